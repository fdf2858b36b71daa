"""What each causal attention pattern costs on this machine: MASFormer's cost model against measured time.

    python -m scaleformer.bench.causal_spans [--out results/bench/masformer-cpu] [--n 8192] [--repeats 10]

Two parts, each pattern timed after an untimed warm-up, ``repeats`` timed runs, median and IQR
(:func:`scaleformer.ops.measure.measure`), peak memory growth over the inputs (:class:`~scaleformer.ops.measure.MemoryProbe`):

- **one layer's attention at the paper's shape**: GPT-3 XL's 16 heads of 128 at n = 8,192, fp32, forward and
  backward of :meth:`Span.attend` (the kernels the routed layers run); beside each, the paper's C for the layer,
  the (query, key) pairs it attends and the floor those pairs' FLOPs give at the machine's measured matmul rate.
  MASFormer's model (l = 4 of 24 full, blocks of 1,024) is the sum of its layers. The claim to check: attention
  time falls with C (``falls_with_cost``).
- **the tiny decoder-only reader** (``backbone=tiny_gpt2_reader``) routed by each method at n = 1,024: a training
  step (forward and backward of the LM loss on one packed batch) and one generated token with a cache of n - 1.

Writes ``<out>.json`` (every time and its runs) and ``<out>.md``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch

from scaleformer.compose import compose_config
from scaleformer.io import atomic_write_result
from scaleformer.model.backbone import build_model, prepare
from scaleformer.ops import compat
from scaleformer.ops.measure import MemoryProbe, matmul_peak, measure
from scaleformer.ops.span_cost import layer_cost
from scaleformer.ops.spans import Span
from scaleformer.runs.context import to_config
from scaleformer.runs.runtime import machine

CPU = torch.device("cpu")
# (label, span) at the paper's n = 8,192: its baselines' sizes (Table 1: blocks of 1,024 and 2,048; windows of
# half a block, the paper's pairing), and full attention.
LAYER_PATTERNS = [("full", Span("full", causal=True)), ("block 2048", Span("block", 2048, causal=True)),
                  ("block 1024", Span("block", 1024, causal=True)), ("window 1024", Span("window", 1024, causal=True)),
                  ("window 512", Span("window", 512, causal=True))]
# (label, method option, settings) on the tiny reader at n = 1,024 (its m = 128)
READER_PATTERNS = [("full_attention", "full_attention", {}), ("masformer l=2", "masformer", {"full_layers": 2}),
                   ("masformer l=1", "masformer", {"full_layers": 1}), ("block 256", "block_attention", {"block_size": 256}),
                   ("block 128", "block_attention", {}), ("window 64", "sliding_window", {})]


def timed_phase(fn: Any, repeats: int) -> dict[str, Any]:
    """``fn`` after an untimed warm-up, ``repeats`` timed runs (median, IQR) and the peak memory they grew."""
    fn()  # untimed warm-up
    probe = MemoryProbe(CPU)
    base = probe.start()
    timing, _ = measure(fn, CPU, repeats=repeats, min_time_s=0.0, max_repeats=repeats)
    return {**timing.summary(), **probe.since(base)}


def layer_attention(n: int, repeats: int, heads: int = 16, dh: int = 128) -> list[dict[str, Any]]:
    """Forward + backward of one layer's causal attention per pattern, ``[1, heads, n, dh]`` fp32."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, dh, generator=g).requires_grad_() for _ in range(3))
    rows = []
    for label, span in LAYER_PATTERNS:
        def step(span: Span = span) -> None:
            span.attend(q, k, v).sum().backward()
            q.grad = k.grad = v.grad = None

        pairs = span.pairs(n)
        rows.append({"pattern": label, "kind": span.kind, "size": span.size, "n": n, "paper_cost": layer_cost(span, n),
                     "pairs": pairs, "flops": 3 * 4 * pairs * dh * heads,  # QK^T and PV, forward + 2x backward
                     **timed_phase(step, repeats)})
    return rows


def reader_steps(n: int, repeats: int, batch: int = 4) -> list[dict[str, Any]]:
    """A training step and one cached generated token of the tiny reader, routed by each method."""
    ids = torch.randint(4, 1000, (batch, n), generator=torch.Generator().manual_seed(1))
    return [_reader_row(label, option, settings, ids, repeats) for label, option, settings in READER_PATTERNS]


def _reader_row(label: str, option: str, settings: dict[str, Any], ids: torch.Tensor, repeats: int) -> dict[str, Any]:
    batch, n = ids.shape
    rc = to_config(compose_config(["experiment=masformer_lm", f"method={option}", f"method.max_length={n}",
                                   *(f"method.{k}={v}" for k, v in settings.items())]))
    ready = prepare(rc.backbone, rc.method)
    model = ready.method.wrap(build_model(rc.backbone, ready.conf))

    def train_step() -> None:
        model(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)

    model.eval()
    with torch.no_grad():
        cache = model(input_ids=ids[:1, : n - 1], use_cache=True).past_key_values
    last = ids[:1, n - 1:]

    def one_token() -> None:
        with torch.no_grad():
            model(input_ids=last, use_cache=True, **{compat.cache_kwarg(model): cache})
        compat.crop_cache(cache, n - 1)  # back to n - 1 cached positions for the next timed token

    model.train()
    step = timed_phase(train_step, repeats)
    model.eval()
    token = timed_phase(one_token, repeats)
    return {"pattern": label, "method": option, **settings, "n": n, "batch": batch,
            "attention_cost_paper": ready.method.describe()["attention_cost_paper"],
            "train_step": step, "train_tokens_per_s": batch * n / step["time_s"], "generate_token": token}


