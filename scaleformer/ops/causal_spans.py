"""Per-layer attention spans on a decoder-only model's causal self-attention: MASFormer as its paper runs it.

The paper (Zhang et al. 2023, section 3) continues a GPT-3 XL-style causal LM with full attention in ``l`` layers and
block attention in the others. :func:`route_causal_spans` gives each self-attention module of a Hugging Face causal
LM its own :class:`~scaleformer.ops.spans.Span` (causal) and routes it, through transformers' AttentionInterface,
to :func:`causal_span_forward`, which runs the span kinds' own kernels (``Span.attend``: sdpa causal for full,
:mod:`~scaleformer.ops.causal_kernels` for blocks and windows; the dispatch rule is :class:`Span`'s). The
weights, the embeddings, the MLPs and the cache stay the stock ones. No second implementation of a pattern lives
here: only the cases the kernels do not take, each by the pattern read at token *positions*:

- a padded batch (transformers passes a mask; positions count real tokens, so a left-padded row is cut into the
  blocks of its own tokens, as unpadded): one sdpa call under the span's mask at those positions;
- cached decoding of one token: the keys its span reaches are one contiguous run, sliced (a block's first key
  to the token; a window's w back);
- several new tokens after a cache: the span's mask of those rows.

Every layer is routed (full ones too) and the model-wide implementation set to sdpa, so the model builds its
mask in sdpa's form: none at all when nothing is padded. The backbone's own local attention (``layer_types``,
``sliding_window``) is switched off, since the method's spans replace it; :func:`native_window` says which
native setting equals a window span, for the backbones that have one.

Families: those whose attention modules call the AttentionInterface and need nothing beyond q, k, v and a
scale (tested one by one: ``FAMILIES``). GPT-Neo runs its own attention code, so it cannot be routed:
its ``attention_types`` with every layer "local" is the native form of a window of ``window_size - 1``.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from scaleformer.ops import compat
from scaleformer.ops.spans import Span

CAUSAL_ATTN = "scaleformer_causal_span"
SPAN_ATTR = "scaleformer_span"  # the span a routed attention module runs

# model_type -> (the base model's list of layers, each layer's self-attention module); each family is tested
# to equal its stock model when every span is full (tests/ops/test_causal_spans.py).
FAMILIES: dict[str, tuple[str, str]] = {
    "gpt2": ("h", "attn"),
    "gpt_neox": ("layers", "attention"),
    "llama": ("layers", "self_attn"),
    "mistral": ("layers", "self_attn"),
    "qwen2": ("layers", "self_attn"),
}


def is_causal_lm(model: torch.nn.Module) -> bool:
    """A decoder-only model (its config says it is no encoder-decoder)."""
    conf = getattr(model, "config", None)
    return conf is not None and not getattr(conf, "is_encoder_decoder", False)


def causal_family(model: torch.nn.Module | Any) -> str:
    """The routed family of a model, or of a model's config (checked before any weights are built)."""
    conf = getattr(model, "config", model)
    kind = str(getattr(conf, "model_type", "") or "")
    if kind in FAMILIES:
        return kind
    native = " (GPT-Neo runs its own attention code; its attention_types set global and local layers natively)" \
        if kind == "gpt_neo" else ""
    raise TypeError(f"per-layer causal spans support the decoder-only families {', '.join(sorted(FAMILIES))}; "
                    f"got model_type {kind!r}{native}")


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    return getattr(model.base_model, FAMILIES[causal_family(model)][0])


def attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The self-attention module of each layer, bottom first."""
    name = FAMILIES[causal_family(model)][1]
    return [getattr(layer, name) for layer in decoder_layers(model)]


def learned_positions(model: torch.nn.Module) -> torch.nn.Embedding | None:
    """GPT-2's learned position table (``wpe``); None for rotary families (nothing to extend)."""
    return getattr(model.base_model, "wpe", None) if causal_family(model) == "gpt2" else None


