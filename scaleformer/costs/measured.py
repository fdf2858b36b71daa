"""What each cell of a dry run measured, scaled to the paper's length: the rows of an artifact's cost table.

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
  alone when only training stops (``train_length_scaling``: Unlimiformer's standard mode).

A record is checked before it is read (:mod:`scaleformer.costs.check`). The paper profile's plan of a cell is
:mod:`scaleformer.costs.plan`; the table's arithmetic, rows and totals :mod:`scaleformer.costs.table`.
"""

from __future__ import annotations

import statistics
from typing import Any

from scaleformer.costs.check import check_record
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
        # what validation's cost is read from (scaleformer.costs.validation)
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
