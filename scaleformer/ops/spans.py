"""Per-layer attention spans for a Hugging Face encoder: full, block and sliding-window attention.

MASFormer (Zhang et al., 2023) and its baselines give each encoder layer its own attention span.
:func:`run_encoder` runs a BART or T5 encoder's own layers (pretrained weights untouched) with one
:class:`Span` per layer, so the decoder and its cross-attention stay exactly the stock ones. A span's
kind is a registered :class:`SpanKind` (:data:`SPAN_KINDS`; another package registers its own):

- ``full``: the layer as is, over the whole input (the model's own attention implementation).
- ``block``: the *whole layer* runs on the input reshaped to ``[B * n_blocks, b, d]`` (N padded to a
  multiple of b, pads masked): attention never leaves a block, everything else in a layer is
  position-wise. Uses the model's own kernel (sdpa / flash / eager) on ``b x b`` problems; T5 gets
  the relative-position bias of the block-local positions (relative distances are unchanged).
  Measured on CPU (H=4, dh=16, forward, N=8192, blocks of 1024): 0.06 s vs 0.88 s with a dense mask.
- ``window``: every token attends to the tokens at distance <= w, through the banded kernel
  (:mod:`scaleformer.ops.banded`); the window layers' attention modules are routed to it by
  :func:`route_window_attention`.

Pad queries may attend to themselves (fully padded blocks to their own pads) so no softmax row is
empty: pad outputs are never read by real tokens, but a NaN there would leak through 0 * NaN.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from scaleformer.ops import compat
from scaleformer.ops.banded import WINDOW_ATTN, band_bias
from scaleformer.ops.causal_kernels import block_causal, window_causal
from scaleformer.ops.compat import BartEncoder, BartLearnedPositionalEmbedding, T5Stack
from scaleformer.registry import claim


class SpanKind:
    """How one kind of span attends: its cost, its explicit pattern, and how an encoder layer runs it.

    Kinds are registered by name (:data:`SPAN_KINDS`, :func:`register_span_kind`); a method of another
    package adds its own the same way, and :func:`run_encoder` runs it without a change here.
    """

    name: ClassVar[str]
    routed: ClassVar[bool] = False  # the layer's attention goes to the banded kernel (route_window_attention)

    def pairs(self, size: int, n: int) -> int:
        """Exact number of attended (query, key) pairs among n real tokens (the paper's cost unit)."""
        raise NotImplementedError

    def dense_mask(self, size: int, n: int) -> torch.Tensor:
        """The span as an explicit ``[n, n]`` boolean pattern (for references and tests, not for runs)."""
        raise NotImplementedError

    def covers(self, size: int, n: int) -> bool:
        """True when the span is full attention on n tokens (then the plain layer runs)."""
        return False

    def prepare(self, encoder: torch.nn.Module, size: int, x: torch.Tensor, valid: torch.Tensor,
                bias_attn: torch.nn.Module | None) -> dict[str, Any]:
        """Masks and T5 bias, shared by every layer of this span."""
        raise NotImplementedError

    def enter(self, x: torch.Tensor, size: int, prep: dict[str, Any]) -> torch.Tensor:
        """The layer's input as this span runs it (``[B, N, d]`` by default)."""
        return x

    def leave(self, y: torch.Tensor, size: int, prep: dict[str, Any], n: int) -> torch.Tensor:
        """The layer's output back to ``[B, N, d]``."""
        return y

    def layer_kwargs(self, size: int) -> dict[str, Any]:
        """Extra keywords the layer passes down to its attention function."""
        return {}

    # ---- causal self-attention (a decoder-only model's layers: MASFormer as its paper runs it)
    def causal_mask(self, size: int, n: int) -> torch.Tensor:
        """The span with no key after its query: ``[n, n]`` boolean (for references and tests)."""
        return self.dense_mask(size, n) & torch.ones(n, n, dtype=torch.bool).tril()

    def causal_pairs(self, size: int, n: int) -> int:
        """Attended (query, key) pairs among n tokens under the causal span (by the mask; kinds with a closed
        form override it)."""
        return int(self.causal_mask(size, n).sum())

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, size: int, *,
               scaling: float | None = None, dropout: float = 0.0) -> torch.Tensor:
        """Causal attention of ``query, key, value [B, H, N, dh]`` under the span: ``[B, H, N, dv]``. By the dense
        mask here, so another package's kind works unchanged; the built-in kinds have their kernels."""
        mask = self.causal_mask(size, query.shape[2]).to(query.device)  # [N, N]
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling)


SPAN_KINDS: dict[str, SpanKind] = {}


