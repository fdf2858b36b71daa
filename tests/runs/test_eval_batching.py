"""Evaluation decodes documents in length-sorted batches sized by the memory model: the same predictions
as one at a time, the same validation documents, one clear line for a bad size."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from conftest import compose
from test_end_to_end import _tiny
from tiny_models import tiny

from scaleformer.errors import ConfigError
from scaleformer.methods import build_method, method_config
from scaleformer.model.batching import MAX_BATCH, auto_batch
from scaleformer.runs.run import run
from scaleformer.runs.trainer import validation_docs


def _predictions(tmp_path, *extra: str) -> dict[str, list[dict]]:
    result = run(compose(_tiny(tmp_path, "backbone=tiny_bart_reader", "method=sled", "metrics.bertscore.enabled=false",
                               "data.synthetic_docs.test=7", "data.synthetic_words_spread=0.6", *extra)))
    out = next((tmp_path / "results" / "runs" / result["run_id"] / "eval").iterdir())
    return {s: [json.loads(line) for line in (out / f"predictions_{s}.jsonl").read_text().splitlines()]
            for s in ("validation", "test")}


def test_a_run_predicts_the_same_whatever_the_batch(tmp_path, caplog):
    one = _predictions(tmp_path / "one", "data.eval_batch_size=1")
    with caplog.at_level(logging.INFO, logger="scaleformer"):
        auto = _predictions(tmp_path / "auto", "data.eval_batch_size=null")
    assert any("documents per generation batch" in r.getMessage() for r in caplog.records)
    three = _predictions(tmp_path / "three", "data.eval_batch_size=3")
    assert [r["id"] for r in one["test"]] == [f"test-{i:04d}" for i in range(7)], "file order, whatever the batches"
    assert auto == one and three == one
    assert len({r["prediction"] for r in one["test"]}) > 1


def test_validation_counts_documents_in_file_order():
    assert validation_docs(100, 500) == 100 and validation_docs(100, 8) == 8
    assert validation_docs(1.0, 8) == 8 and validation_docs(0.25, 8) == 2 and validation_docs(0.01, 8) == 1
    assert validation_docs(0, 8) == 0 and validation_docs(0.0, 8) == 0
    with pytest.raises(ConfigError, match="limit_val_batches='all'"):
        validation_docs("all", 8)


def test_the_memory_model_sizes_the_batch():
    model, spec = tiny("bart")
    method = build_method(method_config({"name": "sled", "chunk_size": 64, "overlap": 16}), spec)
    cpu = torch.device("cpu")
    roomy, why = auto_batch(model, method, 4096, 4, 256, cpu, 4, capacity=10**12)
    assert roomy == MAX_BATCH and "documents per generation batch" in why
    tight, _ = auto_batch(model, method, 4096, 4, 256, cpu, 4, capacity=10**6)
    assert tight == 1, "never below one document"
    some, _ = auto_batch(model, method, 4096, 4, 256, cpu, 4, capacity=3 * 10**7)
    more, _ = auto_batch(model, method, 1024, 4, 256, cpu, 4, capacity=3 * 10**7)
    assert 1 <= some < more <= MAX_BATCH, "shorter documents: more of them fit"
