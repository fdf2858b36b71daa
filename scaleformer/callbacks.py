"""Lightning callbacks the configs instantiate (``conf/callbacks/``) and the run's progress bar."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import _update_n

from scaleformer.config import BertScoreConfig, MetricsConfig


class StepCheckpoint(ModelCheckpoint):
    """A checkpoint every ``every_n_train_steps`` steps and one at the end of training.

    Only the newest is kept, ``step=<N>.ckpt``, and ``last.ckpt`` links to it, so ``ckpt_path=last``
    always finds the newest weights (Lightning's own callback saves no final checkpoint when the
    last step is not a multiple of the interval).
    """

    def __init__(self, dirpath: str, every_n_train_steps: int, **kwargs: Any) -> None:
        kwargs.setdefault("filename", "step={step}")
        kwargs.setdefault("auto_insert_metric_name", False)
        kwargs.setdefault("save_top_k", 1)
        kwargs.setdefault("save_last", "link")
        super().__init__(dirpath=dirpath, every_n_train_steps=every_n_train_steps, **kwargs)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._last_global_step_saved != trainer.global_step and trainer.global_step > 0:
            candidates = self._monitor_candidates(trainer)
            self._save_topk_checkpoint(trainer, candidates)
            self._save_last_checkpoint(trainer, candidates)
        super().on_train_end(trainer, pl_module)


class ValidationRouge(pl.Callback):
    """ROUGE of the validation predictions at each validation during fit, into the run's loggers.

    BERTScore is left to the final evaluation: loading its model at every validation would dominate
    short runs.
    """

    def __init__(self, use_stemmer: bool = False, sentence_splitter: str = "auto") -> None:
        self.cfg = MetricsConfig(use_stemmer=use_stemmer, sentence_splitter=sentence_splitter,
                                 bertscore=BertScoreConfig(enabled=False))

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from scaleformer.metrics import compute_metrics

        rows = getattr(pl_module, "val_outputs", [])
        if not rows or trainer.sanity_checking:
            return
        m = compute_metrics([r["prediction"] for r in rows], [r["reference"] for r in rows], self.cfg)
        for k, v in numeric(m).items():
            pl_module.log(f"val/{k}", v, prog_bar=k == "rougeL", batch_size=len(rows))


class StepProgressBar(TQDMProgressBar):
    """One training bar over the optimiser steps of the whole fit, instead of one bar per epoch."""

    @property
    def train_description(self) -> str:
        return "train (steps)"

    @property
    def predict_description(self) -> str:
        return "generate"

    def on_predict_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                               batch_idx: int, dataloader_idx: int = 0) -> None:
        super().on_predict_batch_start(trainer, pl_module, batch, batch_idx, dataloader_idx)
        self.predict_progress_bar.set_description(self.predict_description)  # not "... DataLoader 0"

    def on_train_epoch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        bar = self.train_progress_bar
        if bar.total is None or bar.n == 0:  # first epoch of this fit (resumed fits start mid-way)
            bar.reset(total=trainer.max_steps if trainer.max_steps > 0 else None)
            bar.initial = trainer.global_step
            bar.n = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        bar = self.train_progress_bar
        if bar is not None and self._should_update(trainer.global_step, bar.total):
            _update_n(bar, trainer.global_step)
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items


def log_metrics(trainer: pl.Trainer, split: str, metrics: dict[str, Any]) -> None:
    """Send a final evaluation's numbers to every logger of the run, under `<split>/`."""
    values = {f"{split}/{k}": v for k, v in numeric(metrics).items()}
    for lg in trainer.loggers:
        lg.log_metrics(values, step=trainer.global_step)
        lg.save()


def numeric(m: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in m.items() if isinstance(v, int | float) and not isinstance(v, bool)}
