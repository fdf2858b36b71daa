"""Calling transformers' internals by the role of each argument, whatever the installed release names it.

Releases rename arguments (5.24: ``past_key_values`` became ``cache``). :data:`ALIASES` lists each role's
names across releases; :func:`bind` reads a call's arguments by role and :func:`call` passes them under
the installed names, both against the installed signature. Used through :mod:`scaleformer.ops.compat`,
which re-exports these names: the one seam to the dependencies' internals stays one module to look in.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

# What each argument the project binds has been called across transformers releases, newest first.
ALIASES: dict[str, tuple[str, ...]] = {
    "hidden_states": ("hidden_states",),
    "key_value_states": ("key_value_states",),
    "cache": ("cache", "past_key_values", "past_key_value"),  # 5.24 renamed past_key_values to cache
    "attention_mask": ("attention_mask", "mask"),  # T5Attention calls it mask
    "position_bias": ("position_bias",),
    "inputs_embeds": ("inputs_embeds", "input_embeds"),
    "past_seen_tokens": ("past_seen_tokens", "cache_position"),
}


# The two caches key on functions, never on bound methods: a cached bound method keeps its instance alive
# for the life of the process (``trainer.fit``: a run's Trainer, model and optimiser, run after run).
@functools.cache
def _signature(fn: Callable) -> dict[str, inspect.Parameter] | None:
    try:
        return dict(_signature_object(fn).parameters)
    except (TypeError, ValueError):
        return None


# Computing a signature costs more than the call it binds (decoding binds every cross-attention call,
# each layer, each token): it is computed once per function.
@functools.cache
def _signature_object(fn: Callable) -> inspect.Signature:
    return inspect.signature(fn)


def parameters(fn: Callable) -> dict[str, inspect.Parameter] | None:
    """``fn``'s parameters by name, cached per function."""
    return _signature(getattr(fn, "__func__", fn))  # a method's parameters include ``self``


@functools.cache
def _call_names(fn: Callable, roles: tuple[str, ...]) -> dict[str, str] | None:
    params = parameters(fn) or {}
    out = {r: next((a for a in ALIASES.get(r, (r,)) if a in params), None) for r in roles}
    return None if None in out.values() else out


def call_names(fn: Callable, roles: tuple[str, ...]) -> dict[str, str] | None:
    """Each role's parameter name in the installed ``fn`` (see :data:`ALIASES`); None if one is absent."""
    return _call_names(getattr(fn, "__func__", fn), roles)


def _names_or_raise(fn: Callable, roles: tuple[str, ...]) -> dict[str, str]:
    if (names := call_names(fn, roles)) is None:
        raise TypeError(f"{getattr(fn, '__qualname__', fn)} has no parameter for one of {roles}")
    return names


def takes_var_kwargs(fn: Callable) -> bool:
    params = parameters(fn)
    return params is not None and any(p.kind is p.VAR_KEYWORD for p in params.values())


def bind(fn: Callable, args: tuple, kwargs: dict[str, Any], roles: tuple[str, ...]) -> tuple[dict[str, Any], dict]:
    """One call's arguments by role, and the remaining keyword arguments.

    ``fn`` is the stock function the call was meant for (``args`` include ``self`` for a method). A
    role passed under an older alias into ``**kwargs`` is taken from there too.
    """
    names = _names_or_raise(fn, roles)
    values = _signature_object(getattr(fn, "__func__", fn)).bind(*args, **kwargs).arguments
    var_kw = next((n for n, p in parameters(fn).items() if p.kind is p.VAR_KEYWORD), None)
    rest = dict(values.get(var_kw, {})) if var_kw else {}
    out = {}
    for role, name in names.items():
        if name in values:
            out[role] = values[name]
        else:
            alias = next((a for a in ALIASES.get(role, ()) if a in rest), None)
            out[role] = rest.pop(alias) if alias else parameters(fn)[name].default
    return out, rest


def call(target: Callable, *args: Any, extra: dict[str, Any] | None = None, **by_role: Any) -> Any:
    """Call ``target`` (a function, or a module: its ``forward`` names the parameters) with each keyword
    given by role (see :data:`ALIASES`) under its installed name, and ``extra`` keywords as they are."""
    names = _names_or_raise(type(target).forward if isinstance(target, nn.Module) else target, tuple(by_role))
    return target(*args, **{names[r]: v for r, v in by_role.items()}, **(extra or {}))


def first_output(out: Any) -> torch.Tensor:
    """A layer's hidden states, whether it returns them alone or first in a tuple (releases differ)."""
    return out if isinstance(out, torch.Tensor) else out[0]


def clear() -> None:
    """Forget the cached signatures (tests that swap a stock class's methods call this via patches.reset)."""
    _signature.cache_clear()
    _signature_object.cache_clear()
    _call_names.cache_clear()
