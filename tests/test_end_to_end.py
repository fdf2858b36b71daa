"""Fast end-to-end runs of the real pipeline (train + generate + score) on the tiny backbones."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, compose

from scaleformer.runs.run import run


def _tiny(tmp_path, *extra: str) -> list[str]:
    return [
        f"paths.root={tmp_path}/results",
        f"paths.cache={tmp_path.parent}/shared_cache",
        "data.synthetic_docs.train=4",
        "data.synthetic_docs.validation=2",
        "data.synthetic_docs.test=2",
        "trainer.max_steps=3",
        "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false",
        "generation.num_beams=2",
        "generation.max_new_tokens=8",
        *extra,
    ]


@pytest.mark.parametrize("backbone", ["tiny_bart", "tiny_t5"])
@pytest.mark.parametrize("method", ["truncation", "scaleformer_middle"])
def test_train_and_generate_end_to_end(tmp_path, backbone, method):
    result = run(compose(_tiny(tmp_path, f"backbone={backbone}", f"method={method}",
                               "metrics.bertscore.enabled=false")))
    assert result["train_steps"] == 3
    run_dir = tmp_path / "results" / "runs" / result["run_id"]
    assert method in result["run_id"], "the run folder is named by the method option the user chose"
    out = next((run_dir / "eval").iterdir())
    written = json.loads((out / "metrics.json").read_text())
    assert written["method"]["option"] == method and written["method"]["name"] == result["method"]["name"]
    assert (run_dir / "checkpoints" / "last.ckpt").exists() and (run_dir / "train.log").exists()
    assert list((run_dir / "logs").rglob("metrics.csv")), "the logger writes inside the run folder"
    for split in ("validation", "test"):
        m = written["splits"][split]
        assert m["n_examples"] == 2
        assert 0.0 <= m["rougeL"] <= 100.0
        rows = [json.loads(line) for line in (out / f"predictions_{split}.jsonl").read_text().splitlines()]
        assert len(rows) == 2 and {"id", "prediction", "reference"} <= set(rows[0])
    assert (out / "config.yaml").read_text().count(f"name: {backbone}") == 1
    assert not list(out.glob(".*.tmp")), "no temp files left behind"


METHODS = sorted(p.stem for p in (ROOT / "conf" / "method").glob("*.yaml"))
# Options that need a query per document run on the question-answering ledgers.
_QA = ["data=ledgers_qa", "data.synthetic_words=150", "data.synthetic_docs.train=2", "method.chunk_size=96",
       "method.overlap=16", "method.middle_tokens=8"]
NEEDS_QUERY = {"scaleformer_middle_query": _QA, "scaleformer_middle_query_lift": _QA}


@pytest.mark.compat
@pytest.mark.parametrize("backbone", ["tiny_bart", "tiny_t5"])
@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains_and_generates(tmp_path, backbone, method):
    """Each method config completes the real pipeline on both tiny backbones (2 steps, 1 document)."""
    result = run(compose(_tiny(tmp_path, f"backbone={backbone}", f"method={method}", "trainer.max_steps=2",
                               "data.synthetic_docs.validation=1", "trainer.eval_splits=[validation]",
                               "metrics.bertscore.enabled=false", *NEEDS_QUERY.get(method, []))))
    assert result["train_steps"] == 2
    m = result["splits"]["validation"]
    assert m["n_examples"] == 1 and 0.0 <= m["rouge1"] <= 100.0


def test_bertscore_and_csv_logger_end_to_end(tmp_path):
    result = run(compose(_tiny(tmp_path, "method=truncation", "metrics.bertscore.model_type=offline")))
    m = result["splits"]["validation"]
    assert 0.0 < m["bertscore_f1"] <= 100.0
    assert "minilm" in str(m["bertscore_model"]).lower()
    csv = next((tmp_path / "results").rglob("metrics.csv")).read_text()
    assert "validation/rougeL" in csv and "validation/bertscore_f1" in csv


def test_resume_from_last_checkpoint(tmp_path):
    first = run(compose(_tiny(tmp_path, "method=truncation", "metrics.bertscore.enabled=false",
                              "trainer.eval_splits=[]")))
    ckpt = tmp_path / "results" / "runs" / first["run_id"] / "checkpoints" / "last.ckpt"
    assert ckpt.exists() and first["train_steps"] == 3
    # Same run, longer schedule: the training length is not part of the run's identity, so the same
    # folder's newest checkpoint is continued, from step 3, not from 0.
    second = run(compose(_tiny(tmp_path, "method=truncation", "metrics.bertscore.enabled=false",
                               "trainer.eval_splits=[]", "trainer.max_steps=5")))
    assert second["run_id"] == first["run_id"] and second["train_steps"] == 5
    import torch

    assert torch.load(ckpt, weights_only=True)["global_step"] == 5


def test_wandb_logger_offline(tmp_path):
    result = run(compose(_tiny(tmp_path, "method=truncation", "logger=wandb", "metrics.bertscore.enabled=false",
                               "trainer.eval_splits=[validation]")))
    assert result["splits"]["validation"]["n_examples"] == 2
    assert list((tmp_path / "results").rglob("offline-run-*")), "wandb wrote an offline run in the run folder"
