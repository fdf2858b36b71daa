"""The one rule of the registries plugins add to (methods, span kinds): no replacing a name another
definition holds. Why: a plugin's ``sled`` replacing the built-in one would change every ``method=sled``
run without a word."""

from __future__ import annotations

import sys
from typing import Any

from scaleformer.errors import ConfigError


def defined_in(obj: Any) -> str:
    """Where a class (or an instance's class) is defined: its module and the package it ships in."""
    from importlib.metadata import packages_distributions

    module = (obj if isinstance(obj, type) else type(obj)).__module__
    top = module.split(".")[0]
    return f"{module} (package {(packages_distributions().get(top) or [top])[0]})"


def _definition(obj: Any) -> tuple[str, str]:
    """A class's source file (its module's name when it has none) and qualified name: the same for a
    module imported twice, under two names, or reloaded."""
    cls = obj if isinstance(obj, type) else type(obj)
    return getattr(sys.modules.get(cls.__module__), "__file__", None) or cls.__module__, cls.__qualname__


def claim(registry: dict[str, Any], name: str, obj: Any, what: str) -> None:
    """Register ``obj`` under ``name`` (methods, span kinds), or raise ConfigError when another definition
    holds it. The same definition again is harmless and takes the old one's place."""
    old = registry.get(name)
    if old is not None and old is not obj and _definition(old) != _definition(obj):
        mine = (old if isinstance(old, type) else type(old)).__module__.split(".")[0] == __name__.split(".")[0]
        raise ConfigError(f"{what} {name!r} of {defined_in(obj)} would replace the {'built-in ' if mine else ''}one "
                          f"of {defined_in(old)}: a plugin cannot replace a registered {what}; give it another name")
    registry[name] = obj
