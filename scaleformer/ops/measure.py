"""Timing and peak memory of one benchmark phase.

Timing: at least ``repeats`` timed runs at every size however slow (a single run says nothing about
its own noise), more while the fast ones add up to less than ``min_time_s``; min, median and IQR are
reported. This is ``torch.utils.benchmark.Timer``'s discipline (the device synchronised around each
run, on CUDA only; the process's torch threads), without its extra calls: ``Timer.timeit`` adds two
warm-up runs per measurement and ``blocked_autorange`` guarantees no minimum number of runs, which
on a CPU means a 4-second encode timed once or three times the budget. Warm-ups are the caller's.

Memory: on CUDA, ``torch.cuda.max_memory_allocated`` per phase. On CPU, the process's peak resident
set (``VmHWM``), reset per phase through ``/proc/self/clear_refs`` after ``gc`` + ``malloc_trim`` hand
freed memory back, minus the resident set at the phase start: every allocation of the phase counts,
not only tensors. Growth figures are above the model + inputs already resident.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from scaleformer.ops.host_memory import release_freed_memory


@dataclass(frozen=True)
class Timing:
    """Seconds per timed run of one phase."""

    times: tuple[float, ...]

    def summary(self) -> dict[str, Any]:
        """``time_s`` is the median (the field every consumer reads); min and the quartiles beside it."""
        ts = sorted(self.times)
        p25, p50, p75 = statistics.quantiles(ts, n=4, method="inclusive") if len(ts) > 1 else (ts[0],) * 3
        return {"time_s": statistics.median(ts), "time_min_s": ts[0], "time_iqr_s": p75 - p25,
                "time_p25_s": p25, "time_p75_s": p75, "times_s": list(self.times), "repeats": len(ts)}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(fn: Callable[[], Any], device: torch.device, *, repeats: int, min_time_s: float,
            max_repeats: int) -> tuple[Timing, Any]:
    """Time ``fn`` ``repeats`` times, then again while the total is under ``min_time_s`` (at most
    ``max_repeats`` runs); returns the timing and the last run's output."""
    times: list[float] = []
    out = None
    while len(times) < repeats or (sum(times) < min_time_s and len(times) < max_repeats):
        out = None  # the previous output is not alive during the next run
        sync(device)
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return Timing(tuple(times)), out


def is_oom(err: BaseException) -> bool:
    """CUDA/CPU out-of-memory, whatever the exception type torch raised it as."""
    if isinstance(err, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    msg = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg)


class MemoryProbe:
    """Peak memory of one phase (see the module docstring for what is counted and why)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.available = True
        if device.type == "cpu":
            try:
                self._status()
                Path("/proc/self/clear_refs").write_text("5")
            except OSError:
                self.available = False

    @staticmethod
    def _status() -> dict[str, int]:
        out = {}
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0]) * 1024
        return out

    def start(self) -> int | None:
        """Reset the peak; returns the memory in use now (bytes)."""
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            return torch.cuda.memory_allocated(self.device)
        if not self.available:
            return None
        release_freed_memory()
        Path("/proc/self/clear_refs").write_text("5")
        return self._status()["VmRSS"]

    def peak(self) -> int | None:
        """Peak since :meth:`start` (bytes)."""
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device)
        return self._status()["VmHWM"] if self.available else None

    def since(self, base: int | None) -> dict[str, int | None]:
        """The phase's peak and its growth over ``base`` (what :meth:`start` returned)."""
        peak = self.peak()
        return {"mem_peak_bytes": peak, "mem_growth_bytes": None if peak is None or base is None else peak - base}


def timed_runs(fn: Callable[[], Any], device: torch.device, repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn``: CUDA events on a GPU (no host sync between the calls,
    one at the end), the host's clock around each call on a CPU."""
    if device.type != "cuda":
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return times
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) / 1e3 for start, end in events]


def matmul_peak(device: torch.device, dtype: torch.dtype, *, n: int | None = None, repeats: int = 10) -> dict[str, Any]:
    """The dense matmul rate this device reaches now, in this process: the MFU denominator.

    One ``n x n`` product (8,192 on CUDA, 1,024 on a CPU: large enough to fill the device, small enough to
    cost well under a second), two untimed runs, then ``repeats`` timed ones (CUDA events on a GPU, no host
    sync between them); the median. Measured, not a datasheet's number: a CPU has none, and a GPU's clocks,
    power cap and library decide what a step can reach."""
    n = n or (8192 if device.type == "cuda" else 1024)
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=gen).to(dtype)  # random operands: zeros run faster
    b = torch.randn(n, n, device=device, generator=gen).to(dtype)
    for _ in range(2):
        torch.mm(a, b)
    times = timed_runs(lambda: torch.mm(a, b), device, repeats)
    seconds = statistics.median(times)
    return {"tflops": 2 * n**3 / seconds / 1e12, "n": n, "dtype": str(dtype).removeprefix("torch."),
            "repeats": repeats, "device": str(device)}


