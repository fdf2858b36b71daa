"""The cost probe's schedule as a config reads it, without the probe's imports (the run's context reads it
to know the step a measured run ends at; :mod:`scaleformer.runs.cost` runs it)."""

from __future__ import annotations

from typing import Any


def settings(method_cfg: Any) -> list[str]:
    """What a method is timed as: with and without its chunks recomputed, unless it has no such setting
    (plain only) or is configured to recompute them (checkpoint only: plain may not fit)."""
    if not hasattr(method_cfg, "checkpoint_chunks"):
        return ["plain"]
    return ["checkpoint"] if method_cfg.checkpoint_chunks is True else ["plain", "checkpoint"]


def schedule_steps(trainer: Any, method_cfg: Any) -> int:
    """The optimiser step a run with ``trainer.measure_cost`` ends at: its schedule's micro-batches (one or
    two settings at each of ``trainer.cost_lengths``), unless ``trainer.max_steps`` comes first."""
    groups = len(settings(method_cfg)) * len(trainer.cost_lengths)
    steps = -(-groups * (trainer.cost_warmup + trainer.cost_repeats) // trainer.accumulate_grad_batches)
    return steps if trainer.max_steps < 0 else min(steps, trainer.max_steps)
