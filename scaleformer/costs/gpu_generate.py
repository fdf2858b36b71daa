"""``make gpu-perf``'s generation rows: decoding ms per token against its floor, and batched documents per second.

Run after the training cells, inside the same call and budget (:mod:`scaleformer.costs.gpu_perf`); the decoding rows' measuring is :mod:`scaleformer.costs.gpu_decode`:

* **decode**: BART-base's shape (``conf/backbone/bart_base_shape.yaml``, random weights, bf16 on a GPU) decoding
  exactly ``new_tokens`` tokens (``min_new_tokens = max_new_tokens``) at 1 and 4 beams from an encoder memory
  of 4k, 64k and 1M tokens, through :func:`scaleformer.ops.decoding.generate` (the beam-shared path every
  evaluation uses), the dynamic cache against ``generation.static_cache=true`` (with ``generation.compile=true``
  on a GPU: transformers' CUDA graph; 5.24 compiles greedy search only, and the ``graph`` column says whether
  anything was compiled) and ``generation.step_decoding=true`` (:mod:`scaleformer.ops.step_decoding`: greedy and
  beam search as one step compiled whole, a CUDA graph on a GPU). The memory is random encoder states ``[1, T, d]`` of the model's dtype: nothing is
  encoded, so 1M tokens cost their keys/values only. Per row: two untimed warm-ups (the first compiles), then
  ``repeats`` timed runs (CUDA events on a GPU), median and IQR of ms per token (a run over its tokens; the
  run includes projecting the memory's cross-attention keys/values once, which the floor leaves out). Each row
  gets its floor (:func:`scaleformer.bench.floor.step_floor`: the bytes a step reads over the copy bandwidth
  :func:`scaleformer.ops.measure.copy_bandwidth` measured once per call) and the issue's target.
* **docs**: documents per second evaluating 32 SummScreenFD-length documents (drawn as
  ``conf/data/dryrun_summscreen.yaml`` draws them, read up to its cap) with truncation, SLED and ScaleFormer +
  Middle at the framework's 4 beams, ``new_tokens`` forced, bf16-mixed on a GPU (fp32 weights under autocast,
  as a run evaluates): one at a time against batched (the size
  :func:`scaleformer.model.batching.auto_batch` picks and fixed ones), through the evaluation's path
  (:func:`scaleformer.data.sampler.length_sorted_batches`, then the model class's ``generate`` via
  :func:`scaleformer.ops.decoding.summaries`; the documents tokenized once, as a run's cache holds them). The CPU
  version is :mod:`scaleformer.bench.batched_eval` (its row schema and speed-ups are reused). Per method: one
  untimed batch per size, then ``doc_repeats`` timed passes over all documents, the sizes taking turns.

Budget: no row starts after ``deadline``, and a row whose warm-up says its timed runs would end past it is
skipped; skipped rows are named. ``tiny``: tiny_bart, tiny lengths and documents, on any device.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
from omegaconf import OmegaConf

from scaleformer.bench.batched_eval import speedups
from scaleformer.compose import compose_config
from scaleformer.config import GenerationConfig
from scaleformer.costs.gpu_decode import (
    Budget,
    decode,
    failure,
    free_memory,
    timed,
)
from scaleformer.data.sampler import length_sorted_batches
from scaleformer.data.synthetic import DEFAULT_SEED, split_rows
from scaleformer.export.summarizer import Summarizer
from scaleformer.model.backbone import build_model, prepare
from scaleformer.model.batching import auto_batch
from scaleformer.model.hf import ScaleformerForConditionalGeneration
from scaleformer.ops import decoding
from scaleformer.ops.measure import sync
from scaleformer.resources import conf_dir
from scaleformer.runs import cost_fit
from scaleformer.runs.context import to_config

PARTS = ("decode", "docs")


DOC_METHODS = ("sled", "scaleformer_middle", "truncation")  # most telling first, as the training cells


DOC_BEAMS = 4  # the framework's (and the paper's) beam search


FIXED_SIZES, TINY_FIXED_SIZES = (4, 8), (2,)


def documents(n: int, tiny: bool) -> tuple[list[str], dict[str, Any]]:
    """``n`` distinct test documents drawn as ``conf/data/dryrun_summscreen.yaml`` draws them (tiny: short)."""
    c = OmegaConf.load(conf_dir() / "data" / "dryrun_summscreen.yaml")
    words, spread, cap = (200, 0.5, 512) if tiny else (int(c.synthetic_words), float(c.synthetic_words_spread),
                                                         c.max_input_tokens)
    seen: dict[str, str] = {}
    for row in split_rows("test", n + n // 2 + 1, words, seed=DEFAULT_SEED, n_events=tuple(c.synthetic_events),
                          spread=spread):
        seen.setdefault(row["id"], row["input"])
    return list(seen.values())[:n], {"words": words, "spread": spread, "max_input_tokens": cap,
                                     "source": "conf/data/dryrun_summscreen.yaml" + (" (tiny)" if tiny else "")}


def summarizer(backbone: str, method: str, g: GenerationConfig, device: torch.device, cap: int | None) -> Summarizer:
    """``method`` on the backbone's shape with random weights (the same for every method), as runs build it."""
    rc = to_config(compose_config([f"backbone={backbone}", f"method={method}"], str(conf_dir())))
    prep = prepare(rc.backbone, rc.method)
    torch.manual_seed(0)
    with torch.device(device):  # random init where the model runs (seconds for BART-base on a host's CPU)
        backbone = build_model(rc.backbone, prep.conf)
    model = ScaleformerForConditionalGeneration.from_parts(backbone, prep.method)
    return Summarizer(model.to(device), prep.tokenizer, g, max_input_tokens=cap)


