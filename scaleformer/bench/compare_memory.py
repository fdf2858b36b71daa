"""Memory and time of `scaleformer compare` at real test-set sizes, and of the scipy path it replaced.

Why: scipy's BCa builds a ``[docs, docs - 1]`` jackknife and its sign-flip test ``[resamples, docs, 2]``
index arrays, ~10 GB at 20,000 documents; real test sets reach 6-20k documents. The statistics
(:mod:`scaleformer.metrics.stats`) now draw resamples a block at a time and use the jackknife's closed
form; this measures what that costs, in two parts, each measurement in a fresh process that loads
neither torch nor this package's ``__init__`` (so its peak is its own, not the launcher's):

- ``command``: ``scaleformer compare A B --metric rouge1 --metric exact_match --json ...`` end to end, as a
  user runs it, on two synthetic runs' ``scores_test.jsonl`` (rouge1 continuous, exact_match 0/100 with
  ties): peak RSS (Linux's VmHWM, read by an exit hook), tracemalloc's peak (Python and numpy) in a
  first run, then ``repeats`` timed runs (wall and CPU: median and IQR);
- ``statistics``: :func:`~scaleformer.metrics.stats.paired` on both metrics' arrays, against scipy's
  ``bootstrap`` + ``permutation_test`` as it was called before, at sizes scipy can still afford.

    python scripts/bench_compare.py [--sizes 1000,20000,100000] [--scipy-sizes 1000,2000] [--repeats 10]
"""

from __future__ import annotations

import argparse
import atexit
import json
import platform
import resource
import runpy
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# Each torch-free (tests/bench/test_compare_memory.py checks): the child processes measure the command, not torch.
from scaleformer.io import atomic_write_text
from scaleformer.metrics.stats import CHUNK_ELEMENTS, RESAMPLES, paired
from scaleformer.runs.cost_fit import quartiles
from scaleformer.runs.runtime import machine

SCHEMA = 1
METRICS = ("rouge1", "exact_match")
LIMIT_MIB = 2048  # what 100,000 documents must stay under
# Loads this file without its package (scaleformer.bench's __init__ imports torch), then runs child().
_CHILD = ("import importlib.util as u, sys; s = u.spec_from_file_location('bench_compare_child', sys.argv[1]); "
          "m = u.module_from_spec(s); s.loader.exec_module(m); sys.exit(m.child(sys.argv[2:]))")


def synthetic(n: int, seed: int = 0) -> dict[str, tuple[Any, Any]]:
    """Per metric, runs A and B's scores ``[docs]`` each: A ~0.5 ROUGE-1 points above B."""
    import numpy as np

    rng = np.random.default_rng(seed)
    b = np.round(np.clip(rng.normal(40, 12, n), 0, 100), 4)  # [docs]
    a = np.round(np.clip(b + rng.normal(0.5, 4, n), 0, 100), 4)  # [docs]
    return {"rouge1": (a, b), "exact_match": (100.0 * (a > 55), 100.0 * (b > 55))}


def write_runs(folder: Path, n: int) -> tuple[Path, Path]:
    """Two evaluations' ``scores_test.jsonl`` over ``n`` documents."""
    scores = synthetic(n)
    out = []
    for run in (0, 1):
        f = folder / "ab"[run] / "scores_test.jsonl"
        f.parent.mkdir(parents=True, exist_ok=True)
        columns = {k: v[run].tolist() for k, v in scores.items()}
        with f.open("w") as fh:
            for i in range(n):
                fh.write(json.dumps({"id": f"doc-{i:07d}", "input_tokens": 1000,
                                     **{k: c[i] for k, c in columns.items()}}) + "\n")
        out.append(f)
    return out[0], out[1]


