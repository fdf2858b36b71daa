"""Run a profile's grid: every backbone x row x size, into one results document written as it goes.

A row stops at its first out-of-memory size (recorded; larger sizes are marked skipped with the
reason); a training step that runs out of memory only skips larger training steps. Each finished
cell is written at once (atomically), so a killed run keeps what it measured, and ``resume`` keeps
cells already measured with the same settings, so a long grid can be run in pieces.

The device's copy bandwidth is measured once per run, in this process, with the profile's threads
(:func:`scaleformer.ops.measure.copy_bandwidth`), recorded with the run's environment, and every
generation cell's floor is computed against it (each cell keeps the value it used, so a resumed
grid measured in pieces stays self-describing).
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import platform
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from scaleformer.bench.cell import Context, measure_cell
from scaleformer.bench.probes import peak_tflops
from scaleformer.bench.profile import Profile
from scaleformer.bench.report import write_outputs
from scaleformer.bench.rows import LED, Row, SkipMethod, build_row, expand_methods
from scaleformer.bench.shapes import Shape, attention_impl, load_shape
from scaleformer.bench.summary import summarise
from scaleformer.io import atomic_write_json
from scaleformer.ops.host_memory import heap
from scaleformer.ops.measure import MemoryProbe, copy_bandwidth
from scaleformer.resources import package_commit
from scaleformer.runs.runtime import device_name

SCHEMA = 1
Log = Callable[[str], None]


class Recorder:
    """The results document; every finished cell is written at once, so a killed run keeps them."""

    def __init__(self, doc: dict[str, Any], path: Path | None) -> None:
        self.doc = doc
        self.path = path

    def method(self, rec: dict[str, Any]) -> None:
        ms = self.doc["methods"]
        ms[:] = [m for m in ms if (m["backbone"], m["method"]) != (rec["backbone"], rec["method"])] + [rec]

    def cell(self, rec: dict[str, Any]) -> None:
        cells = self.doc["results"]
        cells[:] = [c for c in cells if _key(c) != _key(rec)] + [rec]
        self.save()

    def find(self, backbone: str, method: str, n: int) -> dict[str, Any] | None:
        return next((c for c in self.doc["results"] if _key(c) == (backbone, method, n)), None)

    def save(self) -> None:
        if self.path is not None:
            atomic_write_json(self.path, self.doc)


def _key(rec: dict[str, Any]) -> tuple[str, str, int]:
    return rec["backbone"], rec["method"], int(rec["n_tokens"])


def _extrapolate(history: list[tuple[int, float]], n: int) -> float | None:
    """Seconds a phase is expected to take at ``n``, from its last sizes (at least linearly)."""
    if not history:
        return None
    n1, w1 = history[-1]
    e = 1.0
    if len(history) >= 2:
        n0, w0 = history[-2]
        if w0 > 0 and w1 > 0 and n1 > n0:
            e = min(max(math.log(w1 / w0) / math.log(n1 / n0), 1.0), 2.5)
    return w1 * (n / n1) ** e


def _predict(history: list[tuple[int, float, float | None]], n: int, train: bool) -> float | None:
    """Seconds a size is expected to take: inference and training step extrapolated apart, since a
    capped or skipped training step must not make the next size look expensive."""
    inference = _extrapolate([(m, w - (t or 0.0)) for m, w, t in history], n)
    steps = [(m, t) for m, _, t in history if t]
    step = _extrapolate(steps, n) if train and steps else 0.0
    return None if inference is None else inference + (step or 0.0)


def _train_wall(cell: dict[str, Any]) -> float | None:
    return (cell.get("train") or {}).get("wall_s")


def run_row(rec: Recorder, profile: Profile, shape: Shape, name: str, device: torch.device, started: float,
            resume: bool, log: Log, bandwidth: float | None = None) -> None:
    """Every size of one row on one backbone, stopping at the first out-of-memory size; ``bandwidth``
    (bytes/s) is the decoding floor's denominator (None: no floor)."""
    dtype = getattr(torch, profile.dtype)
    attn = attention_impl(profile.attn, profile.dtype, shape, device)
    entry: dict[str, Any] = {"backbone": shape.name, "method": name}
    try:
        row = build_row(name, profile, shape, device, dtype, attn)
    except SkipMethod as e:
        entry |= {"status": "skipped", "reason": str(e)}
    except Exception as e:  # noqa: BLE001 - a method that cannot even be built must not stop the others
        entry |= {"status": "error", "reason": f"building the method/model failed: {type(e).__name__}: {e}"[:500]}
    if "status" in entry:
        rec.method(entry)
        rec.save()
        log(f"[{shape.name}] {name}: {entry['status']} ({entry['reason']})")
        return
    entry |= {"status": "ran", "source": row.source,
              "attn_implementation": "led (banded local + global)" if name == LED else attn,
              "attn_fallback": row.attn_fallback, "config": row.config, "note": row.note}
    rec.method(entry)
    ctx = Context(profile, shape, device, dtype, MemoryProbe(device),
                  peak_tflops(device_name(device)) if device.type == "cuda" else None, flops=row.flops,
                  bandwidth=bandwidth)
    # Everything alive now (libraries, the model) leaves the collector's scans: the per-phase
    # gc.collect() of the memory probe then costs milliseconds, not a quarter second.
    gc.freeze()
    try:
        _run_sizes(rec, ctx, row, started, resume, log)
    finally:
        gc.unfreeze()
        entry["attn_fallback"] = row.attn_fallback
        row.method = row.model = None
        if device.type == "cuda":  # the next model needs the room; on CPU refcounting freed it
            gc.collect()
            torch.cuda.empty_cache()


