"""The paper profile's bill on one GPU, per artifact, under its current recipe, from the committed dry runs.

Each dry-run cell (``results/dryrun/<artifact>.json``, restated under the recipe: :mod:`scaleformer.costs.restate`)
carries its plan (epochs x training rows, validations x documents, evaluation documents) and what
it measured. On one GPU:

- a training micro-batch costs what a GPU measured for the cell: its steady-state fit where a ``make gpu-perf``
  window measured one (``results/gpu-perf/<date>/table1-gpu-partial.json``: fixed + per-token, read at the
  training length), else its dry run on a GPU (``results/dryrun/<artifact>-gpu.json``, the single-step probe);
  with neither, the cell's counted FLOPs at the training length over 1-5% of an H100's dense bf16 peak (the
  range one H200 reached in table1's single-step dry run): a range, its utilisation stated;
- a generated document costs a GPU's seconds where one measured the cell, else the cell's CPU seconds times the
  GPU/CPU ratio table1's two dry runs measured for the same method on the same column's shape (else the method's
  median ratio): an estimate, and named one.

Early stopping can only end a run sooner: every figure is an upper bound. A GPU measurement its run's notes
discount (:data:`DISCOUNTED`) is replaced by the ratio estimate, and the bill says which.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import check_profile, load_spec
from scaleformer.costs.plan import paper_cells, paper_plan
from scaleformer.costs.restate import at_training_length
from scaleformer.costs.table import RANGE_BASIS
from scaleformer.io import atomic_write_json, atomic_write_text
from scaleformer.resources import experiments_dir

ARTIFACTS = ("table1", "table2", "figure2")
# GPU measurements to leave out, with the reason their run's notes give.
DISCOUNTED = {("table1-gpu", "truncation", "SummScreenFD shape", "gen_s_doc"):
              "the first cell of its process paid a one-time generation cost (results/gpu-check/2026-11-26/README.md)"}


def _shape(spec: dict[str, Any], row: dict[str, Any]) -> str:
    """The data option a dry-run row read (``dryrun_summscreen`` ...): what cells of different tables share."""
    data = check_profile(spec, "dryrun")["data"]
    if isinstance(data, str):
        return data
    return next((opt for key, opt in data.items() if check_profile(spec, "dryrun")["labels"].get(key) == row["column"]),
                row["column"])


def _read(path: Path) -> list[dict[str, Any]]:
    """A cost table's measured rows, each naming the machine that measured it (``device``: its GPU's model)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    machine = re.search(r"machine ([^;]+);", record.get("provenance", ""))
    on_gpu = any(str(r.get("device", "")).startswith("cuda") for r in record.get("rows", []))
    gpu = machine[1].split(",")[0] if machine and on_gpu else None
    return [{**r, "device": gpu or r.get("device")} for r in record.get("rows", []) if not r.get("not_measured")]


