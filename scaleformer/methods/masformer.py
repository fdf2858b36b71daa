"""MASFormer (Zhang et al., 2023) and its attention-span baselines: a span per layer, over the whole input at once,
on a decoder-only causal LM (as the paper runs it) or on a seq2seq model's encoder (the project's adaptation).

- ``masformer``: full attention in ``full_layers`` layers (at the bottom by default, where the paper finds
  long-range signals help most), block attention of ``block_size`` in the others.
- ``block_attention``: block attention in every layer; ``sliding_window``: a window of ``window``
  tokens (each side in an encoder, back in a causal LM) in every layer; ``full_attention``: full attention
  everywhere (the upper bound).

On an encoder, the decoder cross-attends to every encoder state, unchanged. Kernels: :mod:`scaleformer.ops.spans`
(encoder) and :mod:`scaleformer.ops.causal_spans` (decoder-only).
BART's learned positions are tiled up to ``max_length`` in :meth:`SpanMethod.wrap` (the paper
duplicates the pretrained ones); T5's relative positions need nothing. Inputs longer than
``max_length`` are cut there and re-closed with the suffix specials (a warning, and a count in the
run's metrics). The block size need not divide the input: the last block is padded, pads masked.

Attention cost C (the paper's section 4) = attended (query, key) pairs of one n-token document,
summed over encoder layers: full n^2; block b*n (exactly floor(n/b) b^2 + (n mod b)^2); window
(2w+1) n minus the pairs falling off both edges. :meth:`SpanMethod.attention_cost` computes it,
:meth:`SpanMethod.describe` records the formula and its values in every run's metrics.

Two MASFormers run through these classes:

- **as its paper runs it**: on a decoder-only causal LM (GPT-2, GPT-NeoX/Pythia, Llama, Mistral, Qwen2), the spans
  causal on the model's own self-attention (:mod:`scaleformer.ops.causal_spans`): full attention in ``l`` layers,
  causal blocks of ``m`` in the others; GPT-2's learned positions duplicated up to ``max_length``, as the paper
  duplicates GPT-3 XL's 1,024 to 8,192. C is then also given by the paper's formula, ``(L - l) m n + l n^2``
  (``attention_cost_paper``), beside the causal pairs counted (about half of it).
- **the project's encoder adaptation** (not in the paper): the same spans, non-causal, on a BART/T5 encoder whose
  decoder cross-attends to the whole input; a baseline beside ScaleFormer's chunked methods.

``cost`` (C, in the paper's formula units, at ``n = max_length``) derives the span size by the paper's rules
(section 4): block ``b = C/(L n)``, window ``w = C/(2 L n)``, MASFormer ``l = (C - L m n)/(n^2 - m n)``,
rounded to the nearest integer (the unrounded value is recorded). ``placement`` puts MASFormer's full layers at
the bottom (the paper's choice), in the middle, at the top or one every ``L/l`` layers (its section 4.3 ablation).
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
from scaleformer.ops import span_cost
from scaleformer.ops.causal_spans import causal_family, decoder_layers, is_causal_lm, route_causal_spans
from scaleformer.ops.causal_spans import extend_positions as extend_causal_positions
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
    # C, the attention budget in the paper's units at n = max_length: when set, it sets the span size by the
    # paper's rules (block b, window w, MASFormer's l), replacing the size setting; null: the size as set.
    cost: float | None = None

    def __post_init__(self) -> None:
        check(self.max_length > 0, "method.max_length", self.max_length, "must be > 0")
        check(self.cost is None or self.cost > 0, "method.cost", self.cost, "must be > 0 (or null)")


class SpanMethod(Method):
    """One encoder pass with a per-layer attention span; subclasses say which span each layer gets."""

    cfg: SpanConfig
    formula: ClassVar[str] = ""  # the pairs a (non-causal) encoder layer attends
    paper_formula: ClassVar[str] = ""  # the paper's C (section 2), causal or not
    requires = ("layer_spans",)
    runs_decoder_only = True
    sized: ClassVar[str] = ""  # the setting ``cost`` derives ("" : none, the cost is fixed)

    def __init__(self, cfg: SpanConfig, spec: BackboneSpec) -> None:
        # Causal spans on a decoder-only model's own layers; on a seq2seq model, the encoder's.
        self.causal = bool(getattr(spec, "decoder_only", False))
        layers = getattr(spec, "n_decoder_layers" if self.causal else "n_encoder_layers", None)
        self.n_layers: int | None = layers or None
        super().__init__(cfg, spec)
        self.truncated_inputs = 0
        self._eval_docs = 0
        self._eval_cost = 0

    def spans(self, n_layers: int) -> list[Span]:
        """One span per layer, bottom first; raises ConfigError when the config does not fit."""
        raise NotImplementedError

    def budget(self, n_layers: int) -> float | None:
        """The unrounded size ``cost`` gives by the paper's rules (None without a cost)."""
        c = self.cfg
        if c.cost is None:
            return None
        if not self.sized:
            raise ConfigError(f"method.cost={c.cost}: {c.name}'s cost is fixed by n and the layers; set no cost")
        block = self.setting("block_size") if hasattr(c, "block_size") else 1
        if self.sized == "full_layers" and block >= c.max_length:
            raise ConfigError(f"method.block_size={block}: must be below method.max_length={c.max_length} to "
                              "derive full_layers from a cost")
        # m matters to l alone (b and w read C, L and n only): 1 stands in for the other methods
        m = block if self.sized == "full_layers" else 1
        return span_cost.sizes_for(c.cost, n_layers, c.max_length, m)[self.sized.replace("_size", "")]

    def size(self, n_layers: int) -> int:
        """The span size setting in force: the one ``cost`` derives, or the one set."""
        got = self.budget(n_layers)
        if got is None:
            return self.setting(self.sized)
        value = round(got)
        low = 0 if self.sized == "full_layers" else 1
        high = n_layers if self.sized == "full_layers" else self.cfg.max_length
        check(low <= value <= high, "method.cost", self.cfg.cost,
              f"gives {self.sized}={got:.2f} on {n_layers} layers at n={self.cfg.max_length}; it must round into "
              f"[{low}, {high}]")
        return value

    def setting(self, key: str) -> int:
        """A size setting as set, or where it is null the backbone's: blocks of its pretrained positions (the
        paper's m), a window of half of them."""
        value = getattr(self.cfg, key)
        if value is not None:
            return int(value)
        positions = int(self.spec.max_positions)
        return positions // 2 if key == "window" else positions

    def layer_spans(self, n_layers: int) -> list[Span]:
        """:meth:`spans` as the model runs them: causal on a decoder-only backbone."""
        return [Span(s.kind, s.size, causal=self.causal) for s in self.spans(n_layers)]

    def check_backbone(self, spec: BackboneSpec) -> None:
        n_spec = len(spec.prefix_ids) + len(spec.suffix_ids)
        check(self.cfg.max_length > n_spec, "method.max_length", self.cfg.max_length,
              f"must exceed the {n_spec} special tokens")
        if self.n_layers:
            self.spans(self.n_layers)
            self.budget(self.n_layers)  # a cost for a method whose cost is fixed is refused here

    # ------------------------------------------------------------------------------------- model
    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Check the layer count, tile BART's positions to max_length, route sliding-window layers; on a
        decoder-only model, duplicate GPT-2's positions and route every layer to its causal span."""
        if is_causal_lm(model):
            return self._wrap_causal(model)
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

    def _wrap_causal(self, model: torch.nn.Module) -> torch.nn.Module:
        try:
            causal_family(model)
        except TypeError as e:
            raise ConfigError(f"method.name={self.cfg.name!r}: {e}") from None
        self.causal = True
        self.n_layers = len(decoder_layers(model))
        spans = self.layer_spans(self.n_layers)
        if extend_causal_positions(model, self.cfg.max_length):
            log.info("%s: positions duplicated to %d", self.cfg.name, self.cfg.max_length)
        route_causal_spans(model, spans)
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
            self.count_evaluated(mask.sum(1).tolist(), len(spans))
        return Encoded(hidden, mask)

    def count_evaluated(self, lengths: list[int], n_layers: int) -> None:
        """Add documents of these token counts to the mean C of the evaluation (``attention_cost_mean``)."""
        spans = self.layer_spans(n_layers)
        self._eval_docs += len(lengths)
        self._eval_cost += sum(sum(s.pairs(int(n)) for s in spans) for n in lengths)

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
            raise ValueError("attention_cost needs the layer count: wrap(model) first or pass n_layers")
        n = min(n_tokens, self.cfg.max_length)
        return sum(s.pairs(n) for s in self.layer_spans(n_layers))

    def describe(self) -> dict[str, Any]:
        at_max = self.attention_cost(self.cfg.max_length) if self.n_layers else None
        mean = round(self._eval_cost / self._eval_docs) if self._eval_docs else None
        out = asdict(self.cfg) | {k: self.setting(k) for k in ("block_size", "window") if hasattr(self.cfg, k)}
        if self.n_layers and self.sized:
            out |= {self.sized: self.size(self.n_layers), f"{self.sized}_from_cost": self.budget(self.n_layers)}
        return out | {
            # each layer's span, bottom first: what a checkpoint's weights were trained under (a resume checks it)
            "spans": [f"{sp.kind}:{sp.size}" for sp in self.spans(self.n_layers)] if self.n_layers else None,
            "decoder_only": self.causal,
            "encoder_layers" if not self.causal else "decoder_layers": self.n_layers,
            "attention_cost_formula": self.formula if not self.causal else
            f"C = {self.paper_formula} (the paper's); counted: causal pairs, no key after its query",
            # The paper's C at n = max_length ((L - l) m n + l n^2 and kin), whatever the mask leaves out.
            "attention_cost_paper": span_cost.paper_cost(self.spans(self.n_layers), self.cfg.max_length)
            if self.n_layers and all(s.kind in span_cost.FORMULAS for s in self.spans(self.n_layers)) else None,
            "attention_cost_at_max_length": at_max,  # pairs attended by an input of max_length tokens
            "attention_cost_mean": mean,  # mean C over the documents encoded for evaluation
            "truncated_inputs": self.truncated_inputs,
        }


