"""The causal-pattern benchmark writes its results files, and its cost check says what it measured."""

from __future__ import annotations

import json

import pytest

from scaleformer.bench import causal_spans


@pytest.mark.slow  # a minute on 2 cores: six reader models built and timed
def test_the_benchmark_writes_every_pattern_and_the_cost_model_check(tmp_path):
    out = tmp_path / "spans"
    assert causal_spans.main(["--out", str(out), "--n", "256", "--reader-n", "128", "--repeats", "2"]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert [r["pattern"] for r in result["layer"]] == [p for p, _ in causal_spans.LAYER_PATTERNS]
    assert all(r["repeats"] == 2 and r["time_s"] > 0 and r["pairs"] <= r["n"] * (r["n"] + 1) // 2
               for r in result["layer"])
    assert len(result["reader"]) == len(causal_spans.READER_PATTERNS)
    assert all(r["generate_token"]["time_s"] > 0 for r in result["reader"])
    assert isinstance(result["layer_falls_with_cost"], bool)
    assert "| full |" in out.with_suffix(".md").read_text()


def test_falls_with_cost_compares_neighbours_in_cost_order():
    rows = [{"c": 1, "time_s": 1.0}, {"c": 4, "time_s": 3.0}, {"c": 2, "time_s": 2.0}]
    assert causal_spans.falls_with_cost(rows, "c")
    assert not causal_spans.falls_with_cost([*rows, {"c": 3, "time_s": 9.0}], "c")
