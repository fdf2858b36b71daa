"""The token-embedding API of :class:`~scaleformer.model.hf.ScaleformerForConditionalGeneration`,
answered by the backbone it holds.

Why: transformers' defaults look for the embeddings on the model itself (``self.lm_head``), but this
model holds a backbone, so ``resize_token_embeddings`` (adding a tokenizer's new tokens) failed on a
missing ``lm_head``. Each call goes to the backbone, whose own ``resize_token_embeddings`` also resizes
what only it knows about (BART's ``final_logits_bias``) and ties its weights again; its config is the
one config.json writes (``config.backbone``), so the new ``vocab_size`` is saved and checked on load.
Tied weights need nothing here: transformers 5 gathers a child model's ``_tied_weights_keys`` under
its prefix (``backbone.lm_head.weight`` -> ``backbone.model.shared.weight``) in ``post_init``, and
``tie_weights()`` walks every submodel.
"""

from __future__ import annotations

from typing import Any

import torch

from scaleformer.errors import ConfigError

# Generation settings whose token ids must stay inside the vocabulary (one id or a list of them).
_GENERATION_IDS = ("pad_token_id", "eos_token_id", "bos_token_id", "decoder_start_token_id", "forced_bos_token_id",
                   "forced_eos_token_id")


class BackboneEmbeddings:
    """``get/set_input_embeddings``, ``get/set_output_embeddings`` and ``resize_token_embeddings`` of the
    backbone (``self.backbone``); a shrink that would cut off a token id the method or the decoder uses
    is refused in one line."""

    backbone: Any
    config: Any
    generation_config: Any
    vocab_size: int

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value: torch.nn.Module) -> None:
        self.backbone.set_input_embeddings(value)

    def get_output_embeddings(self) -> torch.nn.Module | None:
        return self.backbone.get_output_embeddings()

    def set_output_embeddings(self, new_embeddings: torch.nn.Module) -> None:
        self.backbone.set_output_embeddings(new_embeddings)

    def resize_token_embeddings(self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None,
                                mean_resizing: bool = True) -> torch.nn.Embedding:
        """The backbone's embeddings (and output layer) resized to ``new_num_tokens`` rows, as
        ``PreTrainedModel.resize_token_embeddings``; ``config.vocab_size`` follows (it is the backbone's)."""
        if new_num_tokens is not None or pad_to_multiple_of is not None:
            rows = self.get_input_embeddings().weight.shape[0] if new_num_tokens is None else new_num_tokens
            if isinstance(rows, int) and isinstance(pad_to_multiple_of, int) and pad_to_multiple_of > 0:
                rows = -(-rows // pad_to_multiple_of) * pad_to_multiple_of
            if isinstance(rows, int):
                check_kept_ids(self.config, self.generation_config, rows, new_num_tokens)
        embeddings = self.backbone.resize_token_embeddings(new_num_tokens, pad_to_multiple_of=pad_to_multiple_of,
                                                           mean_resizing=mean_resizing)
        self.vocab_size = self.config.vocab_size  # transformers' resize leaves the new size on the model too
        return embeddings


def used_ids(config: Any, generation_config: Any = None) -> dict[str, int]:
    """Every token id the method (the spec's pad and framing ids) or the decoder (the backbone's and the
    generation config's special ids) reads, by where it is set; the largest per place."""
    spec = config.spec if isinstance(config.spec, dict) else {}
    places: dict[str, Any] = {"spec.pad_id": spec.get("pad_id"), "spec.prefix_ids": spec.get("prefix_ids"),
                              "spec.suffix_ids": spec.get("suffix_ids")}
    backbone = config.backbone
    for key in _GENERATION_IDS:
        places[f"backbone.{key}"] = getattr(backbone, key, None)
        places[f"generation_config.{key}"] = getattr(generation_config, key, None)
    found = {}
    for where, value in places.items():
        ids = [i for i in (value if isinstance(value, list | tuple) else [value])
               if isinstance(i, int) and not isinstance(i, bool)]
        if ids:
            found[where] = max(ids)
    return found


def check_kept_ids(config: Any, generation_config: Any, rows: int, asked: int | None) -> None:
    """A resize to ``rows`` keeps every token id in :func:`used_ids`, or one line names the first it would cut."""
    cut = {where: i for where, i in used_ids(config, generation_config).items() if i >= rows}
    if cut:
        where, i = max(cut.items(), key=lambda kv: kv[1])
        raise ConfigError(f"resize_token_embeddings(new_num_tokens={asked!r}): would drop token id {i} ({where}), "
                          f"which the model still reads; keep at least {i + 1} tokens")
