"""``make gpu-perf``: table1's training at the paper's shapes on one GPU, optimisations off and on, in one call.

One short lent GPU is enough: the SummScreenFD- and BookSum-shape cells of table1's dry run for truncation,
SLED and ScaleFormer + Middle (6 cells), each trained twice through the steady-state cost probe
(:mod:`scaleformer.runs.cost`): ``before`` (the plain step: chunks 16 at a time, the for-loop AdamW, the
loss logged every micro-batch) and ``after`` (the defaults). Documents are drawn at each data set's mean
length with no spread and read whole (SummScreenFD ~6.5k tokens, BookSum ~151k): measured at the paper's
length, where the CPU's dry run scaled 4,096 tokens. Only ``after`` generates (one test document, the cost
table's generation column). Written: ``OUT/gpu-perf.{md,json}``, a side-by-side table of median step, IQR,
MFU, peak memory, syncs and kernels per micro-batch; and the cost table rebuilt from the ``after`` records
(``results/dryrun/table1-gpu.{md,json}`` on a GPU, its 6 cells).

Cells run one at a time, SLED and ScaleFormer + Middle first, and the side-by-side table is rewritten after
each: ``--budget-s`` starts no cell after that many seconds (less generation's share, below), so a window
that ends keeps what it measured and the table names the cells it skipped; ``--cells`` picks some of them.
``bucketed`` (by default, SummScreenFD's cells): the defaults on micro-batches of documents of similar length,
as many as the memory model says fit of 8 (:data:`scaleformer.bench.step.BUCKETED_OVERRIDES`), per document
against ``after``'s one. ``--variants ...,compiled`` adds ``compiled``: every encoder and decoder layer compiled
(options: their kernels round differently); both in tables of their own
against ``after``: whether fewer launches shorten a step the host bounds. Where ``checkpoint_chunks=null`` turns recomputation on (the
memory model says the plain step would not fit the device), that cell is timed recomputed only.

Then the generation rows (:mod:`scaleformer.costs.gpu_generate`): BART-base-shape decoding in ms
per token at 1 and 4 beams from 4k, 64k and 1M tokens of (random, precomputed) encoder memory, dynamic
against static cache (a CUDA graph on a GPU), each against its floor; and documents per second of 32
SummScreenFD-length documents evaluated one at a time against batched, for the same three methods. Their
tables follow the training table in ``OUT/gpu-perf.{md,json}`` (the JSON's ``generation``). ``--gen-budget-s``
is generation's share of ``--budget-s``: no training cell starts after ``budget - share``, and generation
runs until ``budget`` or for its share, whichever ends later; a generation row that would not fit is skipped
and named. ``--parts`` picks what runs (``train,decode,docs``; e.g. ``decode,docs`` for a window of its own).

``--tiny``: the same path at tiny shapes (random tiny BART, short documents, a one-warm-up one-timed
schedule; tiny lengths for the generation rows) on whatever device there is, writing everything under OUT:
the test tier runs it on the CPU.

    python scripts/gpu_perf.py [--out results/gpu-perf/DATE] [--tables results/dryrun] [--budget-s S]
        [--gen-budget-s G] [--parts train,decode,docs] [--variants before,after,bucketed[,compiled]]
        [--cells sled/summscreen,...] [--compile-backend inductor] [--gen-repeats 10] [--gen-new-tokens 64] [--tiny]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from scaleformer.bench.step import BUCKETED, COMPILED
from scaleformer.costs import gpu_generate
from scaleformer.costs.gpu_train import (
    ALL_VARIANTS,
    DEFAULT_VARIANTS,
    METHODS,
    ORDER,
    measure,
    spec_for,
)
from scaleformer.costs.report import build_costs
from scaleformer.errors import ConfigError
from scaleformer.io import atomic_write_text
from scaleformer.model.backbone import check_compile_backend
from scaleformer.ops.host_memory import keep_freed_memory
from scaleformer.runs.cost_fit import SLOW

PARTS = ["train", *gpu_generate.PARTS]  # the training cells, then the generation rows


# The counters of a slow micro-batch (scaleformer.runs.cost_waits), as the table below the cells names them.
# Each is a mean over micro-batches, so counts keep their fraction (0.4 switches is not 0).
WAITS = (("thread_cpu_s", "launching thread's CPU s"), ("involuntary_switches", "involuntary switches"),
         ("gc_s", "GC s"), ("device_allocs", "cudaMalloc"), ("device_frees", "cudaFree"),
         ("alloc_retries", "allocator retries"), ("sm_clock_mhz", "SM MHz"))


def slow_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Per cell and variant with slow micro-batches: their count, extra time, and each counter's mean over
    them against the others' (where a slow step's time went)."""
    lines = []
    for r in rows:
        for v in ALL_VARIANTS:
            slow = (r.get(v) or {}).get("slow")
            if not slow or not slow["count"]:
                continue
            parts = [f"{_n(slow[k]['slow'], '{:.3g}')} vs {_n(slow[k]['others'], '{:.3g}')} {name}" for k, name in WAITS
                     if k in slow and slow[k]["slow"] is not None]
            lines.append(f"- {r['method']}/{r['dataset']}/{v}: {slow['count']} of {slow['of']}, "
                         f"{slow['excess_s']:.3g} s over the median in all; " + ", ".join(parts))
    if lines:
        lines = ["", f"Slow micro-batches (above {SLOW}x their group's median; scaleformer/runs/cost_waits.py), "
                 "each counter's mean over them vs over the others:", "", *lines]
    return lines


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if not a or not b else f"{a / b:.2f}x"


