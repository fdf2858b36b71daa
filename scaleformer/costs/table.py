"""An artifact's cost table: what the full paper profile would cost, from what each dry-run cell measured.

Per cell (:mod:`scaleformer.costs.measured` for the measurements, :mod:`scaleformer.costs.plan` for the plan): the
paper profile's time, micro-batches x step time + validation during training (its count, documents and
per-document cost from the config's ``trainer.validation``: :mod:`scaleformer.costs.validation`) +
``paper_eval_docs`` x generation seconds per document, the arithmetic written out, validation's hours and share
of the total apart; whether the training peak fits a 24/40/80 GB device; on a CPU, GPU-hours of training from the
counted FLOPs at 1-5% of an H100's dense bf16 peak (``MFU``), or at the MFU a GPU's steady-state dry run measured;
on a GPU, what it measured and nothing assumed. A cell whose run has no record stays in the table as "not
measured", leaving the total unknown rather than short. What a paper launch quotes: :func:`paper_estimate`.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import Cell, column_label
from scaleformer.costs.check import finite
from scaleformer.costs.measured import H100_BF16_TFLOPS, MFU, measured
from scaleformer.costs.plan import paper_cells, paper_plan
from scaleformer.costs.validation import validation_cost


def gpu_basis(artifact: str, folder: Path) -> dict[str, Any] | None:
    """What a CPU table's GPU-hours are read from: the MFU a GPU's steady-state dry run measured per method
    at the paper's length (the artifact's own ``-gpu`` table, else table1's), or None: then the MFU range
    above, which the earlier single-step probe gave."""
    for path in (folder / f"{artifact}-gpu.json", folder / "table1-gpu.json"):
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        steady = [r for r in rows if r.get("probe") == "steady-state" and r.get("mfu") and r.get("peak_tflops")]
        if steady:
            by: dict[str, list[float]] = {}
            for r in steady:
                by.setdefault(r["method"], []).append(r["mfu"])
            return {"source": path.name, "device": steady[0]["device"], "precision": steady[0].get("precision"),
                    "peak_tflops": statistics.median(r["peak_tflops"] for r in steady),
                    "mfu": {m: statistics.median(v) for m, v in by.items()}}
    return None


def estimate(m: dict[str, Any], plan: dict[str, Any] | None, method: str = "",
             basis: dict[str, Any] | None = None) -> dict[str, Any]:
    """The full profile's seconds for a cell, its arithmetic, and (from CPU FLOPs) GPU-hours of training:
    at the MFU a GPU measured for the method (``basis``: :func:`gpu_basis`) where there is one, else over
    the MFU range, the source stated either way."""
    if plan is None or m["step_s"] is None:
        return {"total_s": None, "arithmetic": "no paper profile" if plan is None else "no timed step"}
    bad = next(((k, m.get(k)) for k in ("step_s", "gen_s_doc") if m.get(k) is not None
                and not (finite(m[k]) and m[k] > 0)), None)
    if bad:  # a time that is not a positive number never becomes a total (a negative one would shorten it)
        return {"total_s": None, "arithmetic": f"refused: {bad[0]}={bad[1]!r} at the paper's length is not a positive "
                "number of seconds"}
    if plan.get("micro_batches") is None:  # a budget in epochs of a training set of unknown size
        return {"total_s": None, "arithmetic": f"{plan.get('epochs')} epochs of a training set of unknown size "
                "(the dry run's paper_train_docs names none for this column)"}
    train = plan["micro_batches"] * m["step_s"]
    gen = plan["eval_docs"] * (m["gen_s_doc"] or 0.0)
    val = validation_cost(m, plan)
    head = (f"{plan['epochs']} epochs x {plan['train_docs']:,} documents x {secs(m['step_s'])} s"
            + (" (an upper bound: early stopping may end sooner)" if plan.get("early_stopping_patience") else "")
            if plan.get("epochs") else f"{plan['steps']:,} steps x {plan['accumulate']} micro-batches x {secs(m['step_s'])} s")
    tail = f"{plan['eval_docs']:,} evaluation docs x {secs(m['gen_s_doc'] or 0)} s"
    if val["val_s"] is None:  # a validation count or cost the config does not determine: unknown, not zero
        return {"total_s": None, "train_s": train, "gen_s": gen, **val, "val_share": None,
                "arithmetic": f"{head} + validation unknown ({val['val_source']}) + {tail}"}
    total = train + val["val_s"] + gen
    per = plan.get("val_docs_round") or plan["val_docs"] // max(plan["val_rounds"] or 1, 1)
    middle = (f"{plan['val_rounds']} x {per:,} validation docs x {secs(val['val_s_doc'])} s"
              + ("" if plan.get("validation", "paper") == "paper" else f" ({plan['validation']})"))
    out = {"total_s": total, "train_s": train, "gen_s": gen, **val, "val_share": val["val_s"] / total if total else None,
           "arithmetic": f"{head} + {middle} + {tail} = {total / 3600:,.0f} h"}
    if m["device"] == "cpu" and m["flops_step"]:
        flops = plan["micro_batches"] * m["flops_step"]
        mfu = (basis or {}).get("mfu", {}).get(method)
        if mfu:
            hours = flops / (mfu * basis["peak_tflops"] * 1e12) / 3600
            out["gpu_train_h"] = [hours, hours]
            out["gpu_basis"] = (f"{method}'s MFU {100 * mfu:.1f}% measured in steady state on {basis['device']} "
                                f"({basis['source']}), at its measured {basis['peak_tflops']:,.0f} TFLOP/s")
        else:
            out["gpu_train_h"] = [flops / (H100_BF16_TFLOPS * 1e12 * u) / 3600 for u in reversed(MFU)]
            out["gpu_basis"] = RANGE_BASIS
    return out


def cost_rows(spec: dict[str, Any], profile: str, cells: list[Cell], got: Any,
              basis: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per cell: what it measured and the paper profile's estimate; a cell whose run left no cost
    record is a row too, ``not_measured`` saying why and naming the run, so it cannot drop out unseen."""
    rows, paper = [], paper_cells(spec)
    for c in cells:
        r = got.results.get((c.key, c.method, c.value, c.seed))
        where = f"{spec['sweeps'][c.key]['key']}={c.value}" if "sweeps" in spec else column_label(spec, profile, c.key)
        if r is None or not (r.cost or {}).get("train_steps"):
            why = "no metrics.json" if r is None else "its metrics.json has no cost record (trainer.measure_cost)"
            rows.append({"method": c.method, "column": where, "run_id": c.run_id, "plan": None, "total_s": None,
                         "not_measured": why, "arithmetic": f"not measured: run {c.run_id}, {why}"})
            continue
        plan = paper_plan(spec, c, paper)
        m = measured(r, plan and plan["max_input_tokens"], c.run_id, plan and plan.get("max_train_input_tokens"))
        rows.append({"method": c.method, "column": where, "run_id": c.run_id, **m, "plan": plan,
                     **estimate(m, plan, c.method, basis)})
    return rows


