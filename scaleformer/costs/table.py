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
- the paper profile's time: micro-batches x step time + validation during training (its count, documents
  and per-document cost from the config's ``trainer.validation``: :mod:`scaleformer.artifacts.cost_validation`)
  + ``paper_eval_docs`` x generation seconds per document, the arithmetic written out, validation's hours and
  share of the total apart, the trainer's numbers from composing the paper profile's own config;
- whether the training peak fits a 24/40/80 GB device; on a CPU, GPU-hours of training from the counted
  FLOPs at 1-5% of an H100's dense bf16 peak (``MFU``); on a GPU, what it measured and nothing assumed.

A record is checked before it is read (:mod:`scaleformer.artifacts.cost_check`); a cell whose run has no
record stays in the table as "not measured", leaving the total unknown rather than short.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from scaleformer.artifacts.cost_check import check_record, finite
from scaleformer.artifacts.cost_validation import validation_cost, validation_plan
from scaleformer.artifacts.grid import Cell, check_profile, column_label, expand_grid
from scaleformer.compose import compose_config
from scaleformer.runs import cost_fit

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


def measured(result: Any, paper_cap: int | None = None, run: str | None = None,
             train_cap: int | None = None) -> dict[str, Any] | None:
    """One cell's costs from its ``metrics.json``, at the measured length and at the paper's (its documents'
    own length, capped at the paper profile's ``data.max_input_tokens``; training also at its
    ``data.max_train_input_tokens``, ``train_cap``: BookSum trains on 16,384 tokens of each book and is
    evaluated whole); None when nothing was measured.

    A steady-state record (groups of warm-up and timed micro-batches at two lengths or more) is read through
    :mod:`scaleformer.runs.cost_fit`; a single-step record of the earlier probe by scaling its one timed
    step (:func:`step_factor`). A record with a field the table cannot use raises ``BadRecord`` naming
    ``run`` (default: the record's run id)."""
    check_record(result, run or result.run_id or "(no run id)")
    cost = result.cost or {}
    steps = cost.get("train_steps") or []
    if not steps:
        return None
    linear = cost.get("length_scaling", "linear") == "linear"  # evaluation's encoder side
    train_linear = cost.get("train_length_scaling", cost.get("length_scaling", "linear")) == "linear"
    steady = cost_fit.fits(cost)
    if steady:
        tokens = max(g["tokens"] for f in steady.values() for g in f["groups"])
    else:
        timed = steps[1:] or steps  # the warm-up is timed only when nothing else was
        tokens = statistics.mean(s["input_tokens"] for s in timed)
    full = document_tokens(result) or tokens
    paper = min(full, paper_cap) if paper_cap else full
    trains = min(paper, train_cap) if train_cap else paper
    scale = paper / tokens if linear else 1.0
    training = cost_fit.summary(cost, trains, train_linear) if steady else _single_step(steps, trains, train_linear)
    gen = cost.get("generate") or []
    docs = sum(int(m.get("n_examples") or 0) for m in result.splits.values())
    # the tokens evaluation read (after the dry run's truncation), per document
    read = sum(float(m.get("input_tokens_per_s") or 0) * float(m.get("generation_time_s") or 0)
               for m in result.splits.values()) / max(docs, 1)
    gen_scale = paper / read if linear and read and paper > read else 1.0
    gen_s = enc_s = dec_s = made = None
    if gen and docs:
        encode = sum(g.get("encode_s", 0.0) for g in gen)
        decode = sum(g["time_s"] for g in gen) - encode
        enc_s = encode * gen_scale / docs
        dec_s = decode * decode_ratio(cost.get("model") or {}, read, read * gen_scale) / docs
        gen_s = enc_s + dec_s
        counts = [n for g in gen for n in (g.get("new_tokens") or [])]
        made = sum(counts) / len(counts) if counts else None  # new tokens per document
    peaks = [_at(g, gen_scale) for g in gen if g.get("mem_peak_bytes") is not None]
    return {
        "device": cost.get("device", "cpu"), "precision": cost.get("precision"), "memory": cost.get("memory"),
        "tokens": round(tokens), "paper_tokens": round(paper), "train_tokens": round(trains), "scale": round(scale, 3),
        "length_scaling": "linear" if linear else "bounded",
        "train_length_scaling": "linear" if train_linear else "bounded", **training,
        "gen_s_doc": gen_s, "gen_peak_gb": max(peaks) / GB if peaks else None,
        # what validation's cost is read from (scaleformer.artifacts.cost_validation)
        "gen_encode_s_doc": enc_s, "gen_decode_s_doc": dec_s, "gen_new_tokens": made,
    }


def _single_step(steps: list[dict[str, Any]], paper: float, train_linear: bool) -> dict[str, Any]:
    """The training fields of a single-step record (warm-up, then one step per setting): each timed step
    scaled from its own length by the FLOPs that grow with the input (:func:`step_factor`)."""
    timed = steps[1:] or steps
    plain = [s for s in timed if not s["checkpoint_chunks"]]
    ckpt = [s for s in timed if s["checkpoint_chunks"]]
    total, enc = steps[0].get("flops"), steps[0].get("encoder_forward_flops")
    f = {id(s): step_factor(s, paper, steps[0], train_linear) for s in timed}
    return {
        "probe": "single-step", "encoder_share": min(1.0, 3 * enc / total) if total and enc is not None else 1.0,
        "step_s": None if not plain else statistics.median(s["time_s"] * f[id(s)] for s in plain),
        "step_ckpt_s": None if not ckpt else statistics.median(s["time_s"] * f[id(s)] for s in ckpt),
        "train_peak_gb": None if not plain else max(_at(s, f[id(s)]) or 0 for s in plain) / GB,
        "train_peak_ckpt_gb": None if not ckpt else max(_at(s, f[id(s)]) or 0 for s in ckpt) / GB,
        "flops_step": None if total is None else total * step_factor(steps[0], paper, steps[0], train_linear),
    }


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