def _run_sizes(rec: Recorder, ctx: Context, row: Row, started: float, resume: bool, log: Log) -> None:
    profile, shape, name = ctx.profile, ctx.shape, row.name
    stop: str | None = None
    train_skip: str | None = None
    history: list[tuple[int, float, float | None]] = []  # (N, wall seconds, of which training step)
    warmed = False
    for n in profile.sizes:
        head = {"backbone": shape.name, "method": name, "n_tokens": n}
        old = rec.find(shape.name, name, n) if resume else None
        if old is not None and old["status"] in ("ok", "oom"):
            cell = old
            if old.get("wall_s"):
                history.append((n, old["wall_s"], _train_wall(old)))
        elif stop:
            cell = head | {"status": "skipped", "reason": stop}
        elif (cap := profile.cap(name)) is not None and n > cap:
            cell = head | {"status": "oom", "cause": "cap",
                           "reason": f"N above the profile's memory cap for this method ({cap} tokens)"}
        else:
            tcap = profile.train_cap(name)
            skip = train_skip or (f"N above the profile's training-step cap for this method ({tcap} tokens)"
                                  if tcap is not None and n > tcap else None)
            pred = _predict(history, n, train=skip is None)
            elapsed = time.perf_counter() - started
            if pred is not None and profile.cell_budget_s is not None and pred > profile.cell_budget_s:
                cell = head | {"status": "skipped", "reason": f"predicted {pred:.0f} s > the profile's "
                               f"{profile.cell_budget_s:.0f} s per size"}
            elif pred is not None and profile.total_budget_s is not None and elapsed + pred > profile.total_budget_s:
                cell = head | {"status": "skipped", "reason": f"predicted {pred:.0f} s would pass the profile's "
                               f"{profile.total_budget_s:.0f} s total budget"}
            else:
                t0 = time.perf_counter()
                try:
                    method, model = row.for_size(n)
                    cell = head | measure_cell(ctx, method, model, n, warmup=not warmed, train_skip=skip)
                except Exception as e:  # noqa: BLE001 - a broken method must not stop the others
                    cell = head | {"status": "error", "error": f"{type(e).__name__}: {e}"[:500],
                                   "traceback": traceback.format_exc(limit=6)[-2000:]}
                warmed = True
                cell["wall_s"] = time.perf_counter() - t0
                history.append((n, cell["wall_s"], _train_wall(cell)))
        if cell["status"] in ("oom", "error"):
            if cell.get("oom_phase") == "train":
                train_skip = train_skip or f"the training step ran out of memory at N={n}"
            elif cell.get("cause") == "cap":
                stop = stop or f"stopped: N={n} is above the memory cap"
            else:
                stop = stop or f"stopped: N={n} {'ran out of memory' if cell['status'] == 'oom' else 'failed'}"
        elif cell.get("train", {}).get("status") == "oom":
            train_skip = train_skip or f"the training step ran out of memory at N={n}"
        rec.cell(cell)
        log(f"[{shape.name}] {name} N={n}: {_short(cell)}")


def _short(cell: dict[str, Any]) -> str:
    if cell["status"] not in ("ok", "oom") or "encode" not in cell:
        return f"{cell['status']} {cell.get('reason', cell.get('error', ''))}".strip()
    g = max(cell.get("generate", {}).items(), key=lambda kv: int(kv[0]), default=(None, None))[1]
    parts = [cell["status"] + (" (truncated)" if cell.get("truncated") else ""),
             f"enc {cell['encode']['time_s'] * 1e3:.1f} ms", f"dec len {cell['decoder_length']}"]
    if g:
        mult = (g.get("floor") or {}).get("floor_multiple")
        parts.append(f"gen {g['time_s'] * 1e3:.0f} ms" + (f" ({mult:.1f}x its floor)" if mult else ""))
    if cell.get("train", {}).get("time_s"):
        parts.append(f"train {cell['train']['time_s'] * 1e3:.0f} ms")
    return ", ".join(parts)