def register_span_kind(kind: SpanKind) -> SpanKind:
    """Add ``kind`` under its name; a name another definition holds (``full``) is refused (registry.claim)."""
    claim(SPAN_KINDS, kind.name, kind, "span kind")
    return kind


@dataclass(frozen=True)
class Span:
    """One layer's attention span: a registered kind (``full``, ``block`` of size b, ``window`` of w each
    side, or one of another package's) and its size; ``causal``: no key after its query (a decoder's
    self-attention; a window then reaches w tokens back only).

    One registry (:data:`SPAN_KINDS`) and one dispatch rule for causal attention, whatever the caller (the
    routed layers of :mod:`~scaleformer.ops.causal_spans`, the benchmarks, the tests): as many queries as keys
    and no mask run :meth:`attend`, the kind's kernel (full: sdpa causal; block and window:
    :mod:`~scaleformer.ops.causal_kernels`, which pick their calls' shapes by device and by whether gradients
    flow; a kind without one: sdpa under its dense mask); one cached token reads the contiguous keys its span
    reaches; anything else (a mask, a static cache, several new tokens after a cache) runs sdpa under the span's
    mask. flex_attention is not dispatched to: on the CPU the kernels beat compiled flex forward, flex has no
    backward there, and it compiles a graph per shape, which a growing cache changes every token
    (``results/bench/causal-peers-cpu.md``); a GPU window measures it beside the kernels in every phase
    (``scaleformer.bench.causal_peers --device cuda``, in ``scripts/gpu_window.sh``) before a GPU rule takes it."""

    kind: str
    size: int = 0
    causal: bool = False

    def __post_init__(self) -> None:
        if self.kind not in SPAN_KINDS:
            raise ValueError(f"unknown span kind {self.kind!r}; registered: {', '.join(sorted(SPAN_KINDS))}")

    @property
    def rule(self) -> SpanKind:
        return SPAN_KINDS[self.kind]

    def pairs(self, n: int) -> int:
        return self.rule.causal_pairs(self.size, n) if self.causal else self.rule.pairs(self.size, n)

    def dense_mask(self, n: int) -> torch.Tensor:
        return self.rule.causal_mask(self.size, n) if self.causal else self.rule.dense_mask(self.size, n)

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, **kw: Any) -> torch.Tensor:
        """Causal attention ``[B, H, N, dv]`` of ``[B, H, N, dh]`` inputs under this span (full when it covers N)."""
        if not self.causal:
            raise ValueError("Span.attend is causal self-attention: an encoder's span runs through run_encoder")
        rule = SPAN_KINDS["full"] if self.covers(query.shape[2]) else self.rule
        return rule.attend(query, key, value, self.size, **kw)

    def covers(self, n: int) -> bool:
        return self.rule.covers(self.size, n)


class Full(SpanKind):
    """The layer as is, over the whole input (the model's own attention implementation)."""

    name = "full"

    def pairs(self, size: int, n: int) -> int:
        return n * n

    def dense_mask(self, size: int, n: int) -> torch.Tensor:
        return torch.ones(n, n, dtype=torch.bool)

    def covers(self, size: int, n: int) -> bool:
        return True

    def causal_pairs(self, size: int, n: int) -> int:
        return n * (n + 1) // 2

    def attend(self, query, key, value, size, *, scaling=None, dropout=0.0):
        return F.scaled_dot_product_attention(query, key, value, dropout_p=dropout, is_causal=True, scale=scaling)

    def prepare(self, encoder, size, x, valid, bias_attn):
        n = x.shape[1]
        mask = compat.bidirectional_mask(encoder.config, x, valid)
        bias = compat.t5_bias(bias_attn, n, n, device=x.device) if bias_attn is not None else None  # [1, H, N, N]
        return {"mask": mask, "bias": bias}


