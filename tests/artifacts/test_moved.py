"""Modules that moved out of ``scaleformer.artifacts`` (to the cost wing, ``scaleformer.costs``, and the reader
pretraining to ``scaleformer.runs``) keep their old names for one release: each old import gives the new module's
objects and a DeprecationWarning naming the new home; the package's own code imports none of them."""

from __future__ import annotations

import importlib
import sys

import pytest
from conftest import ROOT

from scaleformer.artifacts import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_name_reads_its_new_home_and_warns(old):
    sys.modules.pop(f"scaleformer.artifacts.{old}", None)
    new = importlib.import_module(MOVED[old])
    with pytest.warns(DeprecationWarning, match=rf"scaleformer\.artifacts\.{old} moved to {MOVED[old]}"):
        shim = importlib.import_module(f"scaleformer.artifacts.{old}")
    public = [n for n in vars(new) if not n.startswith("_") and getattr(vars(new)[n], "__module__", None) == new.__name__]
    assert public and all(getattr(shim, n) is getattr(new, n) for n in public)


def test_the_packages_own_code_imports_no_old_name():
    old = tuple(f"scaleformer.artifacts.{name}" for name in MOVED)
    hits = [f"{p.relative_to(ROOT)}" for base in ("scaleformer", "scripts", "tests")
            for p in (ROOT / base).rglob("*.py") if p.name != "test_moved.py" and p != ROOT / "scaleformer/artifacts/__init__.py"
            and any(f"{o}" in p.read_text(encoding="utf-8") for o in old)]
    assert not hits, hits
