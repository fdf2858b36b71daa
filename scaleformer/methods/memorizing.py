"""Memorizing Transformers (Wu et al. 2022) as the Unlimiformer paper adapts it to encoder-decoders.

Memorizing Transformers is a decoder-only LM: one kNN-augmented attention layer near the top of the
stack attends both to its local context and to the top-k (key, value) pairs retrieved from a memory
of earlier segments, and mixes the two per head with a learned gate ``g = sigmoid(b_h)``. The
Unlimiformer paper compares against this design applied to BART: retrieval in a single decoder
layer instead of in every layer. What this module implements:

* Encoding: the whole input in overlapping chunks, as SLED / Unlimiformer (every token once).
* Memory layer (``method.layer``, default -2 = the second-to-last decoder layer): its
  cross-attention is ``g * A_topk + (1 - g) * A_local`` per head, where ``A_topk`` attends to the
  top-k keys by score out of *all* encoder states (exact matmul + top-k) and ``A_local`` attends to
  the first window (the first ``max_positions`` encoder states: what the backbone sees without the
  method). Why the second-to-last: Memorizing Transformers puts its single kNN layer near the top
  but below the last layer (layer 9 of 12), so layers above can use what it retrieved; for
  BART-base's 6 decoder layers the second-to-last is the closest such late layer.
* Every other decoder layer cross-attends to the first window only (the "local context").
* Gate: one logit per head, a trainable parameter registered on the memory layer's cross-attention
  (``...encoder_attn.retrieval_gate`` / ``...EncDecAttention.retrieval_gate``), so it is optimised
  and checkpointed with the model. It starts at ``method.gate_init`` (a probability, default 0.05:
  the model starts close to its pretrained local attention). The logit is stored divided by
  ``method.gate_scale`` so that, under Adam, it moves ``gate_scale`` times faster than the other
  weights: at fine-tuning learning rates (1e-5) a plain gate would stay at its init.
* Training attends as generation does (the gate and the memory layer are trained end to end;
  retrieved states are not stop-gradient as in the LM's external memory, since here they are this
  example's own encoder states).

Bad input: k < 1 is a config error; k larger than the number of encoder states is clamped at run
time (full attention in the memory branch); ``method.layer`` outside the decoder is a config error
raised when the model is wrapped.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from scaleformer.config import check
from scaleformer.methods.base import BackboneSpec, Encoded
from scaleformer.methods.chunked import ChunkedConfig
from scaleformer.methods.sled import Sled
from scaleformer.retrieval import (
    RETRIEVE,
    RetrievalState,
    cross_attentions,
    patch_cross_attention,
    resolve_layer,
)


@dataclass
class MemorizingConfig(ChunkedConfig):
    name: str = "memorizing"
    overlap: int = 512  # as Unlimiformer: half a chunk
    # Keys retrieved per query and head in the memory layer; None = the backbone's max positions.
    k: int | None = None
    # The one kNN-augmented decoder layer (negatives count from the end).
    layer: int = -2
    # Initial gate probability g (weight of the retrieved attention), per head.
    gate_init: float = 0.05
    # The gate logit is gate_scale * parameter: its effective learning rate is gate_scale x the optimiser's.
    gate_scale: float = 100.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.k is None or self.k >= 1, "method.k", self.k, "must be >= 1 (or null = max positions)")
        check(0.0 < self.gate_init < 1.0, "method.gate_init", self.gate_init, "must be in (0, 1)")
        check(self.gate_scale > 0, "method.gate_scale", self.gate_scale, "must be > 0")


class Memorizing(Sled):
    """SLED's encoding; one decoder layer mixes top-k retrieval with first-window attention by a gate."""

    name = "memorizing"
    Config = MemorizingConfig
    cfg: MemorizingConfig

    def __init__(self, cfg: MemorizingConfig, spec: BackboneSpec) -> None:
        super().__init__(cfg, spec)
        self.state = RetrievalState(k=cfg.k or spec.max_positions, window=spec.max_positions)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Patch the cross-attentions: the memory layer gets the gate, the others see the first window."""
        mods = cross_attentions(model, self.name)
        mem = resolve_layer(self.cfg.layer, len(mods), "method.layer")
        for i, m in enumerate(mods):
            patch_cross_attention(m, self.state, "memory" if i == mem else "window", i)
        m = mods[mem]
        if not isinstance(getattr(m, "retrieval_gate", None), torch.nn.Parameter):
            heads = getattr(m, "num_heads", None) or m.n_heads  # BART / T5
            w = next(m.parameters())
            logit = math.log(self.cfg.gate_init / (1 - self.cfg.gate_init))
            m.register_parameter("retrieval_gate", torch.nn.Parameter(
                torch.full((heads,), logit / self.cfg.gate_scale, dtype=w.dtype, device=w.device)))
        m.retrieval_gate_scale = self.cfg.gate_scale
        self.state.n_layers = len(mods)
        return model

    def encode(self, encoder: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
               training: bool, prefix_ids: torch.Tensor | None = None,
               prefix_mask: torch.Tensor | None = None) -> Encoded:
        enc = super().encode(encoder, input_ids, attention_mask, training=training, prefix_ids=prefix_ids,
                             prefix_mask=prefix_mask)
        self.state.begin(RETRIEVE, enc.mask)  # the same attention in training and generation
        return enc

    def describe(self) -> dict[str, Any]:
        return asdict(self.cfg) | {"k_resolved": self.state.k}
