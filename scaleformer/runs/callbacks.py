"""Lightning callbacks the configs instantiate (``conf/callbacks/``) and the run's progress: a bar on a
terminal (:class:`StepProgressBar`), plain lines in a log (:class:`LogProgress`)."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar, TQDMProgressBar

from scaleformer.config import BertScoreConfig, MetricsConfig
from scaleformer.data.sampler import process_group
from scaleformer.metrics import compute_metrics
from scaleformer.ops import compat
from scaleformer.progress import Lines, is_terminal
from scaleformer.runs.wandb_logger import ours as wandb_loggers


class StepCheckpoint(ModelCheckpoint):
    """A checkpoint every ``every_n_train_steps`` steps and one at the end of training.

    Only the newest is kept, ``step_<N>.ckpt``, and ``last.ckpt`` links to it, so ``ckpt_path=last``
    always finds the newest weights (Lightning's own callback saves no final checkpoint when the
    last step is not a multiple of the interval).
    """

    def __init__(self, dirpath: str, every_n_train_steps: int, **kwargs: Any) -> None:
        kwargs.setdefault("filename", "step_{step}")
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


class ExactResume(pl.Callback):
    """Lets a run restarted from a mid-epoch checkpoint continue exactly as the uninterrupted run.

    Each checkpoint records the epoch, the training samples of it already used and the RNG states
    (dropout, random middle tokens). On restore, the training sampler skips those samples and the
    RNG states are put back just before the first resumed step, after Lightning has built its data
    iterators. Under several processes (DDP, FSDP) each skips its own share of the order
    (:func:`scaleformer.data.sampler.deal`) and gets its own RNG states back (gathered into the checkpoint).
    """

    KEY = "scaleformer_resume"

    def __init__(self, sampler: Any = None, batch_size: int = 1) -> None:
        self.sampler = sampler  # the train loader's ResumableSampler, set before fit
        self.batch_size = batch_size
        self._pending_rng: dict[str, Any] | None = None

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed  # batches of this epoch trained on
        states = rng_states()
        checkpoint[self.KEY] = {"epoch": trainer.current_epoch, "samples_done": int(done) * self.batch_size,
                                "micro_batch": self.batch_size,  # a continued run keeps it (runs.memory)
                                "rng": states, "rng_by_rank": all_ranks(states)}

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        state = checkpoint.get(self.KEY)
        if not state:
            return
        if self.sampler is not None and hasattr(self.sampler, "resume_at"):
            self.sampler.resume_at(state["epoch"], state["samples_done"])
        by_rank, (rank, world) = state.get("rng_by_rank") or [], process_group()
        # each process its own states when the checkpoint holds as many (else rank 0's: the same world or none)
        self._pending_rng = by_rank[rank] if len(by_rank) == world else state["rng"]

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self._pending_rng is not None:
            set_rng_states(self._pending_rng)
            self._pending_rng = None


def all_ranks(value: Any) -> list[Any]:
    """``value`` from every process, by rank (a collective: every rank calls it); ``[value]`` alone."""
    import torch.distributed as dist

    world = process_group()[1]
    if world == 1:
        return [value]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, value)
    return out


def rng_states() -> dict[str, Any]:
    """Every RNG a training step may draw from, as plain data (a weights-only checkpoint can hold it)."""
    import random

    import numpy as np
    import torch

    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available()
            else [], "numpy": [kind, keys.tolist(), pos, has_gauss, cached], "python": random.getstate()}


def set_rng_states(state: dict[str, Any]) -> None:
    import random

    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


class ValidationRouge(pl.Callback):
    """ROUGE of the validation predictions at each validation during fit, into the run's loggers.

    BERTScore is left to the final evaluation: loading its model at every validation would dominate
    short runs.
    """

    def __init__(self, use_stemmer: bool = False, sentence_splitter: str = "auto",
                 rouge_tokenizer: str = "scrolls", task_metric: str = "rouge") -> None:
        self.task_metric = task_metric
        self.cfg = MetricsConfig(use_stemmer=use_stemmer, sentence_splitter=sentence_splitter,
                                 rouge_tokenizer=rouge_tokenizer, bertscore=BertScoreConfig(enabled=False))

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        rows = getattr(pl_module, "val_outputs", [])
        if not rows or trainer.sanity_checking:
            return
        per_doc: list[dict[str, Any]] = []
        m = compute_metrics([r["prediction"] for r in rows], [r["reference"] for r in rows], self.cfg,
                            task_metric=self.task_metric, rows=per_doc)
        for k, v in numeric(m).items():
            pl_module.log(f"val/{k}", v, prog_bar=k in ("rougeL", "task_score"), batch_size=len(rows))
        scored = {d["index"]: d.get("rougeL") for d in per_doc}
        for lg in wandb_loggers(trainer.loggers):  # a predictions table beside the numbers
            lg.log_predictions("val/predictions", [{**r, "rougeL": scored.get(i)} for i, r in enumerate(rows)],
                               step=trainer.global_step, limit=lg.prediction_rows)


class StepProgressBar(TQDMProgressBar):
    """One training bar over the optimiser steps of the whole fit, instead of one bar per epoch."""

    @property
    def train_description(self) -> str:
        return "train (steps)"

    def on_predict_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                               batch_idx: int, dataloader_idx: int = 0) -> None:
        super().on_predict_batch_start(trainer, pl_module, batch, batch_idx, dataloader_idx)
        self.predict_progress_bar.set_description(predict_label(pl_module))  # not "... DataLoader 0"

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
            compat.set_progress(bar, trainer.global_step)
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items


def predict_label(pl_module: Any) -> str:
    """What an evaluation pass does: a language model's scores perplexity, a summarizer's generates."""
    return "perplexity" if getattr(pl_module, "task", None) == "language_modeling" else "generate"


class LogProgress(ProgressBar):
    """Training and generation progress as plain lines, about every tenth: for logs, CI and SLURM output,
    where each redraw of a bar would become a line of its own. A training line shows the mean loss of the
    micro-batches since the line before (summed on the device, read once a line: no sync a step), not the last
    logged value, which repeats between logging steps."""

    def __init__(self, every: float = 0.1) -> None:
        super().__init__()
        self.every = every
        self._enabled = True
        self._train: Lines | None = None
        self._predict: Lines | None = None
        self._predicted = 0
        self._loss_sum: Any = None  # the micro-batches' losses since the last line, on the device
        self._loss_n = 0

    def disable(self) -> None:  # Lightning disables the bar on every rank but 0
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        total = trainer.max_steps if trainer.max_steps > 0 else int(trainer.estimated_stepping_batches)
        self._train = Lines("train", total, "step", start=trainer.global_step, every=self.every)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if self._enabled and isinstance(loss, torch.Tensor):
            loss = loss.detach().float()
            self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
            self._loss_n += 1
        if self._train is None or not self._enabled or not self._train.due(trainer.global_step):
            return  # the loss is read (a device sync on a GPU) only for the lines that are printed
        detail = ""
        if self._loss_n:
            detail = f"loss {float(self._loss_sum) / self._loss_n:.4g} (mean of {self._loss_n} micro-batches)"
            self._loss_sum, self._loss_n = None, 0
        self._train.update(trainer.global_step, detail)

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        total = sum(n for n in trainer.num_predict_batches if n != float("inf"))
        self._predict, self._predicted = Lines(predict_label(pl_module), int(total), "batch", every=self.every), 0

    def on_predict_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                             batch_idx: int, dataloader_idx: int = 0) -> None:
        self._predicted += 1
        if self._predict is not None and self._enabled:
            self._predict.update(self._predicted)


def progress_callback() -> ProgressBar:
    """A redrawn bar on a terminal, plain lines anywhere else (Lightning's bars write to stdout)."""
    return StepProgressBar() if is_terminal() else LogProgress()


def log_metrics(trainer: pl.Trainer, split: str, metrics: dict[str, Any]) -> None:
    """Send a final evaluation's numbers to every logger of the run, under `<split>/`."""
    values = {f"{split}/{k}": v for k, v in numeric(metrics).items()}
    for lg in trainer.loggers:
        lg.log_metrics(values, step=trainer.global_step)
        lg.save()


def numeric(m: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in m.items() if isinstance(v, int | float) and not isinstance(v, bool)}