def _n(x: Any, fmt: str = "{:,}") -> str:
    return "–" if x is None else fmt.format(x)


def render(doc: dict[str, Any]) -> str:
    if "train" not in doc.get("parts", PARTS):  # a generation-only call
        return "\n".join(["# Generation at the GPU's speed (make gpu-perf, generation rows only)", "",
                          f"{doc['device']}, {doc['when']}, {doc['wall_time_s']:.0f} s for the whole call; written by "
                          "`make gpu-perf` (scaleformer/costs/gpu_generate.py).",
                          *gpu_generate.render(doc.get("generation") or {}), ""])
    lines = ["# Training at the GPU's speed: table1's cells, optimisations off and on", "",
             f"{doc['device']}, {doc['when']}, {doc['wall_time_s']:.0f} s for the whole call; written by `make gpu-perf` "
             "(scaleformer/costs/gpu_perf.py). Per cell, the plain setting at the longest length read (3 untimed "
             "+ 10 timed micro-batches, median and IQR): before = chunks 16 at a time, for-loop AdamW, loss logged "
             "every micro-batch; after = the defaults. MFU: the counted FLOPs over the median step over the matmul "
             "rate measured in the same process.", "",
             "| method | data | tokens | step s before -> after (IQR) | speed-up | MFU before -> after | peak GB "
             "before -> after | syncs/step | kernels/step |", "|" + "---|" * 9]
    for r in doc["rows"]:
        b, a = r.get("before", {}), r.get("after", {})
        lines.append(
            f"| {r['method']} | {r['dataset']} | {_n(a.get('tokens') or b.get('tokens'))} "
            f"| {_n(b.get('step_s'), '{:.3g}')} -> {_n(a.get('step_s'), '{:.3g}')} ({_n(a.get('step_iqr_s'), '{:.2g}')}) "
            f"| {_ratio(b.get('step_s'), a.get('step_s'))} "
            f"| {_n(b.get('mfu'), '{:.1%}')} -> {_n(a.get('mfu'), '{:.1%}')} "
            f"| {_n(b.get('peak_gb'), '{:.1f}')} -> {_n(a.get('peak_gb'), '{:.1f}')} "
            f"| {_n(b.get('syncs_per_step'))} -> {_n(a.get('syncs_per_step'))} "
            f"| {_n(b.get('kernels_per_step'))} -> {_n(a.get('kernels_per_step'))} |")
    failed = [f"{r['method']}/{r['dataset']}/{v}" for r in doc["rows"] for v in r.get("failed", [])]
    if failed:
        lines += ["", f"Failed (the log says why): {', '.join(failed)}."]
    if doc.get("skipped"):
        lines += ["", f"Not measured (the window's budget ran out first): {', '.join(doc['skipped'])}."]
    recomputed = sorted({f"{r['method']}/{r['dataset']}" for r in doc["rows"]
                         for v in ALL_VARIANTS if r.get(v, {}).get("setting") == "checkpoint"})
    if recomputed:
        lines += ["", f"Timed with the chunks recomputed (checkpoint_chunks=null chose it: by the memory model the plain step would not fit): "
                  f"{', '.join(recomputed)}."]
    lines += variant_lines(doc["rows"], doc.get("compile_backend", "inductor"))
    lines += time_lines(doc["rows"])
    lines += slow_lines(doc["rows"])
    if doc.get("generation"):
        lines += gpu_generate.render(doc["generation"])
    return "\n".join([*lines, ""])


