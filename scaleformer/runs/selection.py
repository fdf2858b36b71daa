"""Which trained weights a run evaluates: the last, or the checkpoint that scored best at validation during fit.

The lineage evaluates its best checkpoint (Mivg/SLED and abertsch72/unlimiformer
``configs/training/base_training_args.json``: ``load_best_model_at_end`` by ``metric_for_best_model``, the
task's metric: ROUGE's geometric mean, F1 or exact match; here ``val/task_score``), and stops after
``patience`` validations without a better one (Unlimiformer's, 10). :class:`BestCheckpoint` keeps that
checkpoint and the history of every validation; :func:`select_weights` loads it once training ends, before
the model is exported and before any evaluation split is read. The choice reads only what validation
during fit logged, on the validation split: the test split is never scored before it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from scaleformer.runs import checkpoints

log = logging.getLogger("scaleformer")

MONITOR = "val/task_score"  # the data's task metric at each validation (ValidationRouge logs it)


def selection_monitor(validation: str) -> tuple[str, str]:
    """What chooses the best checkpoint under ``trainer.validation``: the task's metric (higher is better), or
    the teacher-forced loss (lower) when validation generates nothing."""
    return ("val/loss", "min") if validation == "loss" else (MONITOR, "max")


class BestCheckpoint(pl.Callback):
    """At each validation during fit: record the score, keep the best weights as ``best.ckpt``, and stop
    training after ``patience`` validations without a better one (None: never). Its state travels in every
    checkpoint, so a resumed run knows its best so far."""

    def __init__(self, dirpath: str | Path, monitor: str = MONITOR, mode: str = "max",
                 patience: int | None = None) -> None:
        self.dirpath = Path(dirpath)
        self.monitor, self.mode, self.patience = monitor, mode, patience
        self.best_score: float | None = None
        self.best_step: int | None = None
        self.best_path: str | None = None
        self.history: list[dict[str, Any]] = []  # every validation: {"step", "score"}
        self.stale = 0  # validations since the best one

    def _better(self, score: float) -> bool:
        if self.best_score is None:
            return True
        return score > self.best_score if self.mode == "max" else score < self.best_score

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:  # start-up checks that validation logs it; a validation of no document logs nothing
            log.warning("validation at step %d logged no %s: not a candidate for the best checkpoint",
                        trainer.global_step, self.monitor)
            return
        score, step = float(value), int(trainer.global_step)
        if step == 0 or any(h["step"] == step for h in self.history):  # untrained, or weights already scored
            log.info("validation at step %d: %s %.4g; not a candidate (%s)", step, self.monitor, score,
                     "no optimizer step yet" if step == 0 else "the same weights as this step's earlier validation")
            return
        self.history.append({"step": step, "score": round(score, 4)})
        if self._better(score):
            self.best_score, self.best_step, self.stale = score, step, 0
            path = self.dirpath / "best.ckpt"
            # weights only (through the run's atomic checkpoint IO): it is evaluated, never resumed from
            trainer.save_checkpoint(str(path), weights_only=True)
            self.best_path = str(path.resolve())
            log.info("validation at step %d: %s %.4g, the best so far (%s)", step, self.monitor, score, path)
            return
        self.stale += 1
        log.info("validation at step %d: %s %.4g (best %.4g at step %d)", step, self.monitor, score,
                 self.best_score, self.best_step)
        if self.patience is not None and self.stale >= self.patience:
            trainer.should_stop = True
            log.info("early stopping: %d validations without a better %s than step %d's (patience %d)",
                     self.stale, self.monitor, self.best_step, self.patience)

    def state_dict(self) -> dict[str, Any]:
        return {"best_score": self.best_score, "best_step": self.best_step, "best_path": self.best_path,
                "history": list(self.history), "stale": self.stale}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_score, self.best_step = state.get("best_score"), state.get("best_step")
        # the file in this run's checkpoints: a run folder moved or copied elsewhere reads its own, not the old place's
        path = state.get("best_path")
        self.best_path = str((self.dirpath / Path(path).name).resolve()) if path else None
        self.stale = int(state.get("stale") or 0)
        self.history = list(state.get("history") or [])


def best_file_where(path: Path) -> str:
    """How messages name the best checkpoint: its file, and the setting that reads it (the user set no path)."""
    return f"the best checkpoint {path} (trainer.select=best)"


def check_best_file(ckpt_dir: Path | None, training_hash: str) -> None:
    """At start-up: a ``best.ckpt`` in the run's checkpoints that this run did not write (copied in from another
    run, or not a checkpoint) is one line, before any training (it would be evaluated and exported as this
    run's best)."""
    path = None if ckpt_dir is None else ckpt_dir / "best.ckpt"
    if path is not None and path.is_file():
        where = best_file_where(path)
        checkpoints.check_identity(checkpoints.load(path, mmap=True, where=where).get(checkpoints.META_KEY),
                                   training_hash, where)


def select_weights(best: BestCheckpoint | None, module: Any, last_step: int, backbone: str,
                   method: dict[str, Any], training_hash: str | None = None) -> dict[str, Any]:
    """Load the best checkpoint's weights into ``module`` (``best``: the run's callback; None under
    ``trainer.select=last``) and return what was chosen: the rule, the step and score, every validation. With
    ``training_hash``, a best checkpoint another training identity wrote is refused in one line."""
    if best is None:
        return {"rule": "last", "step": last_step}
    record = {"rule": "best", "monitor": best.monitor, "mode": best.mode, "split": "validation",
              "last_step": last_step, "validations": list(best.history)}
    path = Path(best.best_path) if best.best_path else None
    if best.best_step is None or path is None or not path.is_file():
        why = "no validation ran during fit" if best.best_step is None else f"its checkpoint {path} is gone"
        log.warning("trainer.select=best: %s; evaluating the last weights (step %d)", why, last_step)
        return {**record, "rule": f"last ({why})", "step": last_step, "score": None}
    if best.best_step != last_step:
        step = checkpoints.load_weights(module, path, backbone, method, best_file_where(path), training_hash)
        log.info("evaluating the best checkpoint: step %d (%s %.4g on validation), not the last (step %d)",
                 step, best.monitor, best.best_score, last_step)
    return {**record, "step": best.best_step, "score": round(best.best_score, 4), "path": str(path)}
