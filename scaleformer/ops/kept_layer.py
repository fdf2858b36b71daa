"""A BART/T5 encoder's last layer evaluated only at the positions a method keeps.

Why: ScaleFormer keeps 2k (+ m) of each chunk's L final states (2 or 302 of 1024 by default), yet a
full encoder pass computes the last layer's queries, attention output, FFN and final norm at every
position. Here the layers below run as the encoder runs them; the last layer then takes keys and
values from every position of the chunk (so the kept states equal the full computation up to float
rounding: same inputs, same weights, only fewer query rows) and everything else at the kept
positions only.

How: the encoder's own ``forward`` runs (embeddings, masks, dropout, layerdrop, gradient
checkpointing, hooks, all as in transformers) until its last layer is about to run; a forward
pre-hook on that layer stops it there (:class:`_Stop`) and hands over the layer's inputs. The last
layer is then computed from its own submodules (BART: post-LN attention + FFN; T5: pre-LN attention
with the relative-position bias rows of the kept queries, FFN, the stack's final norm).

The layer's call is read by name against the installed signature, and its submodules are checked
before use (:mod:`scaleformer.ops.compat`): on a transformers release whose layers look otherwise, the
full encoder runs instead (the same states, slower) and says so once.

Only when the last layer draws no random numbers (evaluation, or every dropout probability 0 and no
layerdrop): in training with dropout the full layer runs, because dropout masks drawn for the kept
positions only would change the random stream, and with it every later draw of a run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from scaleformer.ops import compat, patches
from scaleformer.ops.spans import encoder_family, encoder_layers

Pick = tuple[torch.Tensor | None, torch.Tensor]  # (row indices [Q] or None = every row, positions [Q, G])

# Called with (rows, width, kept) for every row group computed at kept positions only (FLOP counting).
OBSERVERS: list[Callable[[int, int, int], None]] = []


class _Stop(Exception):
    """Raised by the pre-hook on the last layer: carries that layer's inputs out of the encoder."""

    def __init__(self, args: tuple, kwargs: dict) -> None:
        super().__init__("last encoder layer reached")
        self.args, self.kwargs = args, kwargs


def supported(encoder: nn.Module) -> bool:
    """Whether the encoder is one whose last layer this module can evaluate (BART or T5)."""
    try:
        encoder_family(encoder)
    except TypeError:
        return False
    return True


# Submodules the kept-positions computation reads, per family (checked on the instance before use).
_NEEDS = {
    "bart": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj",
             "self_attn.num_heads", "self_attn.scaling", "self_attn_layer_norm", "fc1", "fc2", "activation_fn",
             "final_layer_norm"),
    "t5": ("layer.0.layer_norm", "layer.0.SelfAttention.q", "layer.0.SelfAttention.k", "layer.0.SelfAttention.v",
           "layer.0.SelfAttention.o", "layer.0.SelfAttention.n_heads", "layer.0.SelfAttention.compute_bias"),
}


def _fits(family: str, encoder: nn.Module, layer: nn.Module) -> bool:
    """Whether this layer has every submodule the kept-positions computation reads."""
    def has(obj: object, path: str) -> bool:
        for part in path.split("."):
            try:
                obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
            except (AttributeError, IndexError, TypeError):
                return False
        return True

    extra = ("final_layer_norm", "dropout") if family == "t5" else ()
    return all(has(layer, p) for p in _NEEDS[family]) and all(has(encoder, p) for p in extra)


def deterministic(encoder: nn.Module) -> bool:
    """True when the last layer (and the stack after it) draws no random numbers."""
    if not encoder.training:
        return True
    if getattr(encoder, "layerdrop", 0.0) > 0:
        return False
    return all(m.p == 0 for m in encoder.modules() if isinstance(m, nn.Dropout)) and all(
        float(getattr(encoder.config, key, 0.0) or 0.0) == 0.0
        for key in ("dropout", "attention_dropout", "activation_dropout", "dropout_rate"))


def gather(h: torch.Tensor, rows: torch.Tensor | None, pos: torch.Tensor) -> torch.Tensor:
    """``h [mb, w, d]`` at rows (None = all) and positions ``[Q, G]``: ``[Q, G, d]``."""
    h = h if rows is None else h.index_select(0, rows)
    return h.gather(1, pos[..., None].expand(-1, -1, h.shape[-1]))


def full_then_gather(encoder: nn.Module, ids: torch.Tensor, mask: torch.Tensor, picks: Sequence[Pick]
                     ) -> list[torch.Tensor]:
    """The plain way: the whole encoder at every position, then each pick's states."""
    h = encoder(input_ids=ids, attention_mask=mask).last_hidden_state  # [mb, w, d]
    return [gather(h, rows, pos) for rows, pos in picks]


