"""Decoding's per-token framework overhead on the CPU: the dynamic self-attention cache against the static one.

Why: on the GPU, generation time hardly grows with the input length (docs/performance.md), so a per-token
cost that does not depend on the cross-attention length dominates decoding: Python, dispatch and the
cache's bookkeeping, step after step. The tiny reader (``conf/backbone/tiny_bart_reader.yaml``: 3+3
layers of width 128, 1,738 tokens) computes next to nothing per step, so on a CPU its milliseconds per token are that
overhead, and the operators dispatched per token are what a GPU would launch.

What: the framework's own generation path (:func:`scaleformer.ops.decoding.generate`, beam-shared
cross-attention) on one encoded document, at 1 and 4 beams, with the output length forced
(``min_new_tokens = max_new_tokens``), eager with the dynamic cache and with ``cache_implementation="static"``
(:mod:`scaleformer.ops.static_decoding`; a CPU never compiles). Per setting: one untimed warm-up, one
untimed run under ``torch.profiler`` (operators per token, :func:`scaleformer.ops.measure.count_ops`),
then ``repeats`` timed runs, the settings interleaved run by run so that a shared machine's drift falls
on all alike; median and IQR of the milliseconds per generated token (the run's time over the forced
length; the encoder is outside it). Both caches' token sequences are compared. ``dynamic (before)`` is the
default path as it was before argument binding cached its signatures (each cross-attention call of each
layer computed its stock function's signature afresh, :mod:`scaleformer.ops.binding`): the default's
before and after, in the same run.

    python -m scaleformer.bench.decode_overhead --out results/bench/decode-overhead-cpu.json [--repeats 20]
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from scaleformer.config import BackboneConfig
from scaleformer.io import atomic_write_text
from scaleformer.model.backbone import build_model, prepare
from scaleformer.ops import binding, decoding, step_decoding
from scaleformer.ops.host_memory import keep_freed_memory
from scaleformer.ops.measure import Timing, count_dispatches, count_ops
from scaleformer.resources import conf_dir, resolve_asset
from scaleformer.runs.runtime import machine

SCHEMA = 3
BEFORE = "dynamic (before)"
STEP, COMPILED = "step", "step (compiled)"  # scaleformer.ops.step_decoding, eager and through inductor
CACHES = (BEFORE, "dynamic", "static", STEP, COMPILED)


def _variant(cache: str) -> Any:
    """``dynamic (before)`` binds with a signature computed per call, as the path did; else nothing."""
    if cache == BEFORE:
        return mock.patch.object(binding, "_signature_object", inspect.signature)
    return contextlib.nullcontext()


def load_reader(backbone: str = "tiny_bart_reader") -> Any:
    """The shipped reader of ``conf/backbone/<backbone>.yaml``, in eval mode, with its attention setting;
    a shape without weights (``bart_base_shape``) with random ones, seeded."""
    from omegaconf import OmegaConf
    from transformers import AutoModelForSeq2SeqLM

    cfg = OmegaConf.load(conf_dir() / "backbone" / f"{backbone}.yaml")
    impl = cfg.get("attn_implementation") or "sdpa"
    if cfg.get("pretrained") is None:
        conf = BackboneConfig(**OmegaConf.to_container(cfg))  # type: ignore[arg-type]
        torch.manual_seed(0)
        return build_model(conf, prepare(conf).conf).eval()
    return AutoModelForSeq2SeqLM.from_pretrained(resolve_asset(cfg.pretrained), attn_implementation=impl,
                                                 use_safetensors=True).eval()  # data, never code


def encoded(model: Any, doc_tokens: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """One random document of ``doc_tokens`` ids, encoded: states ``[1, T, d]`` and mask ``[1, T]``."""
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    ids = torch.randint(4, vocab, (1, doc_tokens), generator=g)
    ids[0, 0], ids[0, -1] = model.config.bos_token_id or 0, model.config.eos_token_id or 2
    mask = torch.ones_like(ids)
    with torch.no_grad():
        hidden = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
    return hidden, mask


def settings(beams: int, new_tokens: int, cache: str, no_repeat_ngram_size: int) -> dict[str, Any]:
    kw = {"num_beams": beams, "max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False,
          "no_repeat_ngram_size": no_repeat_ngram_size}
    if beams > 1:
        kw["early_stopping"] = True
    if cache == "static":  # BEFORE and dynamic: the default, dynamic cache
        kw["cache_implementation"] = "static"
    return kw


def operators(run: Callable[[], Any], tokens: int) -> dict[str, float | None]:
    """Operators dispatched per generated token over one whole run (profiled, untimed)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    counts, dispatch = count_ops(prof), count_dispatches(prof)
    return {"aten_ops_per_token": counts["aten_ops_per_step"] / tokens,
            "top_level_ops_per_token": counts["top_level_ops_per_step"] / tokens,
            "dispatched_per_token": dispatch["dispatched"] / tokens, "graphs_per_token": dispatch["graphs"] / tokens,
            "ops_inside_graphs_per_token": dispatch["inside_graphs"] / tokens}