def time_lines(rows: list[dict[str, Any]], shown: int = 5) -> list[str]:
    """Per cell and variant, where its profiled micro-batch's time went: on a GPU the kernels' summed time
    against the step's median (the share the device computed; the rest it waited on the host), and the
    ``shown`` largest kernels (the operators' own CPU time on a CPU)."""
    lines = []
    for r in rows:
        for v in ALL_VARIANTS:
            row = r.get(v) or {}
            top = row.get("top")
            if not top or not top.get("rows"):
                continue
            busy = ""
            if row.get("kernel_s_per_step") is not None and row.get("step_s"):
                busy = (f"kernels {row['kernel_s_per_step']:.3g} s of a {row['step_s']:.3g} s step "
                        f"({row['kernel_s_per_step'] / row['step_s']:.0%}); ")
            parts = [f"`{t['name']}` {t['ms']:.3g} ms x{t['calls']}" + (f" ({t['share']:.0%})" if t["share"] else "")
                     for t in top["rows"][:shown]]
            lines.append(f"- {r['method']}/{r['dataset']}/{v}: {busy}{top['of']}: " + ", ".join(parts))
    if lines:
        lines = ["", "Where the time went (each cell's profiled warm-up micro-batch at its longest plain length; "
                 "scaleformer/ops/measure.py):", "", *lines]
    return lines


