"""``make gpu-perf``'s decoding rows: ms per token of BART-base's shape decoding from 4k, 64k and 1M tokens of memory.

At 1 and 4 beams, the dynamic cache against the static one and the compiled decoding step, each row against its
floor (the bytes a step reads over the measured copy bandwidth) and the issue's target; and the time budget every
generation row keeps (:class:`Budget`). Rendered with the documents rows by :mod:`scaleformer.costs.gpu_generate`.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from scaleformer.bench.floor import step_floor
from scaleformer.bench.shapes import load_shape, random_model
from scaleformer.config import GenerationConfig
from scaleformer.ops import decoding, static_decoding, step_decoding
from scaleformer.ops.compat import compiled_graphs
from scaleformer.ops.measure import copy_bandwidth, is_oom, sync
from scaleformer.runs import cost_fit

LENGTHS, TINY_LENGTHS = (4096, 65536, 1 << 20), (64, 256, 1024)


BEAMS, CACHES = (1, 4), ("dynamic", "static", "step")  # step: scaleformer.ops.step_decoding, compiled on a GPU


# The targets: ms per token up to 64k tokens of memory (by beams), the floor's multiple at 1M.
MS_TARGET, FLOOR_TARGET = {1: 2.0, 4: 3.0}, 1.5


# What torch.compile's first capture of BART-base's decoding step may take on a GPU: a compiled row does not
# start with less left (its warm-up compiles before the budget check can skip it).
COMPILE_S = 90.0


@dataclass(frozen=True)
class Budget:
    deadline: float | None  # a host clock time; None: unbounded

    def over(self) -> bool:
        return self.deadline is not None and time.time() > self.deadline

    def fits(self, seconds: float) -> bool:
        return self.deadline is None or time.time() + seconds <= self.deadline


def label(n: int) -> str:
    return f"{n >> 20}M" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10}k" if n >= 4096 and n % 1024 == 0 \
        else str(n)


def timed(run: Callable[[], Any], device: torch.device) -> float:
    """Seconds of one ``run()`` (CUDA events on a GPU), its output dropped before the next."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = run()
        end.record()
        torch.cuda.synchronize(device)
        del out
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    out = run()
    del out
    return time.perf_counter() - t0


def failure(e: BaseException) -> str:
    """A row's failure in a few words: out of memory, or the error's first line."""
    return "oom" if is_oom(e) else f"failed: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"


