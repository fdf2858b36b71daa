"""An artifact's cost table: what each cell of its dry run measured, and what the full profile would cost.

The dry run (profile ``dryrun`` of every spec, ``cost_table: true``) trains each cell for three
micro-batches at the paper's shapes with ``trainer.measure_cost`` (:mod:`scaleformer.runs.cost`) and
generates for one document with the paper's beams and ``max_new_tokens``. Per cell, from those:

- seconds per micro-batch, with and without ``method.checkpoint_chunks``; the training peak of both;
  generation seconds per document and its peak;
- the same at the paper's length: the documents' own mean length (the data summary, before the dry
  run's ``data.max_input_tokens``), capped at the paper profile's ``data.max_input_tokens``. Only the
  share that grows with the input is scaled: in training, the encoder's share of the step's FLOPs
  (time and memory growth alike); in generation, the encoding linearly and decoding by its FLOPs per
  token. Methods whose encoder side stops growing (``length_scaling: bounded``, e.g. truncation past
  its window) stay as measured, so the dry run reads documents longer than any window; training
  alone when only training stops (``train_length_scaling``: Unlimiformer's standard mode);
- the paper profile's time: micro-batches x step time + documents generated (validation during
  training, then ``paper_eval_docs``) x seconds per document, the arithmetic written out, the trainer's
  numbers from composing the paper profile's own config;
- whether the training peak fits a 24/40/80 GB device;
- on a CPU, GPU-hours of training from the counted FLOPs at 1-5% of an H100's dense bf16 peak (what one
  H200 reached in table1's dry run at batch 1, and the table says where the range is from); on a GPU,
  what it measured and nothing assumed.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import Cell, check_profile, column_label, expand_grid, resolve_run_ids
from scaleformer.artifacts.tables import collect, provenance
from scaleformer.compose import compose_config
from scaleformer.io import atomic_write_text

GB = 1e9
DEVICES_GB = (24, 40, 80)
H100_BF16_TFLOPS = 989.4  # dense, SXM5 datasheet (scaleformer.bench.probes.PEAK_BF16_TFLOPS)
# The share of that peak a training step reaches: the GPU-hour range. Measured, not assumed: one H200 ran
# table1's dry-run steps at 1.9-48.8 TFLOP/s per cell (the FLOPs table1.json counted over the seconds
# table1-gpu.json timed; batch 1, chunk by chunk), 0.2-4.9% of the peak. The 25-50% a large-batch LM
# reaches put table1's training at 28-56 H100-hours where that H200 measured 877.
MFU = (0.01, 0.05)


def _at(step: dict[str, Any], scale: float) -> float | None:
    """A step's peak memory at ``scale`` times its input: what it started with, plus its growth scaled."""
    peak, base = step.get("mem_peak_bytes"), step.get("base_bytes")
    if peak is None:
        return None
    return peak if base is None or scale == 1 else base + (peak - base) * scale


def document_tokens(result: Any) -> float | None:
    """The mean length of the run's documents before any truncation (the data summary, all splits)."""
    splits = [v for v in (result.data.get("summary") or {}).values() if v.get("n_examples")]
    n = sum(v["n_examples"] for v in splits)
    return sum(v["input_tokens_mean"] * v["n_examples"] for v in splits) / n if n else None


def decode_ratio(model: dict[str, int], tokens: float, paper: float) -> float:
    """How much longer a decoding step takes when the decoder reads ``paper`` instead of ``tokens``
    encoder states: FLOPs per generated token, 2 x decoder parameters + 4 x states x d_model x layers
    (cross-attention's scores and sum)."""
    if not model or paper == tokens:
        return 1.0
    fixed, per_state = 2 * model["decoder_params"], 4 * model["d_model"] * model["decoder_layers"]
    return (fixed + per_state * paper) / (fixed + per_state * tokens)