def _steady(root: Path, spec: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest gpu-perf window's steady-state cells of table1, read at the recipe's training length."""
    found = sorted(root.glob("gpu-perf/*/table1-gpu-partial.json"))
    cells = {(c.method, c.key): c for c in paper_cells(spec).values()}
    labels = check_profile(spec, "dryrun")["labels"]
    out = {}
    for r in _read(found[-1]) if found else []:
        key = next((k for k, v in labels.items() if v == r["column"]), None)
        if r.get("probe") != "steady-state" or key is None or (r["method"], key) not in cells:
            continue
        plan = paper_plan(spec, cells[(r["method"], key)])
        out[(r["method"], r["column"])] = {**at_training_length(r, plan.get("max_train_input_tokens")),
                                           "source": str(found[-1].relative_to(root.parent))}
    return out


def _ratios(root: Path, spec: dict[str, Any]) -> dict[tuple[str, str], float]:
    """GPU/CPU seconds per generated document, per (method, shape), where table1's two dry runs both measured."""
    cpu = {(r["method"], r["column"]): r for r in _read(root / "dryrun" / "table1.json")}
    out = {}
    for g in _read(root / "dryrun" / "table1-gpu.json"):
        c = cpu.get((g["method"], g["column"]))
        if c and c.get("gen_s_doc") and g.get("gen_s_doc") and \
                ("table1-gpu", g["method"], g["column"], "gen_s_doc") not in DISCOUNTED:
            out[(g["method"], _shape(spec, g))] = g["gen_s_doc"] / c["gen_s_doc"]
    return out


def _range(x: float | list[float]) -> list[float]:
    return [float(x), float(x)] if not isinstance(x, list) else [float(v) for v in x]


def cell_bill(r: dict[str, Any], gpu: dict[str, Any] | None, steady: dict[str, Any] | None, ratio: float | None,
              how: str) -> dict[str, Any]:
    """One cell's hours on one GPU (training, validation, evaluation: [low, high]) and what each rests on."""
    plan = r["plan"]
    micro, val_docs, eval_docs = plan["micro_batches"], plan.get("val_docs") or 0, plan["eval_docs"]
    if steady is not None and steady.get("step_s") is not None:
        train, tb = micro * steady["step_s"] / 3600, f"steady state on {steady['device']} ({steady['source']})"
    elif gpu is not None and gpu.get("step_s") is not None:
        train, tb = micro * gpu["step_s"] / 3600, f"dry run on {gpu['device']} (single-step probe)"
    else:
        train, tb = r.get("gpu_train_h") or [None, None], RANGE_BASIS
    doc = next((x.get("gen_s_doc") for x in (steady, gpu) if x and x.get("gen_s_doc")), None)
    gb = "measured on the GPU that trained it" if doc is not None else None
    if doc is None and ratio is not None and r.get("gen_s_doc"):
        doc, gb = r["gen_s_doc"] * ratio, f"its CPU seconds x {ratio:.3g}, the GPU/CPU ratio {how}"
    val = None if doc is None else val_docs * doc / 3600
    ev = None if doc is None else eval_docs * doc / 3600
    parts = [_range(x) if x is not None and x != [None, None] else None for x in (train, val, ev)]
    total = None if None in parts else [sum(p[i] for p in parts) for i in (0, 1)]
    return {"method": r["method"], "column": r["column"], "run_id": r.get("run_id"), "train_tokens": r.get("train_tokens", r["paper_tokens"]),
            "paper_tokens": r["paper_tokens"], "micro_batches": micro, "val_docs": val_docs, "eval_docs": eval_docs,
            "epochs": plan.get("epochs"), "train_h": parts[0], "val_h": parts[1], "eval_h": parts[2], "total_h": total,
            "train_basis": tb, "gen_basis": gb or "unknown"}


def artifact_bill(root: Path, artifact: str) -> dict[str, Any]:
    spec = load_spec(experiments_dir() / f"{artifact}.yaml")
    t1 = load_spec(experiments_dir() / "table1.yaml")
    steady = _steady(root, t1) if artifact == "table1" else {}
    ratios = _ratios(root, t1)
    gpu = {(r["method"], r["column"]): r for r in _read(root / "dryrun" / f"{artifact}-gpu.json")}
    cells = []
    for r in _read(root / "dryrun" / f"{artifact}.json"):
        if not r.get("plan"):
            continue
        g = gpu.get((r["method"], r["column"]))
        if g is not None and (f"{artifact}-gpu", r["method"], r["column"], "gen_s_doc") in DISCOUNTED:
            g = {k: v for k, v in g.items() if k != "gen_s_doc"}
        shape = _shape(spec, r)
        mine = [v for (m, _), v in ratios.items() if m == r["method"]]
        ratio, how = (ratios[(r["method"], shape)], f"table1 measured for {r['method']} on {shape}") \
            if (r["method"], shape) in ratios else \
            (statistics.median(mine), f"table1 measured for {r['method']} (median over its columns)") if mine else (None, "")
        cells.append(cell_bill(r, g, steady.get((r["method"], r["column"])), ratio, how))
    runs = list({c["run_id"] or id(c): c for c in cells}.values())  # a sweep's shared default point: one run
    by_column = {}
    for col in dict.fromkeys(c["column"] for c in runs):
        mine = [c for c in runs if c["column"] == col]
        by_column[col] = {k: _sum(mine, k) for k in ("train_h", "total_h")}
    return {"artifact": artifact, "cells": cells, "runs": len(runs), "total_h": _sum(runs, "total_h"),
            **{k: _sum(runs, k) for k in ("train_h", "val_h", "eval_h")}, "by_column": by_column}


def _sum(cells: list[dict[str, Any]], key: str) -> list[float] | None:
    """[low, high] summed over cells; None when any cell's is unknown."""
    if any(c[key] is None for c in cells):
        return None
    return [sum(c[key][i] for c in cells) for i in (0, 1)]


def _h(x: list[float] | None) -> str:
    if x is None:
        return "unknown"
    lo, hi = x
    return f"{lo:,.0f}" if round(lo) == round(hi) else f"{lo:,.0f}-{hi:,.0f}"


def render(bill: dict[str, Any]) -> str:
    lines = ["# The paper profile's bill on one GPU", "", bill["basis"], "",
             "| artifact | runs | training h | validation h | evaluation h | total h |", "|---|---|---|---|---|---|"]
    for a in bill["artifacts"]:
        lines.append(f"| {a['artifact']} | {a['runs']} | {_h(a['train_h'])} | {_h(a['val_h'])} | {_h(a['eval_h'])} "
                     f"| {_h(a['total_h'])} |")
    lines += ["", booksum_line(bill)]
    lines += ["", "| artifact | method | column | tokens (trained on) | micro-batches | validation docs | evaluation docs "
              "| training h | validation h | evaluation h | training from | generation from |", "|" + "---|" * 12]
    for a in bill["artifacts"]:
        for c in a["cells"]:
            lines.append(f"| {a['artifact']} | {c['method']} | {c['column']} | {c['paper_tokens']:,} ({c['train_tokens']:,}) "
                         f"| {c['micro_batches']:,} | {c['val_docs']:,} | {c['eval_docs']:,} | {_h(c['train_h'])} "
                         f"| {_h(c['val_h'])} | {_h(c['eval_h'])} | {c['train_basis']} | {c['gen_basis']} |")
    prev = bill.get("previous")
    if prev:
        lines += ["", prev["text"]]
    return "\n".join(lines) + "\n"


BASIS = ("Under the paper profile's recipe (docs/reproducing.md): per cell, its micro-batches (epochs x training rows), "
         "its validation documents (twice an epoch) and its evaluation documents (validation + test) times what a "
         "micro-batch and a generated document cost on one GPU, scaleformer/costs/bill.py says from what. Ranges: "
         "training read from counted FLOPs at 1-5% of an H100's dense bf16 peak. Upper bounds: early stopping (10 "
         "validations without a better score) can only end a run sooner. One GPU, nothing in parallel.")


def booksum_line(bill: dict[str, Any]) -> str:
    """table1's BookSum columns under this recipe, against the figure before it (``previous``)."""
    t1 = next(a for a in bill["artifacts"] if a["artifact"] == "table1")
    col = next((v for k, v in t1["by_column"].items() if k.startswith("BookSum")), None)
    if col is None:
        return ""
    text = (f"table1's BookSum columns: {_h(col['total_h'])} h on one GPU, {_h(col['train_h'])} h of it training "
            "(10 epochs of 314 rows cut to 16,384 tokens, each book scored whole)")
    prev = bill.get("previous")
    return text + (f", against {prev['booksum_h']:,.0f} h ({prev['booksum_train_h']:,.0f} h training) before." if prev else ".")


def basis_counts(cells: list[dict[str, Any]], key: str) -> str:
    """The distinct bases of an artifact's cells, each with how many cells rest on it, the commonest first."""
    counts: dict[str, int] = {}
    for c in cells:
        short = c[key].split(" (")[0] if key == "train_basis" else (
            "measured on the GPU" if c[key].startswith("measured") else "its CPU seconds x table1's GPU/CPU ratio")
        counts[short] = counts.get(short, 0) + 1
    return "; ".join(f"{k} ({n})" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def readme_summary(bill: dict[str, Any], link: str) -> str:
    """The README's cost block: each artifact's hours on one GPU under the recipe, what they rest on, BookSum's
    hours against the recipe before, and validation's share (``link``: the bill's folder, as the page sees it)."""
    rows = ["| artifact | runs | training (h) | validation (h) | evaluation (h) | total on one GPU (h) | training from "
            "| generation from |", "|---|---|---|---|---|---|---|---|"]
    for a in bill["artifacts"]:
        rows.append(f"| {a['artifact']} | {a['runs']} | {_h(a['train_h'])} | {_h(a['val_h'])} | {_h(a['eval_h'])} "
                    f"| {_h(a['total_h'])} | {basis_counts(a['cells'], 'train_basis')} | {basis_counts(a['cells'], 'gen_basis')} |")
    t1 = next(a for a in bill["artifacts"] if a["artifact"] == "table1")
    share = t1["val_h"][0] / t1["total_h"][0] if t1.get("total_h") and t1["total_h"][0] else None
    return "\n".join([
        f"From [`{link}/bill.md`]({link}/bill.md) (`python scripts/restate_costs.py`; every cell, its plan and what each "
        "number rests on): the paper profile under the lineage's recipe (10 epochs per summarization set, validation "
        "twice an epoch, the best checkpoint), on one GPU, nothing in parallel, upper bounds (early stopping may end "
        "a run sooner). Training comes from GPU measurements of the cell where they exist (the H200 dry run's "
        "single-step probe, an H100's steady state for SLED), else from counted FLOPs at 1-5% of an H100's dense bf16 "
        "peak (a range); generation from the GPU's seconds per document, else the CPU's times the GPU/CPU ratio "
        "table1's two dry runs measured for the same method.", "", *rows, "",
        booksum_line(bill) + (f" Validation during training is {100 * share:.0f}% of table1's hours: the lineage "
                              "generates with 4 beams on up to 1,000 validation documents twice an epoch "
                              "(`trainer.validation=greedy` or `loss` cost less and are not its protocol)." if share else "")])


def build(root: Path, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The bill of every artifact with a paper profile, from the committed records under ``root`` (results/)."""
    return {"basis": BASIS, "artifacts": [artifact_bill(root, a) for a in ARTIFACTS], **({"previous": previous} if previous else {})}


def write(root: Path, previous: dict[str, Any] | None = None) -> dict[str, Path]:
    bill = build(root, previous)
    return {"json": atomic_write_json(root / "dryrun" / "bill.json", bill),
            "md": atomic_write_text(root / "dryrun" / "bill.md", render(bill))}