def by_run(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The rows of each run, in order: cells that are one configuration (a sweep's default point on each of
    its axes) are one training in the paper profile as in the dry run."""
    runs: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        runs.setdefault(r.get("run_id") or id(r), []).append(r)
    return list(runs.values())


def distinct(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per run, so totals count a run once."""
    return [cells[0] for cells in by_run(rows)]


def measured_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if not r.get("not_measured")]  # the cells marked not_measured have no numbers


def total_hours(rows: list[dict[str, Any]]) -> float | None:
    """The paper profile's hours over the table's runs, each once; None (unknown) when a cell was not
    measured, a cell with a paper profile has no estimate, or none has one: a short total would let
    ``reproduce`` launch the paper profile without ``--yes``."""
    runs = distinct(rows)
    if any(r.get("not_measured") or (r.get("plan") is not None and r.get("total_s") is None) for r in runs):
        return None
    totals = [r["total_s"] for r in runs if r.get("total_s") is not None]
    return sum(totals) / 3600 if totals else None


# What a CPU table's GPU-hours rest on when its rows do not say (tables of the single-step probe).
RANGE_BASIS = (f"{int(MFU[0] * 100)}-{int(MFU[1] * 100)}% of an H100's {H100_BF16_TFLOPS} TFLOP/s dense bf16 peak "
               "(the range one H200 reached in table1's single-step dry run at batch 1)")