def extend_positions(model: torch.nn.Module, length: int) -> bool:
    """Duplicate the learned positions up to ``length``, as the paper does (1,024 pretrained -> 8,192): position
    p >= P gets the embedding of p mod P. Rotary families need nothing. Returns whether the table changed."""
    old = learned_positions(model)
    if old is None or old.num_embeddings >= length:
        return False
    w = old.weight.data  # [P, d]
    new = torch.nn.Embedding(length, w.shape[1]).to(device=w.device, dtype=w.dtype)
    new.weight.data.copy_(w.repeat(-(-length // w.shape[0]), 1)[:length])  # [length, d]
    new.weight.requires_grad_(old.weight.requires_grad)
    model.base_model.wpe = new
    model.config.n_positions = length  # GPT-2's name for max_position_embeddings
    return True


def route_causal_spans(model: torch.nn.Module, spans: list[Span]) -> None:
    """Give each layer's self-attention its span (bottom first) and route it to :func:`causal_span_forward`.

    Idempotent; routing again replaces the spans. Each routed module gets its own shallow copy of the config naming
    the routed implementation; the model's config says sdpa (the masks' form) and plain causal layers."""
    modules = attention_modules(model)
    if len(spans) != len(modules):
        raise ValueError(f"{len(spans)} spans for {len(modules)} decoder layers")
    conf = model.config
    if getattr(conf, "layer_types", None) is not None:
        conf.layer_types = ["full_attention"] * len(modules)
    for key in ("sliding_window", "use_sliding_window"):
        if getattr(conf, key, None):
            setattr(conf, key, None if key == "sliding_window" else False)
    base = model.base_model
    if getattr(base, "has_sliding_layers", False):
        base.has_sliding_layers = False  # Qwen2 builds a sliding mask for such layers
    for layer in decoder_layers(model):
        if getattr(layer, "attention_type", None) not in (None, "full_attention"):
            layer.attention_type = "full_attention"
    compat.set_attn_impl(conf, "sdpa")
    for attn, span in zip(modules, spans):
        if compat.attn_impl(attn) != CAUSAL_ATTN:
            attn.config = copy.copy(attn.config)
            compat.set_attn_impl(attn.config, CAUSAL_ATTN)
        setattr(attn, SPAN_ATTR, Span(span.kind, span.size, causal=True))


def routed_spans(model: torch.nn.Module) -> list[Span | None]:
    """Each layer's span (None where a layer is not routed)."""
    return [getattr(a, SPAN_ATTR, None) if compat.attn_impl(a) == CAUSAL_ATTN else None
            for a in attention_modules(model)]


def native_window(span: Span) -> dict[str, int]:
    """The native settings equal to a causal window span of w: transformers' ``sliding_window`` counts the
    token itself (keys ``i - sw < j <= i``) and GPT-Neo's ``window_size`` likewise, so both are ``w + 1``."""
    if span.kind != "window":
        raise ValueError(f"only a window span has a native form; got {span.kind!r}")
    return {"sliding_window": span.size + 1, "window_size": span.size + 1}


# -------------------------------------------------------------------------------------------- the kernel
def _first_key(span: Span, pos: Any) -> Any:
    """The earliest position a query at ``pos`` reads under a built-in span (its keys run from here to itself): a
    tensor of positions, or one Python int (a decoded token's, from shapes: no tensor, no device sync)."""
    if span.kind == "block":
        return pos // span.size * span.size
    if span.kind == "window":
        return (pos - span.size).clamp(min=0) if torch.is_tensor(pos) else max(pos - span.size, 0)
    return torch.zeros_like(pos) if torch.is_tensor(pos) else 0


def allowed(span: Span, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """May a query at position ``q_pos [B, q, 1]`` read a key at position ``k_pos [B, q, k]`` (each query's own
    count of its keys): ``[B, q, k]`` bool, by positions (a key after the query is the given mask's to refuse)."""
    if span.kind in ("full", "block", "window"):
        return k_pos >= _first_key(span, q_pos)
    n = int(max(q_pos.max(), k_pos.max())) + 1  # another package's kind: its own mask, read at the positions
    dense = span.dense_mask(n).to(q_pos.device)  # [n, n]
    return dense[q_pos.clamp(min=0).expand_as(k_pos), k_pos.clamp(min=0)]


def span_mask(span: Span, q_len: int, k_len: int, attention_mask: torch.Tensor | None,
              position_ids: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    """``[B|1, q, k]`` bool: the keys each new query reads, the given mask read whole and intersected with the span.

    A mask (transformers' ``[B, 1, q, k]``, bool or additive) says which keys each query may read: its padding, a
    packed row's block-diagonal documents, a static cache's empty slots. Each query's position is then the count
    of the keys it may read (itself included), and each key's position its rank among them: a left-padded row, a
    document packed after another, a prompt in a cache longer than it, all read as that document alone. Without a
    mask every key is a real token and a new query sits at its ``position_ids`` (a static cache's prompt arrives
    with keys padded to the cache's length, and its tokens are the first slots), else at the last columns."""
    if attention_mask is not None:
        given = attention_mask[:, 0] if attention_mask.dim() == 4 else attention_mask  # [B|1, q, k]
        given = (given == 0) if given.is_floating_point() else given.bool()
        rank = given.long().cumsum(-1) - 1  # [B, q, k] a key's position among the query's keys
        q_pos = rank[..., -1:]  # [B, q, 1] the query's own position: the last of its keys
        mask = given & allowed(span, q_pos, rank)
    else:
        cols = torch.arange(k_len, device=device)
        if position_ids is not None and position_ids.shape[-1] == q_len:
            q_col = position_ids.reshape(-1, q_len).to(device).clamp(max=k_len - 1)  # [B|1, q]
        else:
            q_col = torch.arange(k_len - q_len, k_len, device=device)[None]  # [1, q]
        q_col = q_col[..., None]  # [B|1, q, 1]
        k_pos = cols.expand(*q_col.shape[:2], k_len)  # [B|1, q, k]
        mask = (k_pos <= q_col) & allowed(span, q_col, k_pos)
    empty = ~mask.any(-1, keepdim=True)  # a pad query reads nothing: let it read key 0 (no empty softmax row)
    return mask | (empty & (torch.arange(k_len, device=device) == 0))


# Set on a routed module while its attention weights are asked for (output_attentions): the dense path returns them.
WEIGHTS_ATTR = "scaleformer_return_weights"


@contextlib.contextmanager
def returning_weights(model: torch.nn.Module, on: bool) -> Iterator[None]:
    """While ``on``, every routed layer returns its attention weights under its span (``output_attentions``):
    computed by the span's dense mask and an explicit softmax, ``[B, H, q, k]`` per layer, as eager attention
    would under that mask."""
    modules = [a for a in attention_modules(model) if hasattr(a, SPAN_ATTR)] if on else []
    for a in modules:
        setattr(a, WEIGHTS_ATTR, True)
    try:
        yield
    finally:
        for a in modules:
            setattr(a, WEIGHTS_ATTR, False)


def causal_span_forward(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, H, q, dh]
    key: torch.Tensor,  # [B, Hk, k, dh] (Hk divides H: grouped-query attention)
    value: torch.Tensor,  # [B, Hk, k, dv]
    attention_mask: torch.Tensor | None,  # None (nothing padded) or transformers' [B, 1, q, k] (bool or additive)
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """AttentionInterface entry of a routed layer: its span over the new queries; returns ``[B, q, H, dv]`` and,
    while they are asked for, the attention weights ``[B, H, q, k]`` under the span (else None).

    The span kinds' kernels run where the pattern needs nothing else: no mask and as many queries as keys
    (training, scoring, a prompt), or one cached token reading the contiguous keys its span reaches. Any other
    call (a mask, a static cache's padded keys, several new tokens after a cache) runs sdpa under
    :func:`span_mask`, the given mask read whole; asked for its weights, the same mask by an explicit softmax."""
    span: Span = getattr(module, SPAN_ATTR)
    if key.shape[1] != query.shape[1]:
        rep = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)  # [B, H, k, d]
    q_len, k_len = query.shape[2], key.shape[2]
    weights = bool(getattr(module, WEIGHTS_ATTR, False))
    if weights or attention_mask is not None or (q_len != k_len and (q_len != 1 or span.kind not in (
            "full", "block", "window"))):
        mask = span_mask(span, q_len, k_len, attention_mask, kwargs.get("position_ids"), query.device)[:, None]
        if not weights:  # [B|1, 1, q, k]
            out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling)
            return out.transpose(1, 2).contiguous(), None
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        scores = (query @ key.transpose(-1, -2)) * scale  # [B, H, q, k]
        probs = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        out = F.dropout(probs, dropout, training=dropout > 0) @ value  # [B, H, q, dv]
        return out.transpose(1, 2).contiguous(), probs
    if q_len == k_len:  # training, scoring, a prompt: the kernels
        out = span.attend(query, key, value, scaling=scaling, dropout=dropout)
    else:  # one cached token: the keys its span reaches are one contiguous run
        first = _first_key(span, k_len - 1)  # a Python int
        out = F.scaled_dot_product_attention(query, key[:, :, first:], value[:, :, first:], dropout_p=dropout,
                                             scale=scaling)
    return out.transpose(1, 2).contiguous(), None  # [B, q, H, dv]


compat.register_attention(CAUSAL_ATTN, causal_span_forward)
