"""MASFormer's patterns measured on a GPU at the paper's shape: what turns its counted bill's "at peak" into a
measured figure.

    python -m scaleformer.bench.gpu_masformer --out results/gpu-perf/masformer [--n 8192] [--repeats 10]

Pythia-1.4B's shape (24 layers of width 2,048, 16 heads, vocabulary 50,304; random weights, bf16 autocast) routed by
each pattern at n tokens: full attention, blocks of n / 8 (the paper's 1,024 at 8,192), and MASFormer with
l = L / 6 and L / 3 full layers at the bottom (4 and 8 of 24) and blocks of n / 8. For each: one training step
(forward and backward of the LM loss on one sequence; the optimiser's update is not timed) and one cached token
(a prompt of n - 1 tokens prefilled untimed, then the decoding step). Each phase: an untimed warm-up, then
``repeats`` timed runs on CUDA events (no host sync inside the timed region), median and IQR, and the peak memory
(``torch.cuda.max_memory_allocated``). Beside each step: its counted FLOPs (:mod:`scaleformer.bench.gpt_shape`, the
bill's formula), the FLOP/s they give, and that rate's share of the GPU's measured bf16 matmul rate and of an
H100's dense bf16 peak (989.4 TFLOP/s, what the bill divides by). A token is memory-bound: beside it, the bytes it
reads (the weights once, its attended keys and values) and their rate.

Writes ``<out>.json`` and ``<out>.md``. Needs CUDA: on a CPU it says so in one line and writes nothing.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import torch
from transformers import AutoModelForCausalLM, GPTNeoXConfig

from scaleformer.bench.gpt_shape import H100_BF16_DENSE, PYTHIA_1_4B, parameters, training_flops
from scaleformer.io import atomic_write_result
from scaleformer.ops import compat
from scaleformer.ops.causal_spans import route_causal_spans
from scaleformer.ops.measure import MemoryProbe, matmul_peak, timed_runs
from scaleformer.ops.span_cost import counted_cost
from scaleformer.ops.spans import Span


def patterns(layers: int, n: int) -> list[tuple[str, list[Span]]]:
    """(label, the layers' causal spans bottom first): full, blocks of n / 8, MASFormer l = L / 6 and L / 3."""
    b = n // 8
    full, block = Span("full", causal=True), Span("block", b, causal=True)
    out = [("full", [full] * layers), (f"block {b}", [block] * layers)]
    for frac in (6, 3):
        ell = max(1, layers // frac)
        out.append((f"masformer l={ell}, b={b}", [full] * ell + [block] * (layers - ell)))
    return out


def build(shape: dict[str, Any], n: int, spans: list[Span], device: torch.device) -> torch.nn.Module:
    """A random GPT-NeoX model of ``shape`` on ``device`` (fp32 weights, bf16 autocast), routed by ``spans``."""
    conf = GPTNeoXConfig(hidden_size=shape["width"], num_hidden_layers=shape["layers"],
                         num_attention_heads=shape["heads"], intermediate_size=4 * shape["width"],
                         vocab_size=shape["vocab"], max_position_embeddings=max(n, shape["positions"]),
                         tie_word_embeddings=bool(shape.get("tied")))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(conf, attn_implementation="sdpa").to(device)
    route_causal_spans(model, spans)
    return model


def _summary(times: list[float]) -> dict[str, Any]:
    q = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else [times[0]] * 3
    return {"time_s": statistics.median(times), "time_iqr_s": q[2] - q[0], "times_s": times, "repeats": len(times)}


def measure_pattern(label: str, spans: list[Span], shape: dict[str, Any], n: int, repeats: int,
                    device: torch.device, rate: float) -> dict[str, Any]:
    """One pattern's training step and cached token, timed and counted."""
    model = build(shape, n, spans, device)
    ids = torch.randint(0, shape["vocab"], (1, n), device=device, generator=torch.Generator(device).manual_seed(1))
    probe = MemoryProbe(device)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        model.zero_grad(set_to_none=True)

    step()  # untimed warm-up
    base = probe.start()
    train = {**_summary(timed_runs(step, device, repeats)), **probe.since(base)}
    flops = training_flops(shape, spans, n)
    train |= {"flops": flops["total"], "attention_share": flops["attention"] / flops["total"],
              "flops_per_s": flops["total"] / train["time_s"]}
    train |= {"of_measured_matmul": train["flops_per_s"] / rate, "of_h100_peak": train["flops_per_s"] / H100_BF16_DENSE}
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
        cache = model(input_ids=ids[:, :-1], use_cache=True).past_key_values  # the prompt, untimed
        last = ids[:, -1:]

        def token() -> None:
            model(input_ids=last, past_key_values=cache, use_cache=True)
            compat.crop_cache(cache, n - 1)  # the next call decodes the same position again

        token()
        base = probe.start()
        decode = {**_summary(timed_runs(token, device, repeats)), **probe.since(base)}
    d = shape["width"]
    keys = counted_cost(spans, n) - counted_cost(spans, n - 1)  # the last token's attended keys, all layers
    params = parameters(shape)
    read = 2 * (params["layers"] + shape["vocab"] * d) + 4 * d * keys  # bf16 weights once, K and V per key a layer
    decode |= {"bytes": read, "bytes_per_s": read / decode["time_s"], "keys": keys}
    return {"pattern": label, "spans": [f"{s.kind}{'' if s.kind == 'full' else f' {s.size}'}" for s in spans],
            "train_step": train, "cached_token": decode}


def render(result: dict[str, Any]) -> str:
    lines = [f"# MASFormer's patterns on {result['device']}", "",
             f"Pythia-1.4B's shape, random weights, bf16 autocast, n = {result['n']:,}; {result['repeats']} timed runs "
             f"after a warm-up, CUDA events, median [IQR]. Measured bf16 matmul rate: "
             f"{result['matmul_flops_per_s'] / 1e12:,.0f} TFLOP/s.", "",
             "| pattern | step (s) | TFLOP/s | of matmul | of H100 peak | step peak (GB) | token (ms) | GB/s read |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        t, k = r["train_step"], r["cached_token"]
        lines.append(f"| {r['pattern']} | {t['time_s']:.3f} [{t['time_iqr_s']:.3f}] | {t['flops_per_s'] / 1e12:,.0f} | "
                     f"{100 * t['of_measured_matmul']:.0f}% | {100 * t['of_h100_peak']:.0f}% | "
                     f"{(t['mem_peak_bytes'] or 0) / 1e9:.1f} | {1e3 * k['time_s']:.2f} [{1e3 * k['time_iqr_s']:.2f}] | "
                     f"{k['bytes_per_s'] / 1e9:,.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/gpu-perf/masformer")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("error: needs a CUDA device (none here): the patterns are measured at the paper's shape on a "
                         "GPU; on a CPU, python -m scaleformer.bench.causal_spans")
    if args.n < 64 or args.n % 8 or args.repeats < 1:
        raise SystemExit(f"error: --n {args.n} must be a multiple of 8 of at least 64, --repeats {args.repeats} >= 1")
    device = torch.device("cuda")
    rate = matmul_peak(device, torch.bfloat16)["tflops"] * 1e12
    rows = []
    for label, spans in patterns(PYTHIA_1_4B["layers"], args.n):
        rows.append(measure_pattern(label, spans, PYTHIA_1_4B, args.n, args.repeats, device, rate))
        torch.cuda.empty_cache()  # the pattern's model is gone: its memory goes back before the next is built
    result = {"device": torch.cuda.get_device_name(device), "n": args.n, "repeats": args.repeats,
              "shape": PYTHIA_1_4B, "matmul_flops_per_s": rate, "h100_bf16_dense": H100_BF16_DENSE, "rows": rows}
    print(atomic_write_result(args.out, result, render(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
