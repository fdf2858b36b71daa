"""Retrieval cross-attention for BART and T5 decoders (Unlimiformer, Memorizing Transformers).

What the decoder gets from these methods is ``[local window | datastore]`` along the encoder axis:
the backbone's own encoding of the truncated input (what it sees without the method), then the
SLED-packed states of the whole input. :class:`RetrievalState` says where the datastore starts.

How the hook works: :func:`patch_cross_attention` swaps the *class* of every decoder cross-attention
module (``BartAttention`` at ``decoder.layers[i].encoder_attn``, ``T5Attention`` at
``decoder.block[i].layer[1].EncDecAttention``) for a subclass whose ``forward`` projects keys and
values of *all* encoder states with the module's own ``k``/``v`` projections (once per generation:
they go into the ``EncoderDecoderCache`` exactly where the original puts them, so later steps and
beam search reuse them; with :func:`scaleformer.ops.decoding.generate` they are projected once per
document and its beams share them, see :mod:`scaleformer.ops.decoding`, whose beam-sharing classes these
subclass) and then attends per head to a selection of them, by the layer's role:

* ``retrieve``: the top-k datastore keys by score ``q . k`` (exact: one matmul + ``topk`` on the
  device), softmax over those k only, weighted sum of their values. With k >= the number of states
  this *is* full cross-attention over the datastore. At generation, decoder position 0 attends to
  the local window instead (Unlimiformer skips retrieval at the first decoding step).
* ``window``: the local window only.
* ``memory``: Memorizing Transformers' gated mix of top-k retrieval from the datastore (which the
  method masks down to its memory) and attention to the local window (a per-head gate).

Swapping the class instead of wrapping the module keeps every parameter name, so a checkpoint of
plain fine-tuning loads into a patched model and back. The phase (what the patched layers do on
the next forward) lives in a :class:`RetrievalState` shared by the method and the modules; the
method sets it in ``encode`` (training vs generation). In phase ``full`` the original forward runs.

T5 cross-attention has no relative position bias (``EncDecAttention`` is built with
``has_relative_attention_bias=False``); the zero bias the first layer passes along is still added
to the scores when given, so the patched layers compute exactly what the originals do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from scaleformer.errors import ConfigError
from scaleformer.ops import compat, patches
from scaleformer.ops.compat import BART_ROLES, T5_ROLES, BartAttention, EncoderDecoderCache, T5Attention
from scaleformer.ops.decoding import (
    SharedBartAttention,
    SharedT5Attention,
    expand_if_needed,
    group_mask,
    group_queries,
    ungroup,
)

# Phases: what the patched layers do on the next forward (set by the method's encode()).
FULL = "full"  # the original attention over all encoder states (e.g. Unlimiformer's standard training)
RETRIEVE = "retrieve"  # each layer does what its role says, top-k retrieval included
RANDOM = "random"  # retrieve-role layers attend to the random subset sampled in begin()
# Roles: one per decoder layer, fixed at wrap().
ROLES = ("retrieve", "window", "memory")


@dataclass(eq=False)
class RetrievalState:
    """What the patched cross-attention layers share with their method."""

    k: int  # keys retrieved per query and head (clamped to the number of states at run time)
    window: int  # the backbone's max positions: a window layer's span when there is no local part
    phase: str = FULL
    local: int = 0  # encoder states before the datastore (the local window's width; 0 = none)
    local_first_step: bool = False  # retrieve-role layers: decoder position 0 attends to the local window
    n_layers: int = 0  # decoder layers, known once wrap() ran
    random_keep: torch.Tensor | None = None  # [n_layers, batch, T] subsets for phase RANDOM
    record: bool = False  # keep each layer's last top-k indices in ``retrieved`` (tests, analysis)
    retrieved: dict[int, torch.Tensor | None] = field(default_factory=dict)  # layer -> [B, H, Q, k]

    def begin(self, phase: str, mask: torch.Tensor, *, local: int = 0, local_first_step: bool = False) -> None:
        """Set the phase and layout for the next forward; phase RANDOM samples each layer's subset now.

        ``mask`` [batch, T] covers what the decoder gets; its first ``local`` states are the local
        window, the rest the datastore. Sampling here, not in the layers, keeps the subsets fixed if
        activation checkpointing re-runs the forward during backward.
        """
        self.phase, self.local, self.local_first_step = phase, local, local_first_step
        self.random_keep = (random_subsets(mask[:, local:], self.n_layers, self.k)
                            if phase == RANDOM and self.n_layers else None)


def random_subsets(mask: torch.Tensor, n_layers: int, k: int) -> torch.Tensor:
    """Per layer and document, min(k, real states) real datastore states uniformly without replacement.

    mask: [batch, T] 1 for real states. Returns [n_layers, batch, T] bool.
    """
    real = mask.bool()  # [B, T]
    draw = torch.rand((n_layers, *real.shape), device=mask.device).masked_fill(~real, -1.0)  # [L, B, T]
    idx = draw.topk(min(k, real.shape[1]), dim=-1).indices  # [L, B, k']
    keep = torch.zeros_like(draw, dtype=torch.bool).scatter_(-1, idx, True)
    return keep & real


# ----------------------------------------------------------------------------------------- attention
def _masked(scores: torch.Tensor, mask: Any, bias: torch.Tensor | None) -> torch.Tensor:
    """Add the bias and the model's encoder mask (whatever form its attention backend made) to scores."""
    if bias is not None:
        scores = scores + bias  # T5: [1, H, Q, T] zeros
    if mask is None:  # sdpa drops the mask when nothing is padded
        return scores
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"retrieval cross-attention needs a tensor encoder mask, got {type(mask).__name__} "
                        "(flex attention): use backbone.attn_implementation=sdpa or eager")
    if mask.dim() == 2:  # flash attention passes the raw [B, T] padding mask
        mask = mask[:, None, None, :].bool()
    if mask.dtype == torch.bool:  # sdpa: True = attend, [B, 1, Q|1, T]
        return scores.masked_fill(~mask, float("-inf"))
    return scores + mask  # eager: additive, 0 or the dtype's min