def free_memory(device: torch.device) -> None:
    """The caching allocator's free blocks back to the device between rows (a GPU's), so each row starts even."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def decode_row(model: Any, hidden: torch.Tensor, mask: torch.Tensor, beams: int, cache: str, *, new_tokens: int,
               repeats: int, bandwidth: float | None, budget: Budget) -> dict[str, Any] | float:
    """One decoding row, or the seconds its timed runs would take where they would not fit the budget."""
    device = hidden.device
    g = GenerationConfig(num_beams=beams, max_new_tokens=new_tokens, min_new_tokens=new_tokens, step_decoding=cache
                         == "step", static_cache=cache == "static", compile=cache != "dynamic" and device.type == "cuda")
    kw = decoding.generation_kwargs(g) | static_decoding.generation_kwargs(g)  # what a run's evaluation passes
    step, compile_step = kw.pop("step_decoding", False), kw.pop("compile_step", None)

    def run() -> Any:
        return step_decoding.decode(model, hidden, mask, step=step, compile=compile_step, **kw)

    graphs = compiled_graphs()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with torch.no_grad():
        t0 = time.perf_counter()
        # warm-up 1 (compiles); the step returns the sequences alone: its beam-shared cross-attention keys/values
        # are the same layers x [1, heads, T, head_dim] x 2 as the path that returns its cache
        res = run() if step else decoding.generate(model, hidden, mask, **kw, return_dict_in_generate=True)
        made, cross = (int(res.shape[1]) - 1, 2 * model.config.decoder_layers * hidden.numel() * hidden.element_size()
                       ) if step else (int(res.sequences.shape[1]) - 1, decoding.cross_attention_bytes(res.past_key_values))
        del res
        sync(device)
        first_s = time.perf_counter() - t0
        if made != new_tokens:
            raise AssertionError(f"generated {made} tokens, expected exactly {new_tokens}")
        estimate = timed(run, device) * repeats  # warm-up 2: what a timed run costs
        if not budget.fits(estimate):
            return estimate
        times = [timed(run, device) for _ in range(repeats)]
    p25, med, p75 = cost_fit.quartiles(times)
    per = 1e3 / new_tokens
    floor = step_floor(model, rows=beams, new_tokens=new_tokens, cross_bytes=cross, cross_length=int(hidden.shape[1]),
                       time_s=med, bandwidth=bandwidth)
    return {"status": "ok", "compiled_graphs": compiled_graphs() - graphs, "first_run_s": first_s, "new_tokens": made,
            "repeats": len(times),
            "ms_per_token": med * per, "ms_per_token_p25": p25 * per, "ms_per_token_p75": p75 * per,
            "ms_per_token_iqr": (p75 - p25) * per, "times_s": times, "floor": floor,
            "peak_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None}


def target(length_index: int, beams: int, row: dict[str, Any]) -> dict[str, Any]:
    """The issue's bound for a row: ms per token up to the second length (64k), the floor's multiple at the last."""
    if length_index < 2:
        bound, value = MS_TARGET[beams], row.get("ms_per_token")
        return {"what": f"ms/token <= {bound:g}", "value": value, "met": None if value is None else value <= bound}
    value = (row.get("floor") or {}).get("floor_multiple")
    return {"what": f"x floor <= {FLOOR_TARGET:g}", "value": value, "met": None if value is None else value <= FLOOR_TARGET}


def decode(gen: dict[str, Any], tiny: bool, device: torch.device, budget: Budget, *, new_tokens: int,
           repeats: int, log: Callable[[str], None], save: Callable[[], None]) -> None:
    shape = load_shape("tiny_bart" if tiny else "bart_base_shape")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model, _ = random_model(shape.model_config(), "sdpa", device, dtype, seed=0)
    bw = copy_bandwidth(device, size_bytes=32 * 2**20 if tiny else None)
    gen["bandwidth"] = bw
    gen["decode_setup"] = {"backbone": shape.name, "dtype": str(dtype).replace("torch.", ""),
                           "attn_implementation": "sdpa", "new_tokens": new_tokens, "repeats": repeats,
                           "memory": "random encoder states [1, T, d], not encoded"}
    lengths = TINY_LENGTHS if tiny else LENGTHS
    for i, length in enumerate(lengths):
        names = [(b, c, f"decode/{label(length)}/{b}-beam/{c}") for b in BEAMS for c in CACHES]
        if budget.over():
            gen["skipped"] += [n for *_, n in names]
            continue
        try:
            gen_ = torch.Generator(device=device).manual_seed(length)
            hidden = torch.randn(1, length, int(shape.config.d_model), generator=gen_, device=device, dtype=dtype)
            mask = torch.ones(1, length, dtype=torch.long, device=device)
        except Exception as e:  # noqa: BLE001 - the memory itself may not fit: say so, go on
            gen["failed"] += [f"{n} ({failure(e)})" for *_, n in names]
            continue
        for beams, cache, name in names:
            if budget.over():
                gen["skipped"].append(name)
                continue
            compiles = cache == "step" or (cache == "static" and beams == 1)  # transformers compiles greedy only
            if compiles and device.type == "cuda" and not budget.fits(COMPILE_S):
                gen["skipped"].append(f"{name} (compiling needs ~{COMPILE_S:.0f} s)")
                continue
            try:
                row = decode_row(model, hidden, mask, beams, cache, new_tokens=new_tokens, repeats=repeats,
                                 bandwidth=bw["bytes_per_s"], budget=budget)
            except Exception as e:  # noqa: BLE001 - a row that fails (OOM, compile) is recorded, the rest run
                log(traceback.format_exc(limit=3))
                row = {"status": failure(e)}
            free_memory(device)
            if isinstance(row, float):
                gen["skipped"].append(f"{name} (~{row:.0f} s)")
                continue
            row = {"length": length, "beams": beams, "cache": cache, **row}
            row["target"] = target(i, beams, row)
            gen["decode"].append(row)
            log(f"{name}: {row['status']}" + (f", {row['ms_per_token']:.2f} ms/token, "
                                             f"{row['floor']['floor_multiple'] or 0:.1f}x floor" if row["status"] == "ok" else ""))
            save()
        del hidden, mask
        if device.type == "cuda":
            from torch import _dynamo

            _dynamo.reset()  # the compiled step and its graphs' memory go with this length
        free_memory(device)
