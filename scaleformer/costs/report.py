"""An artifact's cost table rendered: the markdown and JSON files of a dry run, and the README's cost block.

The numbers come from :mod:`scaleformer.costs.table` (what each cell measured, the paper profile's
arithmetic) and :mod:`scaleformer.runs.cost_fit` (steady-state statistics and fits); this module
only lays them out.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import column_label, expand_grid, resolve_run_ids
from scaleformer.artifacts.tables import collect, provenance
from scaleformer.costs.check import finite
from scaleformer.costs.measured import DEVICES_GB, H100_BF16_TFLOPS, MFU
from scaleformer.costs.table import (
    RANGE_BASIS,
    by_run,
    cost_rows,
    cost_table_paths,
    distinct,
    fmt,
    gpu_basis,
    gpu_hours,
    measured_rows,
    secs,
    total_hours,
)
from scaleformer.costs.validation import BASIS
from scaleformer.io import atomic_write_text


def _spread(values: list[float | None]) -> str:
    """One number as it is; several as their median and range."""
    got = sorted(v for v in values if v is not None)
    if len(got) < 2:
        return fmt(got[0] if got else None)
    return f"median {statistics.median(got):.1f} ({got[0]:.1f}-{got[-1]:.1f})"


def _fits(gb: float | None) -> str:
    return "–" if gb is None else "/".join("yes" if gb <= d else "no" for d in DEVICES_GB)


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def steady_state_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The steady-state section: what each cell's timed micro-batches measured, before any scaling."""
    steady = [r for r in rows if r.get("probe") == "steady-state"]
    if not steady:
        return []
    r0 = steady[0]
    out = ["", f"Steady state ({r0['warmup']} untimed warm-up + {r0['repeats']} timed micro-batches per setting and "
           f"length, {r0['timer']}): the median and IQR at the longest length read, the line fixed + per-token "
           "through the lengths' medians (what the paper's length is read from), MFU as the plain setting's counted "
           f"FLOPs over the median time over the matmul rate measured in the run ({fmt(r0['peak_tflops'], '{:.3g}')} "
           "TFLOP/s), at the measured and at the paper's length; the phases of a micro-batch (median s) and the "
           "host-device synchronisations in one (CUDA's sync debug mode; none on a CPU).", "",
           "| Method | Column | Lengths read | s/step (IQR) | fixed s + s per 1k tokens | MFU measured / paper "
           "| data / forward / backward / optimiser / other s | syncs/step |", "|" + "---|" * 8]
    for r in steady:
        ph = r.get("phases") or {}
        phases = " / ".join(secs(ph.get(k)) for k in ("data", "forward", "backward", "optimizer", "other"))
        out.append(f"| {r['method']} | {r['column']} | {', '.join(f'{t:,}' for t in r['measured_tokens'])} "
                   f"| {secs(r['step_measured_s'])} ({secs(r['step_iqr_s'])}) | {secs(r['fixed_s'])} + "
                   f"{secs(r['per_1k_tokens_s'])} | {_pct(r['mfu_measured'])} / {_pct(r['mfu'])} | {phases} "
                   f"| {fmt(r.get('syncs_per_step'), '{:d}')} |")
    notes = [f"- {r['method']} on {r['column']}: {r['fit_note']}" for r in steady if r.get("fit_note")]
    return out + (["", "Fits read with care:", *notes] if notes else [])


def _validation(r: dict[str, Any]) -> str:
    """A row's validation hours and their share of its total ("–": a table from before they were apart)."""
    if "val_s" not in r:
        return "–"
    if r["val_s"] is None:
        return "unknown"
    return f"{r['val_s'] / 3600:,.1f} ({_pct(r.get('val_share'))})"


def validation_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Validation during training over the table's runs: its hours, its share of the total, and its source."""
    runs = [r for r in distinct(measured_rows(rows)) if "val_s" in r]
    if not runs:
        return []
    known = [r for r in runs if r["val_s"] is not None and r.get("total_s")]
    modes: dict[str, int] = {}
    for r in runs:
        mode = (r.get("plan") or {}).get("validation", "paper")
        modes[mode] = modes.get(mode, 0) + 1
    said = "; ".join(f"{m} in {n} run(s)" + ("" if m == "paper" else ", NOT the paper's protocol")
                     for m, n in sorted(modes.items()))
    val, total = sum(r["val_s"] for r in known), sum(r["total_s"] for r in known)
    head = (f"Validation during training (trainer.validation: {said}): "
            + (f"{val / 3600:,.0f} h of the {total / 3600:,.0f} h ({100 * val / total:.1f}%)" if total else "none")
            + (f", {len(runs) - len(known)} run(s) unknown" if len(known) < len(runs) else "") + ".")
    counted = sorted({(r.get("plan") or {}).get("val_source") or "" for r in runs} - {""})
    return ["", head, *(f"- counted from: {src}" for src in counted),
            *(f"- per document: {BASIS[m]}" for m in sorted(modes) if m in BASIS)]