def one_pass(s: Summarizer, ids: list[list[int]], size: int, first_batch_only: bool = False) -> list[str]:
    """Summaries of pre-tokenized documents in length-sorted batches of ``size``, as an evaluation decodes them."""
    device = next(s.model.parameters()).device
    out = [""] * len(ids)
    for idx in length_sorted_batches([len(d) for d in ids], size)[:1 if first_batch_only else None]:
        x = torch.full((len(idx), max(len(ids[i]) for i in idx)), s.method.spec.pad_id, dtype=torch.long)
        m = torch.zeros_like(x)
        for row, i in enumerate(idx):
            x[row, :len(ids[i])], m[row, :len(ids[i])] = torch.tensor(ids[i]), 1
        for i, text in zip(idx, decoding.summaries(s.model, s.tokenizer, s.generation, x.to(device), m.to(device))):
            out[i] = text.strip()
    return out


def docs(gen: dict[str, Any], tiny: bool, device: torch.device, budget: Budget, *, n_docs: int, new_tokens: int,
         repeats: int, log: Callable[[str], None], save: Callable[[], None]) -> None:
    texts, source = documents(n_docs, tiny)
    # As a run evaluates: bf16-mixed on a GPU (fp32 weights under autocast, trainer.precision=auto), else fp32.
    mixed = device.type == "cuda"
    g = GenerationConfig(num_beams=DOC_BEAMS, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    out = gen["docs"]
    out |= {"documents": len(texts), "source": source, "beams": DOC_BEAMS, "new_tokens": new_tokens,
            "repeats": repeats, "precision": "bf16-mixed" if mixed else "32-true", "auto_batch": {}}
    for method in DOC_METHODS:
        if budget.over():
            gen["skipped"].append(f"docs/{method}")
            continue
        try:
            s = summarizer("tiny_bart" if tiny else "bart_base_shape", method, g, device, source["max_input_tokens"])
            ids = [s.token_ids(t) for t in texts]
            out.setdefault("tokens", [len(d) for d in ids])
            auto, why = auto_batch(s.model.backbone, s.method, max(map(len, ids)), DOC_BEAMS, new_tokens, device,
                                   2 if mixed else 4)
            out["auto_batch"][method] = why
            sizes = sorted({1, auto, *(TINY_FIXED_SIZES if tiny else FIXED_SIZES)})
            chosen, total = [], 0.0
            with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=mixed):
                for size in sizes:  # one untimed batch each (the longest): warm-up and the pass's estimate
                    warm = timed(partial(one_pass, s, ids, size, first_batch_only=True), device)
                    est = warm * math.ceil(len(ids) / size) * repeats
                    if budget.fits(total + est):
                        chosen.append(size)
                        total += est
                    else:
                        gen["skipped"].append(f"docs/{method}/batch-{size} (~{est:.0f} s)")
                times: dict[int, list[float]] = {size: [] for size in chosen}
                summaries: dict[int, list[str]] = {}
                for _ in range(repeats):
                    for size in chosen:
                        sync(device)
                        t0 = time.perf_counter()
                        summaries[size] = one_pass(s, ids, size)
                        times[size].append(time.perf_counter() - t0)
            for size in chosen:
                p25, med, p75 = cost_fit.quartiles([len(ids) / t for t in times[size]])
                out["rows"].append({"method": method, "beams": DOC_BEAMS, "batch": size, "auto": size == auto,
                                    "docs_per_s": med, "docs_per_s_iqr": p75 - p25, "timed": len(times[size]),
                                    "pass_s": cost_fit.quartiles(times[size])[1],
                                    "same_summaries": summaries[size] == summaries[1] if 1 in summaries else None})
                log(f"docs/{method}/batch-{size}: {med:.2f} docs/s")
        except Exception as e:  # noqa: BLE001 - recorded, the other methods run
            log(traceback.format_exc(limit=3))
            gen["failed"].append(f"docs/{method} ({failure(e)})")
        s = None
        free_memory(device)
        out["speedups"] = speedups(out["rows"])
        save()


