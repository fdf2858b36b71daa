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

from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoModelForCausalLM, GenerationMixin, PreTrainedModel

from scaleformer.model.hf import CheckedLoading
from scaleformer.model.hf_config import ScaleformerConfig
from scaleformer.model.hf_embeddings import BackboneEmbeddings

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

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The backbone's forward (``labels``: its shifted next-token loss), its layers routed to their spans."""
        return self.backbone(*args, **kwargs)

    @torch.no_grad()
    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """The backbone's ``generate``: the routed layers read a left-padded batch by its real tokens, and one
        cached token reads only the keys its span reaches."""
        return self.backbone.generate(*args, **kwargs)


# Registered on import (see scaleformer.model.autoreg): AutoModelForCausalLM builds this class for model_type
# "scaleformer" when the backbone is decoder-only.
AutoModelForCausalLM.register(ScaleformerConfig, ScaleformerForCausalLM, exist_ok=True)