def step_factor(step: dict[str, Any], paper: float, warmup: dict[str, Any], linear: bool) -> float:
    """How much a measured step grows at ``paper`` tokens. Only the encoder's FLOPs grow with the input
    (forward + backward = 3 x its forward, 4 x when the chunks are recomputed), linearly from what the
    warm-up counted at its own length; the decoder's and the optimiser's stay. Each step is scaled from its
    own input length: the dry run's micro-batches read documents of different lengths."""
    n = step.get("input_tokens") or 0
    if not linear or not n:
        return 1.0
    n0, total, enc = warmup.get("input_tokens") or n, warmup.get("flops"), warmup.get("encoder_forward_flops")
    if not total or enc is None:  # nothing counted: the whole step grows with the input
        return paper / n
    k = 4 if step.get("checkpoint_chunks") else 3
    rest, per_token = max(total - 3 * enc, 0.0), enc / n0  # FLOPs that stay; encoder forward FLOPs per token
    return (rest + k * per_token * paper) / (rest + k * per_token * n)


def measured(result: Any, paper_cap: int | None = None) -> dict[str, Any] | None:
    """One cell's costs from its ``metrics.json``, at the measured length and at the paper's (its documents'
    own length, capped at the paper profile's ``data.max_input_tokens``); None when nothing was measured."""
    cost = result.cost or {}
    steps = cost.get("train_steps") or []
    if not steps:
        return None
    timed = steps[1:] or steps  # the warm-up is timed only when nothing else was
    plain = [s for s in timed if not s["checkpoint_chunks"]]
    ckpt = [s for s in timed if s["checkpoint_chunks"]]
    tokens = statistics.mean(s["input_tokens"] for s in timed)
    linear = cost.get("length_scaling", "linear") == "linear"  # evaluation's encoder side
    train_linear = cost.get("train_length_scaling", cost.get("length_scaling", "linear")) == "linear"
    full = document_tokens(result) or tokens
    paper = min(full, paper_cap) if paper_cap else full
    scale = paper / tokens if linear else 1.0
    # Time and memory growth of each step, scaled by the same factor (see step_factor).
    total, enc = steps[0].get("flops"), steps[0].get("encoder_forward_flops")
    share = min(1.0, 3 * enc / total) if total and enc is not None else 1.0
    f = {id(s): step_factor(s, paper, steps[0], train_linear) for s in timed}
    flops_paper = None if total is None else total * step_factor(steps[0], paper, steps[0], train_linear)
    gen = cost.get("generate") or []
    docs = sum(int(m.get("n_examples") or 0) for m in result.splits.values())
    # the tokens evaluation read (after the dry run's truncation), per document
    read = sum(float(m.get("input_tokens_per_s") or 0) * float(m.get("generation_time_s") or 0)
               for m in result.splits.values()) / max(docs, 1)
    gen_scale = paper / read if linear and read and paper > read else 1.0
    gen_s = None
    if gen and docs:
        encode = sum(g.get("encode_s", 0.0) for g in gen)
        decode = sum(g["time_s"] for g in gen) - encode
        gen_s = (encode * gen_scale + decode * decode_ratio(cost.get("model") or {}, read, read * gen_scale)) / docs
    peaks = [_at(g, gen_scale) for g in gen if g.get("mem_peak_bytes") is not None]
    return {
        "device": cost.get("device", "cpu"), "precision": cost.get("precision"), "memory": cost.get("memory"),
        "tokens": round(tokens), "paper_tokens": round(paper), "scale": round(scale, 3),
        "length_scaling": "linear" if linear else "bounded",
        "train_length_scaling": "linear" if train_linear else "bounded", "encoder_share": round(share, 3),
        "step_s": None if not plain else statistics.median(s["time_s"] * f[id(s)] for s in plain),
        "step_ckpt_s": None if not ckpt else statistics.median(s["time_s"] * f[id(s)] for s in ckpt),
        "train_peak_gb": None if not plain else max(_at(s, f[id(s)]) or 0 for s in plain) / GB,
        "train_peak_ckpt_gb": None if not ckpt else max(_at(s, f[id(s)]) or 0 for s in ckpt) / GB,
        "flops_step": flops_paper,
        "gen_s_doc": gen_s, "gen_peak_gb": max(peaks) / GB if peaks else None,
    }


