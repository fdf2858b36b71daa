"""Model selection as the lineage does it: a budget in epochs, validation twice an epoch, the checkpoint that scored
best on validation evaluated (and exported), early stopping; the test split is read only after the choice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import compose

from scaleformer.errors import ConfigError
from scaleformer.runs import run as run_module
from scaleformer.runs import selection
from scaleformer.runs.context import RunContext, to_config
from scaleformer.runs.run import run


def _paper_like(tmp_path: Path, *extra: str) -> list[str]:
    """trainer=paper's schedule on 4 training ledgers: 2 epochs, validation at each half (4 in all), best kept."""
    return [f"paths.root={tmp_path}/results", f"paths.cache={tmp_path.parent}/shared_cache", "method=truncation",
            "trainer=paper", "optim=tiny", "backbone=tiny_bart", "trainer.accumulate_grad_batches=1",
            "data.synthetic_docs.train=4", "data.synthetic_docs.validation=2", "data.synthetic_docs.test=1",
            "data.synthetic_words=150", "data.epochs=2", "trainer.limit_val_batches=2",
            "trainer.enable_progress_bar=false", "trainer.log_every_n_steps=1", "trainer.precision=32-true",
            "generation.num_beams=1", "generation.max_new_tokens=8", "metrics.bertscore.enabled=false",
            "data.eval_batch_size=1", "trainer.accelerator=cpu", *extra]


def test_the_best_validation_checkpoint_is_chosen_on_validation_evaluated_and_recorded(tmp_path, monkeypatch):
    order: list[str] = []
    chosen, scored = selection.select_weights, run_module.evaluate_split

    def spy_select(*a, **kw):
        order.append("select")
        return chosen(*a, **kw)

    def spy_eval(rc, trainer, module, dm, split, out_dir):
        order.append(split)
        return scored(rc, trainer, module, dm, split, out_dir)

    monkeypatch.setattr(run_module, "select_weights", spy_select)
    monkeypatch.setattr(run_module, "evaluate_split", spy_eval)
    cfg = compose(_paper_like(tmp_path))
    out = run(cfg)
    assert order == ["select", "validation", "test"]  # the test split is read after the choice, never before
    sel = out["selection"]
    steps = [v["step"] for v in sel["validations"]]
    assert sel["rule"] == "best" and sel["split"] == "validation" and sel["monitor"] == "val/task_score"
    # 5 training rows an epoch (a ledger with two references): validation every int(5 x 0.5) = 2 micro-batches,
    # twice an epoch as the lineage's eval_steps = int(steps per epoch x 0.5); 2 epochs, 10 steps
    assert steps == [2, 4, 7, 9] and sel["last_step"] == out["train_steps"] == 10
    best = max(sel["validations"], key=lambda v: v["score"])  # the first of equal scores stays the best
    assert (sel["step"], sel["score"]) == (best["step"], best["score"]) and out["step"] == sel["step"]
    ctx = RunContext.create(to_config(compose(_paper_like(tmp_path))))
    assert ctx.expected_eval_dir.name.startswith("epochs_2-")  # known before the run: the grid finds it
    assert json.loads((ctx.expected_eval_dir / "metrics.json").read_text())["selection"]["step"] == sel["step"]
    exported = json.loads((ctx.run_dir / "model" / "scaleformer.json").read_text())
    assert exported["run"]["step"] == sel["step"]  # the exported model is the chosen one


def test_early_stopping_ends_training_after_patience_validations_without_a_better_score(tmp_path):
    # lr 1e-12: the scores cannot move, so no validation after the first is better
    out = run(compose(_paper_like(tmp_path, "optim.lr=1e-12", "optim.warmup_ratio=0", "trainer.early_stopping_patience=2")))
    sel = out["selection"]
    assert [v["step"] for v in sel["validations"]] == [2, 4, 7]
    assert out["train_steps"] == 7 < 10 and sel["step"] == 2


@pytest.mark.parametrize("extra, needs", [
    (["trainer.limit_val_batches=0"], "needs validation during fit"),
    (["callbacks.validation_rouge=null"], "ValidationRouge"),
])
def test_selection_without_a_validation_to_choose_by_stops_at_start_up(extra, needs):
    with pytest.raises(ConfigError, match=needs):
        to_config(compose(["trainer=paper", *extra]))


def test_the_paper_profile_warms_up_a_tenth_of_its_steps():
    from scaleformer.runs.module import warmup_steps

    rc = to_config(compose(["trainer=paper", "optim=paper"]))
    assert warmup_steps(rc.optim, 1570) == 157  # warmup_ratio 0.1 of the optimiser steps
    assert warmup_steps(to_config(compose(["optim=tiny"])).optim, 1570) == 50  # warmup_steps where no ratio is set
    assert warmup_steps(rc.optim, 3) == 0


class _FakeTrainer:
    """What BestCheckpoint reads of a trainer: the step, the logged metrics, and where checkpoints go."""

    sanity_checking = False
    should_stop = False

    def __init__(self) -> None:
        self.global_step, self.callback_metrics, self.saved = 0, {}, []

    def save_checkpoint(self, path: str, weights_only: bool = False) -> None:
        self.saved.append((self.global_step, path))
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(str(self.global_step))


@pytest.mark.parametrize("mode, scores, best_step", [("max", [1.0, 3.0, 2.0, 3.0], 20), ("min", [1.0, 3.0, 0.5, 0.5], 30)])
def test_the_best_score_wins_a_tie_goes_to_the_earlier_and_the_state_survives_a_resume(tmp_path, mode, scores, best_step):
    cb, tr = selection.BestCheckpoint(tmp_path, "val/x", mode, patience=2), _FakeTrainer()
    for i, s in enumerate(scores, 1):
        tr.global_step, tr.callback_metrics = 10 * i, {"val/x": s}
        cb.on_validation_end(tr, None)
    assert cb.best_step == best_step and [s for s, _ in tr.saved] == sorted({s for s, _ in tr.saved})
    assert tr.should_stop == (mode == "max")  # two validations without a better score after step 20
    again = selection.BestCheckpoint(tmp_path, "val/x", mode)
    again.load_state_dict(json.loads(json.dumps(cb.state_dict())))  # plain data, as a weights-only checkpoint holds
    assert (again.best_step, again.best_score, again.history) == (cb.best_step, cb.best_score, cb.history)
