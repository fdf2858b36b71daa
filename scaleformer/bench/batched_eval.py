"""Batched evaluation on the CPU: documents per second of 32 test ledgers, one at a time against batched.

A decoding step of the tiny reader is nearly all per-token overhead (the generate loop, beam bookkeeping,
a few dozen small launches per layer), which documents decoded together share. This measures it where a
researcher meets it: :class:`~scaleformer.export.summarizer.Summarizer` over the test ledgers of the
tiny table's 2.5k column (the path a run's evaluation, the Hugging Face class and the Summarizer share:
length-sorted batches, beam-shared cross-attention), for each method at 1 and 4 beams, with every
document forced to ``new_tokens`` tokens (``min_new_tokens = max_new_tokens``) so that batch sizes are
compared on the same work. Each batch size runs in the same process on the same documents; one untimed
pass, then ``repeats`` timed passes (the sizes taking turns), median and IQR of a pass's documents per
second. The summaries of every batch size are checked to be the ones the documents get alone.

    python -m scaleformer.bench.batched_eval [--methods truncation,sled,scaleformer_middle] [--out results/bench]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from scaleformer.compose import compose_config
from scaleformer.config import GenerationConfig
from scaleformer.data.synthetic import split_rows
from scaleformer.export.summarizer import Summarizer
from scaleformer.io import atomic_write_text
from scaleformer.model.backbone import build_model, prepare
from scaleformer.model.hf import ScaleformerForConditionalGeneration
from scaleformer.resources import conf_dir
from scaleformer.runs import cost_fit
from scaleformer.runs.context import to_config
from scaleformer.runs.runtime import machine

# The tiny tables' 2.5k test ledgers (conf/data/ledgers_short.yaml: 2,200 words, their own seed).
WORDS, SEED = 2200, 20261126
SIZES = (1, 8, 16)  # 1 first: the summaries every other size must equal


def ledgers(n: int) -> list[str]:
    """The first ``n`` distinct test ledgers."""
    seen: dict[str, str] = {}
    for row in split_rows("test", n + n // 2, WORDS, seed=SEED):
        seen.setdefault(row["id"], row["input"])
    return list(seen.values())[:n]


def summarizer(method: str, beams: int, new_tokens: int) -> Summarizer:
    """The tiny reader read through ``method``, decoding exactly ``new_tokens`` tokens at ``beams`` beams."""
    rc = to_config(compose_config(["backbone=tiny_bart_reader", f"method={method}"], str(conf_dir())))
    prep = prepare(rc.backbone, rc.method)
    model = ScaleformerForConditionalGeneration.from_parts(build_model(rc.backbone, prep.conf), prep.method)
    gen = GenerationConfig(num_beams=beams, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    return Summarizer(model, prep.tokenizer, gen)


def timed_passes(s: Summarizer, docs: list[str], sizes: Sequence[int], repeats: int
                 ) -> dict[int, tuple[list[float], list[str]]]:
    """Per batch size: seconds of ``repeats`` passes over ``docs`` (after an untimed one), and its summaries.
    The sizes take turns within each repetition, so the machine's drift falls on all of them alike."""
    out: dict[int, tuple[list[float], list[str]]] = {}
    for size in sizes:
        s.batch_size = size
        out[size] = ([], s.summarize(docs))
    for _ in range(repeats):
        for size in sizes:
            s.batch_size = size
            t0 = time.perf_counter()
            s.summarize(docs)
            out[size][0].append(time.perf_counter() - t0)
    return out


def measure(methods: Sequence[str], n_docs: int = 32, beams: Sequence[int] = (1, 4), new_tokens: int = 64,
            sizes: Sequence[int] = SIZES, repeats: int = 10, log: Callable[[str], None] = print) -> dict[str, Any]:
    rows = []
    docs = ledgers(n_docs)
    for method in methods:
        for b in beams:
            passes = timed_passes(summarizer(method, b, new_tokens), docs, sizes, repeats)
            alone = passes[sizes[0]][1]
            for size, (times, out) in passes.items():
                p25, med, p75 = cost_fit.quartiles([n_docs / t for t in times])
                rows.append({"method": method, "beams": b, "batch": size, "docs_per_s": med, "docs_per_s_iqr": p75 - p25,
                             "pass_s": cost_fit.quartiles(times)[1], "timed": len(times),
                             "same_summaries": out == alone})
                log(f"{method}, {b} beam(s), batch {size}: {med:.2f} docs/s (IQR {p75 - p25:.2f})")
    return {"schema": 1, "backbone": "tiny_bart_reader", "data": f"{n_docs} test ledgers (~2.5k tokens)",
            "new_tokens": new_tokens, "repeats": repeats, "torch_threads": torch.get_num_threads(),
            "machine": machine(), "rows": rows, "speedups": speedups(rows)}


def speedups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per method and beams: the best batch's documents per second over one at a time's."""
    out = []
    for key in dict.fromkeys((r["method"], r["beams"]) for r in rows):
        mine = [r for r in rows if (r["method"], r["beams"]) == key]
        one = next((r for r in mine if r["batch"] == 1), None)
        best = max(mine, key=lambda r: r["docs_per_s"])
        if one is not None:
            out.append({"method": key[0], "beams": key[1], "one_at_a_time": one["docs_per_s"], "best_batch": best["batch"],
                        "best": best["docs_per_s"], "speedup": best["docs_per_s"] / one["docs_per_s"]})
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# Batched evaluation on the CPU ({result['backbone']}, {result['data']})", "",
             f"Generated by `python -m scaleformer.bench.batched_eval`: {result['new_tokens']} tokens per document "
             f"(forced), one untimed pass then {result['repeats']} timed passes per batch size, median (IQR) of "
             f"documents per second; {result['torch_threads']} torch threads, {result['machine']}. Same process, "
             "same documents; `same` says whether every summary equals the one its document gets alone.", "",
             "| method | beams | batch | docs/s | IQR | pass s | same |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['beams']} | {r['batch']} | {r['docs_per_s']:.2f} | {r['docs_per_s_iqr']:.2f} | "
              f"{r['pass_s']:.2f} | {'yes' if r['same_summaries'] else 'NO'} |" for r in result["rows"]]
    lines += ["", "| method | beams | one at a time docs/s | best batch | docs/s | speed-up |", "|---|---|---|---|---|---|"]
    lines += [f"| {s['method']} | {s['beams']} | {s['one_at_a_time']:.2f} | {s['best_batch']} | {s['best']:.2f} | "
              f"{s['speedup']:.2f}x |" for s in result["speedups"]]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="truncation,sled,scaleformer_middle")
    ap.add_argument("--docs", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default="results/bench")
    args = ap.parse_args(argv)
    for flag, v in (("--docs", args.docs), ("--new-tokens", args.new_tokens), ("--repeats", args.repeats)):
        if v < 1:
            raise SystemExit(f"error: {flag}={v}: must be >= 1")
    result = measure(args.methods.split(","), args.docs, new_tokens=args.new_tokens, repeats=args.repeats,
                     log=lambda line: print(line, file=sys.stderr, flush=True))
    out = Path(args.out)
    atomic_write_text(out / "batched-eval-cpu.json", json.dumps(result, indent=1) + "\n")
    atomic_write_text(out / "batched-eval-cpu.md", markdown(result))
    print(out / "batched-eval-cpu.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