class Block(SpanKind):
    """The whole layer on ``[B * n_blocks, b, d]``: attention never leaves a block of ``size``."""

    name = "block"

    def pairs(self, size: int, n: int) -> int:  # full blocks of b plus the last partial block
        return (n // size) * size * size + (n % size) ** 2

    def dense_mask(self, size: int, n: int) -> torch.Tensor:
        i = torch.arange(n)
        return (i[:, None] // size) == (i[None, :] // size)

    def covers(self, size: int, n: int) -> bool:
        return size >= n

    def causal_pairs(self, size: int, n: int) -> int:  # a triangle per block
        r = n % size
        return (n // size) * size * (size + 1) // 2 + r * (r + 1) // 2

    def attend(self, query, key, value, size, *, scaling=None, dropout=0.0):
        return block_causal(query, key, value, size, scaling=scaling, dropout=dropout)

    def prepare(self, encoder, size, x, valid, bias_attn):
        b, n, _ = x.shape
        nb = -(-n // size)
        blocks = F.pad(valid, (0, nb * size - n)).view(b * nb, size)  # [B*nb, b]
        blocks = blocks | ~blocks.any(1, keepdim=True)  # a block of pads attends to its pads (no empty row)
        shape = x.new_zeros(1).expand(b * nb, size, x.shape[2])  # [B*nb, b, d]: only shape/dtype/device are read
        mask = compat.bidirectional_mask(encoder.config, shape, blocks)
        bias = compat.t5_bias(bias_attn, size, size, device=x.device) if bias_attn is not None else None  # [1, H, b, b]
        return {"mask": mask, "bias": bias, "blocks": nb}

    def enter(self, x, size, prep):
        b, n, d = x.shape
        return F.pad(x, (0, 0, 0, prep["blocks"] * size - n)).view(b * prep["blocks"], size, d)  # [B*nb, b, d]

    def leave(self, y, size, prep, n):
        return y.view(-1, prep["blocks"] * size, y.shape[-1])[:, :n]  # [B, N, d]


class Window(SpanKind):
    """Every token attends to the tokens at distance <= ``size``: an encoder's through the banded kernel, a
    decoder's causal window (the ``size`` tokens back) through :func:`~scaleformer.ops.causal_kernels.window_causal`."""

    name = "window"
    routed = True

    def pairs(self, size: int, n: int) -> int:  # |i - j| <= w, minus what falls off the edges
        m = min(size, max(n - 1, 0))
        return n * (2 * m + 1) - m * (m + 1)

    def dense_mask(self, size: int, n: int) -> torch.Tensor:
        i = torch.arange(n)
        return (i[:, None] - i[None, :]).abs() <= size

    def covers(self, size: int, n: int) -> bool:
        return size >= n - 1

    def causal_pairs(self, size: int, n: int) -> int:  # 0 <= i - j <= w
        m = min(size, max(n - 1, 0))
        return n * (m + 1) - m * (m + 1) // 2

    def causal_mask(self, size: int, n: int) -> torch.Tensor:
        i = torch.arange(n)
        d = i[:, None] - i[None, :]
        return (d >= 0) & (d <= size)

    def attend(self, query, key, value, size, *, scaling=None, dropout=0.0):
        return window_causal(query, key, value, size, scaling=scaling, dropout=dropout)

    def prepare(self, encoder, size, x, valid, bias_attn):
        bias = band_bias(bias_attn, size) if bias_attn is not None else None  # [1, H, c, c + 2w]
        return {"mask": valid, "bias": bias}

    def layer_kwargs(self, size: int) -> dict[str, Any]:
        return {"window": size}


for _kind in (Full(), Block(), Window()):
    register_span_kind(_kind)


# ----------------------------------------------------------------------------------- the backbone
def encoder_family(encoder: torch.nn.Module) -> str:
    """``"bart"`` or ``"t5"``; anything else is refused (the layer loop mirrors those two stacks)."""
    if isinstance(encoder, BartEncoder):
        return "bart"
    if isinstance(encoder, T5Stack) and not encoder.is_decoder:
        return "t5"
    raise TypeError(f"per-layer attention spans support BART and T5 encoders (BartEncoder, T5Stack); "
                    f"got {type(encoder).__name__}")


def encoder_layers(encoder: torch.nn.Module) -> torch.nn.ModuleList:
    return encoder.layers if encoder_family(encoder) == "bart" else encoder.block


def self_attention(layer: torch.nn.Module) -> torch.nn.Module:
    """The self-attention module of one BART/T5 encoder layer."""
    return layer.self_attn if hasattr(layer, "self_attn") else layer.layer[0].SelfAttention


def position_capacity(encoder: torch.nn.Module) -> int | None:
    """Longest input the encoder's positions cover: BART's learned table, None (unbounded) for T5."""
    if encoder_family(encoder) == "t5":
        return None
    emb = encoder.embed_positions
    return emb.num_embeddings - emb.offset


def extend_positions(encoder: torch.nn.Module, length: int) -> bool:
    """Tile BART's learned positions to ``length`` (MASFormer's recipe: duplicate the pretrained ones).

    Position p >= P (P pretrained positions) gets the embedding of p mod P. Only the encoder's table
    grows (the decoder keeps its own); T5 needs nothing. Returns whether the table changed.
    """
    have = position_capacity(encoder)
    if have is None or have >= length:
        return False
    old = encoder.embed_positions
    w = old.weight.data  # [offset + P, d]
    head, table = w[: old.offset], w[old.offset:]  # the offset rows are BART's unused padding slots
    reps = -(-length // have)
    new = BartLearnedPositionalEmbedding(length, w.shape[1]).to(device=w.device, dtype=w.dtype)
    new.weight.data.copy_(torch.cat([head, table.repeat(reps, 1)[:length]]))  # [offset + length, d]
    new.weight.requires_grad_(old.weight.requires_grad)
    encoder.embed_positions = new
    encoder.max_source_positions = length
    return True


def route_window_attention(encoder: torch.nn.Module, layer_ids: list[int]) -> None:
    """Send the self-attention of ``layer_ids`` to the banded kernel (idempotent).

    Each routed module gets its own shallow copy of the config naming ``scaleformer_window``; the
    encoder stack, the decoder and every other layer keep the model's config and implementation.
    """
    layers = encoder_layers(encoder)
    for i in layer_ids:
        attn = self_attention(layers[i])
        if compat.attn_impl(attn) == WINDOW_ATTN:
            continue
        conf = copy.copy(attn.config)
        conf.scaleformer_base_attn = compat.attn_impl(attn) or "sdpa"  # fallback without a window
        compat.set_attn_impl(conf, WINDOW_ATTN)
        attn.config = conf


def is_routed(encoder: torch.nn.Module, i: int) -> bool:
    return compat.attn_impl(self_attention(encoder_layers(encoder)[i])) == WINDOW_ATTN




# ------------------------------------------------------------------------------------ the encoder
def run_encoder(
    encoder: torch.nn.Module,
    input_ids: torch.Tensor,  # [B, N]
    attention_mask: torch.Tensor,  # [B, N]
    spans: list[Span],  # one per encoder layer
) -> torch.Tensor:
    """The encoder's forward pass with one attention span per layer; returns ``[B, N, d]``.

    Mirrors BartEncoder / T5Stack forward (embeddings, dropout, layerdrop, final norm) and calls
    the stock layers, so gradient checkpointing and the attention implementation carry over.
    """
    family = encoder_family(encoder)
    layers = encoder_layers(encoder)
    if len(spans) != len(layers):
        raise ValueError(f"{len(spans)} spans for {len(layers)} encoder layers")
    n = input_ids.shape[1]
    cap = position_capacity(encoder)
    if cap is not None and n > cap:
        raise ValueError(f"input of {n} tokens exceeds the encoder's {cap} positions: extend them first "
                         "(the method's wrap(model) does)")
    valid = attention_mask.bool()  # [B, N]
    if family == "bart":
        x = encoder.embed_tokens(input_ids)  # [B, N, d], embed_scale included
        x = x + encoder.embed_positions(x[:, :, -1]).to(x.device)  # positions 0..N-1 (shape only)
        x = encoder.layernorm_embedding(x)
        x = F.dropout(x, p=encoder.dropout, training=encoder.training)
        bias_attn = None
    else:
        x = encoder.dropout(encoder.embed_tokens(input_ids))  # [B, N, d]
        bias_attn = self_attention(layers[0])  # holds T5's shared relative_attention_bias
    prepared: dict[Span, Any] = {}
    for i, (layer, span) in enumerate(zip(layers, spans)):
        if encoder.training and getattr(encoder, "layerdrop", 0.0) > 0 and torch.rand([]) < encoder.layerdrop:
            continue
        span = Span("full") if span.covers(n) else span
        rule = span.rule
        if span not in prepared:
            prepared[span] = rule.prepare(encoder, span.size, x, valid, bias_attn)
        if rule.routed and not is_routed(encoder, i):
            raise ValueError(f"encoder layer {i} has a {span.kind} span but is not routed to the banded kernel: "
                             "call route_window_attention (the method's wrap(model) does)")
        x = _apply(layer, span, x, prepared[span], family)
    if family == "t5":
        x = encoder.dropout(encoder.final_layer_norm(x))
    return x


def _apply(layer: torch.nn.Module, span: Span, x: torch.Tensor, prep: dict[str, Any], family: str) -> torch.Tensor:
    n = x.shape[1]
    rule, extra = span.rule, span.rule.layer_kwargs(span.size)
    h = rule.enter(x, span.size, prep)
    if family == "bart":
        y = compat.first_output(compat.call(layer, h, attention_mask=prep["mask"], extra=extra))
    else:
        y = compat.first_output(compat.call(layer, h, attention_mask=prep["mask"], position_bias=prep["bias"],
                                            extra=extra))
    return rule.leave(y, span.size, prep, n)
