"""Test-only Lightning callbacks that interrupt a run (importable by Hydra as tests.helpers.*)."""

from __future__ import annotations

import os
from typing import Any

import lightning.pytorch as pl

# The override that lets a test run name these classes (a config names classes, never a package prefix).
ALLOW_HELPERS = ("allowed_targets=[tests.helpers.CrashAt,tests.helpers.KillAt,tests.helpers.StopAt,"
                 "tests.helpers.StepDocuments]")


class CrashAt(pl.Callback):
    """Raise before optimiser step `step` runs: a crash after the last checkpoint."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError(f"simulated crash before step {self.step}")


class KillAt(CrashAt):
    """Die like `kill -9` before step `step`: no exception handling, no cleanup."""

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os._exit(137)


class StopAt(pl.Callback):
    """Stop training cleanly once ``step`` optimiser steps are done (the run saves its last checkpoint there), as
    an interrupted job would have left it, without the process dying: an in-process resume test."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step >= self.step:
            trainer.should_stop = True


class StepDocuments(pl.Callback):
    """Record, per optimiser step, the document ids of each micro-batch that went into it (class-level, so a
    test reads what the run's own instance saw)."""

    steps: list[list[list[str]]] = []

    def __init__(self) -> None:
        type(self).steps = [[]]

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, *args: Any) -> None:
        type(self).steps[-1].append(list(batch["ids"]))

    def on_before_optimizer_step(self, *args: Any) -> None:
        type(self).steps.append([])


def transformers_warnings() -> Any:
    """A context collecting what transformers logs at warning level (its own handler never reaches pytest's
    caplog); ``warning_once``'s memory is cleared first, so a warning said earlier in the session shows again."""
    import contextlib
    import logging

    @contextlib.contextmanager
    def collect() -> Any:
        records: list[str] = []
        handler = logging.Handler(logging.WARNING)
        handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
        logger = logging.getLogger("transformers")
        logging.Logger.warning_once.cache_clear()  # type: ignore[attr-defined]
        logger.addHandler(handler)
        try:
            yield records
        finally:
            logger.removeHandler(handler)

    return collect()
