"""The results document as markdown (tables, exponents, comparisons, targets), written with the plot.

Every timing is shown as median / min / IQR, so a reader sees the noise of each number beside it;
truncated sizes are labelled with the fraction of the input read, and the fit ranges are stated.
Generation also shows its memory floor (:mod:`scaleformer.bench.floor`) per beam count; results
written before the floor was measured render with those columns empty.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scaleformer.bench.plot import plot
from scaleformer.bench.summary import MEMORY_KEYS, SCALING_KEYS, cells_of
from scaleformer.io import atomic_write_bytes, atomic_write_json, atomic_write_text
from scaleformer.ops.host_memory import DEFAULTS


def _ms(x: float | None) -> str:
    return "" if x is None else (f"{x * 1e3:.0f}" if x >= 1 else f"{x * 1e3:.1f}" if x >= 1e-3 else f"{x * 1e3:.2f}")


def _timing(d: dict[str, Any] | None) -> str:
    """median / min / IQR in ms."""
    if not d or d.get("time_s") is None:
        return ""
    return f"{_ms(d['time_s'])} / {_ms(d.get('time_min_s'))} / {_ms(d.get('time_iqr_s'))}"


def _mib(x: int | None) -> str:
    return "" if x is None else f"{x / 2**20:.0f}" if abs(x) >= 2**24 else f"{x / 2**20:.1f}"


def _sig(v: float) -> str:
    """Three significant digits, trailing zeros kept (1.00, 0.387, 22.1), whole numbers from 100."""
    return f"{v:.0f}" if abs(v) >= 100 else format(v, "#.3g").rstrip(".")


def _per_beam(gen: dict[str, Any], beams: list[str], key: str, fmt: Any = _sig) -> str:
    """One floor field of every beam count, ``a / b``; empty when no beam count has it."""
    vals = [((gen.get(b) or {}).get("floor") or {}).get(key) for b in beams]
    return "" if all(v is None for v in vals) else " / ".join("" if v is None else fmt(v) for v in vals)


def _bandwidth(doc: dict[str, Any]) -> str:
    """The copy bandwidth of the run (and of resumed pieces, when they differ)."""
    runs = [doc["environment"], *doc.get("runs", [])]
    bws = [r["copy_bandwidth"] for r in runs if r.get("copy_bandwidth")]
    if not bws:
        return "not measured (results written before the floor was)"
    b = bws[0]
    text = (f"{b['gb_per_s']:.1f} GB/s (read + write of a {b['size_bytes'] / 2**20:.0f} MiB device-to-device copy, "
            f"median of {b['repeats']}, {b.get('threads')} thread(s))")
    if len({round(x["gb_per_s"], 1) for x in bws}) > 1:
        later = ", ".join(f"{x['gb_per_s']:.1f}" for x in bws[1:])
        text += f"; resumed pieces {later} GB/s, each cell uses its own"
    return text


def _n(n: int) -> str:
    return f"{n // 1048576}M" if n % 1048576 == 0 else f"{n // 1024}k" if n % 1024 == 0 else str(n)


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _status(c: dict[str, Any]) -> str:
    st = c["status"]
    if st == "oom":
        st = f"oom ({c.get('oom_phase') or c.get('cause')})"
    if c.get("truncated"):
        st += f", truncated ({100 * c['input_coverage']:.0f}% read)"
    if c.get("decoder_length_ok") is False:
        st += f", dec len != {c['decoder_length_expected']}"
    train = c.get("train") or {}
    if train.get("status") in ("skipped", "oom") and c["status"] == "ok":
        st += f" (train {train['status']})"
    elif train.get("truncated") and not c.get("truncated"):
        st += f" (train truncated, {100 * train['input_coverage']:.0f}% read)"
    return st


def _header(doc: dict[str, Any]) -> list[str]:
    s, env, spec = doc["settings"], doc["environment"], doc.get("spec") or {}
    beams = ", ".join(str(b) for b in s["beams"])
    load = env.get("load_average")
    return [
        f"# Benchmark `{doc['profile']}`", "",
        f"- device: {env['device_name']} ({env['device']}), torch {env['torch']}, transformers "
        f"{env['transformers']}, {env['threads']} thread(s) of {env.get('cpus')} CPU(s)"
        # a CPU timing depends on the heap (scaleformer.ops.host_memory); records before the setting had glibc's
        + (f"; CPU heap: {env.get('host_memory', DEFAULTS)}" if env["device"] == "cpu" else "")
        + (f"; load average at the start {load[0]:.2f}" if load else ""),
        f"- dtype {s['dtype']}, attention {s['attn']}, random weights; one document per run; "
        f"{s['new_tokens']} new tokens forced (min = max), beams {beams}; training step = forward + "
        f"backward (no optimiser step) with {s['label_tokens']} label tokens"
        + (f", gradient checkpointing from N = {s['grad_ckpt_min_tokens']}" if s["grad_ckpt_min_tokens"] else ""),
        f"- times in ms as **median / min / IQR** of at least {s['repeats']} timed runs per phase and size "
        f"(up to {s['max_repeats']} while under {s['min_time_s']} s); each size's encode and training step "
        "first run once untimed (warm-up; memory, FLOPs and input coverage are read there); generation warms "
        "up once per method. `gen` = decoding from the encoded states (end to end = enc + gen), through "
        "`scaleformer.ops.decoding.generate`: BART/T5 decoders compute cross-attention keys/values once per "
        "document and its beams share them (other decoders, e.g. LED's: the stock per-beam cache)",
        "- `x-attn MiB`: cross-attention keys/values held by the generation cache, measured (distinct "
        "storages) per beam count",
        "- **decoding floor** per beam count: `step MiB` = bytes one decoding step reads: the decoder's weights "
        "(every decoder parameter but the cross-attention key/value projections, which run once per document; "
        "one row per sequence of each embedding table; the whole lm_head and BART's final_logits_bias) + the "
        "cross-attention keys/values the cache holds (`x-attn MiB`) + the self-attention keys/values at the mean "
        f"decoded length ((new tokens + 1) / 2 = {(s['new_tokens'] + 1) / 2:g} positions per beam); `floor ms` = "
        "step bytes / the copy bandwidth; `ms/tok` = median generation time / new tokens; `x floor` = ms/tok / "
        f"floor ms. Copy bandwidth: {_bandwidth(doc)}",
        f"- memory: {doc['memory_measure']}; `mem inf` = peak growth over encode + generation, `mem train` "
        "= over the training step",
        "- **truncated**: the encoder did not read the whole input (16 marker tokens spread over the document; "
        "the share that reached the encoder's embedding is shown). Truncated sizes do constant work and are "
        "left out of the exponent fits",
        f"- exponents: slope of log value vs log N; time over N >= {spec.get('fit_from')} when two such sizes "
        f"ran (else every non-truncated size, as labelled); memory over N >= {spec.get('memory_fit_from')} only "
        "(below that, growth is fixed allocator overhead)",
        f"- wall time: {doc.get('wall_time_s', 0):.0f} s", "",
    ]


def _backbone(doc: dict[str, Any], backbone: str, notes: list[str]) -> list[str]:
    beams = [str(b) for b in doc["settings"]["beams"]]
    gpu = doc["environment"]["device"] == "cuda"
    per = f"({'/'.join(beams)}b)"
    head = ["method", "N", "status", "enc ms", "dec len", *[f"gen {b}b ms" for b in beams], "train ms",
            "mem inf MiB", "mem train MiB", f"x-attn MiB {per}", f"step MiB {per}", f"floor ms {per}",
            f"ms/tok {per}", f"x floor {per}", "enc tok/s", "runs"]
    if gpu:
        head += ["enc TFLOP/s", "% peak"]
    lines = [f"## {backbone}", "", "Times: median / min / IQR (ms).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in doc["methods"]:
        if m["backbone"] != backbone:
            continue
        if m["status"] != "ran":
            notes.append(f"{backbone} / {m['method']}: {m['status']}, {m['reason']}")
            continue
        if m.get("note"):
            notes.append(f"{backbone} / {m['method']}: {m['note']}")
        reasons: dict[str, int] = {}
        for n, c in sorted(cells_of(doc, backbone, m["method"]).items()):
            if c.get("reason") or c.get("error"):
                reasons.setdefault(c.get("reason") or c.get("error"), n)
            if (c.get("train") or {}).get("reason"):
                reasons.setdefault(f"training step skipped: {c['train']['reason']}", n)
            e, gen, train = c.get("encode") or {}, c.get("generate") or {}, c.get("train") or {}
            row = [m["method"], _n(n), _status(c), _timing(e), str(c.get("decoder_length", "")),
                   *[_timing(gen.get(b)) for b in beams], _timing(train),
                   _mib(c.get("mem_inference_growth_bytes")), _mib(train.get("mem_growth_bytes")),
                   " / ".join(_mib((c.get("cross_attention_bytes") or {}).get(b)) for b in beams)
                   if c.get("cross_attention_bytes") else "",
                   " / ".join(_mib(((gen.get(b) or {}).get("floor") or {}).get("step_bytes")) for b in beams)
                   if any((gen.get(b) or {}).get("floor") for b in beams) else "",
                   _per_beam(gen, beams, "floor_ms"), _per_beam(gen, beams, "ms_per_token"),
                   _per_beam(gen, beams, "floor_multiple", lambda v: f"{v:.1f}"),
                   f"{e['tokens_per_s']:.3g}" if e.get("tokens_per_s") else "", str(e.get("repeats", ""))]
            if gpu:
                row += [f"{e['tflops_per_s']:.1f}" if e.get("tflops_per_s") else "",
                        f"{100 * e['peak_fraction']:.0f}" if e.get("peak_fraction") is not None else ""]
            lines.append("| " + " | ".join(row) + " |")
        for why, n in reasons.items():
            notes.append(f"{backbone} / {m['method']} from N={_n(n)}: {why}")
    lines += ["", f"Fitted scaling exponents ({beams[-1]}-beam generation; range of each fit in brackets; "
              "truncated sizes left out):", "",
              "| method | encode | enc + gen | train | mem inf | mem train | truncated sizes |",
              "|---|---|---|---|---|---|---|"]
    for m in doc["methods"]:
        if m["backbone"] != backbone or m["status"] != "ran":
            continue
        sc = m.get("scaling") or {}
        cut = [_n(n) if c.get("truncated") else f"{_n(n)} (train)"
               for n, c in sorted(cells_of(doc, backbone, m["method"]).items())
               if c.get("truncated") or (c.get("train") or {}).get("truncated")]
        lines.append("| " + " | ".join([m["method"], *[_fit(sc.get(k), k) for k in SCALING_KEYS],
                                        ", ".join(cut)]) + " |")
    return [*lines, ""]


def _fit(f: dict[str, Any] | None, key: str) -> str:
    if not f:
        return "n/a"
    tag = "" if f["basis"].startswith("N >=") or key in MEMORY_KEYS else ", all"
    return f"{f['exponent']:.2f} [{_n(f['range'][0])}..{_n(f['range'][1])}{tag}]"


def markdown(doc: dict[str, Any]) -> str:
    """The results as markdown: one table per backbone, exponents, comparisons, targets, notes."""
    lines = _header(doc)
    notes: list[str] = []
    for backbone in doc["grid"]["backbones"]:
        lines += _backbone(doc, backbone, notes)
    if doc.get("comparisons"):
        lines += ["## Comparisons", "", "| backbone | N | method vs baseline | beams | decode speedup | "
                  "floor speedup | enc+gen speedup | cross-attn length ratio | cross-attn memory ratio |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for c in doc["comparisons"]:
            tag = " (truncated)" if c.get("truncated") else ""
            lines.append(f"| {c['backbone']} | {_n(c['n_tokens'])}{tag} | {c['method']} vs {c['baseline']} | "
                         f"{c['beams']} | {c['decode_speedup']:.2f}x | "
                         + (f"{c['floor_speedup']:.2f}x" if c.get("floor_speedup") else "") + f" | {c['e2e_speedup']:.2f}x | "
                         f"{c['cross_attention_length_ratio']:.3f} | {_fmt(c['cross_attention_memory_ratio'])} |")
        lines.append("")
    if doc.get("targets"):
        lines += ["## Targets", "",
                  "| target | backbone | bound | measured | status |", "|---|---|---|---|---|"]
        for t in doc["targets"]:
            measured = _fmt(t["value"])
            if t["kind"] in ("max_ratio", "min_ratio") and t["value"]:
                if t.get("baseline_beams") and t.get("baseline") in (None, t["method"]):
                    measured += f" ({t['beams']} beams / {t['baseline_beams']})"
                elif str(t.get("metric", "")).endswith("_s"):
                    measured += f" ({1 / t['value']:.2f}x faster)"
                if t.get("reference_note"):
                    measured += f"; before: {t['reference_note']}"
            if t.get("range"):
                measured += f" over {_n(t['range'][0])}..{_n(t['range'][1])}"
            if t.get("worst_at"):
                measured += f" (worst at {_n(t['worst_at'])})"
            lines.append(f"| {t['target']} | {t['backbone']} | {t['kind']} {_fmt(t['bound'])} | {measured} | "
                         f"{t['status']} |")
        lines.append("")
    if notes:
        lines += ["## Notes", "", *[f"- {x}" for x in notes], ""]
    lines += ["N: 1k = 1024 tokens, 1M = 1048576. Memory growth excludes the model and inputs already resident.", ""]
    return "\n".join(lines)


def write_outputs(doc: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """``<profile>.json``, ``.md`` and ``.png`` in ``out_dir``, each written atomically."""
    name = doc["profile"]
    return {"json": atomic_write_json(out_dir / f"{name}.json", doc),
            "md": atomic_write_text(out_dir / f"{name}.md", markdown(doc)),
            "png": atomic_write_bytes(out_dir / f"{name}.png", plot(doc))}
