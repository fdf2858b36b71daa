"""The paper profile's plan of a dry-run cell: its micro-batches, validations and evaluated documents.

Read from the paper profile's own composed config (``trainer.*``, ``data.*``) of the cell the dry-run cell stands
for, never typed in; validation's count and documents through :mod:`scaleformer.costs.validation`.
"""

from __future__ import annotations

from typing import Any

from scaleformer.artifacts.grid import Cell, check_profile, expand_grid
from scaleformer.compose import compose_config
from scaleformer.costs.validation import validation_plan


def paper_cells(spec: dict[str, Any]) -> dict[tuple[Any, ...], Cell]:
    """The paper profile's cells by (column, method, value): what each dry-run cell stands for."""
    if not spec["profiles"].get("paper"):
        return {}
    return {(c.key, c.method, c.value): c for c in expand_grid(spec, "paper")}


def paper_plan(spec: dict[str, Any], cell: Cell, paper: dict[tuple[Any, ...], Cell] | None = None
               ) -> dict[str, Any] | None:
    """The paper profile's training and evaluation sizes for a dry-run cell, from its composed config
    (``paper``: :func:`paper_cells`, expanded once per table). A budget in epochs (``trainer.max_steps=-1``,
    ``max_epochs`` from ``data.epochs``) needs the training set's size: the dry run's ``paper_train_docs``
    (training rows of the paper's data, per column); without it the micro-batches are unknown."""
    same = (paper_cells(spec) if paper is None else paper).get((cell.key, cell.method, cell.value))
    if same is None:
        return None
    cfg = compose_config(same.overrides)
    t = cfg.trainer
    dry = check_profile(spec, "dryrun")
    accumulate, batch = int(t.accumulate_grad_batches), int(cfg.data.get("batch_size") or 1)
    plan: dict[str, Any] = {"accumulate": accumulate, "max_input_tokens": cfg.data.get("max_input_tokens"),
                            "max_train_input_tokens": cfg.data.get("max_train_input_tokens")}
    epoch_batches = None
    if int(t.max_steps) == -1:  # a budget in epochs
        rows = _per_column(dry.get("paper_train_docs"), cell.key)
        epochs = int(t.max_epochs)
        epoch_batches = -(-int(rows) // batch) if rows else None
        micro = epochs * epoch_batches if epoch_batches else None
        plan.update(epochs=epochs, train_docs=rows, micro_batches=micro,
                    steps=None if micro is None else -(-micro // accumulate),
                    early_stopping_patience=t.get("early_stopping_patience"))
    else:
        micro = int(t.max_steps) * accumulate
        plan.update(steps=int(t.max_steps), micro_batches=micro)
    docs = _per_column(dry.get("paper_eval_docs", 0), cell.key) or 0
    # a column's documents: a number (validation + test), or per split ({validation: n, test: m})
    split = docs.get("validation") if isinstance(docs, dict) else None
    eval_docs = int(sum(docs.values()) if isinstance(docs, dict) else docs)
    return {**plan, **validation_plan(t, cfg.data, micro or 0, split, epoch_batches), "eval_docs": eval_docs}


def _per_column(value: Any, key: str) -> Any:
    """A spec's per-column value (``{column: n}``), or one for every column (a number, or per split:
    ``{validation: n, test: m}``)."""
    per_split = isinstance(value, dict) and set(value) <= {"validation", "test"}
    return value.get(key) if isinstance(value, dict) and not per_split else value
