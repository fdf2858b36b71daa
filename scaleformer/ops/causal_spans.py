"""Per-layer attention spans on a decoder-only model's causal self-attention: MASFormer as its paper runs it.

The paper (Zhang et al. 2023, section 3) continues a GPT-3 XL-style causal LM with full attention in ``l`` layers and
block attention in the others. :func:`route_causal_spans` gives each self-attention module of a Hugging Face causal
LM its own :class:`~scaleformer.ops.spans.Span` (causal) and routes it, through transformers' AttentionInterface,
to :func:`causal_span_forward`, which runs the span kinds' own kernels (``Span.attend``: sdpa causal for full,
``[B, H x nb, b, dh]`` blocks, the banded kernel's left side for a window). The weights, the embeddings, the MLPs
and the cache stay the stock ones. No second implementation of a pattern lives here: only the cases the kernels
do not take, each by the pattern read at token *positions*:

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

import copy
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
def _first_key(span: Span, pos: torch.Tensor) -> torch.Tensor:
    """The earliest position a query at ``pos`` reads under a built-in span (its keys run from here to itself)."""
    if span.kind == "block":
        return pos // span.size * span.size
    if span.kind == "window":
        return (pos - span.size).clamp(min=0)
    return torch.zeros_like(pos)


def allowed(span: Span, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """May the query at ``q_pos [B, q]`` read the key at ``k_pos [B, k]``: ``[B, q, k]`` bool, by positions."""
    qp, kp = q_pos[:, :, None], k_pos[:, None, :]
    if span.kind in ("full", "block", "window"):
        return (kp <= qp) & (kp >= _first_key(span, qp))
    n = int(max(q_pos.max(), k_pos.max())) + 1  # another package's kind: its own mask, read at the positions
    mask = span.dense_mask(n).to(q_pos.device)  # [n, n]
    return mask[qp.clamp(min=0), kp.clamp(min=0)]


def causal_span_forward(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, H, q, dh]
    key: torch.Tensor,  # [B, Hk, k, dh] (Hk divides H: grouped-query attention)
    value: torch.Tensor,  # [B, Hk, k, dv]
    attention_mask: torch.Tensor | None,  # None (nothing padded) or transformers' [B, 1, q, k] (bool or additive)
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """AttentionInterface entry of a routed layer: its span over the new queries; returns ``[B, q, H, dv]``."""
    span: Span = getattr(module, SPAN_ATTR)
    if key.shape[1] != query.shape[1]:
        rep = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)  # [B, H, k, d]
    q_len, k_len = query.shape[2], key.shape[2]
    if attention_mask is None and q_len == k_len:  # training, scoring, a prompt: the kernels
        out = span.attend(query, key, value, scaling=scaling, dropout=dropout)
    elif attention_mask is None and q_len == 1 and span.kind in ("full", "block", "window"):
        first = int(_first_key(span, torch.tensor(k_len - 1)))  # a Python int from shapes: no device sync
        out = F.scaled_dot_product_attention(query, key[:, :, first:], value[:, :, first:], dropout_p=dropout,
                                             scale=scaling)
    else:
        b = query.shape[0]
        if attention_mask is None:
            valid = torch.ones(b, k_len, dtype=torch.bool, device=query.device)  # [B, k]
        else:  # the last query row reads every real key up to itself: the padding, whatever the layout
            last = attention_mask[:, 0, -1, :]
            valid = (last == 0) if last.is_floating_point() else last.bool()  # [B, k]
            valid = valid.expand(b, k_len)
        k_pos = valid.long().cumsum(1) - 1  # [B, k] each key's position among its row's real tokens
        q_pos = k_pos[:, k_len - q_len:]  # [B, q] the new tokens are the last columns
        mask = allowed(span, q_pos, k_pos) & valid[:, None, :]  # [B, q, k]
        own = torch.arange(k_len - q_len, k_len, device=query.device)[:, None] == \
            torch.arange(k_len, device=query.device)[None, :]  # [q, k] each query's own column
        mask = mask | (own & ~mask.any(-1, keepdim=True))  # a pad query reads itself: no empty softmax row
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask[:, None], dropout_p=dropout,
                                             scale=scaling)
    return out.transpose(1, 2).contiguous(), None  # [B, q, H, dv]


compat.register_attention(CAUSAL_ATTN, causal_span_forward)