def falls_with_cost(rows: list[dict[str, Any]], cost: str, time: str = "time_s") -> bool:
    """Whether the time never rises as the cost falls (ties in cost aside)."""
    ordered = sorted(rows, key=lambda r: r[cost])
    return all(a[time] <= b[time] * 1.05 for a, b in zip(ordered, ordered[1:]) if a[cost] < b[cost])


def render(result: dict[str, Any]) -> str:
    peak = result["matmul_peak_gflops"]
    lines = [f"# Causal attention patterns on {result['machine']}", "",
             f"One layer's attention at the paper's shape (16 heads x 128, n = {result['n']}, fp32, forward + backward; "
             f"median of {result['repeats']} after a warm-up; floor: the pairs' FLOPs at the measured matmul rate, "
             f"{peak:.0f} GFLOP/s).", "",
             "| pattern | paper's C (layer) | pairs attended | time (s) | IQR (s) | floor (s) | peak growth (MB) |",
             "|---|---|---|---|---|---|---|"]
    for r in result["layer"]:
        growth = r["mem_growth_bytes"]
        lines.append(f"| {r['pattern']} | {r['paper_cost']:,} | {r['pairs']:,} | {r['time_s']:.3f} | "
                     f"{r['time_iqr_s']:.3f} | {r['flops'] / (peak * 1e9):.3f} | "
                     f"{'-' if growth is None else f'{growth / 2**20:.0f}'} |")
    m = result["masformer_model"]
    lines += ["", f"MASFormer (l = 4 of 24 full, blocks of 1,024) sums its layers: {m['time_s']:.2f} s of attention per "
              f"training step against {m['full_time_s']:.2f} s for full attention in all 24 ({m['time_share']:.0%}), at "
              f"{m['cost_share']:.0%} of full attention's C. Attention time falls with C: "
              f"{'yes' if result['layer_falls_with_cost'] else 'no'}.", "",
              f"The tiny reader (6 layers, width 128) at n = {result['reader_n']}, routed by each method (training step: "
              f"batch {result['reader'][0]['batch']}; one generated token after {result['reader_n'] - 1} cached):", "",
              "| method | paper's C | step (s) | IQR (s) | tokens/s | step peak growth (MB) | token (ms) | IQR (ms) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in result["reader"]:
        s, t = r["train_step"], r["generate_token"]
        growth = s["mem_growth_bytes"]
        lines.append(f"| {r['pattern']} | {r['attention_cost_paper']:,} | {s['time_s']:.3f} | {s['time_iqr_s']:.3f} | "
                     f"{r['train_tokens_per_s']:,.0f} | {'-' if growth is None else f'{growth / 2**20:.0f}'} | "
                     f"{t['time_s'] * 1e3:.2f} | {t['time_iqr_s'] * 1e3:.2f} |")
    steps = [r["train_step"]["time_s"] for r in result["reader"]]
    lines += ["", f"Reader step time falls with C: {'yes' if result['reader_falls_with_cost'] else 'no'} (the slowest "
              f"pattern's step is {max(steps) / min(steps):.1f}x the fastest's: the layers' matmuls, which every "
              "pattern runs alike, are the rest)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/bench/masformer-cpu")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--reader-n", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)
    peak = matmul_peak(CPU, torch.float32)
    layer = layer_attention(args.n, args.repeats)
    by = {r["pattern"]: r for r in layer}
    full, block = by["full"], by["block 1024"]
    masformer = {"time_s": 4 * full["time_s"] + 20 * block["time_s"], "full_time_s": 24 * full["time_s"],
                 "cost": 4 * full["paper_cost"] + 20 * block["paper_cost"], "full_cost": 24 * full["paper_cost"]}
    masformer |= {"time_share": masformer["time_s"] / masformer["full_time_s"],
                  "cost_share": masformer["cost"] / masformer["full_cost"]}
    reader = reader_steps(args.reader_n, args.repeats)
    result = {"machine": machine(), "torch": torch.__version__, "threads": torch.get_num_threads(), "n": args.n,
              "repeats": args.repeats, "matmul_peak_gflops": peak["tflops"] * 1e3, "matmul_peak": peak, "layer": layer, "masformer_model": masformer,
              "layer_falls_with_cost": falls_with_cost(layer, "paper_cost"), "reader_n": args.reader_n,
              "reader": reader, "reader_falls_with_cost": falls_with_cost(
                  [{"cost": r["attention_cost_paper"], "time_s": r["train_step"]["time_s"]} for r in reader], "cost")}
    atomic_write_result(args.out, result, render(result))
    print(json.dumps({"layer_falls_with_cost": result["layer_falls_with_cost"], "masformer": masformer}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