def encode_at(encoder: nn.Module, ids: torch.Tensor, mask: torch.Tensor, picks: Sequence[Pick]
              ) -> list[torch.Tensor]:
    """Final encoder states ``[Q, G, d]`` of each pick, the last layer evaluated at those positions only.

    ids, mask: ``[mb, w]``; picks as :func:`full_then_gather` (positions must be real tokens, < row
    length). Falls back to :func:`full_then_gather` when the last layer draws random numbers.
    """
    if not supported(encoder) or not deterministic(encoder):
        return full_then_gather(encoder, ids, mask, picks)
    family = encoder_family(encoder)
    layer = encoder_layers(encoder)[-1]
    if not patches.enabled("kept_layer") or not _fits(family, encoder, layer):
        return full_then_gather(encoder, ids, mask, picks)
    handle = layer.register_forward_pre_hook(_stop, with_kwargs=True)
    try:
        encoder(input_ids=ids, attention_mask=mask)
        raise RuntimeError(f"{type(encoder).__name__} returned without running its last layer")
    except _Stop as stop:
        x, bias = _inputs(family, layer, stop.args, stop.kwargs)  # [mb, w, d], T5: [1, H, w, w] or None
    finally:
        handle.remove()
    valid = mask.bool()  # [mb, w]
    outs = []
    for rows, pos in picks:
        xr = x if rows is None else x.index_select(0, rows)
        vr = valid if rows is None else valid.index_select(0, rows)
        if family == "bart":
            outs.append(_bart_last(layer, xr, vr, pos))
        else:
            br = bias if bias is None or bias.shape[0] == 1 or rows is None else bias.index_select(0, rows)
            outs.append(_t5_last(encoder, layer, xr, vr, pos, br))
        for fn in OBSERVERS:
            fn(int(pos.shape[0]), int(x.shape[1]), int(pos.shape[1]))
    return outs


def _stop(module: nn.Module, args: tuple, kwargs: dict) -> None:
    raise _Stop(args, kwargs)


def _inputs(family: str, layer: nn.Module, args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The last layer's hidden states and (T5) its self-attention position bias, bound by name."""
    if family == "bart":
        a, _ = compat.bind(type(layer).forward, (layer, *args), kwargs, ("hidden_states",))
        return a["hidden_states"], None
    a, _ = compat.bind(type(layer).forward, (layer, *args), kwargs, ("hidden_states", "position_bias"))
    return a["hidden_states"], a["position_bias"]


def layer_fits(encoder: nn.Module) -> bool:
    """Whether this encoder's last layer has the submodules read here (checked before any use)."""
    return supported(encoder) and _fits(encoder_family(encoder), encoder, encoder_layers(encoder)[-1])


def layer_inputs(family: str, layer: nn.Module, args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The inputs a pre-hook saw the last layer called with: hidden states and (T5) position bias."""
    return _inputs(family, layer, args, kwargs)


def _heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``[b, n, H * D]`` to ``[b, H, n, D]``."""
    b, n, _ = x.shape
    return x.view(b, n, n_heads, -1).transpose(1, 2)


def _merge(x: torch.Tensor) -> torch.Tensor:
    """``[b, H, n, D]`` to ``[b, n, H * D]``."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)


def _bart_last(layer: nn.Module, x: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """BartEncoderLayer (post-LN) at ``pos [q, G]`` of ``x [q, w, d]``; keys/values from every position."""
    attn = layer.self_attn
    xq = gather(x, None, pos)  # [q, G, d]
    q = _heads(attn.q_proj(xq), attn.num_heads)  # [q, H, G, D]
    k, v = _heads(attn.k_proj(x), attn.num_heads), _heads(attn.v_proj(x), attn.num_heads)  # [q, H, w, D]
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=valid[:, None, None, :], scale=attn.scaling)
    h = layer.self_attn_layer_norm(xq + attn.out_proj(_merge(o)))  # dropout: identity here
    h = layer.final_layer_norm(h + layer.fc2(layer.activation_fn(layer.fc1(h))))
    if h.dtype == torch.float16 and not torch.isfinite(h).all():  # as BartEncoderLayer
        clamp = torch.finfo(h.dtype).max - 1000
        h = torch.clamp(h, min=-clamp, max=clamp)
    return h


def _t5_last(encoder: nn.Module, block: nn.Module, x: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor,
             bias: torch.Tensor | None) -> torch.Tensor:
    """T5Block (pre-LN) + the stack's final norm at ``pos [q, G]``; the bias rows of the kept queries."""
    sa = block.layer[0]
    attn = sa.SelfAttention
    w = x.shape[1]
    n = sa.layer_norm(x)  # [q, w, d]
    q = _heads(attn.q(gather(n, None, pos)), attn.n_heads)  # [q, H, G, D]
    k, v = _heads(attn.k(n), attn.n_heads), _heads(attn.v(n), attn.n_heads)  # [q, H, w, D]
    if bias is None:  # a one-layer encoder: its only layer computes the bias itself
        bias = (compat.t5_bias(attn, w, w, device=x.device) if attn.has_relative_attention_bias
                else x.new_zeros(1, attn.n_heads, w, w))
    if bias.shape[0] == 1:  # [1, H, w, w]: each kept query's row of the bias
        rows = bias[0][:, pos].transpose(0, 1)  # [q, H, G, w]
    else:  # a per-row bias [q, H, w, w] (a mask already added in)
        rows = bias.gather(2, pos[:, None, :, None].expand(-1, bias.shape[1], -1, w))
    additive = torch.where(valid[:, None, None, :], rows.to(q.dtype), torch.finfo(q.dtype).min)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=additive, scale=getattr(attn, "scaling", 1.0))
    h = _t5_clamp(gather(x, None, pos) + attn.o(_merge(o)))  # [q, G, d]; dropout: identity here
    h = _t5_clamp(block.layer[-1](h))
    return encoder.dropout(encoder.final_layer_norm(h))


def _t5_clamp(h: torch.Tensor) -> torch.Tensor:
    """T5Block's fp16 clamp (inf values after a sub-layer)."""
    if h.dtype != torch.float16:
        return h
    top = torch.where(torch.isinf(h).any(), torch.finfo(h.dtype).max - 1000, torch.finfo(h.dtype).max)
    return torch.clamp(h, min=-top, max=top)

