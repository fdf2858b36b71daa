"""MASFormer (Zhang et al., 2023) and its attention-span baselines: the whole input in one encoder pass.

- ``masformer``: full attention in the bottom ``full_layers`` encoder layers (where the paper finds
  long-range signals help most), block attention of ``block_size`` in the others.
- ``block_attention``: block attention in every layer; ``sliding_window``: a window of ``window``
  tokens each side in every layer; ``full_attention``: full attention everywhere (the upper bound).

The decoder cross-attends to every encoder state, unchanged. Kernels: :mod:`scaleformer.ops.spans`.
BART's learned positions are tiled up to ``max_length`` in :meth:`SpanMethod.wrap` (the paper
duplicates the pretrained ones); T5's relative positions need nothing. Inputs longer than
``max_length`` are cut there and re-closed with the suffix specials (a warning, and a count in the
run's metrics). The block size need not divide the input: the last block is padded, pads masked.

Attention cost C (the paper's section 4) = attended (query, key) pairs of one n-token document,
summed over encoder layers: full n^2; block b*n (exactly floor(n/b) b^2 + (n mod b)^2); window
(2w+1) n minus the pairs falling off both edges. :meth:`SpanMethod.attention_cost` computes it,
:meth:`SpanMethod.describe` records the formula and its values in every run's metrics.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from omegaconf import MISSING

from scaleformer.errors import ConfigError, check
from scaleformer.methods.base import Encoded, Method, MethodConfig
from scaleformer.methods.truncation import prepend_prefix
from scaleformer.ops.spans import (
    Span,
    encoder_family,
    encoder_layers,
    extend_positions,
    route_window_attention,
    run_encoder,
)

if TYPE_CHECKING:
    from scaleformer.model.spec import BackboneSpec

log = logging.getLogger(__name__)


@dataclass
class SpanConfig(MethodConfig):
    name: str = MISSING
    # Longest input encoded in one pass (specials included); BART's positions are tiled up to it and
    # longer inputs are truncated. 16384 = the GovReport truncation of the ScaleFormer paper.
    max_length: int = 16384

    def __post_init__(self) -> None:
        check(self.max_length > 0, "method.max_length", self.max_length, "must be > 0")


class SpanMethod(Method):
    """One encoder pass with a per-layer attention span; subclasses say which span each layer gets."""

    cfg: SpanConfig
    formula: ClassVar[str] = ""
    requires = ("layer_spans",)

    def __init__(self, cfg: SpanConfig, spec: BackboneSpec) -> None:
        self.n_layers: int | None = getattr(spec, "n_encoder_layers", None) or None
        super().__init__(cfg, spec)
        self.truncated_inputs = 0
        self._eval_docs = 0
        self._eval_cost = 0

    def spans(self, n_layers: int) -> list[Span]:
        """One span per encoder layer, bottom first; raises ConfigError when the config does not fit."""
        raise NotImplementedError

    def check_backbone(self, spec: BackboneSpec) -> None:
        n_spec = len(spec.prefix_ids) + len(spec.suffix_ids)
        check(self.cfg.max_length > n_spec, "method.max_length", self.cfg.max_length,
              f"must exceed the {n_spec} special tokens")
        if self.n_layers:
            self.spans(self.n_layers)

    # ------------------------------------------------------------------------------------- model
    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Check the layer count, tile BART's positions to max_length, route sliding-window layers."""
        encoder = model.get_encoder()
        try:
            encoder_family(encoder)
        except TypeError as e:
            raise ConfigError(f"method.name={self.cfg.name!r}: {e}") from None
        self.n_layers = len(encoder_layers(encoder))
        spans = self.spans(self.n_layers)
        if extend_positions(encoder, self.cfg.max_length):
            log.info("%s: encoder positions tiled to %d", self.cfg.name, self.cfg.max_length)
        route_window_attention(encoder, [i for i, s in enumerate(spans) if s.rule.routed])
        return model

    # ---------------------------------------------------------------------------------- encoding
    def encode(self, encoder, input_ids, attention_mask, *, training: bool, prefix_ids=None,
               prefix_mask=None) -> Encoded:
        if prefix_ids is not None:
            if prefix_mask is None:
                prefix_mask = torch.ones_like(prefix_ids)
            input_ids, attention_mask = prepend_prefix(prefix_ids, prefix_mask, input_ids, attention_mask,
                                                       self.spec.pad_id)
        ids, mask = self.truncate(input_ids, attention_mask)  # [B, N <= max_length]
        spans = self.spans(len(encoder_layers(encoder)))
        hidden = run_encoder(encoder, ids, mask, spans)  # [B, N, d]
        if not training:
            lengths = mask.sum(1).tolist()
            self._eval_docs += len(lengths)
            self._eval_cost += sum(sum(s.pairs(int(n)) for s in spans) for n in lengths)
        return Encoded(hidden, mask)

    def query_window(self) -> tuple[int, str]:
        return self.cfg.max_length, "method.max_length"

    def truncate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keep the first max_length tokens, re-closing cut documents with the suffix specials (</s>)."""
        m = self.cfg.max_length
        if input_ids.shape[1] <= m:
            return input_ids, attention_mask
        cut = attention_mask.sum(1) > m  # [B] documents that lose their end
        n_cut = int(cut.sum())
        if n_cut:
            if not self.truncated_inputs:
                log.warning("%s: inputs longer than method.max_length=%d are truncated (counted in metrics as "
                            "method.truncated_inputs); raise max_length to keep them whole",
                            self.cfg.name, m)
            self.truncated_inputs += n_cut
        ids = input_ids[:, :m].clone()  # [B, m]
        mask = attention_mask[:, :m]
        suffix = self.spec.suffix_ids
        if suffix and n_cut:
            tail = torch.tensor(suffix, dtype=ids.dtype, device=ids.device)  # [s]
            ids[:, m - len(suffix):] = torch.where(cut[:, None], tail[None, :], ids[:, m - len(suffix):])
        return ids, mask

    def decoder_length(self, n_tokens: int) -> int:
        return min(n_tokens, self.cfg.max_length)

    # -------------------------------------------------------------------------------------- cost
    def attention_cost(self, n_tokens: int, n_layers: int | None = None) -> int:
        """C: attended (query, key) pairs of one n-token document, summed over encoder layers."""
        n_layers = n_layers or self.n_layers
        if not n_layers:
            raise ValueError("attention_cost needs the encoder's layer count: wrap(model) first or pass n_layers")
        n = min(n_tokens, self.cfg.max_length)
        return sum(s.pairs(n) for s in self.spans(n_layers))

    def describe(self) -> dict[str, Any]:
        at_max = self.attention_cost(self.cfg.max_length) if self.n_layers else None
        mean = round(self._eval_cost / self._eval_docs) if self._eval_docs else None
        return asdict(self.cfg) | {
            "encoder_layers": self.n_layers,
            "attention_cost_formula": self.formula,
            "attention_cost_at_max_length": at_max,  # C for an input of max_length tokens
            "attention_cost_mean": mean,  # mean C over the documents encoded for evaluation
            "truncated_inputs": self.truncated_inputs,
        }


_BLOCK = "(floor(n/b)*b^2 + (n mod b)^2)"


@dataclass
class MasformerConfig(SpanConfig):
    name: str = "masformer"
    # l: bottom encoder layers with full attention. The paper's main setting is l=4 of 24 layers
    # (1/6); 1 keeps that share on 6-layer BART-base and fits the 2-layer tiny backbones.
    full_layers: int = 1
    # b: block size of the other layers (the paper's m=1024, also BART's pretrained window).
    block_size: int = 1024

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.full_layers >= 0, "method.full_layers", self.full_layers, "must be >= 0")
        check(self.block_size > 0, "method.block_size", self.block_size, "must be > 0")


class Masformer(SpanMethod):
    name = "masformer"
    small_settings = {"max_length": 512, "block_size": 32, "full_layers": 1}
    Config = MasformerConfig
    cfg: MasformerConfig
    formula = f"C = l*n^2 + (L-l)*{_BLOCK}  (= (L-l)*b*n + l*n^2 when b divides n)"

    def spans(self, n_layers: int) -> list[Span]:
        c = self.cfg
        check(c.full_layers <= n_layers, "method.full_layers", c.full_layers,
              f"must be <= the encoder's {n_layers} layers")
        return [Span("full")] * c.full_layers + [Span("block", c.block_size)] * (n_layers - c.full_layers)


@dataclass
class BlockAttentionConfig(SpanConfig):
    name: str = "block_attention"
    # b: tokens per block; each token attends within its block only.
    block_size: int = 1024

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.block_size > 0, "method.block_size", self.block_size, "must be > 0")


class BlockAttention(SpanMethod):
    name = "block_attention"
    small_settings = {"max_length": 512, "block_size": 32}
    Config = BlockAttentionConfig
    cfg: BlockAttentionConfig
    formula = f"C = L*{_BLOCK}  (= L*b*n when b divides n)"

    def spans(self, n_layers: int) -> list[Span]:
        return [Span("block", self.cfg.block_size)] * n_layers


@dataclass
class SlidingWindowConfig(SpanConfig):
    name: str = "sliding_window"
    # w: tokens attended on each side. 512 matches block attention of b=1024 in cost, as the paper
    # pairs Window(w) with Block(b=2w).
    window: int = 512

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.window > 0, "method.window", self.window, "must be > 0")


class SlidingWindow(SpanMethod):
    name = "sliding_window"
    small_settings = {"max_length": 512, "window": 16}
    Config = SlidingWindowConfig
    cfg: SlidingWindowConfig
    formula = "C = L*((2m+1)*n - m*(m+1)), m = min(w, n-1)  (~ L*(2w+1)*n)"

    def spans(self, n_layers: int) -> list[Span]:
        return [Span("window", self.cfg.window)] * n_layers


@dataclass
class FullAttentionConfig(SpanConfig):
    name: str = "full_attention"


class FullAttention(SpanMethod):
    name = "full_attention"
    small_settings = {"max_length": 512}
    Config = FullAttentionConfig
    cfg: FullAttentionConfig
    formula = "C = L*n^2"

    def spans(self, n_layers: int) -> list[Span]:
        return [Span("full")] * n_layers