def peak_rss_mib() -> float:
    """This process's peak resident memory. Linux's VmHWM belongs to the process's own memory map; its
    ru_maxrss also keeps the launcher's peak from before exec (here one that imported torch)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux (bytes on macOS)


def _scipy_paired(x: Any, y: Any) -> tuple[float, float, float]:
    """What :func:`scaleformer.metrics.stats.paired` computed before: scipy's BCa and permutation test,
    whole arrays."""
    import warnings

    import numpy as np
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ci = stats.bootstrap((x - y,), lambda v, axis=-1: v.mean(axis=axis), vectorized=True, axis=-1,
                             n_resamples=10_000, method="BCa", random_state=np.random.default_rng(0))
    p = stats.permutation_test((x, y), lambda u, v, axis=-1: (u - v).mean(axis=axis), permutation_type="samples",
                               vectorized=True, n_resamples=10_000, alternative="two-sided",
                               random_state=np.random.default_rng(0)).pvalue
    return float(ci.confidence_interval.low), float(ci.confidence_interval.high), float(p)


def _ours(x: Any, y: Any) -> tuple[float, float, float]:
    p = paired(x, y, test="monte-carlo")  # scipy's test, memory-bounded: the same p at any size
    return p.low, p.high, p.p_value


def child(argv: Sequence[str]) -> int:
    """In a fresh process. ``command REPORT traced|timed ARGS...``: run `scaleformer compare ARGS` and, at
    exit, write its peaks to REPORT. ``ours|scipy REPORT N REPEATS``: the statistics of N documents'
    synthetic scores, once traced and REPEATS times timed."""
    mode, report = argv[0], Path(argv[1])
    if mode == "command":
        if argv[2] == "traced":
            tracemalloc.start()
        atexit.register(lambda: report.write_text(json.dumps({
            "peak_rss_mib": peak_rss_mib(),
            "traced_peak_mib": tracemalloc.get_traced_memory()[1] / 2 ** 20 if tracemalloc.is_tracing() else None})))
        sys.argv = ["scaleformer compare", *argv[3:]]
        runpy.run_module("scaleformer.cli.compare", run_name="__main__", alter_sys=True)  # the command itself
        return 0
    n, repeats = int(argv[2]), int(argv[3])
    fn = _ours if mode == "ours" else _scipy_paired
    data = synthetic(n)
    tracemalloc.start()
    results = {k: fn(a, b) for k, (a, b) in data.items()}
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    walls, cpus = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        for a, b in data.values():
            fn(a, b)
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    report.write_text(json.dumps({"traced_peak_mib": traced / 2 ** 20, "peak_rss_mib": peak_rss_mib(),
                                  "wall_s": walls, "cpu_s": cpus, "results": results}))
    return 0


def _spawn(*args: str) -> dict[str, Any]:
    """Run child(args) in a fresh process; its report, wall and CPU time."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _CHILD, __file__, args[0], str(report), *args[1:]],
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0 or not report.exists():
            raise RuntimeError(f"{' '.join(args[:3])} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        return json.loads(report.read_text()) | {"wall": wall, "cpu": cpu}


def _timing(row: dict[str, Any], walls: Sequence[float], cpus: Sequence[float]) -> dict[str, Any]:
    for key, values in (("wall", walls), ("cpu", cpus)):
        p25, p50, p75 = quartiles(values)
        row[f"{key}_s"], row[f"{key}_iqr_s"] = round(p50, 3), round(p75 - p25, 3)
    return row


def measure_command(n: int, repeats: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """`scaleformer compare` of two runs of ``n`` documents: one traced run, then ``repeats`` timed."""
    with tempfile.TemporaryDirectory() as tmp:
        a, b = write_runs(Path(tmp), n)
        args = [str(a), str(b), *(x for k in METRICS for x in ("--metric", k)), "--json", f"{tmp}/out.json"]
        log(f"command: {n:,} documents, 1 traced + {repeats} timed ...")
        traced = _spawn("command", "traced", *args)
        timed = [_spawn("command", "timed", *args) for _ in range(repeats)]
        result = json.loads(Path(tmp, "out.json").read_text())
    row = {"part": "command", "impl": "ours", "documents": n, "timed": repeats,
           "traced_peak_mib": round(traced["traced_peak_mib"], 1),
           "peak_rss_mib": round(max(r["peak_rss_mib"] for r in [traced, *timed]), 1),
           "methods": {k: f"{m['interval_method']} / {m['test_method']}" for k, m in result["metrics"].items()},
           "diff": {k: round(m["diff"], 4) for k, m in result["metrics"].items()}}
    return _timing(row, [r["wall"] for r in timed], [r["cpu"] for r in timed])


def measure_statistics(n: int, impl: str, repeats: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """paired() (``impl`` ours) or scipy's old path (scipy) on both metrics of ``n`` documents."""
    log(f"statistics ({impl}): {n:,} documents, 1 traced + {repeats} timed ...")
    got = _spawn(impl, str(n), str(repeats))
    row = {"part": "statistics", "impl": impl, "documents": n, "timed": repeats,
           "traced_peak_mib": round(got["traced_peak_mib"], 1), "peak_rss_mib": round(got["peak_rss_mib"], 1),
           "p_value": {k: v[2] for k, v in got["results"].items()}}
    return _timing(row, got["wall_s"], got["cpu_s"])


def environment() -> dict[str, Any]:
    import numpy
    import scipy

    return {"machine": machine(), "platform": platform.platform(), "python": platform.python_version(),
            "numpy": numpy.__version__, "scipy": scipy.__version__, "resamples": RESAMPLES,
            "chunk_elements": CHUNK_ELEMENTS}


def render(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    lines = ["# `scaleformer compare`: peak memory and time by number of documents", "",
             f"{env['machine']}; Python {env['python']}, numpy {env['numpy']}, scipy {env['scipy']}; {doc['when']}; "
             f"written by `make bench-compare` ({Path(__file__).name}'s docstring says how). Two synthetic runs, "
             f"metrics {', '.join(METRICS)}, {env['resamples']:,} resamples and sign flips per metric, blocks of "
             f"at most {env['chunk_elements']:,} values. Peak RSS: the process's (interpreter and imports "
             "included); traced: tracemalloc's peak of Python and numpy allocations. Time: median (IQR) of "
             f"{doc['repeats']} runs, wall and CPU (CPU is the steadier on a shared machine); a command's "
             "includes starting Python and reading both files.", "",
             "| part | path | documents | peak RSS MiB | traced peak MiB | wall s (IQR) | CPU s (IQR) | interval / test |",
             "|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        how = ", ".join(f"{k}: {v}" for k, v in r.get("methods", {}).items()) or "–"
        lines.append(f"| {r['part']} | {r['impl']} | {r['documents']:,} | {r['peak_rss_mib']:.0f} "
                     f"| {r['traced_peak_mib']:.1f} | {r['wall_s']:.2f} ({r['wall_iqr_s']:.2f}) "
                     f"| {r['cpu_s']:.2f} ({r['cpu_iqr_s']:.2f}) | {how} |")
    commands = [r for r in doc["rows"] if r["part"] == "command"]
    if commands:
        big = max(commands, key=lambda r: r["documents"])
        verdict = "under" if big["peak_rss_mib"] < LIMIT_MIB else "OVER"
        lines += ["", f"At {big['documents']:,} documents the command peaks at {big['peak_rss_mib']:.0f} MiB, {verdict} "
                  f"the {LIMIT_MIB:,} MiB limit."]
    old = sorted((r["documents"], r["traced_peak_mib"]) for r in doc["rows"] if r["impl"] == "scipy")
    if len(old) >= 2 and old[-1][0] > old[0][0]:
        per_doc = (old[-1][1] - old[0][1]) / (old[-1][0] - old[0][0])  # MiB per document, from the two ends
        at = 20_000
        lines += ["", f"scipy's path grows with documents x resamples (its flips) and documents squared (its "
                  f"jackknife), so it is measured only where it still fits: {per_doc:.2f} MiB per document here, "
                  f"~{(old[-1][1] + per_doc * (at - old[-1][0])) / 1024:.0f} GiB at {at:,} documents by a straight "
                  f"line (its jackknife alone would hold {16 * at * (at - 1) / 2 ** 30:.1f} GiB there: 16 bytes x n x (n - 1))."]
    return "\n".join([*lines, ""])


def _sizes(flag: str, text: str) -> list[int]:
    """Comma-separated document counts, each >= 2 ('': none)."""
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        sizes = [0]
    if any(n < 2 for n in sizes):
        raise ValueError(f"{flag} {text!r}: give comma-separated document counts, each >= 2")
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_compare", description="Memory and time of `scaleformer compare`.")
    ap.add_argument("--sizes", default="1000,20000,100000", help="document counts of the command, comma-separated")
    ap.add_argument("--scipy-sizes", default="1000,2000", help="sizes for the statistics, ours and scipy's ('': none)")
    ap.add_argument("--repeats", type=int, default=10, help="timed runs per size (after one under tracemalloc)")
    ap.add_argument("--out", default=str(Path("results") / "bench"), help="output folder")
    args = ap.parse_args(argv)
    try:
        if args.repeats < 1:
            raise ValueError(f"--repeats={args.repeats}: must be >= 1")
        sizes, old = _sizes("--sizes", args.sizes), _sizes("--scipy-sizes", args.scipy_sizes)
        if not sizes:
            raise ValueError("--sizes: empty; give at least one document count")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    started = time.time()
    log = lambda s: print(s, flush=True)  # noqa: E731
    rows = [measure_statistics(n, impl, args.repeats, log) for n in old for impl in ("scipy", "ours")]
    rows += [measure_command(n, args.repeats, log) for n in sizes]
    doc = {"schema": SCHEMA, "environment": environment(), "when": time.strftime("%Y-%m-%d"),
           "repeats": args.repeats, "limit_mib": LIMIT_MIB, "rows": rows,
           "wall_time_s": round(time.time() - started, 1)}
    out = Path(args.out)
    atomic_write_text(out / "compare-memory.json", json.dumps(doc, indent=1) + "\n")
    atomic_write_text(out / "compare-memory.md", render(doc))
    print(render(doc))
    print(f"wrote {out}/compare-memory.{{json,md}} in {doc['wall_time_s']:.0f} s")
    return 0
