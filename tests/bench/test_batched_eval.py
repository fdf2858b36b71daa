"""The batched-evaluation benchmark (scaleformer.bench.batched_eval) at tiny repetitions: its records, the
check that batching keeps every summary, and its results files."""

from __future__ import annotations

import json

from scaleformer.bench import batched_eval


def test_the_benchmark_writes_its_results(tmp_path, capsys):
    assert batched_eval.main(["--methods", "sled", "--docs", "3", "--new-tokens", "4", "--repeats", "1",
                              "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "batched-eval-cpu.json").read_text())
    rows = result["rows"]
    assert {(r["beams"], r["batch"]) for r in rows} == {(b, n) for b in (1, 4) for n in batched_eval.SIZES}
    assert all(r["same_summaries"] and r["docs_per_s"] > 0 and r["timed"] == 1 for r in rows)
    assert [(s["method"], s["beams"]) for s in result["speedups"]] == [("sled", 1), ("sled", 4)]
    md = (tmp_path / "batched-eval-cpu.md").read_text()
    assert md.count("| sled |") == len(rows) + 2 and "speed-up" in md


def test_ledgers_are_distinct_test_documents():
    docs = batched_eval.ledgers(5)
    assert len(docs) == len(set(docs)) == 5
