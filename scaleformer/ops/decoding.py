"""Generation with beam-shared cross-attention: keys/values computed once per document, never copied.

Why: stock beam search expands the encoder states to ``[batch x beams, T, d]`` before the decoder,
projects cross-attention keys/values once per beam (``beams`` x the memory) and copies that whole
cache at every step (``reorder_cache`` over ``[batch x beams, heads, T, head_dim]``), although the
beams of one document share those keys and values and beam search never moves a beam to another
document. For long inputs that copy is most of a 4-beam decode.

How (:func:`generate`):

* the cross-attention keys/values of every decoder layer are projected from the un-expanded
  encoder states ``[batch, T, d]`` with the layer's own projections and stored in a
  :class:`SharedCrossCache` (``[batch, heads, T, head_dim]`` per layer) whose ``reorder_cache`` is a
  no-op; it rides in the :class:`~transformers.cache_utils.EncoderDecoderCache` given to
  ``model.generate``, so the decoder never projects them again;
* ``generate`` gets encoder states of width 0 (``[batch, T, 0]``): its beam expansion then copies
  nothing, and the decoder still reads the batch, length and dtype it builds masks from;
* each decoder cross-attention module is a :class:`SharedBartAttention` / :class:`SharedT5Attention`
  (the class swapped in place, parameters untouched): when its keys/values hold fewer rows than its
  queries, the ``beams`` queries of a document (one decoding step each) become ``beams`` query rows
  of one attention call against that document's keys/values (:func:`group_queries`). Otherwise the
  stock forward runs unchanged. The retrieval layers of :mod:`scaleformer.ops.retrieval` subclass these.

The token sequences equal the stock path's (tested for BART and T5, greedy and beam search, ragged
batches and every method); logits may differ in the last float bits (other matmul shapes).
Architectures other than BART/T5, flex attention, and a transformers release whose attention
signatures or cache layout the seam (:mod:`scaleformer.ops.compat`) does not recognise fall back to the
stock path (the last says so once). ``generation.static_cache`` (``cache_implementation="static"``) makes the
self-attention part of the cache static (:mod:`scaleformer.ops.static_decoding`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput

from scaleformer.ops import compat, patches, static_decoding
from scaleformer.ops.compat import (
    BART_ROLES,
    T5_ROLES,
    BartAttention,
    DynamicCache,
    EncoderDecoderCache,
    T5Attention,
)


class SharedCrossCache(DynamicCache):
    """Cross-attention keys/values once per document ``[batch, heads, T, head_dim]`` per layer.

    Beam search reorders beams within each document only, and every beam of a document reads the
    same keys/values, so reordering is a no-op. Methods that change the batch (contrastive search)
    are refused rather than silently wrong.
    """

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        return None

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("beam-shared cross-attention does not support batch expansion of the cache")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise NotImplementedError("beam-shared cross-attention does not support batch selection of the cache")


def shared_kv(module: nn.Module, key_value_states: Any, cache: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """This layer's per-document keys/values when the cache shares them across beams, else None."""
    if key_value_states is None or not isinstance(cache, EncoderDecoderCache):
        return None
    cross = cache.cross_attention_cache
    i = module.layer_idx
    if not isinstance(cross, SharedCrossCache) or not cache.is_updated.get(i):
        return None
    layer = cross.layers[i]
    return layer.keys, layer.values


