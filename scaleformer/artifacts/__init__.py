"""The papers' artifacts: spec -> grid -> runs -> tables and figures, and their statistics.

- ``grid``: an artifact's spec, its cells and where their results are; ``gridrun``: running the cells here or as
  Hydra multiruns; ``sweeps``: failed cells of a multirun;
- ScaleFormer's tables and Figure 2: ``tables``, ``figures``; their statistics ``significance``, ``power``, the
  archived per-document scores ``scores_archive`` and a table restated under the current rules ``restate``;
- MASFormer's perplexity tables and Figure 3: ``perplexity_tables``, ``perplexity_figure``, their numbers
  ``perplexity_stats`` and their recheck ``perplexity_recheck``; its Figure 4 (a metric against attention cost C):
  ``metric_by_cost``.

What a profile costs (cost tables, bills, the GPU window's measurements) is the cost wing, ``scaleformer.costs``,
which prices these grids and sits above them. Modules that moved from here keep their old names for one release
(:data:`MOVED`, each import warned as deprecated): ``scaleformer.artifacts.costs`` and the like.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

# old module (under scaleformer.artifacts) -> where it lives now; deprecated, removed in the release after 0.3.
MOVED = {
    "costs": "scaleformer.costs.table",
    "cost_check": "scaleformer.costs.check",
    "cost_validation": "scaleformer.costs.validation",
    "cost_report": "scaleformer.costs.report",
    "cost_restate": "scaleformer.costs.restate",
    "bill": "scaleformer.costs.bill",
    "masformer_bill": "scaleformer.costs.counted_bill",
    "gpu_perf": "scaleformer.costs.gpu_perf",
    "gpu_perf_generate": "scaleformer.costs.gpu_generate",
    "cost_figure": "scaleformer.artifacts.metric_by_cost",
    "pretrain_reader": "scaleformer.runs.pretrain_reader",
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import scaleformer.artifacts.<old>``: a module that reads every name from where it lives now."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        head, _, leaf = name.rpartition(".")
        return importlib.machinery.ModuleSpec(name, self) if head == __name__ and leaf in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = MOVED[spec.name.rpartition(".")[2]]
        warnings.warn(f"{spec.name} moved to {new}; the old name goes in the next release", DeprecationWarning,
                      stacklevel=2)
        target = importlib.import_module(new)
        module = types.ModuleType(spec.name, target.__doc__)
        module.__getattr__ = lambda attr: getattr(target, attr)  # type: ignore[method-assign]
        module.__dir__ = lambda: dir(target)  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


if not any(isinstance(f, _Moved) for f in sys.meta_path):
    sys.meta_path.insert(0, _Moved())


def __getattr__(name: str) -> Any:
    """``from scaleformer.artifacts import costs`` (an old submodule by attribute): its new home, warned."""
    if name in MOVED:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
