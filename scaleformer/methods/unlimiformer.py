"""Unlimiformer (Bertsch et al. 2023): every cross-attention head retrieves its top-k encoder states.

The input is encoded in overlapping chunks exactly as SLED does (every token kept once, from the
chunk where it is furthest from an edge), so the decoder's "datastore" is the whole document. At
generation, each cross-attention layer in ``method.layers`` attends, per head and per decoding step,
to the k encoder states with the highest score ``q . k`` instead of to all of them (k defaults to
the backbone's max positions, the window the model was trained on). The search is exact: one matmul
over the keys projected from all states plus ``topk`` on the device, so the result equals full
cross-attention restricted to those k keys (softmax over the k). Layers outside ``method.layers``
attend to the first window only, as in the reference implementation where those layers see the
truncated input. See :mod:`scaleformer.retrieval` for the hook.

Training modes (``method.training_mode``):

* ``standard``: the model trains like truncation (input cut to the backbone's max positions, plain
  cross-attention); Unlimiformer is applied at evaluation only (the paper's cheap setting).
* ``random_encoded``: the full input is encoded in chunks; each decoder layer in range attends to a
  random subset of k of its encoded states (fresh per step, layer and document, shared by heads).
* ``retrieval``: training attends exactly as generation does (top-k of all states).
* ``alternating``: retrieval and random-encoded training on alternate steps.

Bad input: k < 1 is a config error; k larger than the number of encoder states is clamped at run
time (the number varies per batch), which is full cross-attention; a layer range outside the
decoder is a config error raised when the model is wrapped (the decoder's depth is read there).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from scaleformer.config import check
from scaleformer.methods.base import BackboneSpec, Encoded
from scaleformer.methods.chunked import ChunkedConfig
from scaleformer.methods.sled import Sled
from scaleformer.methods.truncation import Truncation, TruncationConfig
from scaleformer.retrieval import (
    FULL,
    RANDOM,
    RETRIEVE,
    RetrievalState,
    cross_attentions,
    patch_cross_attention,
    resolve_range,
)

TRAINING_MODES = ("standard", "random_encoded", "retrieval", "alternating")


@dataclass
class UnlimiformerConfig(ChunkedConfig):
    name: str = "unlimiformer"
    # The reference implementation's default chunk overlap is half a chunk.
    overlap: int = 512
    # Keys retrieved per query and head; None = the backbone's max positions (1024 for BART).
    k: int | None = None
    # Decoder layers that retrieve, [start, end) (negatives count from the end); None = all (paper).
    layers: list[int] | None = None
    training_mode: str = "standard"

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.k is None or self.k >= 1, "method.k", self.k, "must be >= 1 (or null = max positions)")
        check(self.layers is None or len(self.layers) == 2, "method.layers", self.layers,
              "must be [start, end) or null (all layers)")
        check(self.training_mode in TRAINING_MODES, "method.training_mode", self.training_mode,
              f"must be one of {', '.join(TRAINING_MODES)}")


class Unlimiformer(Sled):
    """SLED's encoding + top-k retrieval cross-attention in the decoder (needs :meth:`wrap`)."""

    name = "unlimiformer"
    Config = UnlimiformerConfig
    cfg: UnlimiformerConfig

    def __init__(self, cfg: UnlimiformerConfig, spec: BackboneSpec) -> None:
        super().__init__(cfg, spec)
        self.state = RetrievalState(k=cfg.k or spec.max_positions, window=spec.max_positions)
        self._truncation = Truncation(TruncationConfig(), spec)  # standard training: the first window
        self._steps = 0  # training encodes so far (alternating mode)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Patch every decoder cross-attention: ``method.layers`` retrieve, the others see the first window."""
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
        source = self._truncation if phase == FULL else super()
        enc = source.encode(encoder, input_ids, attention_mask, training=training, prefix_ids=prefix_ids,
                            prefix_mask=prefix_mask)
        self.state.begin(phase, enc.mask)
        return enc

    def describe(self) -> dict[str, Any]:
        return asdict(self.cfg) | {"k_resolved": self.state.k}