def measure(beams_list: Sequence[int] = (1, 4), new_tokens: int = 64, repeats: int = 10, doc_tokens: int = 1024,
            no_repeat_ngram_size: int = 0, backbone: str = "tiny_bart_reader",
            log: Callable[[str], None] = print, caches: Sequence[str] = CACHES) -> dict[str, Any]:
    """Every (beams, cache) setting: ``repeats`` timed runs each, interleaved; records and comparisons."""
    model = load_reader(backbone)
    hidden, mask = encoded(model, doc_tokens)
    runs: dict[tuple[int, str], Callable[[], Any]] = {}
    for beams in beams_list:
        for cache in caches:
            kw = settings(beams, new_tokens, cache, no_repeat_ngram_size)
            def run(kw: dict[str, Any] = kw, cache: str = cache) -> Any:
                if cache in (STEP, COMPILED):
                    return step_decoding.generate(model, hidden, mask, compile="inductor" if cache == COMPILED
                                                  else None, **kw)
                with _variant(cache):
                    return decoding.generate(model, hidden, mask, **kw)

            runs[(beams, cache)] = run
    records: dict[tuple[int, str], dict[str, Any]] = {}
    with torch.no_grad():
        for key, run in runs.items():
            out = run()  # warm-up: first-call costs (allocator growth, lazy imports) stay out of the timings
            records[key] = {"beams": key[0], "cache": key[1], "new_tokens": int(out.shape[-1] - 1),
                            "sequences": out, **operators(run, new_tokens)}
            log(f"beams={key[0]} cache={key[1]}: {records[key]['aten_ops_per_token']:.0f} aten ops/token")
        times: dict[tuple[int, str], list[float]] = {k: [] for k in runs}
        for r in range(repeats):
            for key, run in runs.items():
                t0 = time.perf_counter()
                run()
                times[key].append(time.perf_counter() - t0)
            log(f"repeat {r + 1} of {repeats} done")
    same = {key: torch.equal(rec["sequences"], records[(key[0], "dynamic")]["sequences"]) for key, rec in records.items()}
    rows = []
    for key, rec in records.items():
        s = Timing(tuple(times[key])).summary()
        per = 1e3 / new_tokens
        rows.append({**{k: v for k, v in rec.items() if k != "sequences"}, "forced_new_tokens": new_tokens,
                     "repeats": s["repeats"],
                     "ms_per_token": s["time_s"] * per, "ms_per_token_p25": s["time_p25_s"] * per,
                     "ms_per_token_p75": s["time_p75_s"] * per, "ms_per_token_iqr": s["time_iqr_s"] * per,
                     "ms_per_token_min": s["time_min_s"] * per, "run_time_s": s["time_s"], "times_s": s["times_s"],
                     "tokens_equal_dynamic": same[key]})
    return {"schema": SCHEMA, "backbone": backbone, "doc_tokens": doc_tokens, "batch": 1,
            "forced_new_tokens": new_tokens, "no_repeat_ngram_size": no_repeat_ngram_size,
            "torch_threads": torch.get_num_threads(), "rows": rows, "comparison": pairs(rows, "dynamic", "static"),
            "before_after": pairs(rows, BEFORE, "dynamic"), "step": pairs(rows, "dynamic", STEP),
            "step_compiled": pairs(rows, "dynamic", COMPILED)}


