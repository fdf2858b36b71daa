"""Training documents per launch, on the CPU: one document per micro-batch against bucketed micro-batches.

Why: at the SummScreenFD shape a GPU's training step waits on the host (``results/gpu-perf/2026-11-27/``:
1,629-1,786 kernels per one-document micro-batch, 0.7% of dense bf16 peak), because every kernel works on one
document's few chunks. Several documents of similar length per micro-batch (``data.bucket=true``,
``data.batch_size``: :func:`scaleformer.data.sampler.bucketed`, the loss of :mod:`scaleformer.ops.loss`) give
each launch that many documents' work. The operators dispatched per document are what a GPU launches, and a
CPU counts them as well as a GPU would.

What: the run's own training forward + backward (:class:`scaleformer.runs.module.SummarizationModule`, SLED at
its defaults: 1,024-token chunks, 150 overlap) over the same 8 documents of 3,584-4,096 tokens (the shape of
``make gpu-perf``'s SummScreenFD cell; their summaries 96-160 tokens), as 8 micro-batches of one document, 2 of
4 and 1 of 8, each micro-batch's loss divided by their number as Lightning's accumulation does; the optimiser
step (once per 8 documents in every setting) is outside. Two models: BART-base's structure (6+6 layers, its
50,265-token vocabulary and 1,024 positions) at width 96 (FFN 384, 2 heads): the operators a BART-base step
dispatches, counted (its 1,024-token chunks' attention makes a timed CPU pass take most of a minute, so it is
not timed); and the shipped ``tiny_bart_reader`` (3+3 layers, width 128), counted and timed. Per setting: one
untimed warm-up, one profiled run (operators per document, :func:`scaleformer.ops.measure.count_ops`), then for
the timed model ``repeats`` timed runs, the settings interleaved run by run; median and IQR of the milliseconds
per document.

    python -m scaleformer.bench.bucketed_training --out results/bench/bucketed-training-cpu.json [--repeats 10]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from scaleformer.config import BackboneConfig
from scaleformer.data.datamodule import Collator
from scaleformer.io import atomic_write_text
from scaleformer.methods import build_method, method_config
from scaleformer.model.backbone import build_model, prepare
from scaleformer.ops.host_memory import keep_freed_memory
from scaleformer.ops.measure import Timing, count_ops
from scaleformer.resources import conf_dir
from scaleformer.runs.module import SummarizationModule
from scaleformer.runs.runtime import machine

SCHEMA = 1
DOCS = 8
SIZES = (1, 4, 8)  # documents per micro-batch
LENGTHS = tuple(int(x) for x in np.linspace(3584, 4096, DOCS))  # one bucket's documents, longest last
TARGETS = tuple(int(x) for x in np.linspace(96, 160, DOCS))
# BART-base's structure at little width and 2 heads: the operators a step dispatches depend on neither (heads are
# a tensor dimension), while 12 heads' 1,024 x 1,024 attention scores of 8 documents' chunks do not fit 24 GB on a CPU
NARROW = {"d_model": 96, "encoder_ffn_dim": 384, "decoder_ffn_dim": 384, "encoder_attention_heads": 2,
          "decoder_attention_heads": 2}
MODELS = ("bart_base_shape", "tiny_bart_reader")
TIMED = ("tiny_bart_reader",)


def module_for(backbone: str, seed: int = 0) -> SummarizationModule:
    """The run's module for ``backbone`` (``bart_base_shape`` at :data:`NARROW` width) with SLED's defaults."""
    torch.manual_seed(seed)
    cfg = BackboneConfig(name=backbone, **_backbone_fields(backbone))
    prepared = prepare(cfg)
    conf = prepared.conf
    if backbone == "bart_base_shape":
        for key, value in NARROW.items():
            setattr(conf, key, value)
    spec = dataclasses.replace(prepared.spec, d_model=int(conf.d_model))
    method = build_method(method_config({"name": "sled"}), spec)
    model = build_model(cfg, conf, weights=backbone != "bart_base_shape")
    return SummarizationModule(model, method, prepared.tokenizer).train()


def _backbone_fields(backbone: str) -> dict[str, Any]:
    raw = OmegaConf.to_container(OmegaConf.load(conf_dir() / "backbone" / f"{backbone}.yaml"))
    names = {f.name for f in dataclasses.fields(BackboneConfig)}
    return {k: v for k, v in raw.items() if k in names and k != "name"}  # type: ignore[union-attr]


def documents(vocab: int, pad: int, seed: int = 0) -> list[dict[str, Any]]:
    """:data:`DOCS` random documents of :data:`LENGTHS` tokens with :data:`TARGETS`-token summaries."""
    g = np.random.default_rng(seed)
    return [{"id": f"d{i}", "references": [""], "input_ids": g.integers(4, vocab, n), "labels": g.integers(4, vocab, t)}
            for i, (n, t) in enumerate(zip(LENGTHS, TARGETS))]


def micro_batches(docs: list[dict[str, Any]], size: int, pad: int) -> list[dict[str, Any]]:
    collate = Collator(pad)
    return [collate(docs[i:i + size]) for i in range(0, len(docs), size)]


def train_pass(module: SummarizationModule, batches: list[dict[str, Any]]) -> Callable[[], None]:
    """Forward + backward of every micro-batch, each loss over their number (Lightning's accumulation)."""
    def run() -> None:
        module.zero_grad(set_to_none=True)
        for b in batches:
            (module(b) / len(batches)).backward()
    return run


def measure(models: Sequence[str] = MODELS, sizes: Sequence[int] = SIZES, repeats: int = 10,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    runs: dict[tuple[str, int], Callable[[], None]] = {}
    for name in models:
        module = module_for(name)
        docs = documents(module.model.backbone.config.vocab_size, module.method.spec.pad_id)
        for size in sizes:
            runs[(name, size)] = train_pass(module, micro_batches(docs, size, module.method.spec.pad_id))
    records: dict[tuple[str, int], dict[str, Any]] = {}
    for key, run in runs.items():
        run()  # warm-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run()
        counts = count_ops(prof)
        records[key] = {"model": key[0], "docs_per_micro_batch": key[1], "micro_batches": DOCS // key[1],
                        "aten_ops_per_doc": counts["aten_ops_per_step"] / DOCS,
                        "top_level_ops_per_doc": counts["top_level_ops_per_step"] / DOCS}
        log(f"{key[0]} x{key[1]}: {records[key]['aten_ops_per_doc']:.0f} aten ops per document")
    times: dict[tuple[str, int], list[float]] = {k: [] for k in runs if k[0] in TIMED}
    for r in range(repeats if times else 0):
        for key, run in runs.items():
            if key not in times:
                continue
            t0 = time.perf_counter()
            run()
            times[key].append((time.perf_counter() - t0) / DOCS)
        log(f"repeat {r + 1} of {repeats} done")
    rows = []
    for key, rec in records.items():
        if key not in times:
            rows.append({**rec, "repeats": 0, "ms_per_doc": None})
            continue
        s = Timing(tuple(times[key])).summary()
        rows.append({**rec, "repeats": s["repeats"], "ms_per_doc": s["time_s"] * 1e3,
                     "ms_per_doc_p25": s["time_p25_s"] * 1e3, "ms_per_doc_p75": s["time_p75_s"] * 1e3,
                     "ms_per_doc_iqr": s["time_iqr_s"] * 1e3})
    comparison = []
    for name in models:
        one = next(r for r in rows if r["model"] == name and r["docs_per_micro_batch"] == 1)
        for r in rows:
            if r["model"] == name and r["docs_per_micro_batch"] > 1:
                comparison.append({"model": name, "docs_per_micro_batch": r["docs_per_micro_batch"],
                                   "ops_fall": one["aten_ops_per_doc"] / r["aten_ops_per_doc"],
                                   "ms_fall": one["ms_per_doc"] / r["ms_per_doc"] if r["ms_per_doc"] else None})
    return {"schema": SCHEMA, "docs": DOCS, "lengths": list(LENGTHS), "targets": list(TARGETS), "narrow": NARROW,
            "method": "sled (defaults: chunk_size 1024, overlap 150)", "rows": rows, "comparison": comparison}


def markdown(doc: dict[str, Any]) -> str:
    lines = [f"# Training documents per launch on the CPU ({doc['when']})", "",
             f"{doc['machine']}; torch {doc['torch']}, {doc['torch_threads']} threads. The run's training forward + "
             f"backward ({doc['method']}) over the same {doc['docs']} documents of {doc['lengths'][0]:,}-"
             f"{doc['lengths'][-1]:,} tokens (summaries {doc['targets'][0]}-{doc['targets'][-1]}), one document per "
             "micro-batch against bucketed micro-batches; the optimiser step (once per 8 documents in every setting) "
             "is outside. `bart_base_shape`: BART-base's 6+6 layers and vocabulary at width "
             f"{doc['narrow']['d_model']} and {doc['narrow']['encoder_attention_heads']} heads, operators only (not "
             "timed; neither changes how many operators a step dispatches). Median (IQR) of "
             f"{max(r['repeats'] for r in doc['rows'])} interleaved repeats; "
             "`python -m scaleformer.bench.bucketed_training`.", "",
             "| model | documents per micro-batch | aten ops per document | top-level ops per document | ms per document (IQR) |",
             "|---|---|---|---|---|"]
    for r in doc["rows"]:
        ms = f"{r['ms_per_doc']:,.1f} ({r['ms_per_doc_iqr']:,.1f})" if r["ms_per_doc"] else "not timed"
        lines.append(f"| {r['model']} | {r['docs_per_micro_batch']} | {r['aten_ops_per_doc']:,.0f} | "
                     f"{r['top_level_ops_per_doc']:,.0f} | {ms} |")
    lines += ["", "| model | documents per micro-batch | operators fall | ms fall |", "|---|---|---|---|"]
    for c in doc["comparison"]:
        ms = f"{c['ms_fall']:.2f}x" if c["ms_fall"] else "-"
        lines.append(f"| {c['model']} | {c['docs_per_micro_batch']} | {c['ops_fall']:.1f}x | {ms} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("results/bench/bucketed-training-cpu.json"))
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    if args.repeats < 10:
        raise SystemExit(f"error: --repeats={args.repeats}: at least 10 timed repeats (a median and quartiles)")
    if bad := [m for m in models if m not in MODELS]:
        raise SystemExit(f"error: --models={args.models}: {', '.join(bad)} not one of {', '.join(MODELS)}")
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    started = time.time()
    doc = measure(models, repeats=args.repeats, log=lambda s: print(s, file=sys.stderr, flush=True))
    doc |= {"machine": machine(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "when": time.strftime("%Y-%m-%d"), "wall_time_s": round(time.time() - started, 1)}
    atomic_write_text(args.out, json.dumps(doc, indent=1) + "\n")
    atomic_write_text(args.out.with_suffix(".md"), markdown(doc))
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