def group_queries(q: torch.Tensor, docs: int) -> torch.Tensor:
    """``[docs x beams, H, 1, D]`` (one step per sequence, beams of a document adjacent) to ``[docs, H, beams, D]``."""
    rows, h, _, d = q.shape
    return q.reshape(docs, rows // docs, h, d).transpose(1, 2)


def ungroup(out: torch.Tensor, rows: int) -> torch.Tensor:
    """``[docs, H, beams, D]`` back to ``[docs x beams, H, 1, D]``."""
    docs, h, beams, d = out.shape
    return out.transpose(1, 2).reshape(rows, h, 1, d)


def group_mask(mask: Any, docs: int) -> Any:
    """The decoder's encoder mask for :func:`group_queries`' layout (a view; no copy of the mask).

    4-d masks ``[docs x beams, 1, 1, T]`` (sdpa bool, eager additive) become ``[docs, 1, beams, T]``;
    flash attention's 2-d padding mask ``[docs x beams, T]`` becomes ``[docs, T]`` (a document's beams
    share one row); None stays None.
    """
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"beam-shared cross-attention needs a tensor encoder mask, got {type(mask).__name__}")
    if mask.dim() == 2:
        return mask.view(docs, -1, mask.shape[-1])[:, 0]
    rows, m, q, t = mask.shape
    return mask.reshape(docs, rows // docs, m, t).transpose(1, 2)


def ungroup_weights(w: torch.Tensor | None, rows: int) -> torch.Tensor | None:
    """Attention weights ``[docs, H, beams, T]`` back to ``[docs x beams, H, 1, T]`` (None stays None)."""
    return None if w is None else ungroup(w, rows)


def attend(module: nn.Module, eager: Any, grouped: bool, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           mask: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The module's attention implementation on (grouped) queries: output ``[rows, Q, H * D]`` and weights.

    Flash attention reads a 2-d padding mask as the queries' padding too when it unpads them, which
    grouped beams are not: grouped calls go through sdpa with the equivalent boolean mask instead.
    """
    impl = compat.attn_impl(module)
    if grouped and impl is not None and "flash" in impl:
        impl = "sdpa"
        mask = None if mask is None else mask[:, None, None, :].bool()  # [docs, 1, 1, T]
    fn = compat.attention_function(impl, eager)
    out, w = fn(module, q, k, v, mask, dropout=0.0 if not module.training else module.dropout,
                **{**kwargs, "is_causal": False})  # out [docs | rows, beams | Q, H, D]
    rows = q.shape[0] * q.shape[2] if grouped else q.shape[0]
    if grouped:
        w = ungroup_weights(w, rows)
    return out.reshape(rows, -1, out.shape[-2] * out.shape[-1]), w


class SharedBartAttention(BartAttention):
    """BartAttention that reads per-document cross-attention keys/values with grouped beam queries.

    Arguments are bound by name against the installed ``BartAttention.forward`` (:func:`compat.bind`),
    and the stock forward gets them exactly as they came.
    """

    def forward(self, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        a, rest = compat.bind(BartAttention.forward, (self, *args), kwargs, BART_ROLES)
        kv = shared_kv(self, a["key_value_states"], a["cache"])
        hidden, mask = a["hidden_states"], a["attention_mask"]
        rows, steps = hidden.shape[:2]
        if kv is None or kv[0].shape[0] == rows:
            return super().forward(*args, **kwargs)
        k, v = expand_if_needed(kv, rows, steps)
        docs = k.shape[0]
        q = self.q_proj(hidden).view(rows, steps, -1, self.head_dim).transpose(1, 2)  # [rows, H, Q, D]
        grouped = docs != rows
        if grouped:
            q, mask = group_queries(q, docs), group_mask(mask, docs)  # [docs, H, beams, D]
        out, w = attend(self, compat.BART_EAGER, grouped, q, k, v, mask, scaling=self.scaling, **rest)
        return self.out_proj(out.reshape(rows, steps, -1)), w


class SharedT5Attention(T5Attention):
    """T5Attention that reads per-document cross-attention keys/values with grouped beam queries."""

    def forward(self, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        a, rest = compat.bind(T5Attention.forward, (self, *args), kwargs, T5_ROLES)
        kv = shared_kv(self, a["key_value_states"], a["cache"])
        hidden, mask, position_bias = a["hidden_states"], a["attention_mask"], a["position_bias"]
        rows, steps = hidden.shape[:2]
        if kv is None or kv[0].shape[0] == rows:
            return super().forward(*args, **kwargs)
        k, v = expand_if_needed(kv, rows, steps)
        docs = k.shape[0]
        d = self.key_value_proj_dim
        q = self.q(hidden).view(rows, steps, -1, d).transpose(1, 2)  # [rows, H, Q, D]
        if position_bias is None:  # cross-attention has no relative bias: zeros, shared by later layers
            position_bias = torch.zeros((1, self.n_heads, steps, k.shape[2]), device=q.device, dtype=q.dtype)
        grouped = docs != rows
        if grouped:
            q, mask = group_queries(q, docs), group_mask(mask, docs)  # [docs, H, beams, D]
        out, w = attend(self, compat.T5_EAGER, grouped, q, k, v, mask, scaling=self.scaling,
                        position_bias=position_bias, **rest)
        return self.o(out.reshape(rows, steps, -1)), position_bias, w


def expand_if_needed(kv: tuple[torch.Tensor, torch.Tensor], rows: int, steps: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys/values per sequence when several queries per sequence come at once (a decoder prompt:
    rare, so plainly expanded); per document otherwise."""
    k, v = kv
    if steps == 1:
        return k, v
    beams = rows // k.shape[0]
    return k.repeat_interleave(beams, 0), v.repeat_interleave(beams, 0)


SHARED = {BartAttention: SharedBartAttention, T5Attention: SharedT5Attention}


def share_cross_attention(model: nn.Module) -> list[nn.Module] | None:
    """Give every decoder cross-attention module its beam-sharing class (idempotent; parameters, names
    and behaviour without a :class:`SharedCrossCache` unchanged). Returns the modules in layer order, or
    None when beams cannot share them here (another architecture, flex attention's block masks)."""
    impl = compat.attn_impl(model)
    if "flex" in impl or not hasattr(model, "get_decoder"):
        return None
    if not any(isinstance(m, tuple(SHARED)) for m in model.get_decoder().modules()):
        return None  # another architecture: nothing to share, nothing to say
    if not patches.enabled("beam_shared_cross_attention"):
        return None
    mods = [m for name, m in model.get_decoder().named_modules()
            if name.endswith((".encoder_attn", ".EncDecAttention"))]
    for m in mods:
        if type(m) in SHARED:
            m.__class__ = SHARED[type(m)]
    if not mods or not all(isinstance(m, tuple(SHARED.values())) and m.layer_idx is not None for m in mods):
        return None
    return sorted(mods, key=lambda m: m.layer_idx)


def _project(module: nn.Module, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values ``[batch, H, T, D]`` of encoder states with a cross-attention module's projections."""
    if isinstance(module, BartAttention):
        k_proj, v_proj, d = module.k_proj, module.v_proj, module.head_dim
    else:
        k_proj, v_proj, d = module.k, module.v, module.key_value_proj_dim
    shape = (*states.shape[:-1], -1, d)
    return k_proj(states).view(shape).transpose(1, 2), v_proj(states).view(shape).transpose(1, 2)


def cross_cache(model: nn.Module, modules: list[nn.Module], hidden: torch.Tensor,
                self_cache: Any = None) -> EncoderDecoderCache:
    """An empty self-attention cache (``self_cache``, e.g. a static one, else a dynamic one) and every
    layer's per-document cross-attention keys/values."""
    cross = SharedCrossCache()
    for m in modules:
        cross.update(*_project(m, hidden), m.layer_idx)
    if self_cache is None:
        self_cache = compat.dynamic_cache(model.config.get_text_config(decoder=True))
    return EncoderDecoderCache(self_cache, cross)


# Flags that only beam search reads, at the values that leave greedy search silent.
BEAM_ONLY = {"early_stopping": False, "length_penalty": 1.0}


def _greedy_without_beam_flags(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A greedy call (``num_beams=1`` over a beam config, e.g. an export's) with the beam-only flags reset:
    they change nothing there, yet transformers warns on every call that they are not valid."""
    gen = kwargs.get("generation_config")
    beams = kwargs.get("num_beams", getattr(gen, "num_beams", None))
    if gen is None or beams not in (None, 1) or all(getattr(gen, k, None) in (None, v) for k, v in BEAM_ONLY.items()):
        return kwargs
    gen = copy.deepcopy(gen)
    for k, v in BEAM_ONLY.items():
        if getattr(gen, k, None) is not None:
            setattr(gen, k, v)
    return {**kwargs, "generation_config": gen}


def generation_kwargs(g: Any) -> dict[str, Any]:
    """``model.generate`` keywords of a :class:`scaleformer.config.GenerationConfig` (or any object with its fields)."""
    return {"num_beams": g.num_beams, "max_new_tokens": g.max_new_tokens, "min_new_tokens": g.min_new_tokens,
            "length_penalty": g.length_penalty, "no_repeat_ngram_size": g.no_repeat_ngram_size,
            **({"early_stopping": True} if g.num_beams > 1 else {})}  # a beam-search flag only


def generate(model: nn.Module, hidden: torch.Tensor, mask: torch.Tensor, *, shared: bool = True,
             **kwargs: Any) -> Any:
    """``model.generate`` from encoder states ``hidden [batch, T, d]`` and their ``mask [batch, T]``.

    With ``shared`` (and a BART/T5 decoder), cross-attention keys/values are computed once per
    document and shared by its beams (see the module docstring); otherwise, and with
    ``use_cache=False``, the stock path. ``cache_implementation="static"`` (keyword or generation config)
    makes the self-attention cache static (:mod:`scaleformer.ops.static_decoding`; on the shared path only,
    else the dynamic cache, said once). Returns what ``model.generate`` returns for ``kwargs``.
    """
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    with compat.eager_calls(decoder.modules() if decoder is not None else ()):  # backbone.compile_decoder: training's
        return _generate(model, hidden, mask, shared=shared, **kwargs)


def _generate(model: nn.Module, hidden: torch.Tensor, mask: torch.Tensor, *, shared: bool, **kwargs: Any) -> Any:
    # A given generation config: its unset fields from the model's (transformers' rule, applied here, once),
    # then the changes below, then read whole (the changes' None would otherwise be filled in again).
    if kwargs.get("generation_config") is not None:
        kwargs = {**kwargs, "generation_config": filled(kwargs["generation_config"], model.generation_config)}
    kwargs = _greedy_without_beam_flags(kwargs)
    static, kwargs = static_decoding.take_request(model, kwargs)
    with read_whole(model, kwargs.get("generation_config")):
        return _generate_from(model, hidden, mask, shared, static, kwargs)


def filled(gen: Any, defaults: Any) -> Any:
    """A copy of generation config ``gen`` whose unset (None) fields are ``defaults``' (transformers' rule for a
    config given to ``generate``), set one by one: ``update`` would warn as if the caller had set each."""
    gen = copy.deepcopy(gen)
    for key, value in defaults.to_dict().items():
        if value is not None and getattr(gen, key, None) is None:
            setattr(gen, key, value)
    return gen


@contextlib.contextmanager
def read_whole(model: nn.Module, gen: Any) -> Iterator[None]:
    """``gen`` (when given) is the model's generation config for the call, so ``generate`` reads it whole:
    transformers fills each unset (None) field of a given config from the model's own, which undid a
    setting turned off on the way (the static-cache request taken out, BART's forced end turned off)."""
    if gen is None:
        yield
        return
    before = model.generation_config
    model.generation_config = gen
    try:
        yield
    finally:
        model.generation_config = before


def _generate_from(model: nn.Module, hidden: torch.Tensor, mask: torch.Tensor, shared: bool, static: bool,
                   kwargs: dict[str, Any]) -> Any:
    use_cache = kwargs.get("use_cache")
    if use_cache is None:  # the setting as generate reads it: the keyword, the given config, the model's
        use_cache = getattr(kwargs.get("generation_config") or model.generation_config, "use_cache", True)
    mods = share_cross_attention(model) if shared and use_cache is not False else None
    given = _given_cache(kwargs)
    if given is not None:  # continuing an earlier call (its sequences as decoder_input_ids): its cache as it is
        if static:
            static_decoding.fallback("the call passes its own cache")
        own = mods is not None and isinstance(given, EncoderDecoderCache) and isinstance(
            given.cross_attention_cache, SharedCrossCache)  # one this path made: it holds the projected keys
        states = hidden.new_empty(*hidden.shape[:2], 0) if own else hidden  # [batch, T, 0 | d]
        return model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=states), attention_mask=mask,
                              **{compat.cache_kwarg(model): given}, **kwargs)
    if mods is None:  # a fresh BaseModelOutput per call: beam search expands it in place
        if static:
            static_decoding.fallback("no beam-shared cross-attention here (another decoder, flex attention, "
                                     "shared=False or use_cache=False)")
        return model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=hidden), attention_mask=mask,
                              **kwargs)
    cache = cross_cache(model, mods, hidden, static_decoding.self_cache(model, kwargs) if static else None)
    width0 = hidden.new_empty(*hidden.shape[:2], 0)  # [batch, T, 0]: shapes for the masks, nothing to copy
    return model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=width0), attention_mask=mask,
                          **{compat.cache_kwarg(model): cache}, **kwargs)