def _allowed(mask: Any) -> torch.Tensor | None:
    """The encoder mask as booleans (True = may attend) ``[B, 1, Q|1, T]``; None when nothing is masked."""
    if mask is None:
        return None
    if mask.dim() == 2:
        return mask[:, None, None, :].bool()
    if mask.dtype == torch.bool:
        return mask
    return mask > torch.finfo(mask.dtype).min / 2  # eager: additive, 0 or the dtype's min


def topk_unsorted(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's k largest scores and their indices (unsorted), exactly ``scores.topk(k, sorted=False)``'s
    set (up to the choice among tied values), in two cheaper stages when rows are long.

    Why: at generation every query searches the whole datastore, and a single top-k over T scores
    costs most of a decoding step. Split a row's first ``g * b`` scores into g groups of b (group j:
    positions j, j + g, j + 2g, ...; strided, so the group maxima are one vectorised max over b rows).
    The top k scores lie in the k groups with the largest maxima (any other group has k groups whose
    maxima are at least its own) or among the last ``T - g * b`` scores, which join the candidates;
    the second top-k runs over those k * b (+ tail) candidates. b ~ sqrt(T / k) balances the two
    stages; rows under 16 k use one plain top-k.
    """
    t = scores.shape[-1]
    b = math.isqrt(t // k) if k else 0
    if b < 4:
        return scores.topk(k, dim=-1, sorted=False)
    g = t // b
    n = g * b
    groups = scores[..., :n].unflatten(-1, (b, g))  # [..., b, g]: group j = column j
    best = groups.amax(-2).topk(k, dim=-1, sorted=False).indices  # [..., k] the k groups holding the top k
    cand = groups.gather(-1, best.unsqueeze(-2).expand(*best.shape[:-1], b, k)).flatten(-2)  # [..., b * k]
    if n < t:
        cand = torch.cat([cand, scores[..., n:]], -1)  # [..., b * k + tail]
    values, j = cand.topk(k, dim=-1, sorted=False)
    kb = k * b
    inside = (j // k) * g + best.gather(-1, j % k)  # candidate (r, i): row r of group best[i]
    return values, torch.where(j < kb, inside, n + j - kb)


def top_k(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scores with all but each row's top k set to -inf, and the kept indices ``[..., k]``.

    k is clamped to the number of keys (they vary per batch); with k >= keys nothing is dropped and
    the indices are None. Padding keys are -inf already, so a row with fewer real keys than k keeps
    them all (the padding it also "keeps" gets zero weight).
    """
    if k >= scores.shape[-1]:
        return scores, None
    idx = topk_unsorted(scores, k)[1]  # [B, H, Q, k]
    sel = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, idx, True)  # [B, H, Q, T]
    return scores.masked_fill(~sel, float("-inf")), idx


