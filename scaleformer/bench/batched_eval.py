"""Batched evaluation on the CPU: documents per second of 32 test ledgers, one at a time against batched.

A decoding step of the tiny reader is nearly all per-token overhead (the generate loop, beam bookkeeping,
a few dozen small launches per layer), which documents decoded together share. This measures it where a
researcher meets it: :class:`~scaleformer.export.summarizer.Summarizer` over the test ledgers of the
tiny table's 2.5k column (the path a run's evaluation, the Hugging Face class and the Summarizer share:
length-sorted batches, beam-shared cross-attention), for each method at 1 and 4 beams, with every
document forced to ``new_tokens`` tokens (``min_new_tokens = max_new_tokens``) so that batch sizes are
compared on the same work (``--stop eos``: each stops at its end of sequence, as the tiny table's
evaluation decodes, 4 beams and up to 128 tokens; a batch then runs as long as its longest summary).
Each batch size runs in the same process on the same documents; one untimed pass, then ``repeats`` timed
passes (the sizes taking turns), median and IQR of a pass's documents per second, and of an encoder-only
pass over the same batches: what batching cannot share (a chunked method encodes several chunks per
document), so one-at-a-time time over it bounds the speed-up. The summaries of every batch size are
checked to be the ones the documents get alone; where one differs, both summaries' beam scores are
recorded (a gap at float32 rounding, ~1e-7, is a tie that the batch's other kernel shapes broke the
other way, not a changed search).

With forced tokens each batch size also gets its read floor: the bytes its decoding steps must read
(:mod:`scaleformer.bench.floor`: the decoder's weights once per step of a batch, each document's own
cross-attention keys/values over its real states, the self-attention cache) over the copy bandwidth
measured in the same process. Batching shares the weights' reads, not a document's keys/values, so the
encoder-only pass plus this floor is the least a pass can take, and one-at-a-time time over it bounds the
speed-up tighter than the encoder alone (the cross-attention projections and the decoder's matmuls are
left out, so it is still a bound).

    python -m scaleformer.bench.batched_eval [--methods truncation,sled,scaleformer_middle] [--beams 1,4]
        [--new-tokens 64] [--stop forced|eos] [--tag NAME] [--out results/bench]
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

from scaleformer.bench.floor import kv_bytes, weight_bytes
from scaleformer.compose import compose_config
from scaleformer.config import GenerationConfig
from scaleformer.data.sampler import length_sorted_batches
from scaleformer.data.synthetic import split_rows
from scaleformer.export.summarizer import Summarizer
from scaleformer.io import atomic_write_text
from scaleformer.model.backbone import build_model, prepare
from scaleformer.model.hf import ScaleformerForConditionalGeneration
from scaleformer.ops.decoding import generation_kwargs
from scaleformer.ops.host_memory import DEFAULTS, heap, keep_freed_memory
from scaleformer.ops.measure import copy_bandwidth
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


def summarizer(method: str, beams: int, new_tokens: int, forced: bool = True) -> Summarizer:
    """The tiny reader read through ``method`` at ``beams`` beams, decoding exactly ``new_tokens`` tokens
    (``forced``) or up to them, stopping at the end of sequence."""
    rc = to_config(compose_config(["backbone=tiny_bart_reader", f"method={method}"], str(conf_dir())))
    prep = prepare(rc.backbone, rc.method)
    model = ScaleformerForConditionalGeneration.from_parts(build_model(rc.backbone, prep.conf), prep.method)
    gen = GenerationConfig(num_beams=beams, max_new_tokens=new_tokens, min_new_tokens=new_tokens if forced else 0)
    return Summarizer(model, prep.tokenizer, gen)


def encode_pass(s: Summarizer, ids: list[list[int]], size: int) -> list[torch.Tensor]:
    """The encoder's share of a pass: every batch of ``size`` encoded as the Summarizer's would be.
    Returns each batch's encoder mask ``[batch, T]`` (what its decoder cross-attends to; read only outside
    the timed passes)."""
    with torch.no_grad():
        return [s.model.encode(*s.padded([ids[i] for i in idx]), training=False).mask
                for idx in length_sorted_batches([len(d) for d in ids], size)]


def read_floor_s(s: Summarizer, masks: list[torch.Tensor], new_tokens: int, bandwidth: float) -> float:
    """Seconds a pass's decoding cannot beat at ``bandwidth`` bytes/s: per batch (``masks``: its encoder
    mask ``[batch, T]``), ``new_tokens`` steps, each reading the decoder's weights once, every document's
    cross-attention keys/values over its real states once (beams share them) and the beams' self-attention
    cache at the mean decoded length (:mod:`scaleformer.bench.floor`)."""
    model, beams = s.model.backbone, s.generation.num_beams
    elem = next(model.parameters()).element_size()
    total = 0.0
    for mask in masks:
        rows = mask.shape[0] * beams
        step = (weight_bytes(model, rows)["total"] + kv_bytes(model.config, int(mask.sum()), elem)
                + kv_bytes(model.config, (new_tokens + 1) / 2, elem, rows))
        total += new_tokens * step
    return total / bandwidth


Passes = tuple[list[float], list[float], list[str], list[torch.Tensor]]


def timed_passes(s: Summarizer, docs: list[str], sizes: Sequence[int], repeats: int) -> dict[int, Passes]:
    """Per batch size: seconds of ``repeats`` passes over ``docs`` (after an untimed one), of as many
    encoder-only passes, its summaries and its batches' encoder masks. The sizes take turns
    within each repetition, so the machine's drift falls on all of them alike."""
    ids = [s.token_ids(t) for t in docs]
    out: dict[int, Passes] = {}
    for size in sizes:
        s.batch_size = size
        summaries = s.summarize(docs)
        out[size] = ([], [], summaries, encode_pass(s, ids, size))
    for _ in range(repeats):
        for size in sizes:
            s.batch_size = size
            t0 = time.perf_counter()
            s.summarize(docs)
            t1 = time.perf_counter()
            encode_pass(s, ids, size)
            out[size][0].append(t1 - t0)
            out[size][1].append(time.perf_counter() - t1)
    return out


