"""The causal span kernels against their peers, side by side in one run: the project's, torch's sdpa with the
pattern as a dense mask (what transformers runs for a custom mask and for its native sliding layers), and compiled
``flex_attention`` with a block mask (the reference for block-sparse masks).

    python -m scaleformer.bench.causal_peers [--out results/bench/causal-peers-cpu] [--n 4096] [--rounds 10]

One layer's attention at ``heads x dh`` (16 x 128, GPT-3 XL's, as MASFormer runs it), batch 1, fp32 on a CPU
(bf16 on CUDA), one torch thread on a CPU unless ``--threads``. Three phases per pattern: the forward with no
gradient (scoring, a prompt), training (forward and backward) and one cached token (a query against n keys).
Every (pattern, phase, implementation) gets an untimed warm-up (flex's compilation is timed apart), then
``rounds`` interleaved rounds, one timed call each per round: median and IQR. The floor: the attended pairs' FLOPs
(4 dh per pair a head forward; training 3x: the backward's two products per forward one) at this run's measured
matmul rate (before and after the rounds, the higher); a token's, the bytes of the keys and values its span reads at
the measured copy bandwidth. flex has no backward on a CPU: its training cells are n/a and the notes say why. Writes ``<out>.json`` and ``<out>.md``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from scaleformer.io import atomic_write_result
from scaleformer.ops import compat
from scaleformer.ops.causal_spans import SPAN_ATTR, causal_span_forward
from scaleformer.ops.measure import Timing, copy_bandwidth, matmul_peak, sync, timed_runs
from scaleformer.ops.spans import Span
from scaleformer.runs.runtime import machine

PATTERNS = [("full", Span("full", causal=True)), ("block 512", Span("block", 512, causal=True)),
            ("block 1024", Span("block", 1024, causal=True)), ("window 512", Span("window", 512, causal=True)),
            ("window 1024", Span("window", 1024, causal=True))]
PHASES = ("forward", "training", "token")
IMPLS = ("project", "sdpa dense mask", "flex")


def mask_mod(span: Span, offset: int = 0) -> Callable[..., torch.Tensor]:
    """flex's mask function of a built-in causal span (the query at position ``offset + q``)."""
    def allowed(b: Any, h: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        q = q + offset
        keep = q >= k
        if span.kind == "block":
            keep = keep & (q // span.size == k // span.size)
        elif span.kind == "window":
            keep = keep & (q - k <= span.size)
        return keep
    return allowed


class Peers:
    """The callables of each implementation for one pattern, on inputs ``[1, H, n, dh]``."""

    def __init__(self, span: Span, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, flex: Any) -> None:
        n = q.shape[2]
        self.span, self.q, self.k, self.v = span, q, k, v
        self.dense = span.dense_mask(n).to(q.device)  # [n, n]
        self.row = self.dense[-1:]  # [1, n]: the last token's keys
        self.module = SimpleNamespace(**{SPAN_ATTR: span})
        self.flex = None if flex is None else flex[0]
        if flex is not None:
            create_block_mask = flex[1]
            self.block = create_block_mask(mask_mod(span), None, None, n, n, device=q.device)
            self.block1 = create_block_mask(mask_mod(span, n - 1), None, None, 1, n, device=q.device)

    def call(self, impl: str, phase: str) -> Callable[[], Any]:
        grad = phase == "training"
        q, k, v = (x if grad else x.detach() for x in (self.q, self.k, self.v))  # flex refuses inputs needing grad
        if phase == "token":
            last = q[:, :, -1:]  # [1, H, 1, dh]: the last token against every key
            fn = {"project": lambda: causal_span_forward(self.module, last, k, v, None),
                  "sdpa dense mask": lambda: F.scaled_dot_product_attention(last, k, v, attn_mask=self.row),
                  "flex": lambda: self.flex(last, k, v, block_mask=self.block1)}[impl]
            return lambda: _no_grad(fn)
        forward = {"project": lambda: self.span.attend(q, k, v),
                   "sdpa dense mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=self.dense),
                   "flex": lambda: self.flex(q, k, v, block_mask=self.block)}[impl]
        if not grad:
            return lambda: _no_grad(forward)

        def train() -> None:
            forward().sum().backward()
            self.q.grad = self.k.grad = self.v.grad = None
        return train


def _no_grad(fn: Callable[[], Any]) -> Any:
    with torch.no_grad():
        return fn()


def floors(span: Span, n: int, heads: int, dh: int, gemm: float, bandwidth: float, elem: int) -> dict[str, float]:
    """Seconds each phase cannot beat: its FLOPs at the matmul rate; a token's bytes at the copy bandwidth."""
    pairs = span.pairs(n)
    reached = {"full": n, "block": (n - 1) % max(span.size, 1) + 1, "window": min(span.size + 1, n)}[span.kind]
    token_bytes = 2 * reached * heads * dh * elem  # the keys and values the last token reads
    return {"forward": 4 * pairs * dh * heads / gemm, "training": 12 * pairs * dh * heads / gemm,
            "token": token_bytes / bandwidth}


def run(n: int, rounds: int, heads: int, dh: int, device: torch.device, budget_s: float | None = None, *,
        with_flex: bool = True) -> dict[str, Any]:
    """Every cell warmed up (no new pattern once ``budget_s`` is half spent: a GPU window's flex compilations),
    then the interleaved rounds."""
    start = time.perf_counter()
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    rates = [matmul_peak(device, dtype)["tflops"] * 1e12]  # again after the rounds: the higher is the floor's
    bandwidth = copy_bandwidth(device)["bytes_per_s"]
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, dh, generator=g, device=device).to(dtype).requires_grad_() for _ in range(3))
    flex, flex_note, no_backward = _flex(device) if with_flex else (None, "flex_attention not run (--no-flex)", None)
    notes = {"flex": flex_note or f"training: {no_backward}"} if flex_note or no_backward else {}
    peers, cells = {}, {}
    for label, span in PATTERNS:
        if budget_s is not None and time.perf_counter() - start > budget_s / 2:
            notes["budget"] = f"{label} and the patterns after it were not measured (half of {budget_s:.0f} s spent)"
            break
        peers[label] = Peers(span, q, k, v, flex)
        for phase in PHASES:
            for impl in IMPLS:
                if impl == "flex" and (flex is None or (phase == "training" and no_backward)):
                    continue
                fn = peers[label].call(impl, phase)
                t0 = time.perf_counter()
                try:
                    fn()  # untimed warm-up (flex compiles here)
                    sync(device)
                except Exception as err:  # noqa: BLE001 - flex only: no toolchain to compile, say
                    if impl != "flex":
                        raise
                    notes[impl] = f"{phase}: {type(err).__name__}: {str(err).split('. ')[0]}"
                    continue
                cells[(label, phase, impl)] = {"fn": fn, "first_call_s": time.perf_counter() - t0, "times": []}
    for _ in range(rounds):  # interleaved: every cell once per round
        for cell in cells.values():
            cell["times"] += timed_runs(cell["fn"], device, 1)
    rates.append(matmul_peak(device, dtype)["tflops"] * 1e12)
    gemm = max(rates)
    elem = torch.finfo(dtype).bits // 8
    rows = []
    for label, span in PATTERNS:
        if label not in peers:
            continue
        floor = floors(span, n, heads, dh, gemm, bandwidth, elem)
        for phase in PHASES:
            row: dict[str, Any] = {"pattern": label, "phase": phase, "pairs": span.pairs(n), "floor_s": floor[phase]}
            for impl in IMPLS:
                cell = cells.get((label, phase, impl))
                if cell is None:
                    continue
                t = Timing(tuple(cell["times"])).summary()
                row[impl] = {"time_s": t["time_s"], "iqr_s": t["time_iqr_s"], "times_s": t["times_s"],
                             "first_call_s": cell["first_call_s"], "floor_share": floor[phase] / t["time_s"]}
            peer = min((row[i]["time_s"] for i in IMPLS[1:] if i in row), default=None)
            row["ratio_to_fastest_peer"] = row["project"]["time_s"] / peer if peer else None
            rows.append(row)
    return {"machine": machine(), "torch": torch.__version__, "device": str(device), "dtype": str(dtype),
            "threads": torch.get_num_threads(), "n": n, "heads": heads, "dh": dh, "rounds": rounds,
            "matmul_gflops": gemm / 1e9, "matmul_gflops_runs": [r / 1e9 for r in rates],
            "copy_gb_per_s": bandwidth / 1e9, "notes": notes, "rows": rows}