def paper_cells(spec: dict[str, Any]) -> dict[tuple[Any, ...], Cell]:
    """The paper profile's cells by (column, method, value): what each dry-run cell stands for."""
    if not spec["profiles"].get("paper"):
        return {}
    return {(c.key, c.method, c.value): c for c in expand_grid(spec, "paper")}


def paper_plan(spec: dict[str, Any], cell: Cell, paper: dict[tuple[Any, ...], Cell] | None = None
               ) -> dict[str, Any] | None:
    """The paper profile's training and evaluation sizes for a dry-run cell, from its composed config
    (``paper``: :func:`paper_cells`, expanded once per table)."""
    same = (paper_cells(spec) if paper is None else paper).get((cell.key, cell.method, cell.value))
    if same is None:
        return None
    cfg = compose_config(same.overrides)
    t = cfg.trainer
    micro = int(t.max_steps) * int(t.accumulate_grad_batches)
    every, limit = t.get("val_check_interval"), t.get("limit_val_batches")
    rounds = int(t.max_steps) // int(every) if isinstance(every, int) and every > 0 else 0
    val_docs = rounds * int(limit) if isinstance(limit, int) and not isinstance(limit, bool) else 0
    docs = check_profile(spec, "dryrun").get("paper_eval_docs", 0)
    eval_docs = int(docs.get(cell.key, 0) if isinstance(docs, dict) else docs)
    return {"steps": int(t.max_steps), "accumulate": int(t.accumulate_grad_batches), "micro_batches": micro,
            "val_rounds": rounds, "val_docs": val_docs, "eval_docs": eval_docs,
            "max_input_tokens": cfg.data.get("max_input_tokens")}


def estimate(m: dict[str, Any], plan: dict[str, Any] | None) -> dict[str, Any]:
    """The full profile's seconds for a cell, its arithmetic, and (from CPU FLOPs) GPU-hours of training."""
    if plan is None or m["step_s"] is None:
        return {"total_s": None, "arithmetic": "no paper profile" if plan is None else "no timed step"}
    train = plan["micro_batches"] * m["step_s"]
    docs = plan["val_docs"] + plan["eval_docs"]
    gen = docs * (m["gen_s_doc"] or 0.0)
    out = {"total_s": train + gen, "train_s": train, "gen_s": gen, "arithmetic": (
        f"{plan['steps']:,} steps x {plan['accumulate']} micro-batches x {_secs(m['step_s'])} s"
        f" + ({plan['val_rounds']} x {plan['val_docs'] // max(plan['val_rounds'], 1)} validation"
        f" + {plan['eval_docs']:,} evaluation) docs x {_secs(m['gen_s_doc'] or 0)} s"
        f" = {(train + gen) / 3600:,.0f} h")}
    if m["device"] == "cpu" and m["flops_step"]:
        flops = plan["micro_batches"] * m["flops_step"]
        out["gpu_train_h"] = [flops / (H100_BF16_TFLOPS * 1e12 * u) / 3600 for u in reversed(MFU)]
    return out


def cost_rows(spec: dict[str, Any], profile: str, cells: list[Cell], got: Any) -> list[dict[str, Any]]:
    rows, paper = [], paper_cells(spec)
    for c in cells:
        r = got.results.get((c.key, c.method, c.value, c.seed))
        if r is None or not (r.cost or {}).get("train_steps"):
            continue
        plan = paper_plan(spec, c, paper)
        m = measured(r, plan and plan["max_input_tokens"])
        where = f"{spec['sweeps'][c.key]['key']}={c.value}" if "sweeps" in spec else column_label(spec, profile, c.key)
        rows.append({"method": c.method, "column": where, "run_id": c.run_id, **m, "plan": plan, **estimate(m, plan)})
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


def h100_hours(rows: list[dict[str, Any]]) -> str | None:
    """The table's training on one H100 by counted FLOPs, "low-high" hours over its runs (None on a GPU)."""
    gpu = [r["gpu_train_h"] for r in distinct(rows) if r.get("gpu_train_h")]
    return f"{sum(g[0] for g in gpu):,.0f}-{sum(g[1] for g in gpu):,.0f}" if gpu else None