def beam_scores(s: Summarizer, ids: list[list[int]], size: int, which: list[int]) -> list[dict[str, Any]]:
    """For each document in ``which`` (``ids``: every document's tokens): its best beam score alone and in
    its batch of ``size`` (None at one beam, which has no sequence score)."""
    if s.generation.num_beams == 1 or not which:
        return [{"doc": i, "alone": None, "batched": None} for i in which]
    kw = {**generation_kwargs(s.generation), "output_scores": True, "return_dict_in_generate": True}
    batches = length_sorted_batches([len(d) for d in ids], size)
    out = []
    for i in which:
        idx = next(b for b in batches if i in b)
        alone = s.model.generate(*s.padded([ids[i]]), **kw).sequences_scores[0]
        batched = s.model.generate(*s.padded([ids[j] for j in idx]), **kw).sequences_scores[idx.index(i)]
        out.append({"doc": i, "alone": float(alone), "batched": float(batched)})
    return out


def measure(methods: Sequence[str], n_docs: int = 32, beams: Sequence[int] = (1, 4), new_tokens: int = 64,
            sizes: Sequence[int] = SIZES, repeats: int = 10, forced: bool = True,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    rows = []
    docs = ledgers(n_docs)
    # the floor's denominator, measured once in this process before any pass (forced tokens only)
    bandwidth = copy_bandwidth(torch.device("cpu")) if forced else None
    for method in methods:
        for b in beams:
            s = summarizer(method, b, new_tokens, forced)
            passes = timed_passes(s, docs, sizes, repeats)
            alone = passes[sizes[0]][2]
            for size, (times, enc_times, out, masks) in passes.items():
                p25, med, p75 = cost_fit.quartiles([n_docs / t for t in times])
                differ = [i for i, (x, y) in enumerate(zip(out, alone)) if x != y]
                rows.append({"method": method, "beams": b, "batch": size, "docs_per_s": med, "docs_per_s_iqr": p75 - p25,
                             "pass_s": cost_fit.quartiles(times)[1], "encode_s": cost_fit.quartiles(enc_times)[1],
                             "read_floor_s": read_floor_s(s, masks, new_tokens, bandwidth["bytes_per_s"])
                             if bandwidth else None,
                             "timed": len(times), "same_summaries": not differ,
                             "summary_tokens_mean": sum(len(s.tokenizer(x, add_special_tokens=False)["input_ids"]) for x in out) / n_docs,
                             "differing": beam_scores(s, [s.token_ids(t) for t in docs], size, differ)})
                log(f"{method}, {b} beam(s), batch {size}: {med:.2f} docs/s (IQR {p75 - p25:.2f})")
    return {"schema": 2, "backbone": "tiny_bart_reader", "data": f"{n_docs} test ledgers (~2.5k tokens)",
            "new_tokens": new_tokens, "stop": "forced" if forced else "eos", "repeats": repeats,
            "torch_threads": torch.get_num_threads(), "machine": machine(), "bandwidth": bandwidth, "rows": rows,
            "speedups": speedups(rows)}


def speedups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per method and beams: the best batch's documents per second over one at a time's."""
    out = []
    for key in dict.fromkeys((r["method"], r["beams"]) for r in rows):
        mine = [r for r in rows if (r["method"], r["beams"]) == key]
        one = next((r for r in mine if r["batch"] == 1), None)
        best = max(mine, key=lambda r: r["docs_per_s"])
        if one is not None:
            # batching shares the decoding, not the encoder: one at a time's pass over the encoder-only
            # pass at the best batch is the most it can give
            bound = one["pass_s"] / best["encode_s"] if best.get("encode_s") else None
            # ... and each document's own cross-attention reads, which no batch shares, bound it tighter
            least = best["encode_s"] + best["read_floor_s"] if best.get("encode_s") and best.get("read_floor_s") \
                else None
            out.append({"method": key[0], "beams": key[1], "one_at_a_time": one["docs_per_s"], "best_batch": best["batch"],
                        "best": best["docs_per_s"], "speedup": best["docs_per_s"] / one["docs_per_s"],
                        "encoder_share_best": best["encode_s"] / best["pass_s"] if best.get("encode_s") else None,
                        "encoder_bound": bound, "read_bound": one["pass_s"] / least if least else None})
    return out


def _same(r: dict[str, Any]) -> str:
    if r["same_summaries"]:
        return "yes"
    gaps = [abs(d["alone"] - d["batched"]) for d in r.get("differing", []) if d["alone"] is not None]
    n = len(r.get("differing", [])) or "some"
    return f"NO ({n}; beam-score gap {max(gaps):.1e})" if gaps else f"NO ({n})"


def _opt(v: float | None, fmt: str, scale: float = 1.0, unit: str = "") -> str:
    return "" if v is None else format(scale * v, fmt) + unit


def _machine(result: dict[str, Any]) -> str:
    """The machine with its CPU heap (records from before ``machine`` named it have ``host_memory``, or ran
    before the setting existed: glibc's defaults)."""
    m = result["machine"]
    return m if "CPU heap" in m else f"{m}; CPU heap: {result.get('host_memory', DEFAULTS)}"


def markdown(result: dict[str, Any]) -> str:
    forced = result.get("stop", "forced") == "forced"
    stop = f"{result['new_tokens']} tokens per document (forced)" if forced else \
        f"up to {result['new_tokens']} tokens per document, each stopping at its end of sequence"
    lines = [f"# Batched evaluation on the CPU ({result['backbone']}, {result['data']})", "",
             f"Generated by `python -m scaleformer.bench.batched_eval`: {stop}, one untimed pass then "
             f"{result['repeats']} timed passes per batch size, median (IQR) of documents per second, and of an "
             f"encoder-only pass over the same batches (what batching cannot share); {result['torch_threads']} "
             f"torch threads, {_machine(result)} "
             "(`scaleformer.ops.host_memory`). Same process, same documents; `same` says whether every summary "
             "equals the one its document gets alone (where not: how many, and the largest gap between the "
             "document's best beam score alone and in its batch). The bound from the encoder is one at a time's "
             "pass over the best batch's encoder-only pass: batching cannot go past it, and each document's own "
             "cross-attention reads lower it further." + _reads(result), "",
             "| method | beams | batch | docs/s | IQR | pass s | encoder s | read floor s | summary tokens | same |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['beams']} | {r['batch']} | {r['docs_per_s']:.2f} | {r['docs_per_s_iqr']:.2f} | "
              f"{r['pass_s']:.2f} | {_opt(r.get('encode_s'), '.2f')} | {_opt(r.get('read_floor_s'), '.2f')} | "
              f"{_opt(r.get('summary_tokens_mean'), '.1f')} | {_same(r)} |" for r in result["rows"]]
    lines += ["", "| method | beams | one at a time docs/s | best batch | docs/s | speed-up | encoder share at best "
              "| bound from the encoder | bound from the encoder + reads |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {s['method']} | {s['beams']} | {s['one_at_a_time']:.2f} | {s['best_batch']} | {s['best']:.2f} | "
              f"{s['speedup']:.2f}x | {_opt(s.get('encoder_share_best'), '.0f', 100, '%')} | "
              f"{_opt(s.get('encoder_bound'), '.2f', unit='x')} | {_opt(s.get('read_bound'), '.2f', unit='x')} |"
              for s in result["speedups"]]
    return "\n".join(lines) + "\n"


def _reads(result: dict[str, Any]) -> str:
    """The read floor's sentence: what it counts, at what bandwidth (none for records without one)."""
    bw = result.get("bandwidth")
    if not bw:
        return ""
    return (f" The read floor is the bytes a pass's decoding steps must read (the decoder's weights once per step "
            f"of a batch, each document's cross-attention keys/values over its real states, once however many "
            f"beams, the self-attention cache) over this process's copy bandwidth, {bw['gb_per_s']:.1f} GB/s "
            f"(read + write, median of {bw['repeats']} copies of {bw['size_bytes'] // 2**20} MiB); the encoder-only "
            f"pass plus it is the least a pass can take, and one at a time's pass over that bounds the speed-up "
            f"(the cross-attention projections and the decoder's matmuls are left out, so it is still a bound).")


def main(argv: Sequence[str] | None = None) -> int:
    keep_freed_memory()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="truncation,sled,scaleformer_middle")
    ap.add_argument("--docs", type=int, default=32)
    ap.add_argument("--beams", default="1,4")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--stop", choices=("forced", "eos"), default="forced",
                    help="forced: every document exactly --new-tokens tokens; eos: up to them, as evaluation decodes")
    ap.add_argument("--tag", default="", help="results/bench/batched-eval-cpu-TAG.{json,md} (default: no suffix)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default="results/bench")
    args = ap.parse_args(argv)
    for flag, v in (("--docs", args.docs), ("--new-tokens", args.new_tokens), ("--repeats", args.repeats)):
        if v < 1:
            raise SystemExit(f"error: {flag}={v}: must be >= 1")
    try:
        beams = [int(b) for b in args.beams.split(",")]
    except ValueError:
        raise SystemExit(f"error: --beams={args.beams!r}: a comma-separated list of integers >= 1") from None
    if not beams or min(beams) < 1:
        raise SystemExit(f"error: --beams={args.beams!r}: a comma-separated list of integers >= 1")
    if args.tag and not args.tag.replace("-", "").isalnum():
        raise SystemExit(f"error: --tag={args.tag!r}: letters, digits and '-' only (it names the results files)")
    result = measure(args.methods.split(","), args.docs, beams, new_tokens=args.new_tokens, repeats=args.repeats,
                     forced=args.stop == "forced", log=lambda line: print(line, file=sys.stderr, flush=True))
    result["host_memory"] = heap()
    out, name = Path(args.out), "batched-eval-cpu" + (f"-{args.tag}" if args.tag else "")
    atomic_write_text(out / f"{name}.json", json.dumps(result, indent=1) + "\n")
    atomic_write_text(out / f"{name}.md", markdown(result))
    print(out / f"{name}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