def _softmax(scores: torch.Tensor, dtype: torch.dtype, p: float, training: bool) -> torch.Tensor:
    # Half precision is upcast to float32 for the softmax, as transformers' eager attention does; float64
    # stays float64 (a float32 round trip would cost it its exactness).
    probs = scores.softmax(-1, dtype=torch.promote_types(scores.dtype, torch.float32)).to(dtype)
    return nn.functional.dropout(probs, p=p, training=training)


def attend_top_k(scores: torch.Tensor, v: torch.Tensor, k: int, p: float = 0.0, training: bool = False,
                 steps: int | None = None, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Attention restricted to each row's top-k keys: output [B, H, Q, D], weights, indices [B, H, Q, k].

    ``scores`` [B, H, Q, T'] score the values ``v[..., offset:, :]`` (v: [B, H, offset + T', D]).
    One query per sequence (a decoding step; ``steps`` = queries per sequence, default Q; the Q rows
    may be the beams of one document): softmax over the k retrieved scores and their k values read
    by row index (no copy of v), so the step costs k, not T, beyond the score matmul and the search.
    Several queries per sequence (teacher forcing): the dense [B, H, Q, T'] form (scores outside the
    top k masked), whose memory equals the scores'.
    """
    steps = scores.shape[-2] if steps is None else steps
    if k < scores.shape[-1] and steps == 1:
        top, idx = topk_unsorted(scores, k)  # [B, H, Q, k]
        probs = _softmax(top, v.dtype, p, training)
        b, h, q, _ = idx.shape
        t, d = v.shape[-2:]
        if v.is_contiguous():  # rows of v as [B * H * T, D]
            rows = idx + offset + torch.arange(b * h, device=idx.device).view(b, h, 1, 1) * t
            picked = v.view(-1, d).index_select(0, rows.reshape(-1))  # [B * H * Q * k, D]
        else:
            picked = v[..., offset:, :].gather(2, idx.reshape(b, h, q * k, 1).expand(-1, -1, -1, d))
        out = torch.matmul(probs[..., None, :], picked.view(b, h, q, k, d))  # [B, H, Q, 1, D]
        return out.squeeze(-2), probs, idx
    chosen, idx = top_k(scores, k)
    probs = _softmax(chosen, v.dtype, p, training)  # [B, H, Q, T'], zero outside the top k
    return torch.matmul(probs, v[..., offset:, :]), probs, idx


def _attend(scores: torch.Tensor, v: torch.Tensor, p: float, training: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain attention over the given keys: output [B, H, Q, D] and weights."""
    probs = _softmax(scores, v.dtype, p, training)
    return torch.matmul(probs, v), probs


