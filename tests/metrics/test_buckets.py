"""Scores by input length: every evaluation reports each metric per document-length bucket."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import compose

from scaleformer.metrics.buckets import bucket_labels, by_length


def test_labels_and_membership_by_hand():
    assert bucket_labels([1024, 4096]) == ["<1024", "1024-4095", ">=4096"]
    got = by_length([10, 1023, 1024, 4095, 4096, 10**6], [1024, 4096], lambda idx: {"members": idx})
    assert got == {"<1024": {"n": 2, "members": [0, 1]}, "1024-4095": {"n": 2, "members": [2, 3]},
                   ">=4096": {"n": 2, "members": [4, 5]}}
    empty = by_length([], [100], lambda idx: {"x": 1})
    assert empty == {"<100": {"n": 0}, ">=100": {"n": 0}}


def test_bucket_counts_add_up_to_the_split(tmp_path: Path):
    from scaleformer.runs.run import run

    words = [20, 60, 140, 400, 30, 90]
    rows = [{"id": f"d{i}", "input": " ".join(f"word{j % 50}" for j in range(n)), "output": "word1 word2"}
            for i, n in enumerate(words)]
    (tmp_path / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run(compose(["debug=default", "data=local", f"data.path={tmp_path}/validation.jsonl",
                          "trainer.do_train=false", "data.max_eval_examples=null", "method=truncation",
                          "metrics.length_buckets=[64,128,256]", f"paths.root={tmp_path}/r",
                          f"paths.cache={tmp_path}/c"]))
    split = result["splits"]["validation"]
    buckets = split["by_length"]
    assert list(buckets) == ["<64", "64-127", "128-255", ">=256"]
    assert sum(b["n"] for b in buckets.values()) == split["n_examples"] == len(words)
    assert sum(1 for b in buckets.values() if b["n"]) >= 3, "the lengths spread over the buckets"
    for b in buckets.values():
        assert b["n"] == 0 or {"rouge1", "task_score", "n_scored"} <= set(b)
    saved = json.loads(next((tmp_path / "r").rglob("metrics.json")).read_text())
    assert saved["splits"]["validation"]["by_length"] == buckets
