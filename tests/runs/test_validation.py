"""trainer.validation: what validation during fit computes. ``paper`` (the default) decodes as the test does;
``loss`` logs the teacher-forced loss only and generates nothing; ``greedy`` decodes with 1 beam and a token
cap. The evaluation of the eval splits is the same under all three; a monitor must name what is logged."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import compose

from scaleformer.errors import ConfigError
from scaleformer.runs import module
from scaleformer.runs.context import check_monitors, to_config, validation_monitor, validation_record
from scaleformer.runs.run import run


def _fit(tmp_path, *extra: str) -> list[str]:
    """4 optimiser steps validated after steps 2 and 4 on 2 documents (one a batch), nothing evaluated after."""
    return [f"paths.root={tmp_path}/results", f"paths.cache={tmp_path.parent}/shared_cache", "method=truncation",
            "data.synthetic_docs.train=4", "data.synthetic_docs.validation=2", "data.synthetic_docs.test=1",
            "trainer.max_steps=4", "trainer.val_check_interval=2", "trainer.limit_val_batches=2",
            "trainer.eval_splits=[]", "trainer.enable_progress_bar=false", "trainer.log_every_n_steps=1",
            "generation.num_beams=2", "generation.max_new_tokens=8", "metrics.bertscore.enabled=false",
            "data.eval_batch_size=1", "callbacks.checkpoint=null", "++trainer.export_model=false", *extra]


def _logged(tmp_path) -> list[dict[str, str]]:
    with next((tmp_path / "results").rglob("metrics.csv")).open() as f:
        return list(csv.DictReader(f))


def test_loss_validation_logs_the_teacher_forced_loss_and_generates_nothing(tmp_path, monkeypatch):
    def no_generation(*_):
        raise AssertionError("trainer.validation=loss generated")

    monkeypatch.setattr(module, "summaries", no_generation)
    # early stopping on the metric this validation logs (strict: a missing val/loss would stop the run)
    out = run(compose(_fit(tmp_path, "trainer.validation=loss",
                           "++callbacks.stop._target_=lightning.pytorch.callbacks.EarlyStopping",
                           "++callbacks.stop.monitor=val/loss", "++callbacks.stop.patience=10")))
    assert out["train_steps"] == 4
    losses = [float(r["val/loss"]) for r in _logged(tmp_path) if r.get("val/loss")]
    assert len(losses) == 2 and all(0 < v < 100 for v in losses)
    assert not any(r.get("val/rougeL") for r in _logged(tmp_path))
    run_dir = tmp_path / "results" / "runs" / out["run_id"]
    assert "trainer.validation=loss: validation during fit is not the paper's protocol" in \
        (run_dir / "train.log").read_text()
    owner = json.loads((run_dir / "identity.json").read_text())
    assert owner["training_identity"]["trainer"]["validation"] == "loss"  # the run's record says so


def test_greedy_validation_decodes_one_beam_to_its_cap_and_the_test_as_configured(tmp_path, monkeypatch):
    stock, asked = module.summaries, []

    def spy(model, tokenizer, gen, *args):
        asked.append((gen.num_beams, gen.max_new_tokens))
        return stock(model, tokenizer, gen, *args)

    monkeypatch.setattr(module, "summaries", spy)
    run(compose(_fit(tmp_path, "trainer.validation=greedy", "++trainer.validation_max_new_tokens=3",
                     "trainer.eval_splits=[test]")))
    assert asked == [(1, 3)] * 4 + [(2, 8)]  # 2 validations x 2 documents, then the test document
    assert len([r for r in _logged(tmp_path) if r.get("val/rougeL")]) == 2


def test_the_papers_validation_decodes_as_the_test_does(tmp_path, monkeypatch):
    stock, asked = module.summaries, []
    monkeypatch.setattr(module, "summaries", lambda m, tok, gen, *a: asked.append(gen.num_beams) or stock(m, tok, gen, *a))
    run(compose(_fit(tmp_path, "trainer.limit_val_batches=1")))
    assert asked == [2, 2]


@pytest.mark.parametrize(("validation", "monitor", "mode", "message"), [
    ("loss", "val/rougeL", "max", "trainer.validation=loss logs only val/loss; val/rougeL needs "
                                  "trainer.validation=paper or greedy"),
    ("paper", "val/loss", "min", "trainer.validation=paper logs ROUGE (val/rougeL ...); val/loss needs "
                                 "trainer.validation=loss"),
    ("greedy", "val/rougeL", None, "must be max for val/rougeL (higher is better)"),
    ("loss", "val/loss", "max", "must be min for val/loss (lower is better)"),
    ("paper", "val/bleu", "max", "validation logs no such metric"),
])
def test_a_monitor_must_name_what_the_validation_logs(validation, monitor, mode, message):
    node = {"_target_": "lightning.pytorch.callbacks.EarlyStopping", "monitor": monitor,
            **({"mode": mode} if mode else {})}
    rouge = {"_target_": "scaleformer.runs.callbacks.ValidationRouge"}
    with pytest.raises(ConfigError, match="^callbacks.stop.(monitor|mode)=") as e:
        check_monitors(validation, {"validation_rouge": rouge, "stop": node})
    assert message in str(e.value)
    for v in ("paper", "greedy", "loss"):
        best, want = validation_monitor(v)
        check_monitors(v, {"validation_rouge": rouge, "stop": {**node, "monitor": best, "mode": want}})
    with pytest.raises(ConfigError, match="callbacks.validation_rouge .*which is null"):
        check_monitors("paper", {"validation_rouge": None, "stop": {**node, "monitor": "val/rougeL", "mode": "max"}})


def test_a_run_refuses_a_monitor_its_validation_does_not_log_at_start_up():
    with pytest.raises(ConfigError, match=r"^callbacks\.checkpoint\.monitor='val/rougeL': trainer\.validation=loss"):
        to_config(compose(["trainer.validation=loss", "++callbacks.checkpoint.monitor=val/rougeL",
                           "++callbacks.checkpoint.mode=max"]))


def test_the_record_says_whether_validation_was_the_papers_protocol():
    assert validation_record(to_config(compose([])).trainer) == {
        "mode": "paper", "paper_protocol": True, "monitor": "val/rougeL", "monitor_mode": "max", "max_new_tokens": None}
    greedy = validation_record(to_config(compose(["trainer.validation=greedy"])).trainer)
    assert greedy["paper_protocol"] is False and greedy["max_new_tokens"] == 128
    assert validation_record(to_config(compose(["trainer.validation=loss"])).trainer)["monitor"] == "val/loss"