def render_markdown(spec: dict[str, Any], rows: list[dict[str, Any]], prov: str) -> str:
    got = measured_rows(rows)
    device = got[0]["device"] if got else "cpu"
    lines = [f"# {spec['artifact']}: cost of the paper profile, from the dry run ({device})", "",
             f"Measured per cell: {got[0]['memory'] if got else ''}, precision {got[0]['precision'] if got else ''}. "
             "Where the dry run read shorter documents than the paper (tokens a -> b), time and memory growth "
             "are scaled linearly to the paper's length (module docstring of scaleformer.costs.table).", "",
             "| Method | Column | Tokens | s/step | s/step ckpt | Train peak GB | ckpt GB | Gen s/doc | Gen peak GB "
             f"| Fits {'/'.join(map(str, DEVICES_GB))} GB | ckpt fits | Paper profile h | of which validation h "
             "| GPU h (train, by FLOPs) |", "|" + "---|" * 14]
    for r in rows:
        if r.get("not_measured"):
            lines.append(f"| {r['method']} | {r['column']} | not measured (run {r['run_id']}) |" + " – |" * 11)
            continue
        tokens = f"{r['tokens']:,}" + (f" -> {r['paper_tokens']:,}" if r["scale"] != 1 else "") + (
            f" (trains on {r['train_tokens']:,})" if r.get("train_tokens", r["paper_tokens"]) < r["paper_tokens"] else "")
        gpu = "–" if not r.get("gpu_train_h") else f"{r['gpu_train_h'][0]:.1f}-{r['gpu_train_h'][1]:.1f}"
        lines.append(f"| {r['method']} | {r['column']} | {tokens} | {secs(r['step_s'])} | {secs(r['step_ckpt_s'])} "
                     f"| {fmt(r['train_peak_gb'])} | {fmt(r['train_peak_ckpt_gb'])} | {secs(r['gen_s_doc'])} "
                     f"| {fmt(r['gen_peak_gb'])} | {_fits(r['train_peak_gb'])} | {_fits(r['train_peak_ckpt_gb'])} "
                     f"| {fmt(None if r['total_s'] is None else r['total_s'] / 3600, '{:,.0f}')} | {_validation(r)} "
                     f"| {gpu} |")
    lines += steady_state_lines(rows)
    total = [r["total_s"] for r in distinct(rows) if r["total_s"] is not None]
    gpu, basis = gpu_hours(rows)
    lines += ["", "Arithmetic per cell (the paper profile's trainer, composed from its config):", ""]
    lines += [f"- {r['method']} on {r['column']}: {r['arithmetic']}" for r in rows]
    for cells in by_run(rows):
        if len(cells) > 1:
            named = ", ".join(f"{r['method']} on {r['column']}" for r in cells)
            lines.append(f"- {named}: one run (the same configuration), counted once below")
    missing = [r for r in distinct(rows) if r.get("not_measured")]
    if missing:
        runs = ", ".join(r["run_id"] or "?" for r in missing)
        lines += ["", f"Whole table on this {device}: unknown, {len(missing)} run(s) not measured ({runs}); the "
                  f"measured ones: {sum(total) / 3600:,.0f} h."]
    elif total:
        lines += ["", f"Whole table on this {device}: {sum(total) / 3600:,.0f} h."]
    lines += validation_lines(rows)
    same: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in distinct(rows):
        if r.get("flops_step"):
            same.setdefault((r["method"], r["tokens"], round(r["flops_step"])), []).append(r)
    # sweep points that count the same FLOPs on the same document do the same work: their spread is noise
    lines += [f"Repeatability: {len(rs)} runs of {m} that count the same FLOPs on the same documents ({n:,} tokens "
              f"on average) took {_spread([r['step_s'] for r in rs])} s/step, this machine's run-to-run spread: read "
              f"single cells' differences against it (generation: {_spread([r['gen_s_doc'] for r in rs])} s/doc, "
              "where different weights may decode to different lengths)."
              for (m, n, _), rs in same.items() if len(rs) >= 3]
    if gpu:
        lines += [f"Training on one GPU, estimated from the counted FLOPs at {basis} (not a measurement of this "
                  f"table): {gpu} GPU-hours. Generation on a GPU: not measured."]
    if device == "cpu":
        lines += ["", "GPU rows: not measured (no GPU was lent to this run). Memory is the CPU process's fp32 peak, "
                  "Python and libraries included; bf16 autocast on a GPU stores smaller activations."]
    return "\n".join([*lines, "", prov, ""])