def gpu_hours(rows: list[dict[str, Any]]) -> tuple[str | None, str]:
    """The table's training on one GPU by counted FLOPs over its runs ("low-high" hours, one number when the
    basis is one measured MFU; None on a GPU's table) and what those hours rest on."""
    gpu = [r for r in distinct(rows) if r.get("gpu_train_h")]
    if not gpu or not all(isinstance(r["gpu_train_h"], list) and len(r["gpu_train_h"]) == 2
                          and all(finite(h) and h >= 0 for h in r["gpu_train_h"]) for r in gpu):
        return None, ""  # none, or a hand-edited table's NaN: no number rather than a wrong one
    lo, hi = (sum(r["gpu_train_h"][i] for r in gpu) for i in (0, 1))
    hours = f"{lo:,.0f}" if round(lo) == round(hi) else f"{lo:,.0f}-{hi:,.0f}"
    return hours, "; ".join(sorted({r.get("gpu_basis") or RANGE_BASIS for r in gpu}))


def fmt(x: float | None, fmt: str = "{:.1f}") -> str:
    return "–" if x is None else fmt.format(x)


def secs(x: float | None) -> str:
    """Seconds to one decimal, or two significant digits below a second (a GPU's 0.047 s step is not 0.0)."""
    return fmt(x, "{:.1f}" if x is None or x >= 1 else "{:.2g}")


def cost_table_paths(artifact: str, folder: Path) -> list[Path]:
    """Where an artifact's cost table may be, best first: a GPU's, then a CPU's."""
    return [folder / f"{artifact}-gpu.json", folder / f"{artifact}.json"]


def known_hours(record: Any) -> tuple[float | None, str]:
    """A cost table's ``total_h`` when it is a known estimate (a finite number > 0), else None and why it
    is unknown: missing, not a number, negative, NaN, or cells not measured."""
    if not isinstance(record, dict):
        return None, f"not a cost table (a JSON {type(record).__name__})"
    total = record.get("total_h")
    if finite(total) and total > 0:
        return float(total), ""
    rows = record.get("rows")
    if rows and isinstance(rows, list) and all(isinstance(r, dict) and r.get("arithmetic") == "no paper profile"
                                               for r in rows):
        return None, "the artifact has no paper profile"
    missing = record.get("not_measured") or []
    if missing and isinstance(missing, list):
        return None, f"{len(missing)} cell(s) not measured (run {missing[0]}{' and more' if len(missing) > 1 else ''})"
    if total is None:
        return None, "it has no total_h"
    what = "NaN" if isinstance(total, float) and math.isnan(total) else f"{total!r}"
    return None, f"total_h={what} is not a positive number of hours"


def paper_estimate(artifact: str, folder: Path) -> tuple[float | None, str]:
    """(hours, one line) for the paper profile, from the committed cost table (a GPU's when there is one).
    Hours are None when the estimate is unknown (no table, or a total that is missing, not a number,
    negative or NaN): the launch then needs ``--yes``, as above an hour."""
    for path in cost_table_paths(artifact, folder):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        hours, why = known_hours(record)
        if hours is None:
            return None, f"the cost of {artifact}'s paper profile is unknown: {path}: {why}"
        listed = record.get("rows")
        rows = [r for r in listed if isinstance(r, dict)] if isinstance(listed, list) else []
        device = next((r["device"] for r in rows if "device" in r), "?")
        gpu, basis = gpu_hours(measured_rows(rows))
        extra = f"; training on one GPU ~{gpu} h by FLOPs at {basis} (generation not measured)" if gpu else ""
        return hours, (f"estimate for {artifact} (paper profile), from the dry run on {device} ({path}): "
                       f"{hours:,.0f} h as measured there{extra}")
    return None, (f"the cost of {artifact}'s paper profile is unknown: no cost table yet at {folder}/{artifact}.json "
                  f"(`make {artifact} PROFILE=dryrun` measures one)")
