"""The package's shape: no import cycles, imports pointing down the layers, subpackages that say what
lives in them, one version source, a wheel that carries its configs, and tests/ mirroring the package
(tests/README.md).

The import graph counts every import the code can execute, those inside functions included (a
deferred import hides a cycle, it does not remove it); only ``if TYPE_CHECKING:`` blocks are left out.
Importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first, so those count as edges too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
import zipfile
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import ROOT

PKG = ROOT / "scaleformer"
# Layers, bottom first: a module may import its own layer and the ones below, never above.
LAYERS = [
    {"errors", "io", "progress", "registry", "resources"},
    {"config"},
    {"ops"},
    {"methods"},
    {"compose"},  # registers each method's dataclass as its YAML's schema
    {"model"},
    {"data"},
    {"metrics"},
    {"export"},
    {"runs", "bench"},
    {"artifacts"},
    {"costs"},  # what a profile costs: prices the artifacts' grids, read by the commands and scripts/ only
    {"cli"},
]
TOP_LEVEL_MODULES = {"__init__", "errors", "io", "progress", "registry", "resources", "compose"}
TESTS = ROOT / "tests"
# Test folders that are no subpackage: the repository's scripts/, and golden/'s pinned values (data).
TEST_FOLDERS_BESIDE_THE_PACKAGE = {"scripts", "golden"}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(tree: ast.AST, mods: dict[str, Path]) -> set[str]:
    found: set[str] = set()

    def walk(node: ast.AST) -> None:
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, ast.If) and "TYPE_CHECKING" in ast.unparse(ch.test):
                continue
            if isinstance(ch, ast.ImportFrom) and ch.module and ch.module.startswith("scaleformer") and not ch.level:
                for a in ch.names:
                    sub = f"{ch.module}.{a.name}"
                    found.add(sub if sub in mods else ch.module)
            elif isinstance(ch, ast.Import):
                found.update(a.name for a in ch.names if a.name.startswith("scaleformer"))
            walk(ch)

    walk(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        for target in _imports(ast.parse(path.read_text()), mods):
            parts = target.split(".")
            for i in range(2, len(parts) + 1):  # the packages on the way are imported first
                t = ".".join(parts[:i])
                if t in mods and t != name and not name.startswith(t + "."):
                    edges[name].add(t)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted({*edges, *(w for ws in edges.values() for w in ws)}):
        if v not in index:
            visit(v)
    return out


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) == 1:
        return None  # the package root: re-exports for users, lazily
    return next(i for i, names in enumerate(LAYERS) if parts[1] in names)


def test_the_import_graph_has_no_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_imports_point_down_the_layers():
    upward = [f"{a} -> {b}" for a, targets in import_graph().items() for b in targets
              if _layer(a) is not None and _layer(b) is not None and _layer(b) > _layer(a)]
    assert upward == []


# Library internals that move between releases: reached from scaleformer/ops/compat.py alone, where
# each has a fallback and the compat tier checks it against every supported release.
INTERNAL = ("torch._", "transformers.models.", "transformers.generation.", "lightning.pytorch.utilities._",
            "lightning.fabric.utilities._", "pytorch_lightning.utilities._")


def _internal_imports(tree: ast.AST) -> list[str]:
    names = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    return [m for m in names if m.startswith(INTERNAL)]


MAX_DEFERRED = 8  # own-module imports inside functions: each waits for a reason its comment states


def test_own_modules_are_imported_at_the_top_unless_a_comment_says_why():
    """An own-module import inside a function hides the module's dependencies from its reader: at most
    ``MAX_DEFERRED`` of them, each under (or beside) a ``# deferred: <why>`` comment."""
    found, silent = [], []
    for path in sorted(PKG.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else
                         [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                if any(n == "scaleformer" or n.startswith("scaleformer.") for n in names) or \
                        (isinstance(node, ast.ImportFrom) and node.level):
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    found.append(where)
                    if "# deferred:" not in lines[node.lineno - 2] + lines[node.lineno - 1]:
                        silent.append(where)
    assert len(found) <= MAX_DEFERRED, f"{len(found)} deferred own-module imports (at most {MAX_DEFERRED}): {found}"
    assert not silent, f"deferred without a '# deferred: <why>' comment: {silent}"


def test_library_internals_are_reached_only_through_compat():
    assert _internal_imports(ast.parse("def f():\n    from torch._dynamo.utils import counters\n"))
    found = {name: bad for name, path in _modules().items() if name != "scaleformer.ops.compat"
             and (bad := _internal_imports(ast.parse(path.read_text())))}
    assert not found, f"import these through scaleformer/ops/compat.py: {found}"


def test_every_module_has_a_layer_and_the_root_holds_no_kernel_or_infrastructure():
    roots = {p.stem for p in PKG.glob("*.py")}
    assert roots == TOP_LEVEL_MODULES, roots ^ TOP_LEVEL_MODULES
    packages = {p.parent.name for p in PKG.glob("*/__init__.py")}
    assert packages == set().union(*LAYERS) - TOP_LEVEL_MODULES, packages


@pytest.mark.parametrize("package", sorted(p.parent.name for p in PKG.glob("*/__init__.py")))
def test_each_subpackage_says_what_lives_in_it(package):
    doc = ast.get_docstring(ast.parse((PKG / package / "__init__.py").read_text()))
    assert doc and len(doc) > 80, f"scaleformer/{package}/__init__.py needs a docstring naming its modules"


def test_one_version_source():
    import scaleformer

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "scaleformer.__version__"}
    assert f"## {scaleformer.__version__}" in (ROOT / "CHANGELOG.md").read_text()


def test_the_wheel_carries_configs_specs_and_assets(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("scaleformer-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {str(p.relative_to(ROOT)) for d in ("conf", "experiments") for p in (PKG / d).rglob("*.yaml")}
    shipped |= {str(p.relative_to(ROOT)) for p in (PKG / "assets").rglob("*") if p.is_file()}
    assert shipped - names == set()
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    scripts = zipfile.ZipFile(wheel).read(entry).decode()
    for command in ("scaleformer = scaleformer.cli:main", "scaleformer-train", "scaleformer-summarize"):
        assert command in scripts


def test_tests_mirror_the_package():
    """A test folder is named after a subpackage of scaleformer (or scripts/); test modules keep unique
    basenames and no folder has an __init__.py or a conftest.py of its own: pytest imports each test
    module by its basename, and tests/conftest.py serves every folder."""
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    packages = {p.parent.name for p in PKG.glob("*/__init__.py")}
    assert folders - packages - TEST_FOLDERS_BESIDE_THE_PACKAGE == set(), "tests/<folder> names no subpackage"
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == [], "two test modules share a basename"
    assert sorted(TESTS.rglob("__init__.py")) == [] and sorted(TESTS.rglob("conftest.py")) == [TESTS / "conftest.py"]


def test_test_modules_import_test_modules_of_their_own_folder_or_the_top_level_only():
    """tests/ is on the path (pyproject's pythonpath) but a subfolder is only while pytest imports one of
    its modules: what tests of several folders share lives at the top (conftest, helpers, chunk_reference)."""
    top = {p.stem for p in TESTS.glob("*.py")}
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        mine = top | {p.stem for p in path.parent.glob("*.py")}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.relative_to(TESTS)}: {n}" for n in names
                      if n.split(".")[0].startswith("test_") and n.split(".")[0] not in mine]
    assert found == []