def _g(x: float | None, fmt: str = "{:.1f}") -> str:
    return "–" if x is None else fmt.format(x)


def _secs(x: float | None) -> str:
    """Seconds to one decimal, or two significant digits below a second (a GPU's 0.047 s step is not 0.0)."""
    return _g(x, "{:.1f}" if x is None or x >= 1 else "{:.2g}")


def _spread(values: list[float | None]) -> str:
    """One number as it is; several as their median and range."""
    got = sorted(v for v in values if v is not None)
    if len(got) < 2:
        return _g(got[0] if got else None)
    return f"median {statistics.median(got):.1f} ({got[0]:.1f}-{got[-1]:.1f})"


def _fits(gb: float | None) -> str:
    return "–" if gb is None else "/".join("yes" if gb <= d else "no" for d in DEVICES_GB)


def render_markdown(spec: dict[str, Any], rows: list[dict[str, Any]], prov: str) -> str:
    device = rows[0]["device"] if rows else "cpu"
    lines = [f"# {spec['artifact']}: cost of the paper profile, from the dry run ({device})", "",
             f"Measured per cell: {rows[0]['memory'] if rows else ''}, precision {rows[0]['precision'] if rows else ''}. "
             "Where the dry run read shorter documents than the paper (tokens a -> b), time and memory growth "
             "are scaled linearly to the paper's length (module docstring of scaleformer.artifacts.costs).", "",
             "| Method | Column | Tokens | s/step | s/step ckpt | Train peak GB | ckpt GB | Gen s/doc | Gen peak GB "
             f"| Fits {'/'.join(map(str, DEVICES_GB))} GB | ckpt fits | Paper profile h | GPU h (train, H100) |",
             "|" + "---|" * 13]
    for r in rows:
        tokens = f"{r['tokens']:,}" + (f" -> {r['paper_tokens']:,}" if r["scale"] != 1 else "")
        gpu = "–" if not r.get("gpu_train_h") else f"{r['gpu_train_h'][0]:.1f}-{r['gpu_train_h'][1]:.1f}"
        lines.append(f"| {r['method']} | {r['column']} | {tokens} | {_secs(r['step_s'])} | {_secs(r['step_ckpt_s'])} "
                     f"| {_g(r['train_peak_gb'])} | {_g(r['train_peak_ckpt_gb'])} | {_secs(r['gen_s_doc'])} "
                     f"| {_g(r['gen_peak_gb'])} | {_fits(r['train_peak_gb'])} | {_fits(r['train_peak_ckpt_gb'])} "
                     f"| {_g(None if r['total_s'] is None else r['total_s'] / 3600, '{:,.0f}')} | {gpu} |")
    total = [r["total_s"] for r in distinct(rows) if r["total_s"] is not None]
    gpu = h100_hours(rows)
    lines += ["", "Arithmetic per cell (the paper profile's trainer, composed from its config):", ""]
    lines += [f"- {r['method']} on {r['column']}: {r['arithmetic']}" for r in rows]
    for cells in by_run(rows):
        if len(cells) > 1:
            named = ", ".join(f"{r['method']} on {r['column']}" for r in cells)
            lines.append(f"- {named}: one run (the same configuration), counted once below")
    if total:
        lines += ["", f"Whole table on this {device}: {sum(total) / 3600:,.0f} h."]
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
        lines += [f"Training on one H100, estimated from the counted FLOPs at {int(MFU[1] * 100)}-{int(MFU[0] * 100)}% "
                  f"of its {H100_BF16_TFLOPS} TFLOP/s dense bf16 peak (the range one H200 reached in table1's dry run "
                  f"at batch 1, not a measurement of this table): {gpu} GPU-hours. Generation on a GPU: "
                  "not measured."]
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
    rows = cost_rows(spec, profile, cells, got)
    suffix = "-gpu" if rows and rows[0]["device"] != "cpu" else ""
    name = f"{spec['artifact']}{suffix}"
    prov = provenance(got)
    record = {"artifact": spec["artifact"], "profile": profile, "assumptions": {
        "h100_bf16_tflops": H100_BF16_TFLOPS, "mfu_range": list(MFU), "devices_gb": list(DEVICES_GB)},
        "rows": rows, "total_h": sum(r["total_s"] or 0 for r in distinct(rows)) / 3600, "provenance": prov}
    return {"md": atomic_write_text(out_dir / f"{name}.md", render_markdown(spec, rows, prov)),
            "json": atomic_write_text(out_dir / f"{name}.json", json.dumps(record, indent=1) + "\n")}