def pairs(rows: list[dict[str, Any]], first: str, second: str) -> list[dict[str, Any]]:
    """Setting ``second`` against ``first`` at each beam count where both ran: ms and operators per token,
    their ratios (second over first), and whether their tokens are the same."""
    by = {(r["beams"], r["cache"]): r for r in rows}
    out = []
    for beams in sorted({r["beams"] for r in rows}):
        a, b = by.get((beams, first)), by.get((beams, second))
        if a is None or b is None:
            continue
        out.append({"beams": beams, "first": first, "second": second,
                    "ms_per_token": [a["ms_per_token"], b["ms_per_token"]],
                    "time_ratio": b["ms_per_token"] / a["ms_per_token"],
                    "aten_ops_per_token": [a["aten_ops_per_token"], b["aten_ops_per_token"]],
                    "ops_ratio": b["aten_ops_per_token"] / a["aten_ops_per_token"],
                    "dispatched_per_token": [a["dispatched_per_token"], b["dispatched_per_token"]],
                    "dispatched_ratio": b["dispatched_per_token"] / a["dispatched_per_token"],
                    "tokens_equal": a["tokens_equal_dynamic"] and b["tokens_equal_dynamic"]})
    return out


def _pairs_table(title: str, pairs_: list[dict[str, Any]]) -> list[str]:
    if not pairs_:
        return []
    a, b = pairs_[0]["first"], pairs_[0]["second"]
    lines = ["", title, "", f"| beams | ms/token {a} -> {b} | time ratio | dispatched ops/token {a} -> {b} | "
             "ops ratio | same tokens |", "|---|---|---|---|---|---|"]
    for c in pairs_:
        (ta, tb), (oa, ob) = c["ms_per_token"], c["dispatched_per_token"]
        lines.append(f"| {c['beams']} | {ta:.2f} -> {tb:.2f} | {c['time_ratio']:.2f}x | {oa:,.0f} -> {ob:,.0f} | "
                     f"{c['dispatched_ratio']:.2f}x | {'yes' if c['tokens_equal'] else 'NO'} |")
    return lines