def _flex(device: torch.device) -> tuple[Any, str | None, str | None]:
    """Compiled flex_attention and its block-mask builder, or None and why (an old torch); and why it cannot train
    here, if it cannot: asked of eager flex on a tiny input, since a compiled call that raises makes dynamo run
    every later call of flex eagerly (scores materialised), compiled graphs and all."""
    try:
        from torch.nn.attention.flex_attention import flex_attention

        x = torch.randn(1, 1, 128, 16, device=device, requires_grad=True)
        try:
            flex_attention(x, x, x).sum().backward()
            no_backward = None
        except NotImplementedError as err:
            no_backward = str(err).split(". ")[0]
        return compat.compiled_flex(), None, no_backward
    except Exception as err:  # noqa: BLE001 - the row says why flex is absent
        return None, f"flex_attention unavailable: {type(err).__name__}: {err}", None


def _span(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{format(lo, fmt)}-{format(hi, fmt)}"


def findings(result: dict[str, Any]) -> list[str]:
    """The comparisons the table supports, computed from it (blocks and windows: the kernels under test)."""
    sparse = [r for r in result["rows"] if not r["pattern"].startswith("full")]
    out = []

    def faster(phase: str, peer: str) -> list[float]:
        return [r[peer]["time_s"] / r["project"]["time_s"] for r in sparse if r["phase"] == phase and peer in r]

    fwd = [r for r in sparse if r["phase"] == "forward"]
    if fwd and all("flex" in r for r in fwd):
        out.append(f"Forward with no gradient, blocks and windows: the project's kernels take "
                   f"{_span([r['project']['time_s'] / r['flex']['time_s'] for r in fwd], '.2f')}x compiled flex's time "
                   f"at {_span([r['project']['floor_share'] * 100 for r in fwd], '.0f')}% of the floor (flex: "
                   f"{_span([r['flex']['floor_share'] * 100 for r in fwd], '.0f')}%).")
    flexed = [r for r in result["rows"] if "flex" in r]
    if flexed:
        wins = [f"{r['pattern']} {r['phase']}" for r in flexed if r["flex"]["time_s"] < r["project"]["time_s"]]
        out.append(f"Compiled flex is faster than the project's kernel in {len(wins)} of the {len(flexed)} cells it "
                   f"runs{': ' + ', '.join(wins) if wins else ''}.")
    for phase, what in (("forward", "Forward"), ("training", "Training"), ("token", "One cached token")):
        ratios = faster(phase, "sdpa dense mask")
        if ratios:
            share = _span([r["project"]["floor_share"] * 100 for r in sparse if r["phase"] == phase], ".0f")
            out.append(f"{what}, blocks and windows: sdpa with the dense mask takes {_span(ratios, '.1f')}x the "
                       f"project's time; the project reaches {share}% of the floor.")
    return out


def render(result: dict[str, Any]) -> str:
    lines = [f"# Causal span kernels against their peers on {result['machine']}", "",
             f"One layer's attention: {result['heads']} heads x {result['dh']}, n = {result['n']}, batch 1, "
             f"{result['dtype'].removeprefix('torch.')}, {result['threads']} torch thread(s); median and IQR of "
             f"{result['rounds']} interleaved rounds after an untimed warm-up. Floor: the attended pairs' FLOPs at "
             f"this run's matmul rate ({result['matmul_gflops']:.0f} GFLOP/s; training 3x the forward's), a token's "
             f"keys and values at its copy bandwidth ({result['copy_gb_per_s']:.1f} GB/s). Ratio: the project's "
             "time over the fastest peer's (below 1: the project is faster).", "",
             "| pattern | phase | project (ms) | IQR | % floor | sdpa dense mask (ms) | IQR | % floor | flex (ms) | "
             "IQR | % floor | ratio |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        cells = []
        for impl in IMPLS:
            c = r.get(impl)
            cells += ["n/a", "", ""] if c is None else [f"{c['time_s'] * 1e3:.2f}", f"{c['iqr_s'] * 1e3:.2f}",
                                                         f"{c['floor_share']:.0%}"]
        ratio = "" if r["ratio_to_fastest_peer"] is None else f"{r['ratio_to_fastest_peer']:.2f}"
        lines.append(f"| {r['pattern']} | {r['phase']} | " + " | ".join(cells) + f" | {ratio} |")
    compile_s = [r["flex"]["first_call_s"] for r in result["rows"] if "flex" in r and r["phase"] == "forward"]
    if compile_s:
        lines += ["", f"flex's first call (compilation) took {min(compile_s):.1f}-{max(compile_s):.1f} s per pattern "
                  "and shape, not in the times above."]
    lines += [f"{k}: {v}." for k, v in result["notes"].items()]
    return "\n".join([*lines, "", *findings(result)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/bench/causal-peers-cpu")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dh", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--budget-s", type=float, help="start no new pattern once half of it is spent")
    ap.add_argument("--no-flex", action="store_true", help="the project's kernels and sdpa only (no compilation)")
    args = ap.parse_args(argv)
    if args.rounds < 2:
        raise SystemExit(f"--rounds {args.rounds}: at least 2 (a median and an IQR)")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: no CUDA device here")
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    result = run(args.n, args.rounds, args.heads, args.dh, device, args.budget_s, with_flex=not args.no_flex)
    print(atomic_write_result(args.out, result, render(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
