"""No test reaches outside the repository: `make test` must pass in a clone with nothing beside it.

The papers' text sits beside this project's own checkouts (a folder named shared, one level up), never
beside a user's clone, so a test that reads it directly passes here and in CI and fails for every user.
The one sanctioned way out is conftest's `optional_paper` fixture: it skips with a reason, and CI runs
it against that folder with skipping turned into failure. This module reads every test module's syntax
and follows each path expression it can place relative to the repository root: a path that climbs above
the root, or a string naming that folder, fails the fast tier with the file and line.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from conftest import ROOT

TESTS = ROOT / "tests"
# Path spellings that name the folder beside the repository, wherever they appear as text.
OUTSIDE_TEXT = re.compile(r"(^|[/\\])\.\.[/\\]+shared\b|(^|[/\\])shared[/\\]+papers\b")
# Names conftest exports with a known place: the root and its conf/.
KNOWN = {"ROOT": 0, "CONF": 1}
PATH_CALLS = {"Path", "PurePath", "PosixPath", "pathlib.Path", "os.path.abspath", "os.path.realpath",
              "os.path.normpath"}
OPENERS = {"open", "io.open", "os.listdir", "os.scandir", "os.walk", "glob.glob", "shutil.copy",
           "shutil.copytree", "os.stat"}


def _name(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001 - a node unparse cannot render has no name to match
        return ""


def _walk(depth: int | None, text: str) -> int | None:
    """The depth after following `text`'s components from `depth` (None: unknown, or an absolute path).
    Once a path has climbed above the root it stays outside, whatever folder it names next."""
    if depth is None or not text or os.path.isabs(text) or text.startswith("~"):
        return None
    for part in re.split(r"[/\\]+", text):
        if depth < 0:
            return depth
        depth += -1 if part == ".." else 0 if part in ("", ".") else 1
    return depth


class _Depths(ast.NodeVisitor):
    """The depth below the repository root of each path expression it can place; below 0 is outside."""

    def __init__(self, path: Path) -> None:
        self.file_depth = len(path.relative_to(ROOT).parts)  # tests/x/test_y.py: 3
        self.names: dict[str, int] = dict(KNOWN)
        self.outside: list[tuple[int, str]] = []

    def depth(self, node: ast.AST) -> int | None:
        if isinstance(node, ast.Name):
            return self.file_depth if node.id == "__file__" else self.names.get(node.id)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return _walk(0, node.value)  # relative to the working folder: `make test` and CI run at the root
        if isinstance(node, ast.Attribute):
            if node.attr == "__file__":  # a module's file: only the package's own has a known place
                return 2 if _name(node.value) == "scaleformer" else None
            base = self.depth(node.value)
            return None if base is None or node.attr != "parent" else _walk(base, "..")
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "parents" and isinstance(node.slice, ast.Constant):
            base = self.depth(node.value.value)
            if base is None or not isinstance(node.slice.value, int):
                return None
            return _walk(base, "/".join([".."] * (node.slice.value + 1)))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            left = self.depth(node.left)
            right = node.right
            if left is None:
                return None
            if isinstance(right, ast.Constant) and isinstance(right.value, str):
                return _walk(left, right.value)
            return left if left < 0 else left + 1  # a name joined on: a component, not a climb
        if isinstance(node, ast.Call):
            func = _name(node.func)
            if func.endswith((".resolve", ".absolute", ".expanduser")) and isinstance(node.func, ast.Attribute):
                return self.depth(node.func.value)
            if func in PATH_CALLS and node.args:
                return self.depth(node.args[0])
            if func == "os.path.dirname" and node.args:
                return _walk(self.depth(node.args[0]), "..")
            if func == "os.path.join" and node.args:
                depth = self.depth(node.args[0])
                for arg in node.args[1:]:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        depth = _walk(depth, arg.value)
                return depth
        return None

    def _check(self, node: ast.AST) -> None:
        d = self.depth(node)
        if d is not None and d < 0:
            self.outside.append((node.lineno, _name(node)))

    def visit_Assign(self, node: ast.Assign) -> None:
        d = self.depth(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name):
                if d is None:
                    self.names.pop(target.id, None)
                else:
                    self.names[target.id] = d
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        self._check(node)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._check(node)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self._check(node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = _name(node.func)
        if func in PATH_CALLS | OPENERS or func.startswith("os.path."):
            self._check(node)
            for arg in node.args[:1]:
                self._check(arg)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and OUTSIDE_TEXT.search(node.value):
            self.outside.append((node.lineno, repr(node.value)))


def reads_outside(source: str, path: Path) -> list[str]:
    """`file:line: expression` for each path in `source` that leaves the repository root."""
    finder = _Depths(path)
    finder.visit(ast.parse(source))
    widest: dict[int, str] = {}  # one hit a line: the whole expression, not each step of it
    for line, expr in finder.outside:
        widest[line] = max(widest.get(line, ""), expr, key=len)
    rel = path.relative_to(ROOT)
    return [f"{rel}:{line}: {expr}" for line, expr in sorted(widest.items())]


def test_no_test_module_reads_a_path_outside_the_repository():
    """conftest.py holds `optional_paper`, the one way out, and this module the ways out it must catch (as
    text); every other test module stays inside."""
    found = [hit for p in sorted(TESTS.rglob("*.py")) if p.name not in ("conftest.py", Path(__file__).name)
             for hit in reads_outside(p.read_text(), p)]
    assert found == [], "tests that read outside the repository (use the optional_paper fixture):\n" + \
        "\n".join(found)


UP = ".."  # the planted sources below are code as text: kept off text searches for that folder
PLANTED = [
    "text = (ROOT.parent / 'shared' / 'papers' / 'scaleformer.md').read_text()",
    "PAPER = ROOT.parent / 'shared'",
    "here = Path(__file__).resolve().parents[3] / 'shared' / 'x.md'",
    "up = Path(__file__).parent.parent.parent.parent / 'shared'",
    f"text = open('{UP}/shared/papers/scaleformer.md').read()",
    "p = ROOT / '..' / 'shared' / 'papers'",
    "p = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), '..', 'x')",
    "p = CONF.parent.parent / 'elsewhere'",
    "base = ROOT.parent\ntext = (base / 'notes.md').read_text()",
    f"text = Path('{UP}/shared/NOTES.md').read_text()",
    f"rows = read_rows('x{UP}/shared/papers')",
]

INSIDE = [
    'p = ROOT / "experiments" / "table1.yaml"',
    'p = Path(__file__).resolve().parents[2] / "conftest.py"',
    'p = Path(__file__).parent / "golden" / "runs.json"',
    'p = CONF.parent / "README.md"',
    'p = Path(scaleformer.__file__).resolve().parents[1]',
    'args = ["run_name=../../tmp/x", "../conf/config"]',  # hostile inputs: text given to a CLI, never read
    'p = tmp_path / "shared" / "x"',
]


def test_the_checker_catches_each_way_out_and_passes_paths_inside():
    """Each spelling of a read above the root is caught (a test planted with it fails the tier above);
    paths inside the repository, tmp folders and hostile-input strings pass."""
    where = TESTS / "artifacts" / "test_planted.py"
    caught = [src for src in PLANTED if not reads_outside(src, where)]
    assert caught == [], f"not caught: {caught}"
    wrong = [src for src in INSIDE if reads_outside(src, where)]
    assert wrong == [], f"flagged although inside: {wrong}"
