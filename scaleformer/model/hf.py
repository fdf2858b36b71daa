"""The method travels with the model: a Hugging Face config and model class for every method.

Why: a long-context method that lives only inside this framework's training loop is lost the moment
the model leaves it (plain ``AutoModelForSeq2SeqLM`` code gets the bare backbone: BART fails past its
positions, T5 silently attends over everything). :class:`ScaleformerForConditionalGeneration` holds
the backbone and the method together, so ``forward`` (teacher forcing, ``labels``) and ``generate``
run the method wherever the model goes: this framework's Lightning module and ``Summarizer``, the
benchmark, Hugging Face's ``Seq2SeqTrainer``, or ``AutoModelForSeq2SeqLM.from_pretrained`` after
``import scaleformer`` (the Auto registration is :mod:`scaleformer.model.autoreg`).

Like SLED's ``py-sled`` (Mivg/SLED ``sled/configuration_sled.py``, ``modeling_sled.py``), the config
holds the backbone's config; unlike it, the backbone's weights live under one ``backbone.`` prefix
with nothing renamed, and the parameters a method adds (Memorizing's gate) are ordinary weights of
the same file, so loading reports no missing or unexpected keys.

- :class:`ScaleformerConfig` (``model_type="scaleformer"``): ``backbone`` (the backbone's config),
  ``method`` (the method's validated config, e.g. ``{"name": "scaleformer", "middle_tokens": 64}``)
  and ``spec`` (the :class:`~scaleformer.model.spec.BackboneSpec` facts: positions, special ids);
- ``scaleformer.wrap`` (:mod:`scaleformer.model.wrapping`): any loaded seq2seq model (+ its tokenizer)
  to that class, sharing its weights.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoModelForSeq2SeqLM, GenerationMixin, PreTrainedModel

from scaleformer.errors import ConfigError
from scaleformer.model.hf_config import ScaleformerConfig, learned_positions

# The methods and ops are imported where used (the two imports marked "deferred" below): this module is
# imported by the Auto registration, which can run while transformers is first imported from inside
# those very packages, half-built then (a top-level import of them fails, and the Auto classes would
# not learn model_type "scaleformer"). Code that builds methods lives in scaleformer.model.wrapping.
if TYPE_CHECKING:
    from scaleformer.methods.base import Encoded, Method


class ScaleformerForConditionalGeneration(PreTrainedModel, GenerationMixin):
    """A seq2seq backbone whose encoder side is a long-context method (``self.method``).

    ``forward(input_ids, attention_mask, labels)`` encodes the long input with the method (chunks,
    fusion, kept positions, datastores) and runs the backbone's decoder on the result;
    ``generate(input_ids, attention_mask)`` does the same, then decodes with beam-shared
    cross-attention (:mod:`scaleformer.ops.decoding`). A query (QA tasks) rides along as
    ``prefix_ids`` / ``prefix_mask``, which both accept, so Seq2SeqTrainer's predict loop keeps it.
    """

    config_class = ScaleformerConfig
    base_model_prefix = "scaleformer"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True

    def __init__(self, config: ScaleformerConfig, backbone: PreTrainedModel | None = None,
                 method: Method | None = None) -> None:
        # deferred: the methods import ops, which the Auto registration can find half-built (note above)
        from scaleformer.methods import build_method, method_config

        super().__init__(config)
        check_window(config)
        if backbone is None:
            backbone = AutoModelForSeq2SeqLM.from_config(config.backbone)
        self.backbone = backbone
        self.method: Method = method or build_method(method_config(config.method), config.backbone_spec)
        self.post_init()
        # After post_init, which initialises every module not yet initialised: a method's new modules
        # (MASFormer's tiled position table) carry copied weights that must survive it.
        if self.method.wrap(backbone) is not backbone:
            raise TypeError(f"method {config.method.get('name')!r}: wrap() must patch the model in place")

    @classmethod
    def from_parts(cls, backbone: PreTrainedModel, method: Method) -> ScaleformerForConditionalGeneration:
        """A backbone (weights shared) read through a built method: how runs and
        :func:`~scaleformer.model.wrapping.wrap` make one."""
        config = ScaleformerConfig(backbone=backbone.config, method=dataclasses.asdict(method.cfg),
                                   spec=dataclasses.asdict(method.spec))
        model = cls(config, backbone=backbone, method=method)
        model.generation_config = copy.deepcopy(backbone.generation_config)  # the backbone's decoding settings
        return model.train(backbone.training)

    def _init_weights(self, module: torch.nn.Module) -> None:
        self.backbone._init_weights(module)

    def get_encoder(self) -> torch.nn.Module:
        return self.backbone.get_encoder()

    def get_decoder(self) -> torch.nn.Module:
        return self.backbone.get_decoder()

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value: torch.nn.Module) -> None:
        self.backbone.set_input_embeddings(value)

    def get_output_embeddings(self) -> torch.nn.Module | None:
        return self.backbone.get_output_embeddings()

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
               prefix_ids: torch.Tensor | None = None, prefix_mask: torch.Tensor | None = None,
               training: bool | None = None) -> Encoded:
        """What the decoder cross-attends to: the method's states ``[batch, T, d]`` and mask ``[batch, T]``."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        return self.method.encode(self.backbone.get_encoder(), input_ids, attention_mask,
                                  training=self.training if training is None else training,
                                  prefix_ids=prefix_ids, prefix_mask=prefix_mask)

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                decoder_input_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                encoder_outputs: Any = None, prefix_ids: torch.Tensor | None = None,
                prefix_mask: torch.Tensor | None = None, **kwargs: Any) -> Any:
        """The backbone's seq2seq forward on the method's encoding (``labels`` give the loss)."""
        if encoder_outputs is None:
            if input_ids is None:
                raise ValueError("forward needs input_ids (or encoder_outputs from encode())")
            enc = self.encode(input_ids, attention_mask, prefix_ids=prefix_ids, prefix_mask=prefix_mask)
            encoder_outputs, attention_mask = (enc.hidden,), enc.mask
        return self.backbone(encoder_outputs=encoder_outputs, attention_mask=attention_mask,
                             decoder_input_ids=decoder_input_ids, labels=labels, **kwargs)

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 prefix_ids: torch.Tensor | None = None, prefix_mask: torch.Tensor | None = None,
                 generation_config: Any = None, **kwargs: Any) -> Any:
        """Token ids of the method's summaries; decoding settings from ``generation_config`` (default:
        this model's ``generation_config.json``), keywords override them as in ``model.generate``."""
        if input_ids is None:
            raise ValueError("generate needs input_ids: the long documents, tokenized")
        # deferred: ops can be half-built when the Auto registration imports this module (note above)
        from scaleformer.ops import decoding

        gen = copy.deepcopy(generation_config or self.generation_config)
        kwargs = gen.update(**kwargs)  # decoding keywords into the copy; the rest are model inputs
        enc = self.encode(input_ids, attention_mask, prefix_ids=prefix_ids, prefix_mask=prefix_mask, training=False)
        return decoding.generate(self.backbone, enc.hidden, enc.mask, generation_config=gen, **kwargs)


def check_window(config: ScaleformerConfig) -> None:
    """The method's window fits the backbone's learned positions (a tampered or mistyped config would
    otherwise fail deep inside the embedding with an IndexError)."""
    window = config.spec.get("max_positions")
    learned = learned_positions(config.backbone) if config.backbone is not None else None
    if not isinstance(window, int) or window < 1:
        raise ConfigError(f"config.json: spec.max_positions={window!r}: must be a positive integer")
    if learned is not None and window > learned[1]:
        raise ConfigError(f"config.json: spec.max_positions={window} is above the {learned[1]} positions the "
                          f"backbone's weights have ({learned[0]}); the config does not belong to these weights")


# Registered on import (see scaleformer.model.autoreg): AutoModelForSeq2SeqLM builds this class for
# model_type "scaleformer".
AutoModelForSeq2SeqLM.register(ScaleformerConfig, ScaleformerForConditionalGeneration, exist_ok=True)