def retrieval_attention(module: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any,
                        bias: torch.Tensor | None = None, first_query: int = 0,
                        steps: int | None = None) -> tuple[torch.Tensor, Any]:
    """Cross-attention of a patched layer, per its role and the state's phase.

    q: [B, H, Q, D], k and v: [B, H, T, D]; ``first_query`` is the decoder position of each sequence's
    first query and ``steps`` the queries per sequence (default Q; 1 when the Q rows are the beams of
    one document at one decoding step). Returns the per-head output [B, H, Q, D] and the attention
    weights (None where rows mix spans).
    """
    steps = q.shape[2] if steps is None else steps
    st: RetrievalState = module.retrieval_state
    role, layer = module.retrieval_role, module.retrieval_layer
    p, training = float(module.dropout), module.training
    # q scaled before the product: one pass over [B, H, Q, D], not over the scores (exact for the
    # usual power-of-two scalings)
    scores = _masked(torch.matmul(q * module.scaling, k.transpose(-1, -2)), mask, bias)  # [B, H, Q, T]
    lo = st.local  # the datastore starts here
    span = lo or st.window  # local window; with none (phase RANDOM) the first `window` states (the reference)
    if role == "window":  # slicing, not masking
        return _attend(scores[..., :span], v[..., :span, :], p, training)
    store, store_v = scores[..., lo:], v[..., lo:, :]  # [B, H, Q, T_s], [B, H, T_s, D]
    if role == "retrieve" and st.phase == RANDOM:
        keep = st.random_keep[layer]  # [B, T_s]
        return _attend(store.masked_fill(~keep[:, None, None, :], float("-inf")), store_v, p, training)
    local_row0 = role == "retrieve" and st.local_first_step and first_query == 0
    if local_row0 and steps == 1:  # the first decoding step: no retrieval
        return _attend(scores[..., :span], v[..., :span, :], p, training)
    has = None
    if role == "memory":  # a document whose memory is empty: finite scores, then gated off
        allowed = _allowed(mask)  # [B, 1, Q|1, T] or None (nothing masked)
        has = allowed[..., lo:].any(-1, keepdim=True) if allowed is not None else store.new_ones((), dtype=torch.bool)
        store = store.masked_fill(~has, 0.0)
    out, probs, idx = attend_top_k(store, v, st.k, p, training, steps, offset=lo)
    if st.record:
        st.retrieved[layer] = idx
    if role == "retrieve":
        if local_row0:  # teacher forcing / no cache: row 0 is the first step, the rest retrieve
            first, _ = _attend(scores[..., :1, :span], v[..., :span, :], p, training)  # [B, H, 1, D]
            return torch.cat([first, out[:, :, 1:]], 2), None
        return out, probs
    # memory: g * retrieved + (1 - g) * local, g = sigmoid(gate logit) per head, 0 without a memory
    local, _ = _attend(scores[..., :span], v[..., :span, :], p, training)
    g = torch.sigmoid(module.retrieval_gate * module.retrieval_gate_scale).to(v.dtype)[None, :, None, None]
    g = g * has.to(v.dtype)  # [B, H, Q, 1]
    return g * out + (1 - g) * local, None


def _first_query(cache: Any, layer: int, n_queries: int) -> int:
    """Decoder position of this call's first query: the self-attention cache already holds this step."""
    if isinstance(cache, EncoderDecoderCache):
        return cache.self_attention_cache.get_seq_length(layer) - n_queries
    return 0


