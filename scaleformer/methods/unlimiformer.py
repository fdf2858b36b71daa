"""Unlimiformer (Bertsch et al. 2023): every cross-attention head retrieves its top-k encoder states.

As the reference implementation (abertsch72/unlimiformer, ``src/unlimiformer.py``, class
``Unlimiformer``) does it, with its defaults (``src/run.py``, ``UnlimiformerArguments``):

* Datastore: the whole input encoded in overlapping chunks with SLED's windows and keep rule
  (``window_indices``, copied from SLED; ``chunked_encode_input``, ``reset_memory``). Chunks of the
  backbone's window (``unlimiformer_chunk_size=None`` -> ``window_size()``: 1024 for BART) overlapping
  by half (``unlimiformer_chunk_overlap=0.5``: ``window_margin = int(1024 * 0.5 / 2)``, O = 512).
* Retrieving layers: ``layer_begin=0, layer_end=None``, i.e. every decoder layer (``method.layers``
  null); every head (``unlimiformer_head_num=None``). At each decoding step each head attends to its
  top-k datastore keys by ``q . k`` (``attention_forward_hook``: ``torch.topk`` over
  ``prompt_keys``), softmax over those k. k = the number of states of the first window
  (``topk = min(prompt_size, window_size)``), i.e. the backbone's max positions for long inputs
  (``method.k`` null). The search here is exact (one matmul + topk on the device).
* Layers outside ``method.layers`` attend to the local window, the backbone's own encoding of the
  truncated input: the reference generates from ``input_ids[:, :window]`` (``pre_generate_hook``)
  and only the layers in range are hooked (``inject_hooks``).
* First decoding step: no retrieval; every layer attends to the local window
  (``pre_forward_hook`` sets ``is_first_test_decoding_step`` when there is no cache yet;
  ``attention_forward_hook`` returns early). Here decoder position 0 does so whether or not a cache
  is used, so cached and uncached generation agree. Training retrieves at every position
  (``train_attention_forward_hook`` has no such step).

Training modes (``method.training_mode``; the reference's flags in brackets):

* ``standard`` (default: no flag; the README's "train as usual, Unlimiformer at test"): the model
  trains like truncation (input cut to the backbone's max positions, plain cross-attention).
* ``random_encoded`` (``random_unlimiformer_training``): the full input is encoded in chunks; each
  decoder layer in range attends to a random subset of k datastore states (fresh per step, layer and
  document, shared by heads: ``sample_random_indices``); the other layers see the first
  max-positions datastore states (``random_inputs_forward_hook``: ``long_inputs_encoded[:, :window]``).
* ``retrieval`` (``unlimiformer_training``): training attends as generation does, top-k at every
  position, with the local window for the other layers (``pre_forward_hook``, training branch).
* ``alternating`` (both flags): retrieval on the first step and every other one, random-encoded on
  the rest (``RandomTrainingUnlimiformer.pre_train_hook``: ``train_step % 2 == 0``).

Bad input: k < 1 is a config error; k larger than the number of datastore states is clamped at run
time (the number varies per batch), which is full cross-attention over the datastore; a layer range
outside the decoder is a config error raised when the model is wrapped (the decoder's depth is read
there). See :mod:`scaleformer.ops.retrieval` for the hook and :mod:`scaleformer.methods.datastore` for
the two encodings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from scaleformer.errors import check
from scaleformer.methods.base import Encoded
from scaleformer.methods.datastore import DatastoreMethod
from scaleformer.methods.sled import SledConfig
from scaleformer.ops.retrieval import (
    FULL,
    RANDOM,
    RETRIEVE,
    cross_attentions,
    patch_cross_attention,
    resolve_range,
)

if TYPE_CHECKING:
    from scaleformer.model.spec import BackboneSpec

TRAINING_MODES = ("standard", "random_encoded", "retrieval", "alternating")


@dataclass
class UnlimiformerConfig(SledConfig):
    """Defaults as abertsch72/unlimiformer (src/run.py UnlimiformerArguments, src/unlimiformer.py)."""

    name: str = "unlimiformer"
    # The reference's default chunk overlap is half a chunk (unlimiformer_chunk_overlap=0.5).
    overlap: int = 512
    # Keys retrieved per query and head; None = the backbone's max positions (the reference's window).
    k: int | None = None
    # Decoder layers that retrieve, [start, end) (negatives count from the end); None = all (the reference).
    # The others, and every layer at the first decoding step, attend to the truncated input as one window.
    layers: list[int] | None = None
    # "standard" (the reference's default: train like truncation, retrieve at test), or the paper's
    # long-range training: "random_encoded", "retrieval", "alternating".
    training_mode: str = "standard"

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.k is None or self.k >= 1, "method.k", self.k, "must be >= 1 (or null = max positions)")
        check(self.layers is None or len(self.layers) == 2, "method.layers", self.layers,
              "must be [start, end) or null (all layers)")
        check(self.training_mode in TRAINING_MODES, "method.training_mode", self.training_mode,
              f"must be one of {', '.join(TRAINING_MODES)}")


class Unlimiformer(DatastoreMethod):
    """Local window + SLED datastore; top-k retrieval cross-attention in the decoder (needs :meth:`wrap`)."""

    name = "unlimiformer"
    small_settings = {"chunk_size": 48, "overlap": 24, "k": 16}  # k below the datastore's size
    Config = UnlimiformerConfig
    cfg: UnlimiformerConfig

    def __init__(self, cfg: UnlimiformerConfig, spec: BackboneSpec) -> None:
        super().__init__(cfg, spec)
        self._steps = 0  # training encodes so far (alternating mode)

    def k_resolved(self) -> int:
        return self.cfg.k or self.spec.max_positions

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Patch every decoder cross-attention: ``method.layers`` retrieve, the others see the local window."""
        mods = cross_attentions(model, self.name)
        start, end = resolve_range(self.cfg.layers, len(mods), "method.layers")
        for i, m in enumerate(mods):
            patch_cross_attention(m, self.state, "retrieve" if start <= i < end else "window", i)
        self.state.n_layers = len(mods)
        return model

    def phase(self, training: bool) -> str:
        """What the patched layers do for this encode (advances the alternating counter when training)."""
        if not training:
            return RETRIEVE
        mode = self.cfg.training_mode
        if mode == "alternating":
            self._steps += 1
            return RETRIEVE if self._steps % 2 else RANDOM
        return {"standard": FULL, "random_encoded": RANDOM, "retrieval": RETRIEVE}[mode]

    def encode(self, encoder: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
               training: bool, prefix_ids: torch.Tensor | None = None,
               prefix_mask: torch.Tensor | None = None) -> Encoded:
        phase = self.phase(training)
        kw = dict(training=training, prefix_ids=prefix_ids, prefix_mask=prefix_mask)
        if phase == FULL:
            enc = self.local_window.encode(encoder, input_ids, attention_mask, **kw)
            self.state.begin(FULL, enc.mask)
            return enc
        window, store, _ = self.encode_parts(encoder, input_ids, attention_mask, local=phase != RANDOM, **kw)
        if window is None:  # random-encoded: the datastore only; other layers see its first window
            self.state.begin(RANDOM, store.mask)
            return store
        enc = self.join(window, store.hidden, store.mask)
        self.state.begin(RETRIEVE, enc.mask, local=window.hidden.shape[1], local_first_step=not training)
        return enc

    def decoder_length(self, n_tokens: int) -> int:
        """Encoder states the decoder gets at evaluation: the local window plus the datastore."""
        return self.local_window.decoder_length(n_tokens) + super().decoder_length(n_tokens)

    def train_length(self, n_tokens: int) -> int:
        """Standard training reads the local window only (truncation's input); the other modes encode the
        whole document into the datastore."""
        if self.cfg.training_mode == "standard":
            return self.local_window.decoder_length(n_tokens)
        return super().train_length(n_tokens)