def copy_bandwidth(device: torch.device, *, size_bytes: int | None = None, repeats: int = 10,
                   warmup: int = 2) -> dict[str, Any]:
    """The memory bandwidth this device reaches now, in this process: the decoding floor's denominator.

    One device-to-device copy of ``size_bytes`` (1 GiB on CUDA, 256 MiB on a CPU: far past the caches,
    so it measures memory, not cache), ``warmup`` untimed copies, then ``repeats`` timed ones (CUDA events
    on a GPU, no host sync between them; the process's torch threads on a CPU, as decoding gets); the
    median. A copy reads and writes ``size_bytes`` each, so ``bytes_per_s`` counts both (STREAM's
    convention): the rate at which the memory system moves bytes, what a read-bound step gets."""
    if repeats < 1:
        raise ValueError(f"repeats={repeats}: must be >= 1")
    n = size_bytes or (2**30 if device.type == "cuda" else 256 * 2**20)
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)  # touched: its pages exist before timing
    dst = torch.empty_like(src).fill_(0)
    for _ in range(warmup):
        dst.copy_(src)
    times = timed_runs(partial(dst.copy_, src), device, repeats)
    del src, dst
    seconds = statistics.median(times)
    return {"bytes_per_s": 2 * n / seconds, "gb_per_s": 2 * n / seconds / 1e9, "size_bytes": n,
            "counted": "read + write", "repeats": repeats, "time_s": seconds, "time_min_s": min(times),
            "threads": torch.get_num_threads(), "device": str(device)}


COMPUTE_DTYPES = {"bf16": torch.bfloat16, "16": torch.float16, "64": torch.float64}


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype a run's matmuls take under Lightning's precision string (``bf16-mixed`` -> bfloat16)."""
    return next((d for k, d in COMPUTE_DTYPES.items() if str(precision).startswith(k)), torch.float32)


def profiler_activities(device: torch.device) -> list[Any]:
    """What torch.profiler records on ``device``: the host's operators, and the GPU's kernels on CUDA."""
    acts = [torch.profiler.ProfilerActivity.CPU]
    return [*acts, torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else acts


TOP = 10  # the operators or kernels a profiled cycle lists by time


def count_ops(prof: Any) -> dict[str, Any]:
    """Operators of one micro-batch's cycle: every call into torch's dispatcher (``aten::``), those called
    from outside another operator (what Python asked for), and on a GPU the kernels launched and their
    summed device time (set against the step's time, what share of it the GPU computed). ``top``: where the
    time went, the :data:`TOP` kernels by device time on a GPU, else the operators by their own CPU time."""
    events = list(prof.events())
    aten = [e for e in events if e.name.startswith("aten::")]
    top = [e for e in aten if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")]
    kernels = [e for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")]
    cuda = any(a == torch.profiler.ProfilerActivity.CUDA for a in getattr(prof, "activities", ()))
    timed = [(e.name, e.time_range.elapsed_us()) for e in kernels] if cuda else \
        [(e.name, e.self_cpu_time_total) for e in aten]
    return {"aten_ops_per_step": len(aten), "top_level_ops_per_step": len(top),
            "kernels_per_step": len(kernels) if cuda else None,
            "kernel_s_per_step": sum(us for _, us in timed) / 1e6 if cuda else None,
            "top": {"of": "kernels, device time" if cuda else "operators, own CPU time", "rows": top_by_time(timed)}}


def top_by_time(timed: list[tuple[str, float]], n: int = TOP) -> list[dict[str, Any]]:
    """``(name, us)`` pairs summed by name: the ``n`` largest, with calls, ms and share of the whole."""
    total, by = sum(us for _, us in timed), {}
    for name, us in timed:
        calls, spent = by.get(name, (0, 0.0))
        by[name] = (calls + 1, spent + us)
    ranked = sorted(by.items(), key=lambda kv: -kv[1][1])[:n]
    return [{"name": name if len(name) <= 90 else name[:87] + "...", "calls": calls, "ms": round(us / 1e3, 3),
             "share": round(us / total, 4) if total else None} for name, (calls, us) in ranked]


COMPILED_REGION = "Torch-Compiled Region"  # the profiler's event around each call of a torch.compile'd function


def count_dispatches(prof: Any) -> dict[str, int]:
    """What the host dispatched, a compiled graph counting as one: ``aten::`` operators outside any compiled
    region, plus one per region's call (``dispatched``); and, for honesty, the ``aten::`` operators a compiled
    graph still calls inside (``inside_graphs``: inductor's extern kernels, e.g. ``mm`` on a CPU; under a CUDA
    graph they replay as part of the one launch)."""
    def inside(e: Any) -> bool:
        p = e.cpu_parent
        while p is not None:
            if p.name.startswith(COMPILED_REGION):
                return True
            p = p.cpu_parent
        return False

    events = list(prof.events())
    regions = sum(1 for e in events if e.name.startswith(COMPILED_REGION))
    aten = [e for e in events if e.name.startswith("aten::")]
    nested = sum(1 for e in aten if inside(e))
    return {"dispatched": len(aten) - nested + regions, "graphs": regions, "inside_graphs": nested}