def _cross_kv(module: nn.Module, states: torch.Tensor, cache: Any, k_proj: nn.Module, v_proj: nn.Module,
              head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values [B, H, T, D] of all encoder states, cached once per generation like the originals."""
    i = module.layer_idx
    cache = cache if isinstance(cache, EncoderDecoderCache) else None
    if cache is not None and cache.is_updated.get(i):
        layer = cache.cross_attention_cache.layers[i]
        return layer.keys, layer.values
    shape = (*states.shape[:-1], -1, head_dim)
    key = k_proj(states).view(shape).transpose(1, 2)
    value = v_proj(states).view(shape).transpose(1, 2)
    if cache is not None:
        key, value = cache.cross_attention_cache.update(key, value, i)
        cache.is_updated[i] = True
    return key, value


def _patched_attention(module: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any,
                       bias: torch.Tensor | None, cache: Any) -> tuple[torch.Tensor, Any]:
    """:func:`retrieval_attention` for queries ``[rows, H, Q, D]``; keys/values ``[rows | docs, H, T, D]``.

    Keys/values with fewer rows than the queries are shared by each document's beams
    (:mod:`scaleformer.ops.decoding`): a decoding step's beams become query rows of their document.
    """
    rows, steps = q.shape[0], q.shape[2]
    first = _first_query(cache, module.layer_idx, steps)
    k, v = expand_if_needed((k, v), rows, steps)
    docs = k.shape[0]
    if docs == rows:
        return retrieval_attention(module, q, k, v, mask, bias, first_query=first)
    out, probs = retrieval_attention(module, group_queries(q, docs), k, v, group_mask(mask, docs), bias,
                                     first_query=first, steps=1)  # [docs, H, beams, D]
    return ungroup(out, rows), None if probs is None else ungroup(probs, rows)


class RetrievalBartAttention(SharedBartAttention):
    """BartAttention whose cross-attention goes through :func:`retrieval_attention` (see module doc)."""

    retrieval_state: RetrievalState
    retrieval_role: str
    retrieval_layer: int

    def forward(self, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        a, _ = compat.bind(BartAttention.forward, (self, *args), kwargs, BART_ROLES)
        states, cache = a["key_value_states"], a["cache"]
        if states is None or self.retrieval_state.phase == FULL:
            return super().forward(*args, **kwargs)
        shape = a["hidden_states"].shape[:-1]  # (B, Q)
        q = self.q_proj(a["hidden_states"]).view(*shape, -1, self.head_dim).transpose(1, 2)  # [B, H, Q, D]
        k, v = _cross_kv(self, states, cache, self.k_proj, self.v_proj, self.head_dim)
        out, probs = _patched_attention(self, q, k, v, a["attention_mask"], None, cache)
        return self.out_proj(out.transpose(1, 2).reshape(*shape, -1)), probs


class RetrievalT5Attention(SharedT5Attention):
    """T5Attention whose cross-attention goes through :func:`retrieval_attention` (see module doc)."""

    retrieval_state: RetrievalState
    retrieval_role: str
    retrieval_layer: int

    def forward(self, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        a, _ = compat.bind(T5Attention.forward, (self, *args), kwargs, T5_ROLES)
        states, cache, position_bias = a["key_value_states"], a["cache"], a["position_bias"]
        if states is None or self.retrieval_state.phase == FULL:
            return super().forward(*args, **kwargs)
        shape = a["hidden_states"].shape[:-1]  # (B, Q)
        d = self.key_value_proj_dim
        q = self.q(a["hidden_states"]).view(*shape, -1, d).transpose(1, 2)  # [B, H, Q, D]
        k, v = _cross_kv(self, states, cache, self.k, self.v, d)
        out, probs = _patched_attention(self, q, k, v, a["attention_mask"], position_bias, cache)
        # Pass the (zero) bias on unchanged: later layers reuse it, as T5Stack expects.
        return self.o(out.transpose(1, 2).reshape(*shape, -1)), position_bias, probs


_PATCHED = {BartAttention: RetrievalBartAttention, T5Attention: RetrievalT5Attention,
            SharedBartAttention: RetrievalBartAttention, SharedT5Attention: RetrievalT5Attention}


def cross_attentions(model: nn.Module, method: str) -> list[nn.Module]:
    """The decoder's cross-attention modules in layer order; ConfigError for other architectures and for
    a transformers release whose attention the seam does not recognise."""
    patches.require(["retrieval_layers"], f"method={method}")
    impl = compat.attn_impl(model)
    if "flex" in impl:
        raise ConfigError(f"backbone.attn_implementation={impl!r}: method={method} needs a tensor encoder "
                          "mask; use sdpa or eager")
    dec = model.get_decoder()
    found = [m for name, m in dec.named_modules()
             if name.endswith((".encoder_attn", ".EncDecAttention")) and isinstance(m, tuple(_PATCHED))]
    if not found:
        raise ConfigError(f"method={method}: no BART or T5 cross-attention found in {type(model).__name__}; "
                          "retrieval attention supports BART and T5 backbones")
    return found


def patch_cross_attention(module: nn.Module, state: RetrievalState, role: str, layer: int) -> None:
    """Turn one cross-attention module into its retrieval subclass (idempotent); parameters unchanged."""
    if role not in ROLES:
        raise ValueError(f"role={role!r}: must be one of {ROLES}")
    if type(module) in _PATCHED:
        module.__class__ = _PATCHED[type(module)]
    elif type(module) not in _PATCHED.values():
        raise ConfigError(f"cross-attention class {type(module).__name__} is not supported "
                          "(BartAttention and T5Attention are)")
    module.retrieval_state = state
    module.retrieval_role = role
    module.retrieval_layer = layer


def resolve_layer(value: int, n: int, key: str) -> int:
    """A Python-style index into n decoder layers (negative counts from the end); ConfigError if outside."""
    if not -n <= value < n:
        raise ConfigError(f"{key}={value!r}: outside the decoder, which has {n} layers "
                          f"(valid: {-n}..{n - 1})")
    return value % n


def resolve_range(value: list[int] | None, n: int, key: str) -> tuple[int, int]:
    """``[start, end)`` over n decoder layers (None = all; negatives count from the end)."""
    if value is None:
        return 0, n
    start, end = (v + n if v < 0 else v for v in value)
    if not 0 <= start < end <= n:
        raise ConfigError(f"{key}={list(value)!r}: must be a non-empty range [start, end) inside the decoder, "
                          f"which has {n} layers")
    return start, end
