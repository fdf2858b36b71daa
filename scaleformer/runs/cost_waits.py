"""What a slow training micro-batch waited on: counters read at each cycle's ends, so a step that takes
3x its group's median can be told apart without a profiler trace.

Why: on an H100 the cost probe's micro-batches of one shape took 0.07 to 2.2 s (SLED, 4,096 tokens),
fast and slow ones alternating, forward and backward slowed alike. Candidates a
timer cannot separate: the launching thread was busy longer (its own CPU time grows: more Python, or a
slower core), it was preempted (involuntary context switches), Python's garbage collector ran inside
the step (time in ``gc`` callbacks), the CUDA caching allocator went to the driver (``cudaMalloc``/
``cudaFree``, the latter synchronising; ``num_device_alloc``/``num_device_free``/``num_alloc_retries``),
or the GPU itself ran slower (its SM clock, where NVML is installed; tried once). Each is a cheap host
read at the cycle's ends, outside its timed span, and none synchronises the device.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import torch

try:  # per-thread rusage: Linux
    import resource

    _RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)
except ImportError:  # pragma: no cover - not a POSIX system
    resource, _RUSAGE_THREAD = None, None

DEVICE_KEYS = {"device_allocs": "num_device_alloc", "device_frees": "num_device_free",
               "alloc_retries": "num_alloc_retries"}


class WaitCounters:
    """Running counters of the calling thread (CPU time, involuntary switches), the collector and the CUDA
    allocator; :meth:`read` returns them, :func:`since` their growth over a cycle."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.gc_s, self.gc_runs = 0.0, 0
        self._gc_t0: float | None = None
        gc.callbacks.append(self._on_gc)
        self._clock = device.type == "cuda" and self._sm_clock() is not None  # NVML here, or never asked again

    def _sm_clock(self) -> int | None:
        try:
            return torch.cuda.clock_rate(self.device)  # NVML (pynvml)
        except Exception:  # no NVML here
            return None

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        elif self._gc_t0 is not None:
            self.gc_s += time.perf_counter() - self._gc_t0
            self.gc_runs, self._gc_t0 = self.gc_runs + 1, None

    def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def read(self) -> dict[str, Any]:
        out: dict[str, Any] = {"thread_cpu_s": time.thread_time(), "gc_s": self.gc_s, "gc_runs": self.gc_runs,
                               "involuntary_switches": None}
        if _RUSAGE_THREAD is not None:
            out["involuntary_switches"] = resource.getrusage(_RUSAGE_THREAD).ru_nivcsw
        if self.device.type == "cuda":
            stats = torch.cuda.memory_stats(self.device)  # the allocator's host-side counters: no sync
            out |= {k: stats.get(v) for k, v in DEVICE_KEYS.items()}
            out["sm_clock_mhz"] = self._sm_clock() if self._clock else None
        return out


def since(start: dict[str, Any], end: dict[str, Any]) -> dict[str, Any]:
    """Each counter's growth from ``start`` to ``end`` (the clock: its reading at the end)."""
    out: dict[str, Any] = {}
    for k, v in end.items():
        if k == "sm_clock_mhz":
            out[k] = v
        elif v is None or start.get(k) is None:
            out[k] = None
        else:
            out[k] = round(v - start[k], 6) if isinstance(v, float) else v - start[k]
    return out