def _given_cache(kwargs: dict[str, Any]) -> Any:
    """The cache a caller passes (``cache`` from transformers 5.24, ``past_key_values`` before), taken out of
    ``kwargs``; None when there is none."""
    found = [kwargs.pop(k) for k in ("cache", "past_key_values") if k in kwargs]
    return next((c for c in found if c is not None), None)


def cross_attention_bytes(cache: Any) -> int | None:
    """Bytes of the cross-attention keys/values a generation cache holds (distinct storages only)."""
    if not isinstance(cache, EncoderDecoderCache):
        return None
    seen: dict[int, int] = {}
    for layer in cache.cross_attention_cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, torch.Tensor) and t.numel():
                s = t.untyped_storage()
                seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def summaries(model: Any, tokenizer: Any, g: Any, input_ids: torch.Tensor,
              attention_mask: torch.Tensor | None = None, prefix_ids: torch.Tensor | None = None,
              prefix_mask: torch.Tensor | None = None) -> list[str]:
    """Decoded summaries of a batch under a :class:`scaleformer.config.GenerationConfig` (``model``: a
    :class:`~scaleformer.model.hf.ScaleformerForConditionalGeneration`): the one place training runs,
    evaluation and the Summarizer decode, so they decode alike."""
    out = model.generate(input_ids, attention_mask, prefix_ids=prefix_ids, prefix_mask=prefix_mask,
                         **generation_kwargs(g), **static_decoding.generation_kwargs(g))
    return tokenizer.batch_decode(out, skip_special_tokens=True, clean_up_tokenization_spaces=False)
