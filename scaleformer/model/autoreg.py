"""``import scaleformer`` teaches transformers' Auto classes ``model_type: scaleformer``.

After it, ``AutoConfig.from_pretrained(export)`` gives a :class:`~scaleformer.model.hf.ScaleformerConfig`
and ``AutoModelForSeq2SeqLM.from_pretrained(export)`` a
:class:`~scaleformer.model.hf.ScaleformerForConditionalGeneration` that runs the method (SLED's
``py-sled`` registers alike, in Mivg/SLED ``sled/__init__.py``).

Why a post-import hook rather than registering inside ``import scaleformer``: registering needs the
classes, hence torch and transformers (seconds), and ``import scaleformer`` (every console command,
``--help`` included) stays instant. If transformers is imported already, registration happens at
once; otherwise right after its package first loads, before user code can reach the Auto classes.
(Not after its Auto modules load: those are imported from inside transformers' own lazy imports,
where loading model code fails half-way.)
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import logging
import sys
from types import ModuleType
from typing import Any

from scaleformer.progress import quiet_libraries

log = logging.getLogger("scaleformer")
PACKAGE = "transformers"


def register() -> None:
    """Register the config and model classes with the Auto classes (idempotent).

    The class modules register themselves when they finish loading: when one of them is what first
    imports transformers, this hook runs while it is half-built, and a plain import of it then returns
    without error and leaves the registration to the module's last lines.
    """
    importlib.import_module("scaleformer.model.hf")
    importlib.import_module("scaleformer.model.hf_causal")
    quiet_libraries()  # transformers just loaded: its weight-loading bars off unless asked for


class _ThenRegister(importlib.abc.Loader):
    """Runs the real loader, then the registration that module makes possible."""

    def __init__(self, loader: Any, then: Any) -> None:
        self.loader, self.then = loader, then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        try:
            self.then()
        except Exception as e:  # never break the user's transformers import
            log.warning("scaleformer: could not register its Auto classes (%s: %s)", type(e).__name__, e)


class _AutoHook(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != PACKAGE:
            return None
        sys.meta_path.remove(self)  # once
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _ThenRegister(spec.loader, register)
                return spec
        return None


def install() -> None:
    """Register now where transformers is loaded, else hook its first import."""
    if PACKAGE in sys.modules:
        register()
    elif not any(isinstance(f, _AutoHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _AutoHook())
