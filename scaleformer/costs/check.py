"""A run's cost record checked before a cost table reads it (:mod:`scaleformer.costs.table`).

The table multiplies these numbers by the paper profile's hundreds of thousands of micro-batches and
decides from the total whether ``reproduce`` may launch without ``--yes``: a zero or negative time,
a token count of 0 or a NaN would become a wrong total, a division by zero or a traceback far from the
record. So every field the table reads is checked here first, and the first bad one stops the table
with one line naming the run, the field and its value.
"""

from __future__ import annotations

import math
from typing import Any

from scaleformer.errors import ConfigError

SETTINGS = ("plain", "checkpoint")  # scaleformer.runs.cost_fit.SETTINGS
SCALINGS = ("linear", "bounded")


class BadRecord(ConfigError):
    """A cost record the table cannot read: its message names the run, the field and the value."""


def finite(x: Any) -> bool:
    """A real number (not a bool), neither NaN nor infinite."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def check_record(result: Any, run: str) -> None:
    """Raise :class:`BadRecord` at the first field of ``result`` (a :class:`Results`) that a cost table
    cannot use; ``run`` names the run in the message."""
    problem = _problem(result.cost or {}, result)
    if problem:
        key, value, limit = problem
        raise BadRecord(f"cost record of run {run}: {key}={value!r}: {limit}; measure the cell again "
                        "(its dry run with --force)")


Problem = tuple[str, Any, str] | None
_POSITIVE = "must be a positive, finite number"
_AT_LEAST_0 = "must be a finite number >= 0"
# Seconds no micro-batch or document takes (a week): a larger one is a unit slip or a corrupt record, and sums
# of such numbers overflow the table's arithmetic to inf and NaN.
MAX_SECONDS = 7 * 24 * 3600.0


def _number(row: dict[str, Any], key: str, where: str, positive: bool = False, required: bool = False) -> Problem:
    if key not in row or row[key] is None:
        return (f"{where}.{key}", None, "missing: the table needs it") if required else None
    v = row[key]
    if not finite(v) or (v <= 0 if positive else v < 0):
        return f"{where}.{key}", v, _POSITIVE if positive else _AT_LEAST_0
    if key.endswith("_s") and v > MAX_SECONDS:
        return f"{where}.{key}", v, f"must be at most {MAX_SECONDS:,.0f} s (a week)"
    return None


def _first(*problems: Problem) -> Problem:
    return next((p for p in problems if p), None)


def _rows(cost: dict[str, Any], key: str) -> tuple[list[Any], Problem]:
    rows = cost.get(key) or []
    if not isinstance(rows, list):
        return [], (key, rows, "must be a list of records")
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    return rows, None if bad is None else (f"{key}[{bad}]", rows[bad], "must be a mapping of fields")


def _problem(cost: dict[str, Any], result: Any) -> Problem:
    if not isinstance(cost, dict):
        return "cost", cost, "must be a mapping"
    for key in ("length_scaling", "train_length_scaling"):
        if key in cost and cost[key] not in SCALINGS:
            return key, cost[key], f"must be one of {', '.join(SCALINGS)}"
    steps, bad = _rows(cost, "train_steps")
    groups, bad_groups = _rows(cost, "train_groups")
    gen, bad_gen = _rows(cost, "generate")
    if bad or bad_groups or bad_gen:
        return bad or bad_groups or bad_gen
    for i, s in enumerate(steps):
        where = f"train_steps[{i}]"
        p = _first(_number(s, "time_s", where, positive=True, required=True), _number(s, "bare_s", where),
                   *(_number(s, k, where) for k in ("flops", "encoder_forward_flops", "mem_peak_bytes", "base_bytes")))
        if not p and not groups:  # a single-step record: each step carries its own length and setting
            p = _number(s, "input_tokens", where, positive=True, required=True)
            if not p and not isinstance(s.get("checkpoint_chunks"), bool):
                p = f"{where}.checkpoint_chunks", s.get("checkpoint_chunks"), "missing or not true/false"
        if not p and groups and (not isinstance(s.get("group"), int) or not 0 <= s["group"] < len(groups)):
            p = f"{where}.group", s.get("group"), f"must index train_groups (0-{len(groups) - 1})"
        if not p and groups and not s.get("warmup") and not isinstance(s.get("phases"), dict):
            p = f"{where}.phases", s.get("phases"), "missing: a timed micro-batch's phases (data, forward, ...)"
        if not p and not all(finite(v) for v in (s.get("phases") or {}).values()):
            p = f"{where}.phases", s["phases"], "must hold finite seconds"
        if p:
            return p
    if groups and steps and all(s.get("warmup") for s in steps):
        return "train_steps", f"{len(steps)} warm-ups", "no timed micro-batch"
    for i, g in enumerate(groups):
        where = f"train_groups[{i}]"
        if g.get("setting") not in SETTINGS:
            return f"{where}.setting", g.get("setting"), f"must be one of {', '.join(SETTINGS)}"
        tokens = g.get("tokens_per_step")
        if tokens is not None and (not isinstance(tokens, list) or not tokens
                                   or not all(finite(t) and t > 0 for t in tokens)):
            return f"{where}.tokens_per_step", tokens, "must be a non-empty list of positive token counts"
        p = _first(_number(g, "input_tokens", where, positive=True, required=tokens is None),
                   *(_number(g, k, where) for k in ("flops", "encoder_forward_flops", "mem_peak_bytes", "base_bytes")))
        if p:
            return p
    for i, g in enumerate(gen):
        p = _first(_number(g, "time_s", f"generate[{i}]", positive=True, required=True),
                   *(_number(g, k, f"generate[{i}]") for k in ("encode_s", "mem_peak_bytes", "base_bytes")))
        if p:
            return p
    model = cost.get("model") or {}
    if not isinstance(model, dict):
        return "model", model, "must be a mapping"
    if model:
        p = _first(*(_number(model, k, "model", positive=True, required=True)
                     for k in ("d_model", "decoder_layers", "decoder_params")))
        if p:
            return p
    p = _number(cost.get("matmul_peak") or {}, "tflops", "matmul_peak", positive=True)
    return p or _results_problem(result)


def _results_problem(result: Any) -> Problem:
    """The run's own numbers the table scales by: its documents' length and its evaluation's speed."""
    for split, v in ((result.data or {}).get("summary") or {}).items():
        if isinstance(v, dict):
            p = _first(*(_number(v, k, f"data.summary.{split}") for k in ("n_examples", "input_tokens_mean")))
            if p:
                return p
    for split, m in (result.splits or {}).items():
        if isinstance(m, dict):
            p = _first(*(_number(m, k, f"splits.{split}")
                         for k in ("n_examples", "generation_time_s", "input_tokens_per_s")))
            if p:
                return p
    return None