def measure(tiny: bool, device: torch.device, *, deadline: float | None, parts: Sequence[str] = PARTS,
            new_tokens: int = 64, repeats: int = 10, n_docs: int = 32, doc_repeats: int = 3,
            log: Callable[[str], None] = print, save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The generation rows (``parts`` of :data:`PARTS`), ``save(gen)`` after each, none started after ``deadline``."""
    gen: dict[str, Any] = {"parts": list(parts), "decode": [], "docs": {"rows": [], "speedups": []},
                           "skipped": [], "failed": [], "tiny": tiny}
    budget = Budget(deadline)

    def saved() -> None:
        if save is not None:
            save(gen)

    if "decode" in parts:
        decode(gen, tiny, device, budget, new_tokens=new_tokens, repeats=repeats, log=log, save=saved)
    if "docs" in parts:
        docs(gen, tiny, device, budget, n_docs=n_docs, new_tokens=new_tokens, repeats=doc_repeats, log=log, save=saved)
    saved()
    return gen


def _f(x: Any, fmt: str) -> str:
    return "–" if x is None else fmt.format(x)


def render(gen: dict[str, Any]) -> list[str]:
    """The generation section of ``gpu-perf.md`` (markdown lines)."""
    lines: list[str] = []
    setup, bw = gen.get("decode_setup"), gen.get("bandwidth") or {}
    if setup:
        lines += ["", "## Decoding: ms per token against the floor", "",
                  f"{setup['backbone']} ({setup['dtype']}, {setup['attn_implementation']}, random weights) decoding "
                  f"exactly {setup['new_tokens']} tokens (min_new_tokens = max_new_tokens) through "
                  "`scaleformer.ops.decoding.generate` (beam-shared cross-attention) from precomputed encoder states: "
                  f"{setup['memory']}. Per row: 2 untimed warm-ups, then {setup['repeats']} timed runs "
                  "(CUDA events on a GPU), median (IQR) of a run over its tokens; a run includes projecting the "
                  "memory's cross-attention keys/values once. static = `generation.static_cache=true` with "
                  "`generation.compile=true` on a GPU (transformers 5.24 compiles greedy search only; `graph`: "
                  "graphs torch.compile captured in the row's warm-up; `first s`: the first warm-up, compiling included). Floor: the bytes one step reads "
                  f"(scaleformer/bench/floor.py) over the copy bandwidth measured once in this call, "
                  f"{_f(bw.get('gb_per_s'), '{:,.0f}')} GB/s. Targets (the issue): <= 2 ms/token at 1 beam and "
                  "<= 3 ms at 4 beams up to 64k tokens of memory; within 1.5x of the floor at 1M"
                  + (" (tiny lengths here stand in for 4k/64k/1M: the targets judge a GPU's full-size rows only)."
                     if gen.get("tiny") else "."), "",
                  "| memory tokens | beams | cache | graph | first s | ms/token (IQR) | step MiB | floor ms | x floor | target "
                  "| met |", "|" + "---|" * 11]
        for r in gen["decode"]:
            f, t = r.get("floor") or {}, r.get("target") or {}
            ms = (f"{r['ms_per_token']:.3g} ({r['ms_per_token_iqr']:.2g})" if r["status"] == "ok" else r["status"])
            lines.append(f"| {r['length']:,} | {r['beams']} | {r['cache']} | {_f(r.get('compiled_graphs'), '{}')} "
                         f"| {_f(r.get('first_run_s'), '{:.3g}')} | {ms} "
                         f"| {_f(f.get('step_bytes') and f['step_bytes'] / 2**20, '{:,.1f}')} "
                         f"| {_f(f.get('floor_ms'), '{:.3g}')} | {_f(f.get('floor_multiple'), '{:.2f}x')} "
                         f"| {t.get('what', '–')} | {'–' if t.get('met') is None else 'yes' if t['met'] else 'NO'} |")
    d = gen.get("docs") or {}
    if d.get("source"):
        src = d["source"]
        lines += ["", "## Batched evaluation: documents per second", "",
                  f"{d['documents']} test documents drawn as {src['source']} draws them ({src['words']:,} words on "
                  f"average, log-sd {src['spread']}, read up to {_f(src['max_input_tokens'], '{:,}')} tokens; "
                  f"{_f(d.get('tokens') and min(d['tokens']), '{:,}')}-{_f(d.get('tokens') and max(d['tokens']), '{:,}')} "
                  f"tokens), {d['beams']} beams, {d['new_tokens']} tokens forced, random weights, {d['precision']} "
                  "as a run evaluates; tokenized once, "
                  "then length-sorted batches through the model class's `generate` (the evaluation's path). Per "
                  f"method: one untimed batch per size, then {d['repeats']} timed passes over all documents, the sizes "
                  "taking turns; median (IQR) of documents per second. `same`: every summary equals batch 1's.", "",
                  "| method | batch | docs/s (IQR) | pass s | same |", "|---|---|---|---|---|"]
        for r in d["rows"]:
            same = "–" if r["same_summaries"] is None else "yes" if r["same_summaries"] else "no"
            lines.append(f"| {r['method']} | {r['batch']}{' (auto)' if r['auto'] else ''} | {r['docs_per_s']:.3g} "
                         f"({r['docs_per_s_iqr']:.2g}) | {r['pass_s']:.3g} | {same} |")
        if d["speedups"]:
            lines += ["", "| method | one at a time docs/s | best batch | docs/s | speed-up |", "|---|---|---|---|---|"]
            lines += [f"| {s['method']} | {s['one_at_a_time']:.3g} | {s['best_batch']} | {s['best']:.3g} | "
                      f"{s['speedup']:.2f}x |" for s in d["speedups"]]
        lines += [f"- {m}: {why}" for m, why in d.get("auto_batch", {}).items()]
    if gen.get("failed"):
        lines += ["", f"Generation rows that failed (the log says why): {', '.join(gen['failed'])}."]
    if gen.get("skipped"):
        lines += ["", f"Generation rows not measured (the budget ran out, or the timed runs would not fit it): "
                  f"{', '.join(gen['skipped'])}."]
    return lines