def variant_lines(rows: list[dict[str, Any]], backend: str = "inductor") -> list[str]:
    """The compiled layers, then the bucketed micro-batches, against the defaults, cell by cell, where both ran."""
    lines = []
    for variant, intro in ((COMPILED, f"The layers compiled (`backbone.compile_encoder={backend}`, `compile_decoder="
                            f"{backend}`: options, their kernels round differently) against the defaults, in the same "
                            "call:"),
                           (BUCKETED, "Bucketed micro-batches (`data.bucket=true data.batch_size=8`: documents of "
                            "similar length, as many a micro-batch as the memory model says fit) against the defaults' "
                            "one document, in the same call; times and counts per document:")):
        both = [r for r in rows if r.get(variant) and r.get("after")]
        if not both:
            continue
        lines += ["", intro, "", f"| method | data | documents per micro-batch | s per document after -> {variant} "
                  f"(IQR) | speed-up | MFU after -> {variant} | peak GB after -> {variant} | kernels per document "
                  "| aten ops per document | compiled modules | graphs compiled while timed |", "|" + "---|" * 11]
        for r in both:
            a, c = r["after"], r[variant]
            da, dc = a.get("documents") or 1, c.get("documents") or 1

            def per(x: Any, d: int) -> Any:
                return None if x is None else x / d

            lines.append(
                f"| {r['method']} | {r['dataset']} | {dc} | {_n(per(a.get('step_s'), da), '{:.3g}')} -> "
                f"{_n(per(c.get('step_s'), dc), '{:.3g}')} ({_n(per(c.get('step_iqr_s'), dc), '{:.2g}')}) "
                f"| {_ratio(per(a.get('step_s'), da), per(c.get('step_s'), dc))} "
                f"| {_n(a.get('mfu'), '{:.1%}')} -> {_n(c.get('mfu'), '{:.1%}')} "
                f"| {_n(a.get('peak_gb'), '{:.1f}')} -> {_n(c.get('peak_gb'), '{:.1f}')} "
                f"| {_n(per(a.get('kernels_per_step'), da), '{:,.0f}')} -> {_n(per(c.get('kernels_per_step'), dc), '{:,.0f}')} "
                f"| {_n(per(a.get('ops_per_step'), da), '{:,.0f}')} -> {_n(per(c.get('ops_per_step'), dc), '{:,.0f}')} "
                f"| {_n(c.get('compiled_modules'))} | {_n(c.get('timed_compiles'))} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    keep_freed_memory()
    ap = argparse.ArgumentParser(prog="gpu_perf", description="table1's training cells, optimisations off and on.")
    ap.add_argument("--out", default=str(Path("results") / "gpu-perf" / time.strftime("%Y-%m-%d")))
    ap.add_argument("--tiny", action="store_true", help="tiny shapes on any device (the test tier's CPU run)")
    ap.add_argument("--cpu", action="store_true", help="the paper's shapes without a GPU (slow: a rehearsal of a window)")
    ap.add_argument("--runs", help="where the runs go (default: a temporary folder)")
    ap.add_argument("--tables", help="where the rebuilt cost table goes (default: results/dryrun on a GPU, OUT "
                    "with --tiny or without one)")
    ap.add_argument("--budget-s", type=float, help="start no cell or row after this many seconds, generation's share "
                    "(--gen-budget-s) kept for it (a short GPU window keeps every cell and row it measured; the rest "
                    "are listed as skipped)")
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                    help="which variants, in the order each cell runs them (e.g. after,before; compiled: the defaults "
                    "with the encoder's layers compiled, not run unless named)")
    ap.add_argument("--compile-backend", help="torch.compile backend of the compiled variant (inductor; e.g. "
                    "cudagraphs: CUDA graphs of each layer without generated kernels)")
    ap.add_argument("--cells", default=",".join(f"{m}/{d}" for m, d in ORDER),
                    help="which training cells, as method/data (e.g. sled/summscreen); they run in the default order")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help="what runs: train (the cells), decode (ms per token), docs (batched documents per second)")
    ap.add_argument("--gen-budget-s", type=float, default=150.0,
                    help="generation's share of --budget-s (training cells start no later than budget - share; "
                    "generation runs to the budget or for its share, whichever ends later)")
    ap.add_argument("--gen-repeats", type=int, default=10, help="timed runs per decoding row")
    ap.add_argument("--gen-new-tokens", type=int, help="tokens each decode forces, min = max (64; --tiny: 8)")
    ap.add_argument("--gen-docs", type=int, help="documents of the batched-evaluation rows (32; --tiny: 6)")
    ap.add_argument("--gen-doc-repeats", type=int, help="timed passes over them per batch size (3; --tiny: 2)")
    args = ap.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    if not variants or set(variants) - set(ALL_VARIANTS):
        ap.error(f"--variants={args.variants}: must name some of {', '.join(ALL_VARIANTS)}")
    cells = [tuple(c.split("/", 1)) for c in args.cells.split(",") if c]
    if not cells or set(cells) - set(ORDER):
        ap.error(f"--cells={args.cells}: must name some of {', '.join(f'{m}/{d}' for m, d in ORDER)}")
    if args.compile_backend is not None and args.compile_backend not in torch.compiler.list_backends(exclude_tags=()):
        ap.error(f"--compile-backend={args.compile_backend}: must name a torch.compile backend (e.g. inductor, "
                 "cudagraphs)")
    if args.compile_backend is not None and "compiled" in variants:
        try:  # listed is not installed (tvm): the compiled cells would fail one by one, each an empty row
            check_compile_backend("--compile-backend", args.compile_backend)
        except ConfigError as e:
            ap.error(str(e))
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        ap.error(f"--out={args.out}: is a file; give a folder for gpu-perf.{{json,md}}")
    if (out / "gpu-perf.json").exists():  # a window's measured cells are the costliest files the project has
        ap.error(f"--out={args.out}: already holds gpu-perf.json (an earlier call's cells); give another folder, "
                 f"e.g. --out {args.out}-2")
    if args.budget_s is not None and not (math.isfinite(args.budget_s) and args.budget_s > 0):
        ap.error(f"--budget-s={args.budget_s}: must be a finite number of seconds > 0")
    if not math.isfinite(args.gen_budget_s):
        ap.error(f"--gen-budget-s={args.gen_budget_s}: must be a finite number of seconds")
    if not args.tiny and not torch.cuda.is_available() and not args.cpu:
        ap.error("no GPU here: gpu_perf measures table1's cells at the paper's shapes on a GPU (about 20 min on this "
                 "kind of CPU); --tiny runs the test tier's shapes, --cpu the paper's shapes here anyway")
    parts = [p for p in args.parts.split(",") if p]
    if not parts or set(parts) - set(PARTS):
        ap.error(f"--parts={args.parts}: must name some of {', '.join(PARTS)}")
    for flag, full, tiny in (("gen_new_tokens", 64, 8), ("gen_docs", 32, 6), ("gen_doc_repeats", 3, 2)):
        if getattr(args, flag) is None:
            setattr(args, flag, tiny if args.tiny else full)
    for flag in ("gen_repeats", "gen_new_tokens", "gen_docs", "gen_doc_repeats"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')}={getattr(args, flag)}: must be >= 1")
    if args.gen_budget_s < 0:
        ap.error(f"--gen-budget-s={args.gen_budget_s}: must be >= 0")
    gen_parts = [p for p in parts if p in gpu_generate.PARTS]
    started = time.time()
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    share = args.gen_budget_s if gen_parts else 0.0
    deadline = started + max(0.0, args.budget_s - share) if args.budget_s is not None else None
    doc: dict[str, Any] = {"rows": [], "skipped": []}

    def save(d: dict[str, Any]) -> None:
        doc.update(d)
        doc.update({"parts": parts, "device": device, "when": time.strftime("%Y-%m-%d %H:%M"), "tiny": args.tiny,
                    "wall_time_s": round(time.time() - started, 1)})
        atomic_write_text(out / "gpu-perf.json", json.dumps(doc, indent=1) + "\n")
        atomic_write_text(out / "gpu-perf.md", render(doc))

    written: dict[str, Path] = {}
    if "train" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(args.runs or tmp)
            save(measure(root, args.tiny, deadline=deadline, save=save, variants=variants, cells=cells,
                         backend=args.compile_backend))
            default = out if args.tiny or not torch.cuda.is_available() else Path("results") / "dryrun"
            tables = Path(args.tables) if args.tables else default
            written = build_costs(spec_for("after", args.tiny), "dryrun", root / "after", tables, methods=METHODS)
    if gen_parts:
        now = time.time()
        gen_deadline = max(now + share, started + args.budget_s) if args.budget_s is not None else now + share
        gpu_generate.measure(
            args.tiny, torch.device("cuda" if torch.cuda.is_available() else "cpu"), deadline=gen_deadline,
            parts=gen_parts, new_tokens=args.gen_new_tokens, repeats=args.gen_repeats, n_docs=args.gen_docs,
            doc_repeats=args.gen_doc_repeats, save=lambda g: save({"generation": g}))
    save({})
    print(render(doc))
    print(f"wrote {out}/gpu-perf.{{md,json}}{''.join(f', {p}' for p in written.values())} "
          f"in {doc['wall_time_s']:.0f} s")
    return 0
