"""Memorizing Transformers (Wu et al. 2022) as the Unlimiformer paper adapts it to encoder-decoders.

Memorizing Transformers is a decoder-only LM: one kNN-augmented attention layer near the top of the
stack attends both to its local context and to the top-k (key, value) pairs retrieved from a memory
of *earlier* segments (so memory and local context are disjoint), and mixes the two per head with a
learned gate ``g = sigmoid(b_h)``: ``V = g * V_mem + (1 - g) * V_local`` (Wu et al., section 3). The
Unlimiformer paper (Bertsch et al. 2023) compares against this design on BART: retrieval in a single
decoder layer instead of in every layer. Each choice and its source:

* Local context: the backbone's own encoding of the input's first window as it is (not re-closed with
  ``</s>`` as ``method=truncation`` does: Unlimiformer's code, which runs this baseline with one retrieving
  layer, cuts ``input_ids[:, :window]``), see :mod:`scaleformer.methods.datastore`. Every decoder
  layer other than the memory layer attends to it only, as the LM's other layers see only the local
  context (Wu et al.).
* Memory: the input's tokens the local window does not hold, encoded in overlapping chunks as
  Unlimiformer encodes its datastore (SLED windows and keep rule, ``method.overlap`` 512 as
  Unlimiformer's default), so it is disjoint from the local context as in Wu et al. Ours: the
  memory is the rest of the document (``method.memory_size`` null); a number keeps only the states
  nearest the window, as Wu et al.'s bounded FIFO memory keeps the most recent ones.
* k = 32 keys per query and head (Wu et al.'s setting). A document whose memory holds fewer than k
  states attends to all of them; one with no memory (it fits the window) gets local attention only
  (ours: no source covers an empty memory in this setting).
* Memory layer (``method.layer``, default -2): Wu et al. put the single kNN layer near the top but
  below the last (layer 9 of 12), so layers above can use what it retrieved; for BART-base's 6
  decoder layers the second-to-last is the closest such layer (ours: the mapping).
* Gate: one logit per head (Wu et al.), a trainable parameter registered on the memory layer's
  cross-attention (``...encoder_attn.retrieval_gate`` / ``...EncDecAttention.retrieval_gate``), so it
  is optimised and checkpointed with the model. Ours: it starts at ``method.gate_init`` (a
  probability, default 0.05: close to the pretrained local attention) and the logit is stored
  divided by ``method.gate_scale`` so that, under Adam, it moves ``gate_scale`` times faster than the
  other weights (at fine-tuning learning rates a plain gate would stay at its init).
* Ours: retrieval runs at every decoding position (Wu et al. have no first-step exception; the one
  in Unlimiformer's code is its own). Training attends as generation does; retrieved states are not
  stop-gradient (Wu et al.'s memory holds earlier training steps' states; here it is this example's
  own encoding), and keys/queries are not normalised (Wu et al. normalise against stale keys;
  nothing here is stale).

Bad input: k < 1, ``memory_size`` < 1 and k > ``memory_size`` are config errors; ``method.layer``
outside the decoder is a config error raised when the model is wrapped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from scaleformer.errors import check
from scaleformer.methods.base import Encoded
from scaleformer.methods.datastore import DatastoreMethod
from scaleformer.methods.sled import SledConfig
from scaleformer.ops.retrieval import RETRIEVE, cross_attentions, patch_cross_attention, resolve_layer


@dataclass
class MemorizingConfig(SledConfig):
    name: str = "memorizing"
    overlap: int = 512  # as Unlimiformer's datastore: half a chunk
    # Keys retrieved per query and head in the memory layer (Wu et al.: 32).
    k: int = 32
    # States the memory holds at most (those nearest the local window); None = the rest of the document.
    memory_size: int | None = None
    # The one kNN-augmented decoder layer (negatives count from the end).
    layer: int = -2
    # Initial gate probability g (weight of the retrieved attention), per head.
    gate_init: float = 0.05
    # The gate logit is gate_scale * parameter: its effective learning rate is gate_scale x the optimiser's.
    gate_scale: float = 100.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.k >= 1, "method.k", self.k, "must be >= 1")
        if self.memory_size is not None:
            check(self.memory_size >= 1, "method.memory_size", self.memory_size, "must be >= 1 (or null = no bound)")
            check(self.k <= self.memory_size, "method.k", self.k,
                  f"must be <= method.memory_size ({self.memory_size}): more keys than the memory holds")
        check(0.0 < self.gate_init < 1.0, "method.gate_init", self.gate_init, "must be in (0, 1)")
        check(self.gate_scale > 0, "method.gate_scale", self.gate_scale, "must be > 0")


class Memorizing(DatastoreMethod):
    """Local window for every layer; one decoder layer also retrieves from the memory, mixed by a gate."""

    name = "memorizing"
    small_settings = {"chunk_size": 48, "overlap": 24, "k": 8}
    Config = MemorizingConfig
    cfg: MemorizingConfig

    def k_resolved(self) -> int:
        return self.cfg.k

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Patch the cross-attentions: the memory layer gets the gate, the others see the local window."""
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

    def memory_mask(self, covers: torch.Tensor, total: torch.Tensor, width: int) -> torch.Tensor:
        """Datastore positions ``[batch, width]`` (CPU bool) in each document's memory."""
        j = torch.arange(width)[None, :]  # [1, T_s]
        mem = (j >= covers[:, None]) & (j < total[:, None])
        if self.cfg.memory_size is not None:
            mem &= j < covers[:, None] + self.cfg.memory_size
        return mem

    def encode(self, encoder: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
               training: bool, prefix_ids: torch.Tensor | None = None,
               prefix_mask: torch.Tensor | None = None) -> Encoded:
        window, store, lay = self.encode_parts(encoder, input_ids, attention_mask, training=training,
                                               prefix_ids=prefix_ids, prefix_mask=prefix_mask)
        mem = self.memory_mask(self.local_covers(lay), lay.doc_len + lay.doc_prefix, store.hidden.shape[1])
        enc = self.join(window, store.hidden, mem.to(store.mask.device))  # states outside the memory masked
        self.state.begin(RETRIEVE, enc.mask, local=window.hidden.shape[1])  # the same in training and generation
        return enc

    def decoder_length(self, n_tokens: int) -> int:
        """Unmasked encoder states for one document: the local window plus its memory."""
        lay = self.layout(torch.tensor([n_tokens]))
        mem = self.memory_mask(self.local_covers(lay), lay.doc_len, n_tokens)
        return self.local_window.decoder_length(n_tokens) + int(mem.sum())