_BLOCK = "(floor(n/b)*b^2 + (n mod b)^2)"


@dataclass
class MasformerConfig(SpanConfig):
    name: str = "masformer"
    # l: layers with full attention. The paper's main setting is l=4 of 24 layers (1/6); 1 keeps that share
    # on 6-layer BART-base and fits the 2-layer tiny backbones.
    full_layers: int = 1
    # b: block size of the other layers; null: the backbone's pretrained positions (the paper's m = 1,024, GPT-3 XL's
    # context; BART-base's window too).
    block_size: int | None = None
    # Where the full layers sit: bottom (the paper's choice: long-range signals help most there), middle, top or
    # every L/l layers (its section 4.3 ablation, Table 4).
    placement: str = "bottom"

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.full_layers >= 0, "method.full_layers", self.full_layers, "must be >= 0")
        check(self.block_size is None or self.block_size > 0, "method.block_size", self.block_size, "must be > 0")
        check(self.placement in PLACEMENTS, "method.placement", self.placement, f"must be one of {', '.join(PLACEMENTS)}")


PLACEMENTS = ("bottom", "middle", "top", "every")


def full_layer_ids(n_layers: int, full: int, placement: str) -> tuple[int, ...]:
    """Which of ``n_layers`` (bottom first) get full attention: the first ``full``, the middle ones, the last, or
    one every ``L / l`` layers (the paper's Table 4 "every 3": l = 8 of 24), from the bottom layer up (ours: the
    paper does not say where the first one sits; GPT-Neo's alternation also starts with a global layer)."""
    if placement == "every":
        return tuple(k * n_layers // full for k in range(full))
    start = {"bottom": 0, "middle": (n_layers - full) // 2, "top": n_layers - full}[placement]
    return tuple(range(start, start + full))


class Masformer(SpanMethod):
    name = "masformer"
    small_settings = {"max_length": 512, "block_size": 32, "full_layers": 1}
    Config = MasformerConfig
    cfg: MasformerConfig
    formula = f"C = l*n^2 + (L-l)*{_BLOCK}  (= (L-l)*b*n + l*n^2 when b divides n)"
    paper_formula = "(L-l)*m*n + l*n^2"
    sized = "full_layers"

    def spans(self, n_layers: int) -> list[Span]:
        c = self.cfg
        full = self.size(n_layers)
        check(full <= n_layers, "method.full_layers", full,
              f"must be <= the {'model' if self.causal else 'encoder'}'s {n_layers} layers")
        ids = full_layer_ids(n_layers, full, c.placement)
        return [Span("full") if i in ids else Span("block", self.setting("block_size")) for i in range(n_layers)]


@dataclass
class BlockAttentionConfig(SpanConfig):
    name: str = "block_attention"
    # b: tokens per block; each token attends within its block only. null: the backbone's pretrained positions.
    block_size: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.block_size is None or self.block_size > 0, "method.block_size", self.block_size, "must be > 0")


class BlockAttention(SpanMethod):
    name = "block_attention"
    small_settings = {"max_length": 512, "block_size": 32}
    Config = BlockAttentionConfig
    cfg: BlockAttentionConfig
    formula = f"C = L*{_BLOCK}  (= L*b*n when b divides n)"
    paper_formula = "L*b*n"
    sized = "block_size"

    def spans(self, n_layers: int) -> list[Span]:
        return [Span("block", self.size(n_layers))] * n_layers


@dataclass
class SlidingWindowConfig(SpanConfig):
    name: str = "sliding_window"
    # w: tokens attended on each side; null: half the backbone's pretrained positions (512 on BART-base), matching
    # block attention of b = those positions in cost, as the paper pairs Window(w) with Block(b = 2w).
    window: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.window is None or self.window > 0, "method.window", self.window, "must be > 0")


class SlidingWindow(SpanMethod):
    name = "sliding_window"
    small_settings = {"max_length": 512, "window": 16}
    Config = SlidingWindowConfig
    cfg: SlidingWindowConfig
    formula = "C = L*((2m+1)*n - m*(m+1)), m = min(w, n-1)  (~ L*(2w+1)*n)"
    paper_formula = "2*L*w*n"
    sized = "window"

    def spans(self, n_layers: int) -> list[Span]:
        return [Span("window", self.size(n_layers))] * n_layers


@dataclass
class FullAttentionConfig(SpanConfig):
    name: str = "full_attention"


class FullAttention(SpanMethod):
    name = "full_attention"
    small_settings = {"max_length": 512}
    Config = FullAttentionConfig
    cfg: FullAttentionConfig
    formula = "C = L*n^2"
    paper_formula = "L*n^2"

    def spans(self, n_layers: int) -> list[Span]:
        return [Span("full")] * n_layers
