"""Running an artifact's grid on this machine, and what the tables need from the data itself.

Two ways to run a grid's missing cells. :func:`run_grid` runs them in this one process, in order (the cells
whose weights others share first), with an estimate before starting and one line per cell, so a
CPU profile shows where it is and how long is left. :func:`launch` sends them as Hydra multiruns
(any launcher: SLURM, submitit's local one). :func:`truncation_ceilings` computes, from the generated
evaluation ledgers, the share of their events inside the first window: the most fact recall a
reader of that window alone can reach.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import (
    Cell,
    check_profile,
    column_label,
    continual_stage,
    expand_grid,
    resolve_run_ids,
)
from scaleformer.compose import compose_config
from scaleformer.data import mirrors


def _fmt_s(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min"


def cell_estimate(spec: dict[str, Any], profile: str, cell: Cell) -> float | None:
    """Seconds one cell is expected to take, from the profile's measured ``estimate_s``
    (``{train: s, eval: {column: s}}``): training (unless it reuses another cell's weights) plus
    evaluation. None when the profile records no estimate."""
    est = check_profile(spec, profile).get("estimate_s")
    if not est:
        return None
    ev = est.get("eval", 0)
    ev = ev.get(str(cell.key), 0) if isinstance(ev, dict) else ev
    return float(ev) + (0.0 if cell.train_from is not None else float(est.get("train", 0)))


def _cell_name(spec: dict[str, Any], profile: str, c: Cell) -> str:
    if c.key == "continual":
        return f"{c.method}: continual training (the model its rows fine-tune)"
    where = f"{spec['sweeps'][c.key]['key']}={c.value}" if "sweeps" in spec else column_label(spec, profile, c.key)
    shared = f" (weights trained on {column_label(spec, profile, c.train_from.key)})" if c.train_from else ""
    return f"{c.method} on {where}{shared}"


def _headline(result: dict[str, Any]) -> str:
    """Each split's headline scores: EM and F1 for questions (their ROUGE is no evidence), else R-1."""
    parts = []
    for split, m in result.get("splits", {}).items():
        keys = ((("exact_match", "EM"), ("f1", "F1")) if isinstance(m.get("exact_match"), int | float)
                else (("ppl", "ppl"),) if isinstance(m.get("ppl"), int | float)
                else (("rouge1", "R-1"),)) + (("fact_recall", "facts"),)
        vals = [f"{label} {m[k]:.1f}" for k, label in keys if isinstance(m.get(k), int | float)]
        if vals:
            parts.append(f"{split} " + ", ".join(vals))
    return "; ".join(parts)


def _stage(c: Cell) -> int:
    """Run order: continual training, then the runs that train, then those reading another run's weights."""
    return 0 if c.key == "continual" else 1 + (c.train_from is not None)


def prepare_mirrors(spec: dict[str, Any], profile: str, cells: list[Cell]) -> list[Path]:
    """A rehearsal profile (``mirrors: {scale, docs}``) reads local mirrors of the real sources through the real
    loaders (:mod:`scaleformer.data.mirrors`): write those its cells read and that are missing."""
    spec_m = check_profile(spec, profile).get("mirrors")
    if not spec_m:
        return []
    docs, scale = dict(spec_m.get("docs") or {}), float(spec_m.get("scale", 1.0))
    seen, written = set(), []
    for c in cells:
        data = compose_config(c.overrides).data
        key = (data.get("name"), data.get("files_base"), data.get("hub_id"))
        if key not in seen:
            seen.add(key)
            written += mirrors.ensure(data, docs, scale)
    return written


def run_grid(spec: dict[str, Any], profile: str, root: Path, force: bool = False,
             methods: str | list[str] | None = None, log: Any = None) -> list[str]:
    """Run the grid's missing cells (all with ``force``) here, one after another; returns failures.

    A cell that fails is reported and skipped (its error is in its run folder's train.log); cells
    sharing its weights are skipped too; the others still run.
    """
    # deferred: runs loads Lightning; `scaleformer reproduce` checks its arguments, and renders, without it
    from scaleformer.runs.run import run

    def say(msg: str) -> None:
        print(msg, file=log or sys.stdout, flush=True)

    # A shared-weights run starts from another run's checkpoint folder; Lightning says so, on purpose here.
    warnings.filterwarnings("ignore", message="The dirpath has changed from")
    table = [c for c in expand_grid(spec, profile, methods) if c.available]
    cells = [*continual_stage(table), *table]  # the continually trained models first, then the rows' runs
    for path in prepare_mirrors(spec, profile, cells):
        say(f"{spec['artifact']} ({profile}): wrote the local mirror {path}")
    resolve_run_ids(table, root)
    todo = cells if force else [c for c in cells if not (c.result_dir / "metrics.json").exists()]
    todo.sort(key=_stage)
    name = f"{spec['artifact']} ({profile})"
    if not todo:
        say(f"{name}: all {len(cells)} runs have results; nothing to run (FORCE=1 re-runs)")
        return []
    estimates = [cell_estimate(spec, profile, c) for c in todo]
    total = sum(e for e in estimates if e is not None) if all(e is not None for e in estimates) else None
    trains = sum(c.train_from is None for c in todo)
    say(f"{name}: {len(todo)} of {len(cells)} runs to do ({trains} train, {len(todo) - trains} reuse weights)"
        + (f"; estimate {_fmt_s(total)} (measured on 2 CPU cores, idle)" if total is not None else ""))
    failed: list[str] = []
    bad: set[int] = set()
    started = time.time()
    for i, c in enumerate(todo, 1):
        label = _cell_name(spec, profile, c)
        if any(src is not None and id(src) in bad for src in (c.train_from, c.pretrain_from)):
            failed.append(f"{label}: skipped, the run whose weights it reads failed")
            say(f"[{i}/{len(todo)}] {label}: skipped (its weights' run failed)")
            continue
        overrides = [*c.run_overrides(), f"paths.root={root}", f"skip_existing={'false' if force else 'true'}"]
        if force and c.train_from is None:
            overrides.append("trainer.ckpt_path=null")
        say(f"[{i}/{len(todo)}] {label} ...")
        t0 = time.time()
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # each run's table; its files keep everything
                result = run(compose_config(overrides))
        except Exception as e:  # one broken cell must not cost the rest of the grid
            bad.add(id(c))
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            failed.append(f"{label}: {msg}")
            say(f"[{i}/{len(todo)}] {label}: FAILED after {_fmt_s(time.time() - t0)}: {msg}")
            continue
        left = [e for e in estimates[i:] if e is not None]
        eta = f"; about {_fmt_s(sum(left))} left" if left and len(left) == len(estimates[i:]) else ""
        say(f"[{i}/{len(todo)}] {label}: done in {_fmt_s(time.time() - t0)} ({_headline(result)}); "
            f"elapsed {_fmt_s(time.time() - started)}{eta}")
    say(f"{name}: {len(todo) - len(failed)} of {len(todo)} runs done in {_fmt_s(time.time() - started)}")
    return failed


def launch(spec: dict[str, Any], profile: str, root: Path, force: bool = False, launcher: str | None = None,
           python: str = sys.executable, methods: str | list[str] | None = None,
           launcher_args: Sequence[str] = ()) -> tuple[list[list[str]], list[str]]:
    """Run the grid's missing cells as Hydra multiruns (one per dataset column or sweep).

    Finished cells are skipped by the runs themselves (skip_existing=true) unless `force`, which
    retrains them from scratch. ``launcher`` picks ``conf/hydra/launcher/<name>`` (e.g. slurm) and
    ``launcher_args`` are passed on as they are (``hydra.launcher.partition=gpu``). A failing
    multirun does not stop the others. Returns the commands it ran and one line per failed cell (from
    the sweeps' ``failed.json``; a multirun that failed without one is named by its command).
    """
    table = [c for c in expand_grid(spec, profile, methods) if c.available]
    cells = [*continual_stage(table), *table]
    resolve_run_ids(table, root)
    todo = cells if force else [c for c in cells if not (c.result_dir / "metrics.json").exists()]
    todo.sort(key=_stage)
    groups: dict[tuple[tuple[str, ...], str], list[Cell]] = {}
    for c in todo:  # cells differing only in the value of their last override form one sweep
        ov = c.run_overrides()
        groups.setdefault((tuple(ov[:-1]), ov[-1].split("=", 1)[0]), []).append(c)
    commands: list[list[str]] = []
    failures: list[str] = []
    for (common, key), group in groups.items():
        values = ",".join(c.overrides[-1].split("=", 1)[1] for c in group)
        fresh = force and group[0].train_from is None  # shared cells start from their (new) source weights
        cmd = [python, "-m", "scaleformer.cli.train", "-m", *common, f"{key}={values}", f"paths.root={root}",
               f"skip_existing={'false' if force else 'true'}", *(["trainer.ckpt_path=null"] if fresh else [])]
        if launcher:
            cmd.append(f"hydra/launcher={launcher}")
        cmd.extend(launcher_args)
        print("+ " + " ".join(cmd), flush=True)
        before = set(Path(root).glob("sweeps/*/*/failed.json"))
        proc = subprocess.run(cmd)
        commands.append(cmd)
        records = sorted(set(Path(root).glob("sweeps/*/*/failed.json")) - before)  # this multirun's
        for f in records:
            rec = json.loads(f.read_text(encoding="utf-8"))
            failures.append(f"{' '.join(rec.get('overrides', []))}: {rec.get('error', '?')} ({f})")
        if getattr(proc, "returncode", 0) and not records:
            failures.append(f"multirun exited {proc.returncode}: {' '.join(cmd)}")
    if not todo:
        print(f"{spec['artifact']}: all {len(cells)} runs have results; nothing to launch (FORCE=1 re-runs)")
    return commands, failures