def build_costs(spec: dict[str, Any], profile: str, root: Path, out_dir: Path,
                methods: str | list[str] | None = None) -> dict[str, Path]:
    """Write ``<artifact>.md/.json`` (``-gpu`` when measured on a GPU) from the dry run's results files."""
    cells = [c for c in expand_grid(spec, profile, methods) if c.available]
    resolve_run_ids(cells, root)
    got = collect(cells, lambda key: column_label(spec, profile, key))
    rows = cost_rows(spec, profile, cells, got, gpu_basis(spec["artifact"], out_dir))
    done = measured_rows(rows)
    suffix = "-gpu" if done and done[0]["device"] != "cpu" else ""
    name = f"{spec['artifact']}{suffix}"
    prov = provenance(got)
    record = {"artifact": spec["artifact"], "profile": profile, "assumptions": {
        "h100_bf16_tflops": H100_BF16_TFLOPS, "mfu_range": list(MFU), "devices_gb": list(DEVICES_GB)},
        "rows": rows, "total_h": total_hours(rows), "provenance": prov}
    if len(done) < len(rows):  # the total is unknown (None): these say why
        record["not_measured"] = sorted({r["run_id"] or "?" for r in rows if r.get("not_measured")})
    return {"md": atomic_write_text(out_dir / f"{name}.md", render_markdown(spec, rows, prov)),
            "json": atomic_write_text(out_dir / f"{name}.json", json.dumps(record, indent=1) + "\n")}


def summary_markdown(folder: Path, artifacts: Sequence[str], link: str) -> str | None:
    """The README's cost block from the committed cost tables in ``folder`` (None when there are none):
    every dry run (GPU and CPU) with how long it took and the paper profile's hours, then the training
    memory at each artifact's longest documents from its best device. ``link``: ``folder`` as the page
    that shows the block sees it."""
    found = {a: recs for a in artifacts
             if (recs := [(p, json.loads(p.read_text(encoding="utf-8"))) for p in cost_table_paths(a, folder) if p.exists()])}
    if not found:
        return None
    hours = ["| artifact | measured on | cells | dry run took | paper profile (h) | training (h) | validation (h) "
             "| generation (h) | training on one GPU (h, by FLOPs) |", "|---|---|---|---|---|---|---|---|---|"]
    bases: set[str] = set()
    memory = []
    for artifact, records in found.items():
        for path, rec in records:
            rows = measured_rows(rec["rows"])
            missing = len(rec["rows"]) - len(rows)
            prov = rec.get("provenance", "")
            where, took = re.search(r"machine ([^;]+);", prov), re.search(r"wall time ([^;]+?) summed", prov)
            first = rows[0] if rows else {"device": "?", "precision": "?"}
            head = (f"| [{artifact}]({link}/{path.stem}.md) | {first['device']} ({where[1] if where else '?'}), "
                    f"{first['precision']} | {len(rec['rows'])} | {took[1] if took else '?'} |")
            total = rec.get("total_h")
            if not missing and all(r.get("total_s") is None for r in rows):  # e.g. the QA table: no such profile
                hours.append(f"{head} no paper profile | – | – | – | – |")
            else:
                train, val, gen = (sum(r.get(k) or 0 for r in distinct(rows)) / 3600 for k in ("train_s", "val_s", "gen_s"))
                # a table from before validation was apart counted it in generation
                apart = f"{val:,.0f}" if any("val_s" in r for r in rows) else "in generation"
                gpu, basis = gpu_hours(rows)
                bases |= {basis} if gpu else set()
                said = (f"{total:,.0f}" if finite(total) and total > 0 else "unknown"
                        + (f" ({missing} cell(s) not measured)" if missing else ""))
                hours.append(f"{head} {said} | {train:,.0f} | {apart} | {gen:,.0f} | {gpu or '–'} |")
        rows = measured_rows(records[0][1]["rows"])  # memory: the best device's
        if not rows:
            continue
        longest = max(r["paper_tokens"] for r in rows)
        at = distinct([r for r in rows if r["paper_tokens"] == longest])
        by_method: dict[str, list[dict[str, Any]]] = {}
        for r in at:
            by_method.setdefault(r["method"], []).append(r)
        # a sweep: every point is the same method at the same length, so its spread, not 21 near-equal numbers
        where = at[0]["column"] if len(at) == len(by_method) else f"all {len(at)} runs"
        memory.append(f"{artifact} ({rows[0]['memory']}), {where} ({longest:,} tokens, scaled from the "
                      f"{at[0]['tokens']:,} read): "
                      + ", ".join(f"{m} {_spread([r['train_peak_gb'] for r in rs])} / "
                                  f"{_spread([r['train_peak_ckpt_gb'] for r in rs])}" for m, rs in by_method.items())
                      + ".")
    missing = [a for a in artifacts if a not in found]
    return (f"From `{link}/` (`make <artifact> PROFILE=dryrun`; the arithmetic of every cell is in its "
            "table): how long the dry run took (summed over its cells) and the paper profile's time on the device that "
            "measured it, one device, nothing in parallel. A CPU's run also gives its training's GPU-hours from the "
            f"FLOPs it counted, at {'; '.join(sorted(bases)) or RANGE_BASIS}; generation is not in it.\n\n"
            + "\n".join(hours) + "\n\nPeak GB to train at the longest documents, without / with "
            "`method.checkpoint_chunks`: " + " ".join(memory)
            + (f" Not measured yet: {', '.join(missing)}." if missing else ""))
