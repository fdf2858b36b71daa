"""The training-documents-per-launch benchmark (scaleformer.bench.bucketed_training): its committed record renders,
its documents are one bucket, and bad flags are one line."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

from scaleformer.bench import bucketed_training as bench


def test_the_committed_record_renders_and_meets_its_claims():
    doc = json.loads((ROOT / "results" / "bench" / "bucketed-training-cpu.json").read_text())
    assert doc["schema"] == bench.SCHEMA and doc["docs"] == bench.DOCS == 8
    text = bench.markdown(doc)
    assert (ROOT / "results" / "bench" / "bucketed-training-cpu.md").read_text() == text
    falls = {(c["model"], c["docs_per_micro_batch"]): c["ops_fall"] for c in doc["comparison"]}
    assert falls[("bart_base_shape", 8)] >= 4  # the operators per document fall with the documents per launch
    assert all(r["ms_per_doc"] is None for r in doc["rows"] if r["model"] == "bart_base_shape")
    assert all(r["repeats"] >= 10 for r in doc["rows"] if r["model"] in bench.TIMED)


def test_the_documents_are_one_bucket_and_the_micro_batches_cover_them():
    docs = bench.documents(vocab=200, pad=1)
    assert [len(d["input_ids"]) for d in docs] == list(bench.LENGTHS) and max(bench.LENGTHS) <= 4096
    for size in bench.SIZES:
        batches = bench.micro_batches(docs, size, pad=1)
        assert len(batches) == bench.DOCS // size and sum(len(b["ids"]) for b in batches) == bench.DOCS


@pytest.mark.parametrize("argv", [["--repeats", "3"], ["--models", "gpt2"]])
def test_bad_flags_stop_with_one_line(argv, tmp_path):
    with pytest.raises(SystemExit, match="error: --"):
        bench.main([*argv, "--out", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()
