"""The registry of this project's patches of transformers internals, each checked against the installed release.

Every patch (:data:`PATCHES`) says what it is for, whether the project can do without it (a speed-only patch: the
stock path computes the same tokens, slower) and how to tell that the installed transformers fits it: its classes
exist, take the arguments the patch binds by name (:data:`scaleformer.ops.binding.ALIASES`) and keep the cache
layout the patched layers read. Where a check fails, a speed-only patch gives way and says so once
(:func:`enabled`); a method that cannot exist without its patch stops at start-up with one line naming the
installed version and the tested range (:func:`require`, :data:`TESTED`). The names checked are looked up through
:mod:`scaleformer.ops.compat`, the one seam into the dependencies' internals.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from scaleformer.errors import ConfigError
from scaleformer.ops import binding
from scaleformer.ops.binding import ALIASES, call_names, parameters, takes_var_kwargs
from scaleformer.ops.compat import (
    BART_EAGER,
    BART_ROLES,
    T5_EAGER,
    T5_ROLES,
    BartAttention,
    BartEncoder,
    BartEncoderLayer,
    BartLearnedPositionalEmbedding,
    DynamicCache,
    EncoderDecoderCache,
    Missing,
    T5Attention,
    T5Block,
    T5Stack,
    stock,
)
from scaleformer.resources import installed

log = logging.getLogger("scaleformer")

# The transformers releases this project's patches were tested on (`make test-compat` runs the
# lowest and the newest; the lock pins one inside). The pyproject's lower bound equals the first.
TESTED: dict[str, tuple[str, str]] = {"transformers": ("5.17.0", "5.24.0")}

def tested_range(dist: str = "transformers") -> str:
    return " to ".join(TESTED[dist])


@dataclass(frozen=True)
class Patch:
    """One patch of transformers internals: what it is for, and whether the project can do without it."""

    name: str
    what: str
    speed_only: bool  # True: the stock path computes the same tokens, slower
    check: Callable[[], str | None]  # why the installed release does not fit, or None




def _lacks(fn: Callable, roles: tuple[str, ...]) -> str | None:
    """Which role ``fn`` has no parameter for, as a reason; None when it has them all."""
    params = parameters(fn) or {}
    miss = [r for r in roles if not any(a in params for a in ALIASES.get(r, (r,)))]
    return f"{fn.__qualname__} takes no {miss[0]} argument" if miss else None


def _absent(*objs: Any) -> str | None:
    return next((f"it has no {o.missing_from}" for o in objs if isinstance(o, type) and issubclass(o, Missing)), None)


def _cross_attention_check() -> str | None:
    if (why := _absent(BartAttention, T5Attention, DynamicCache, EncoderDecoderCache)) is not None:
        return why
    if why := _lacks(BartAttention.forward, BART_ROLES) or _lacks(T5Attention.forward, T5_ROLES):
        return why
    if BART_EAGER is None or T5_EAGER is None:
        return "it has no eager_attention_forward in BART or T5"
    try:  # the cache layout the patched layers read: layers[i].keys/values and is_updated
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        k = torch.zeros(1, 1, 1, 1)
        cache.cross_attention_cache.update(k, k, 0)
        cache.cross_attention_cache.layers[0].keys  # noqa: B018
        cache.is_updated.get(0)
        cache.self_attention_cache.get_seq_length(0)
    except Exception as e:  # any failure means the layout moved
        return f"its EncoderDecoderCache layout differs ({type(e).__name__}: {e})"
    return None


def _kept_layer_check() -> str | None:
    if (why := _absent(BartEncoderLayer, T5Block, T5Attention)) is not None:
        return why
    if why := (_lacks(BartEncoderLayer.forward, ("hidden_states", "attention_mask"))
               or _lacks(T5Block.forward, ("hidden_states", "attention_mask", "position_bias"))):
        return why
    if not hasattr(T5Attention, "compute_bias"):
        return "T5Attention has no compute_bias"
    return None


def _spans_check() -> str | None:
    if (why := _absent(BartEncoder, T5Stack, BartEncoderLayer, T5Block, BartLearnedPositionalEmbedding,
                       BartAttention, T5Attention)) is not None:
        return why
    fn = stock("transformers.masking_utils", "create_bidirectional_mask")
    if fn is None or call_names(fn, ("inputs_embeds", "attention_mask")) is None:
        return "its create_bidirectional_mask is missing or takes other arguments"
    if stock("transformers", "AttentionInterface") is None:
        return "it has no AttentionInterface to register the banded kernel with"
    for f in (BartEncoderLayer.forward, T5Block.forward, BartAttention.forward, T5Attention.forward):
        if not takes_var_kwargs(f):  # the window size travels to the kernel as a keyword
            return f"{f.__qualname__} does not pass extra keywords on to the attention function"
    if call_names(T5Attention.compute_bias, ("past_seen_tokens",)) is None:
        return "T5Attention.compute_bias takes neither past_seen_tokens nor cache_position"
    return _kept_layer_check()


PATCHES: dict[str, Patch] = {p.name: p for p in (
    Patch("beam_shared_cross_attention", "beam-shared cross-attention keys/values at generation", True,
          _cross_attention_check),
    Patch("kept_layer", "ScaleFormer's last encoder layer at kept positions only", True, _kept_layer_check),
    Patch("retrieval_layers", "retrieval cross-attention layers (top-k over the datastore)", False,
          _cross_attention_check),
    Patch("layer_spans", "per-layer attention spans in the encoder (full, block, sliding window)", False,
          _spans_check),
)}

_REASONS: dict[str, str | None] = {}
_NOTICED: set[str] = set()


def known_patch(name: str, key: str) -> None:
    """Raise ConfigError unless ``name`` is a registered patch (a typo in a method's ``requires``)."""
    if name not in PATCHES:
        raise ConfigError(f"{key}: requires patch {name!r}, which is not registered; known patches: "
                          f"{', '.join(sorted(PATCHES))}")


def mismatch(name: str) -> str | None:
    """Why the installed transformers does not fit patch ``name`` (cached), or None when it does."""
    if name not in _REASONS:
        try:
            _REASONS[name] = PATCHES[name].check()
        except Exception as e:  # a check must never be the traceback it guards against
            _REASONS[name] = f"{type(e).__name__}: {e}"
    return _REASONS[name]


def enabled(name: str) -> bool:
    """Whether speed-only patch ``name`` applies here; the first time it does not, say so once."""
    if (why := mismatch(name)) is None:
        return True
    if name not in _NOTICED:
        _NOTICED.add(name)
        log.warning("transformers %s: %s turned off (%s; tested on %s); the stock path runs instead: "
                    "the same tokens, slower", installed("transformers"), PATCHES[name].what, why,
                    tested_range())
    return False


def require(names: Iterable[str], key: str) -> None:
    """Stop with one line when a required patch does not fit the installed transformers."""
    for name in names:
        known_patch(name, key)
        if (why := mismatch(name)) is not None:
            raise ConfigError(f"{key} needs {PATCHES[name].what}, which this project patches into transformers; "
                              f"the installed transformers {installed('transformers')} does not fit ({why}); "
                              f"tested: transformers {tested_range()} (make setup installs the tested lock)")


def reset() -> None:
    """Forget checked patches and notices (tests that swap transformers internals call this)."""
    for forget in (_REASONS.clear, _NOTICED.clear, binding.clear):
        forget()


def report() -> dict[str, str]:
    """Each patch's state ("on", or "off: why"), for metrics.json and bug reports."""
    return {n: "on" if mismatch(n) is None else f"off: {mismatch(n)}" for n in PATCHES}