def environment(device: torch.device) -> dict[str, Any]:
    import transformers

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    env = {"device": device.type, "device_name": device_name(device), "torch": torch.__version__,
           "transformers": transformers.__version__, "python": platform.python_version(),
           "cuda": torch.version.cuda, "threads": torch.get_num_threads(), "cpus": cpus, "host_memory": heap()}
    with contextlib.suppress(OSError):
        env["load_average"] = [round(x, 2) for x in os.getloadavg()]  # others' work slows a shared CPU
    if device.type == "cuda":
        env["gpu_memory_bytes"] = torch.cuda.get_device_properties(device).total_memory
        env["peak_bf16_tflops"] = peak_tflops(env["device_name"])
    commit = package_commit()
    env["git_commit"] = None if commit == "unknown" else commit.removesuffix("-dirty")
    env["git_dirty"] = commit.endswith("-dirty")
    return env


def run_profile(profile: Profile, out_dir: str | Path | None, *, resume: bool = False, log: Log = print,
                copy_bytes: int | None = None) -> dict[str, Any]:
    """Run a profile, writing ``<out>/<profile>.json`` as it goes and the table and plot at the end.

    With ``resume``, cells already measured (ok or out of memory) in an existing results file of the
    same settings are kept, so a grid too long for one session can be run in pieces. ``copy_bytes``:
    the size of the bandwidth measurement's copy (default: :func:`copy_bandwidth`'s, past the caches;
    tests pass less).
    """
    started = time.perf_counter()
    if profile.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"profile {profile.name!r} needs CUDA and none is available")
    device = torch.device(profile.device)
    path = Path(out_dir) / f"{profile.name}.json" if out_dir is not None else None
    methods = expand_methods(profile)
    threads = torch.get_num_threads()
    if profile.threads:
        torch.set_num_threads(profile.threads)
    try:
        bandwidth = copy_bandwidth(device, size_bytes=copy_bytes)  # with the profile's threads, as decoding
        log(f"copy bandwidth: {bandwidth['gb_per_s']:.1f} GB/s ({bandwidth['size_bytes'] / 2**20:.0f} MiB copy, "
            f"median of {bandwidth['repeats']})")
        doc = _load_or_new(profile, methods, device, path, resume, bandwidth)
        rec = Recorder(doc, path)
        for bb in profile.backbones:
            shape = load_shape(bb) if isinstance(bb, str) else bb
            for name in methods:
                run_row(rec, profile, shape, name, device, started, resume, log, bandwidth["bytes_per_s"])
    finally:
        torch.set_num_threads(threads)
    doc["wall_time_s"] = round(time.perf_counter() - started, 2)
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    summarise(doc)
    if out_dir is not None:
        write_outputs(doc, Path(out_dir))
    return doc


def _load_or_new(profile: Profile, methods: list[str], device: torch.device, path: Path | None,
                 resume: bool, bandwidth: dict[str, Any] | None = None) -> dict[str, Any]:
    settings = json.loads(json.dumps(profile.settings()))
    env = environment(device)
    if bandwidth is not None:
        env["copy_bandwidth"] = bandwidth  # this run's (a resumed piece's is in runs[-1])
    backbones = [b if isinstance(b, str) else b.name for b in profile.backbones]
    if resume and path is not None and path.exists():
        doc = json.loads(path.read_text())
        if doc.get("settings") != settings:
            raise ValueError(f"{path}: recorded settings differ from profile {profile.name!r}; "
                             "run without --resume (or with another --out) to start over")
        if doc.get("environment", {}).get("device_name") != env["device_name"]:
            raise ValueError(f"{path}: measured on {doc['environment'].get('device_name')!r}, this is "
                             f"{env['device_name']!r}; results of different devices are not merged")
        doc.setdefault("runs", []).append(env)
        grid = doc["grid"]  # the union of every piece's grid, so the table shows them all
        for key, new in (("backbones", backbones), ("methods", methods), ("sizes", list(profile.sizes))):
            grid[key] = list(dict.fromkeys(grid[key] + new))
        grid["sizes"].sort()
        doc["spec"] = profile.report_spec()
        return doc
    return {"schema": SCHEMA, "profile": profile.name, "settings": settings, "spec": profile.report_spec(),
            "environment": env, "grid": {"backbones": backbones, "methods": methods, "sizes": list(profile.sizes)},
            "memory_measure": (
                "CUDA: torch.cuda.max_memory_allocated per phase (peak), reset per phase"
                if device.type == "cuda" else
                "CPU: process peak RSS (VmHWM) per phase, reset via /proc/self/clear_refs after gc + "
                "malloc_trim; growth = peak minus RSS at the phase start (all allocations, not only tensors)"),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "methods": [], "results": []}


def problems(doc: dict[str, Any]) -> list[str]:
    """Failures a run must not hide: method errors and decoder lengths that disagree with the method."""
    out = []
    for c in doc["results"]:
        if c["status"] == "error":
            out.append(f"{c['backbone']} / {c['method']} N={c['n_tokens']}: {c['error']}")
        if c.get("decoder_length_ok") is False:
            out.append(f"{c['backbone']} / {c['method']} N={c['n_tokens']}: decoder length {c['decoder_length']} "
                       f"!= decoder_length() {c['decoder_length_expected']}")
    return out
