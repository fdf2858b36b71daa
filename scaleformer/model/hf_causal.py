"""The method travels with a decoder-only model: MASFormer's causal LM as a Hugging Face class.

:class:`ScaleformerForCausalLM` is :class:`~scaleformer.model.hf.ScaleformerForConditionalGeneration`'s sibling for
a causal backbone (GPT-2, GPT-NeoX/Pythia, Llama, Mistral, Qwen2): the same config (``model_type="scaleformer"``:
the backbone's config, the method, the spec), the same checked loading, the backbone's weights under
``backbone.``. Building it routes every layer's self-attention to its span (the method's ``wrap``:
:mod:`scaleformer.ops.causal_spans`) and duplicates GPT-2's learned positions, so ``forward`` and ``generate``
are the backbone's own and run the method wherever the model goes: a run's Lightning module, the
``Summarizer``, or ``AutoModelForCausalLM.from_pretrained(export)`` after ``import scaleformer``.

How a summary is asked of it (document, query, separator, then greedy continuation) is
:func:`scaleformer.ops.causal_join.causal_summaries`, the one place the run and the ``Summarizer`` decode.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoModelForCausalLM, GenerationMixin, PreTrainedModel

from scaleformer.model.hf import CheckedLoading, deferred_ops
from scaleformer.model.hf_config import ScaleformerConfig
from scaleformer.model.hf_embeddings import BackboneEmbeddings
from scaleformer.model.hf_inputs import check_generation_numbers, output_flags

if TYPE_CHECKING:
    from scaleformer.methods.base import Method


class ScaleformerForCausalLM(BackboneEmbeddings, CheckedLoading, PreTrainedModel, GenerationMixin):
    """A decoder-only backbone whose self-attention runs the method's spans (``self.method``)."""

    config_class = ScaleformerConfig
    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    def __init__(self, config: ScaleformerConfig, backbone: PreTrainedModel | None = None,
                 method: Method | None = None) -> None:
        method = self.checked(config, method, causal=True)
        super().__init__(config)
        self.hold(config, backbone if backbone is not None else AutoModelForCausalLM.from_config(config.backbone), method)

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, past_key_values: Any = None,
                inputs_embeds: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                use_cache: bool | None = None, output_attentions: bool | None = None,
                output_hidden_states: bool | None = None, return_dict: bool | None = None,
                logits_to_keep: int | torch.Tensor = 0, cache_position: torch.Tensor | None = None,
                **kwargs: Any) -> Any:
        """The backbone's forward (``labels``: its shifted next-token loss), its layers routed to their spans.

        The inputs are the backbone family's, by name (Trainer keeps the columns a forward names). The flags not
        passed are this model's config's (``model.config.output_hidden_states``, ``use_cache``...), as a plain model
        reads its own; ``output_attentions`` gives each layer's weights under its span."""
        named = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids,
                 "inputs_embeds": inputs_embeds, "labels": labels, "use_cache": use_cache,
                 "output_attentions": output_attentions, "output_hidden_states": output_hidden_states,
                 "return_dict": return_dict, "cache_position": cache_position}
        ops = deferred_ops()
        if past_key_values is not None:
            named[ops.compat.cache_kwarg(self.backbone)] = past_key_values
        if not (isinstance(logits_to_keep, int) and logits_to_keep == 0):
            named["logits_to_keep"] = logits_to_keep
        given = output_flags(self.config, {k: v for k, v in named.items() if v is not None} | kwargs)
        given = {k: v for k, v in given.items() if v is not None}
        with ops.causal_spans.returning_weights(self.backbone, bool(given.get("output_attentions"))):
            return self.backbone(**given)

    @torch.no_grad()
    def generate(self, inputs: torch.Tensor | None = None, generation_config: Any = None, **kwargs: Any) -> Any:
        """The backbone's ``generate`` with this model's decoding settings (``generation_config``, default this
        model's own, from its ``generation_config.json``; keywords override them, as a plain model's): the routed
        layers read a padded batch by its real tokens, and one cached token only the keys its span reaches."""
        ops = deferred_ops()
        decoding = ops.decoding
        gen = copy.deepcopy(self.generation_config) if generation_config is None else decoding.filled(
            generation_config, self.generation_config)
        model_inputs = gen.update(**kwargs)  # decoding keywords into the copy; the rest are the model's inputs
        check_generation_numbers(gen)
        with ops.causal_spans.returning_weights(self.backbone, bool(gen.output_attentions)), \
                decoding.read_whole(self.backbone, gen):
            return self.backbone.generate(inputs, generation_config=gen, **model_inputs)


# Registered on import (see scaleformer.model.autoreg): AutoModelForCausalLM builds this class for model_type
# "scaleformer" when the backbone is decoder-only.
AutoModelForCausalLM.register(ScaleformerConfig, ScaleformerForCausalLM, exist_ok=True)
