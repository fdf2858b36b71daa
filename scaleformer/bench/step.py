"""A training step's framework overhead, on the CPU with the tiny reader: a proxy for a GPU's idle time.

A GPU runs a small model's step faster than the host can queue it, so what the framework does around the
model (the loop, logging, the optimiser, the method's planning) sets its speed, and a GPU is not needed
to see that work: on a CPU it is the step's steady-state time, as a run trains it (Lightning's fit, the
cost probe's timed micro-batches: :mod:`scaleformer.runs.cost`), minus the bare forward + backward of the
same tensors (the module called directly on the same batch, right after the step: ``trainer.cost_bare``),
the median of those pairs' differences. Operators per step come from the probe's profiled warm-up
micro-batch (its whole cycle) and its bare pair. Each method runs twice in one process, on one machine: ``before`` (the step as it was: chunks 16
at a time, the for-loop AdamW, the loss logged every micro-batch) and ``after`` (the defaults), at the
read length and at an eighth of it (one chunk: where the overhead is largest). ``--variants after,compiled
--name step-compiled`` sets the defaults against ``compiled``: the defaults with every encoder and decoder
layer through ``torch.compile`` (inductor; an option, its kernels round differently), the same way.

    python scripts/bench_step.py [--methods scaleformer_middle,sled,truncation] [--out results/bench]
        [--variants before,after] [--name step-overhead]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from scaleformer.compose import compose_config
from scaleformer.io import atomic_write_text
from scaleformer.ops.host_memory import keep_freed_memory
from scaleformer.resources import conf_dir
from scaleformer.runs import cost_fit
from scaleformer.runs.module import SummarizationModule
from scaleformer.runs.run import run
from scaleformer.runs.runtime import machine

LENGTHS = (1.0, 0.125)
VARIANTS = ("before", "after")
COMPILED = "compiled"  # the defaults, every layer compiled: an option (numerics), measured when asked for
# The defaults on bucketed micro-batches: 8 documents of similar length a step, as many a micro-batch as the
# memory model says fit (scaleformer.runs.memory), 16 in the split so that a micro-batch is full.
BUCKETED = "bucketed"
BUCKETED_OVERRIDES = ["++data.bucket=true", "data.batch_size=8", "data.synthetic_docs.train=16"]
# The step as it was, where the configs can say it; the logging of every micro-batch is patched in
# (logged_every_micro_batch).
BEFORE = ["++optim.fused=false"]
CHUNKED_BEFORE = ["++method.one_pass_training=false"]
RUN = ["trainer.max_steps=200", "++trainer.cost_bare=true", "trainer.eval_splits=[]", "trainer.enable_progress_bar=false",
       "callbacks.checkpoint=null", "++trainer.export_model=false", "++trainer.measure_cost=true",
       f"++trainer.cost_lengths=[{','.join(map(str, LENGTHS))}]"]


def variant_overrides(method: str, variant: str, backend: str = "inductor") -> list[str]:
    """The overrides that make ``method``'s step the variant's (none for ``after``: the defaults;
    ``compiled``: the layers through ``torch.compile``'s ``backend``)."""
    if variant == "after":
        return []
    if variant == BUCKETED:
        return list(BUCKETED_OVERRIDES)
    if variant == COMPILED:  # a fourth warm-up: the compile, the recompile for dynamic shapes, then the probes';
        # the schedule, 2 settings x 2 lengths x (4 + 10), is where training ends
        return [f"++backbone.compile_encoder={backend}", f"++backbone.compile_decoder={backend}",
                "++trainer.cost_warmup=4", "trainer.max_steps=56"]
    chunked = "one_pass_training" in compose_config([f"method={method}"], str(conf_dir())).method
    return [*BEFORE, *(CHUNKED_BEFORE if chunked else [])]


def overrides(method: str, variant: str, root: Path) -> list[str]:
    return [f"method={method}", *RUN, *variant_overrides(method, variant), f"paths.root={root}"]


def logged_every_micro_batch(variant: str) -> Any:
    """``before`` logged the loss on every micro-batch; the module now logs it when Lightning writes it."""
    return mock.patch.object(SummarizationModule, "_log_due", lambda self: True) if variant == "before" \
        else mock.patch.object(SummarizationModule, "_log_due", SummarizationModule._log_due)


def train(method: str, variant: str, root: Path) -> list[dict[str, Any]]:
    """Per length of the plain setting: its tokens, operators, and timed micro-batches (each with its bare pair)."""
    with logged_every_micro_batch(variant):
        out = run(compose_config(overrides(method, variant, root), str(conf_dir())))
    cost = out["cost"]
    return [{"tokens": statistics.mean(g["tokens_per_step"]), "ops": g.get("aten_ops_per_step"),
             "bare_ops": g.get("bare_aten_ops_per_step"),
             "steps": [s for s in cost["train_steps"] if s["group"] == i and not s["warmup"]]}
            for i, g in enumerate(cost["train_groups"]) if g["setting"] == "plain"]


def measure(methods: Sequence[str], rounds: int = 2, log: Callable[[str], None] = print,
            variants: Sequence[str] = VARIANTS) -> dict[str, Any]:
    """``rounds`` of (before, after) per method (or two other ``variants``), interleaved so that the
    machine's drift (a 2-core VM moved the same matmul's time by up to 2x within a minute) falls on both
    alike; each variant's timed micro-batches are pooled over its rounds, and each is paired with its own
    bare forward + backward."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for method in methods:
            pooled: dict[str, list[dict[str, Any]]] = {}
            for r in range(rounds):
                for variant in variants:
                    log(f"{method} ({variant}, round {r + 1} of {rounds}) ...")
                    fit = train(method, variant, Path(tmp) / f"{method}-{variant}-{r}")
                    got = pooled.setdefault(variant, [dict(g, steps=[]) for g in fit])
                    for mine, g in zip(got, fit):
                        mine["steps"] += g["steps"]
            rows += [_row(method, variant, g) for variant in variants for g in pooled[variant]]
    return {"schema": 1, "backbone": "tiny_bart_reader", "data": "synthetic", "lengths": list(LENGTHS),
            "rounds": rounds, "torch_threads": torch.get_num_threads(), "variants": list(variants), "rows": rows,
            "comparison": compare(rows, *variants)}


def _row(method: str, variant: str, fit: dict[str, Any]) -> dict[str, Any]:
    steps = fit["steps"]
    p25, step, p75 = cost_fit.quartiles([s["time_s"] for s in steps])
    b25, base, b75 = cost_fit.quartiles([s["bare_s"] for s in steps])
    o25, over, o75 = cost_fit.quartiles([s["time_s"] - s["bare_s"] for s in steps])
    phases = {k: statistics.median(s["phases"][k] for s in steps) for k in steps[0]["phases"]}
    return {"method": method, "variant": variant, "tokens": round(fit["tokens"]), "timed": len(steps),
            "step_s": step, "step_iqr_s": p75 - p25, "bare_s": base, "bare_iqr_s": b75 - b25,
            "overhead_s": over, "overhead_iqr_s": o75 - o25, "overhead_share": over / step, "phases": phases,
            "ops_per_step": fit["ops"], "bare_ops": fit["bare_ops"]}


def compare(rows: list[dict[str, Any]], old: str = "before", new: str = "after") -> list[dict[str, Any]]:
    """Per method and length: the overhead of ``old`` and ``new`` (the ``*_before``/``*_after`` keys, whichever
    variants they are: each row's ``variants`` names them), and by how much it fell."""
    by = {(r["method"], r["tokens"] // 64, r["variant"]): r for r in rows}  # lengths match to within 64 tokens
    out = []
    for (method, bucket, variant), before in by.items():
        after = by.get((method, bucket, new))
        if variant != old or after is None:
            continue
        out.append({"method": method, "tokens": after["tokens"], "variants": [old, new],
                    "overhead_before_s": before["overhead_s"],
                    "overhead_after_s": after["overhead_s"], "share_before": before["overhead_share"],
                    "share_after": after["overhead_share"],
                    "fell_x": before["overhead_s"] / after["overhead_s"] if after["overhead_s"] > 0 else None,
                    "step_before_s": before["step_s"], "step_after_s": after["step_s"],
                    "ops_before": before["ops_per_step"], "ops_after": after["ops_per_step"]})
    return out


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{1000 * x:.1f}"


def render(doc: dict[str, Any]) -> str:
    variants = doc.get("variants", VARIANTS)
    target, warm = ("make bench-step-compiled", "3 untimed (compiled: 4)") if COMPILED in variants \
        else ("make bench-step", "3 untimed")
    lines = ["# The training step's framework overhead (CPU proxy)", "",
             f"{doc['backbone']} on {doc['data']} documents, {doc['torch_threads']} torch threads, "
             f"{doc['machine']}, {doc['when']}; written by `{target}` ({Path(__file__).name}'s docstring "
             f"says how). Per micro-batch: the steady-state step through Lightning's fit ({warm}, 10 timed: "
             "per round; the rounds' timed micro-batches pooled: median and IQR, ms), the bare forward + backward of the "
             "same tensors right after each, the median of the pairs' differences (the framework's overhead) and the operators dispatched (`aten::` calls, the step's whole cycle).", "",
             "| method | variant | tokens | step ms (IQR) | bare fwd+bwd ms (IQR) | overhead ms | share "
             "| data / forward / backward / optimiser / other ms | ops/step | bare ops |", "|" + "---|" * 10]
    for r in doc["rows"]:
        ph = r["phases"]
        lines.append(f"| {r['method']} | {r['variant']} | {r['tokens']:,} | {_ms(r['step_s'])} ({_ms(r['step_iqr_s'])}) "
                     f"| {_ms(r['bare_s'])} ({_ms(r['bare_iqr_s'])}) | {_ms(r['overhead_s'])} "
                     f"| {100 * r['overhead_share']:.0f}% | "
                     + " / ".join(_ms(ph[k]) for k in ("data", "forward", "backward", "optimizer", "other"))
                     + f" | {r['ops_per_step']:,} | {r['bare_ops']:,} |")
    old, new = variants
    lines += ["", f"{old.capitalize()} and {new}, in the same run:", "",
              f"| method | tokens | overhead {old} -> {new} ms | share {old} -> {new} | fell | step {old} -> "
              f"{new} ms | ops/step {old} -> {new} |", "|" + "---|" * 7]
    for c in doc["comparison"]:
        fell = "–" if c["fell_x"] is None else f"{c['fell_x']:.1f}x"
        lines.append(f"| {c['method']} | {c['tokens']:,} | {_ms(c['overhead_before_s'])} -> {_ms(c['overhead_after_s'])} "
                     f"| {100 * c['share_before']:.0f}% -> {100 * c['share_after']:.0f}% | {fell} "
                     f"| {_ms(c['step_before_s'])} -> {_ms(c['step_after_s'])} | {c['ops_before']:,} -> {c['ops_after']:,} |")
    return "\n".join([*lines, ""])


def main(argv: Sequence[str] | None = None) -> int:
    keep_freed_memory()
    ap = argparse.ArgumentParser(prog="bench_step", description="The training step's framework overhead on the CPU.")
    ap.add_argument("--methods", default="scaleformer_middle,sled,truncation", help="comma-separated methods")
    ap.add_argument("--out", default=str(Path("results") / "bench"), help="output folder")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved (before, after) rounds per method")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: the steadiest timings, as cpu-tiny)")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"the two variants set against each other, old first (before, after, {COMPILED})")
    ap.add_argument("--name", default="step-overhead", help="the results files' name (NAME.json, NAME.md)")
    args = ap.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    if len(variants) != 2 or len(set(variants)) != 2 or set(variants) - {*VARIANTS, COMPILED}:
        print(f"error: --variants={args.variants}: must name two of before, after, {COMPILED}", file=sys.stderr)
        return 2
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.name):
        print(f"error: --name={args.name}: must be a file name (letters, digits, '.', '_', '-')", file=sys.stderr)
        return 2
    for flag in ("threads", "rounds"):
        if getattr(args, flag) < 1:
            print(f"error: --{flag}={getattr(args, flag)}: must be >= 1", file=sys.stderr)
            return 2
    torch.set_num_threads(args.threads)
    methods = [m for m in args.methods.split(",") if m]
    started = time.time()
    doc = measure(methods, args.rounds, log=lambda s: print(s, flush=True), variants=variants)
    doc |= {"machine": machine(), "when": time.strftime("%Y-%m-%d"), "wall_time_s": round(time.time() - started, 1)}
    out = Path(args.out)
    atomic_write_text(out / f"{args.name}.json", json.dumps(doc, indent=1) + "\n")
    atomic_write_text(out / f"{args.name}.md", render(doc))
    print(render(doc))
    print(f"wrote {out}/{args.name}.{{json,md}} in {doc['wall_time_s']:.0f} s")
    return 0
