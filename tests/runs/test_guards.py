"""Start-up and training guards: limits that used to fail deep inside a run fail early, in one line.

- a non-finite training loss stops the run at that step (no results written as if all were fine);
- ``backbone.max_positions`` above the model's learned positions fails when the model config is read;
- ``tag`` is only recorded: it never becomes a path.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from conftest import compose

from scaleformer.config import OptimConfig
from scaleformer.errors import ConfigError
from scaleformer.model import backbone as backbone_mod
from scaleformer.runs.context import to_config
from scaleformer.runs.module import SummarizationModule, TrainingDiverged
from scaleformer.runs.run import run


def _tiny(tmp_path: Path, *extra: str) -> list[str]:
    return ["debug=default", f"paths.root={tmp_path}/results", f"paths.cache={tmp_path}/cache",
            "trainer.enable_progress_bar=false", *extra]


# ---- non-finite loss --------------------------------------------------------------------------------


def _module(optim: OptimConfig) -> SummarizationModule:
    from scaleformer.model.backbone import build_model, prepare

    rc = to_config(compose(["method=truncation"]))
    ready = prepare(rc.backbone, rc.method)
    return SummarizationModule(build_model(rc.backbone, ready.conf), ready.method, ready.tokenizer, optim,
                               rc.generation)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_loss_stops_at_that_step(monkeypatch, bad):
    module = _module(OptimConfig(lr=1e-3))
    monkeypatch.setattr(SummarizationModule, "forward", lambda self, batch: torch.tensor(bad, requires_grad=True))
    batch = {"input_ids": torch.ones(1, 4, dtype=torch.long)}
    with pytest.raises(TrainingDiverged, match=rf"^training diverged: the loss is {bad} at step 1 \(batch 0 of "
                                               r"epoch 0\) with optim\.lr=0\.001, .*optim\.allow_nonfinite_loss=true"):
        module.training_step(batch, 0)
    assert issubclass(TrainingDiverged, ConfigError), "train.py prints ConfigErrors as one line"


def test_nonfinite_loss_opt_out_warns_once_and_trains_on(monkeypatch, caplog):
    module = _module(OptimConfig(lr=1e-3, allow_nonfinite_loss=True))
    monkeypatch.setattr(SummarizationModule, "forward", lambda self, batch: torch.tensor(float("nan")))
    batch = {"input_ids": torch.ones(1, 4, dtype=torch.long)}
    with caplog.at_level(logging.WARNING, logger="scaleformer"):
        for i in range(3):
            assert torch.isnan(module.training_step(batch, i))
    assert sum("allow_nonfinite_loss=true" in r.getMessage() for r in caplog.records) == 1


def test_a_deferred_check_names_the_first_nonfinite_micro_batch_and_guards_checkpoints(monkeypatch):
    """On a GPU the loss is read every check_every micro-batches (no sync per step): the check names the
    first bad one, and a checkpoint or validation in between reads it first."""
    module = _module(OptimConfig(lr=1e-3))
    losses = iter([1.0, float("inf"), float("nan"), 2.0, 1.0])
    monkeypatch.setattr(SummarizationModule, "forward", lambda self, batch: torch.tensor(next(losses)))
    module.check_every = 4
    batch = {"input_ids": torch.ones(1, 4, dtype=torch.long)}
    for i in range(3):
        module.training_step(batch, i)  # nothing read yet
    # outside a trainer every micro-batch is optimiser step 1; the batch index tells them apart
    with pytest.raises(TrainingDiverged, match=r"^training diverged: the loss is inf at step 1 \(batch 1 of epoch 0\)"):
        module.training_step(batch, 3)
    module.training_step(batch, 4)  # a finite loss after the check
    module.check_finite()  # read: nothing to stop
    losses = iter([float("nan")])
    module.training_step(batch, 5)  # pending until a check point
    with pytest.raises(TrainingDiverged, match="the loss is nan"):
        module.on_save_checkpoint({})


def test_finite_loss_is_returned_unchanged(monkeypatch):
    module = _module(OptimConfig())
    loss = torch.tensor(2.5, requires_grad=True)
    monkeypatch.setattr(SummarizationModule, "forward", lambda self, batch: loss)
    assert module.training_step({"input_ids": torch.ones(1, 4, dtype=torch.long)}, 0) is loss


def test_huge_learning_rate_stops_the_run_without_results(tmp_path):
    """optim.lr=1e6 used to train on NaN losses and report ROUGE 0 with exit status 0."""
    with pytest.raises(TrainingDiverged, match=r"the loss is (nan|inf|-inf) at step \d+ .*optim\.lr=1e\+06") as e:
        run(compose(_tiny(tmp_path, "optim.lr=1e6", "trainer.max_steps=8")))
    assert "\n" not in str(e.value)
    results = tmp_path / "results"
    assert not list(results.rglob("metrics.json")) and not list(results.rglob("predictions_*.jsonl"))
    assert not list(results.rglob("*.ckpt")), "no checkpoint of diverged weights"
    failed = json.loads(next(results.rglob("failed.json")).read_text())  # training had begun: the folder stays
    assert failed["error"].startswith("TrainingDiverged: training diverged: the loss is")


# ---- learned positions ------------------------------------------------------------------------------


def test_max_positions_above_learned_positions_fails_before_weights(tmp_path, monkeypatch):
    def no_weights(*args, **kwargs):
        raise AssertionError("the model must not be built")

    monkeypatch.setattr("scaleformer.runs.run.build_model", no_weights)
    with pytest.raises(ConfigError, match=r"^backbone\.max_positions=2048: above the 1024 positions the bart "
                                          r"backbone 'tiny_bart' has learned \(max_position_embeddings=1024\); "
                                          r"set backbone\.max_positions <= 1024"):
        run(compose(_tiny(tmp_path, "backbone.max_positions=2048")))
    assert not list((tmp_path / "results").rglob("metrics.json"))


def test_relative_positions_have_no_limit_and_the_limit_itself_is_fine():
    for overrides in (["backbone=tiny_t5", "backbone.max_positions=16384"], ["backbone.max_positions=1024"]):
        rc = to_config(compose(overrides))
        conf = backbone_mod.model_config(rc.backbone, backbone_mod.load_tokenizer(rc.backbone))
        assert backbone_mod.max_positions(rc.backbone, conf) == rc.backbone.max_positions


def test_learned_positions_by_family():
    from transformers import BartConfig, LEDConfig, T5Config

    assert backbone_mod.learned_positions(BartConfig(max_position_embeddings=512)) == ("max_position_embeddings", 512)
    assert backbone_mod.learned_positions(LEDConfig())[0] == "max_encoder_position_embeddings"
    assert backbone_mod.learned_positions(T5Config(n_positions=512)) is None


# ---- tag ----------------------------------------------------------------------------------------------


def test_tag_is_recorded_never_a_path():
    """`tag` is free text saved in metrics.json: a traversal in it changes no folder name."""
    plain = to_config(compose([]))
    tagged = to_config(compose(["tag=../../../tmp/escape"]))
    assert tagged.tag == "../../../tmp/escape"
    assert (tagged.paths.run_id, tagged.paths.run_dir) == (plain.paths.run_id, plain.paths.run_dir)
    from scaleformer.runs.context import RunContext
    from scaleformer.runs.identity import evaluation_identity, training_identity

    def eval_dir(rc, step):
        return RunContext.create(rc).eval_dir(step)

    assert eval_dir(tagged, 5) == eval_dir(plain, 5)
    assert "escape" not in json.dumps([training_identity(tagged), evaluation_identity(tagged)])