def render(doc: dict[str, Any]) -> str:
    load = doc.get("load_average")
    lines = [
        "# Decoding's per-token overhead (CPU proxy): transformers' loop, the static cache and the decoding step", "",
        f"{doc['backbone']} ({'compute is next to nothing per step, so ms/token is the framework per-token overhead' if doc['backbone'] == 'tiny_bart_reader' else 'random weights: the operators carry over to a GPU, the ms are this CPU arithmetic'}"
        f"), one encoded document of {doc['doc_tokens']:,} tokens, batch {doc['batch']}, "
        f"{doc['forced_new_tokens']} new tokens forced (min_new_tokens = max_new_tokens), no_repeat_ngram_size "
        f"{doc['no_repeat_ngram_size']}; {doc['machine']}, torch {doc['torch']}, transformers {doc['transformers']}"
        + (f", load average {', '.join(f'{x:.2f}' for x in load)} at the start" if load else "")
        + f"; {doc['when']}, {doc['wall_time_s']:.0f} s. Written by `make bench-decode` "
        "(`python -m scaleformer.bench.decode_overhead`; its docstring says how). A busy 2-core shared machine: "
        "read the IQR before a difference. Per setting: one untimed warm-up, one untimed profiled run "
        f"(`aten::` operators per token), then {doc['rows'][0]['repeats'] if doc['rows'] else 0} timed runs, the "
        "settings interleaved; median and IQR (ms per generated token = run time / forced length; the "
        "encoder is outside it). transformers' loop runs eager with either cache; `step` is scaleformer's decoding "
        "step (`scaleformer.ops.step_decoding`), eager and compiled whole by inductor (its warm-up compiles). "
        "Dispatched ops: `aten::` operators outside compiled graphs plus one per graph call (a compiled graph "
        "counts as one); the `aten::` calls a graph still makes inside (inductor's extern kernels, e.g. `mm`) beside it.", "",
        "| beams | decoding | ms/token (IQR) | min | dispatched ops/token | aten ops/token (inside graphs) | "
        "top-level ops/token | tokens = dynamic's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        lines.append(f"| {r['beams']} | {r['cache']} | {r['ms_per_token']:.2f} ({r['ms_per_token_iqr']:.2f}) | "
                     f"{r['ms_per_token_min']:.2f} | {r['dispatched_per_token']:,.0f} | {r['aten_ops_per_token']:,.0f} "
                     f"({r['ops_inside_graphs_per_token']:,.0f}) | {r['top_level_ops_per_token']:,.0f} | "
                     f"{'yes' if r['tokens_equal_dynamic'] else 'NO'} |")
    lines += _pairs_table("The decoding step, eager, against transformers' loop (dynamic cache):", doc.get("step", []))
    lines += _pairs_table("The decoding step compiled against transformers' loop (dynamic cache):",
                          doc.get("step_compiled", []))
    lines += _pairs_table("Static against dynamic:", doc["comparison"])
    lines += _pairs_table("The default (dynamic) path, before and after argument binding cached its signatures:",
                          doc.get("before_after", []))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    keep_freed_memory()
    ap = argparse.ArgumentParser(prog="python -m scaleformer.bench.decode_overhead",
                                 description="Decoding's per-token overhead on the CPU: dynamic vs static cache.")
    ap.add_argument("--out", default=str(Path("results") / "bench" / "decode-overhead-cpu.json"),
                    help="results file (.json; the .md table is written beside it)")
    ap.add_argument("--beams", default="1,4", help="comma-separated beam counts")
    ap.add_argument("--new-tokens", type=int, default=64, help="forced output length (min = max new tokens)")
    ap.add_argument("--repeats", type=int, default=20, help="timed runs per setting (>= 1)")
    ap.add_argument("--doc-tokens", type=int, default=1024, help="the encoded document's length")
    ap.add_argument("--no-repeat-ngram-size", type=int, default=0, help="n-gram blocking (0: off)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: the steadiest timings)")
    ap.add_argument("--backbone", default="tiny_bart_reader", help="conf/backbone option (bart_base_shape: random)")
    ap.add_argument("--caches", default=",".join(CACHES), help=f"comma-separated, of: {', '.join(CACHES)}")
    args = ap.parse_args(argv)
    caches = [c for c in args.caches.split(",") if c]
    if not caches or "dynamic" not in caches or any(c not in CACHES for c in caches):
        print(f"error: --caches={args.caches!r}: comma-separated of {', '.join(CACHES)}, dynamic among them",
              file=sys.stderr)
        return 2
    for flag in ("repeats", "new_tokens", "doc_tokens", "threads"):
        if getattr(args, flag) < 1:
            print(f"error: --{flag.replace('_', '-')}={getattr(args, flag)}: must be >= 1", file=sys.stderr)
            return 2
    try:
        beams = [int(b) for b in args.beams.split(",") if b]
    except ValueError:
        beams = []
    if not beams or min(beams) < 1:
        print(f"error: --beams={args.beams!r}: comma-separated integers >= 1", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    started = time.time()
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    doc = measure(beams, args.new_tokens, args.repeats, args.doc_tokens, args.no_repeat_ngram_size,
                  backbone=args.backbone, log=lambda s: print(s, flush=True), caches=caches)
    import transformers

    doc |= {"machine": machine(), "torch": torch.__version__, "transformers": transformers.__version__,
            "load_average": load, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "wall_time_s": round(time.time() - started, 1)}
    out = Path(args.out)
    atomic_write_text(out, json.dumps(doc, indent=1) + "\n")
    atomic_write_text(out.with_suffix(".md"), render(doc))
    print(render(doc))
    print(f"wrote {out} and {out.with_suffix('.md')} in {doc['wall_time_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
