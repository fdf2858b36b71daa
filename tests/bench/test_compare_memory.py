"""`make bench-compare` (scaleformer/bench/compare_memory.py) at a few documents: it runs the command and
the statistics in fresh processes and writes its results files; the real sizes are its own long run."""

from __future__ import annotations

import json

import pytest

from scaleformer.bench import compare_memory


def test_the_benchmark_writes_its_results(tmp_path, capsys):
    assert compare_memory.main(["--sizes", "40", "--scipy-sizes", "", "--repeats", "1", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "compare-memory.json").read_text())
    (row,) = doc["rows"]
    assert (row["part"], row["impl"], row["documents"], row["timed"]) == ("command", "ours", 40, 1)
    assert row["methods"] == {"rouge1": "BCa / normal", "exact_match": "BCa / normal"}  # 40 documents: the normal limit
    assert 0 < row["traced_peak_mib"] < row["peak_rss_mib"] < compare_memory.LIMIT_MIB and row["wall_s"] > 0
    md = (tmp_path / "compare-memory.md").read_text()
    assert "| command | ours | 40 |" in md and "under the 2,048 MiB limit" in md
    assert "wrote" in capsys.readouterr().out


def test_the_statistics_rows_run_the_same_test_as_scipys_old_path(tmp_path):
    """The child of a statistics row, here in this process: ours and scipy's give the same p-values."""
    got = {}
    for impl in ("ours", "scipy"):
        assert compare_memory.child([impl, str(tmp_path / impl), "30", "1"]) == 0
        got[impl] = json.loads((tmp_path / impl).read_text())
        assert got[impl]["traced_peak_mib"] > 0 and len(got[impl]["wall_s"]) == 1
    assert {k: v[2] for k, v in got["ours"]["results"].items()} == {k: v[2] for k, v in got["scipy"]["results"].items()}
    for k, (lo, hi, _) in got["ours"]["results"].items():
        assert (lo, hi) == pytest.approx(tuple(got["scipy"]["results"][k][:2]), abs=1e-12), k


@pytest.mark.parametrize("args, message", [
    (["--repeats", "0"], r"^error: --repeats=0: must be >= 1$"),
    (["--sizes", "1000,x"], r"^error: --sizes '1000,x': give comma-separated document counts, each >= 2$"),
    (["--sizes", ","], r"^error: --sizes: empty; give at least one document count$"),
])
def test_bad_arguments_stop_with_one_line(tmp_path, capsys, args, message):
    import re

    assert compare_memory.main([*args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert re.search(message, err) and not any(tmp_path.iterdir())


def test_the_child_loads_neither_torch_nor_the_bench_package():
    """Each measurement's process loads this file as ``_CHILD`` does: its imports keep torch out, so a peak is
    the command's own."""
    import subprocess
    import sys

    code = ("import importlib.util as u, sys; s = u.spec_from_file_location('c', sys.argv[1]); "
            "m = u.module_from_spec(s); s.loader.exec_module(m); "
            "print(sorted(k for k in ('torch', 'transformers', 'scaleformer.bench') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, compare_memory.__file__], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