def cost_table_paths(artifact: str, folder: Path) -> list[Path]:
    """Where an artifact's cost table may be, best first: a GPU's, then a CPU's."""
    return [folder / f"{artifact}-gpu.json", folder / f"{artifact}.json"]


def paper_estimate(artifact: str, folder: Path) -> tuple[float | None, str]:
    """(hours, one line) for the paper profile, from the committed cost table (a GPU's when there is one)."""
    for path in cost_table_paths(artifact, folder):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        rows = record.get("rows") or []
        hours = float(record.get("total_h") or 0)
        device = rows[0].get("device", "?") if rows else "?"
        gpu = h100_hours(rows)
        extra = (f"; training on one H100 ~{gpu} GPU-h by FLOPs "
                 f"at {int(MFU[1] * 100)}-{int(MFU[0] * 100)}% of peak (generation not measured)") if gpu else ""
        return hours, (f"estimate for {artifact} (paper profile), from the dry run on {device} ({path}): "
                       f"{hours:,.0f} h as measured there{extra}")
    return None, (f"no cost table for {artifact} yet at {folder}/{artifact}.json (`make {artifact} PROFILE=dryrun` "
                  "measures one): no estimate")


def summary_markdown(folder: Path, artifacts: Sequence[str], link: str) -> str | None:
    """The README's cost block from the committed cost tables in ``folder`` (None when there are none):
    every dry run (GPU and CPU) with how long it took and the paper profile's hours, then the training
    memory at each artifact's longest documents from its best device. ``link``: ``folder`` as the page
    that shows the block sees it."""
    found = {a: recs for a in artifacts
             if (recs := [(p, json.loads(p.read_text(encoding="utf-8"))) for p in cost_table_paths(a, folder) if p.exists()])}
    if not found:
        return None
    hours = ["| artifact | measured on | cells | dry run took | paper profile (h) | training (h) | generation (h) "
             "| training on one H100 (h, by FLOPs) |", "|---|---|---|---|---|---|---|---|"]
    memory = []
    for artifact, records in found.items():
        for path, rec in records:
            rows = rec["rows"]
            prov = rec.get("provenance", "")
            where, took = re.search(r"machine ([^;]+);", prov), re.search(r"wall time ([^;]+?) summed", prov)
            head = (f"| [{artifact}]({link}/{path.stem}.md) | {rows[0]['device']} ({where[1] if where else '?'}), "
                    f"{rows[0]['precision']} | {len(rows)} | {took[1] if took else '?'} |")
            if all(r.get("total_s") is None for r in rows):  # e.g. the QA table: the paper has no such profile
                hours.append(f"{head} no paper profile | – | – | – |")
            else:
                train, gen = (sum(r.get(k) or 0 for r in distinct(rows)) / 3600 for k in ("train_s", "gen_s"))
                hours.append(f"{head} {rec['total_h']:,.0f} | {train:,.0f} | {gen:,.0f} | {h100_hours(rows) or '–'} |")
        rows = records[0][1]["rows"]  # memory: the best device's
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
            "measured it, one device, nothing in parallel. A CPU's run also gives its training's H100-hours from the "
            f"FLOPs it counted, at {int(MFU[1] * 100)}-{int(MFU[0] * 100)}% of the H100's dense bf16 peak (the range "
            "one H200 reached in table1's dry run at batch 1; generation is not in it).\n\n"
            + "\n".join(hours) + "\n\nPeak GB to train at the longest documents, without / with "
            "`method.checkpoint_chunks`: " + " ".join(memory)
            + (f" Not measured yet: {', '.join(missing)}." if missing else ""))
