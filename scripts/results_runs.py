"""The README's blocks about whole runs: the embedded default's scores, the two commands' times, and the paper
profile's bill from the dry runs; with the pieces every block shares (reading a results file, a commit, a
number). Each renderer reads the ``results`` folder it is given (``scripts/render_results.py`` passes its own,
or a restated copy)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LABELS = {"rouge1": "R-1", "rouge2": "R-2", "rougeL": "R-L", "fact_recall": "Facts", "fact_field_recall": "Parts",
          "town_accuracy": "Town", "exact_match": "EM", "f1": "F1", "bertscore_f1": "BS"}


def _shown(path: Path) -> str:
    """A results file as a message names it: from the repository's root when it lies inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


class MissingResults(Exception):
    """A block's results file is absent or unreadable."""


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise MissingResults(f"{_shown(path)}: {e}") from None


def short_commit(c: str | None) -> str:
    return (c or "unknown")[:12] + ("-dirty" if c and c.endswith("-dirty") else "")


def fmt1(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"



# ---- the default run ----------------------------------------------------------------------------

def _blind(results: Path, split: str) -> dict[str, Any]:
    return read_json(results / "default" / f"input_blind_{split}.json")


def render_default(results: Path) -> str:
    metrics = read_json(results / "default" / "metrics.json")
    keys = ["rouge1", "rouge2", "rougeL", "fact_recall", "fact_field_recall", "town_accuracy"]
    lines = [f"| split | input | {' | '.join(LABELS[k] for k in keys)} |", "|---|---|" + "---|" * len(keys)]
    for split in ("validation", "test"):
        b = _blind(results, split)
        for name, base in b["baselines"].items():
            lines.append(f"| {split} ({b['n']}) | {name} | " + " | ".join(fmt1(base["scores"].get(k)) for k in keys)
                         + " |")
    method = metrics["method"]
    return "\n".join([
        f"From `results/default/` (`make default-results`): {method['option']} fine-tuning "
        f"{metrics['backbone']['name']} for {metrics['step']} steps (wall time {metrics['wall_time_s'] / 60:.0f} "
        f"minutes on 2 CPU cores), commit {short_commit(metrics['commit'])}.", "", *lines])


def render_default_town(results: Path) -> str:
    parts = []
    for split in ("validation", "test"):
        b = _blind(results, split)
        n, own = b["n"], b["baselines"]["own document"]["scores"]
        top = b["baselines"]["training summary"]["scores"]
        parts.append(f"{round(own['town_accuracy'] * n / 100)} of {n} {split} ledgers "
                     f"(the most frequent training summary: {round(top['town_accuracy'] * n / 100)})")
    m = read_json(results / "default" / "metrics.json")["method"]
    return (f"`Town`: the summaries name the ledger's own town in {parts[0]} and in {parts[1]}. The town is "
            f"stated once, in the ledger's first words; with k={m['boundary_tokens']} boundary state per chunk "
            f"side and m={m['middle_tokens']} {m['middle_strategy']} middle tokens per chunk, its tokens are among "
            "the states the decoder sees only when the draw keeps them.")


def _minutes(s: float) -> str:
    return f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"


TIME_FIELDS = ("wall_s", "first_progress_s", "load_mean", "load_max", "stopped_at_s")  # numbers when present
IDLE_STEPS = ("setup", "run", "run_terminal", "test")  # what the README's sentence reads of the idle label


def read_times(path: Path) -> dict[str, Any]:
    """times.json's labels, each with its rows, or MissingResults in one line naming the file, label, step and
    field: the README would otherwise read "``make run`` takes nan s" or stop on a KeyError."""
    doc, where = read_json(path), _shown(path)
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, dict):
        raise MissingResults(f"{where}: no \"runs\" mapping (label -> rows): python scripts/time_commands.py writes it")
    for label, run in runs.items():
        rows = run.get("rows") if isinstance(run, dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("step"), str) for r in rows):
            raise MissingResults(f"{where}: runs.{label}: no rows (a list of {{step, wall_s, ...}})")
        for r in rows:
            for key in TIME_FIELDS:
                v = r.get(key)
                if v is not None and not (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                                          and v >= 0):
                    raise MissingResults(f"{where}: runs.{label}, step {r['step']}: {key}={v!r} is not a finite number "
                                         ">= 0")
    for label, steps in (("idle", IDLE_STEPS), ("busy", ("run",)), ("busy-default-threads", ("run",))):
        have = {r["step"] for r in runs[label]["rows"]} if label in runs else set(steps)
        if missing := [s for s in steps if s not in have]:
            raise MissingResults(f"{where}: runs.{label} has no {', '.join(missing)} row(s) (python "
                                 "scripts/time_commands.py)")
    return runs


def render_times(results: Path) -> str:
    """The README's two commands: wall times on a fresh clone, idle and beside other work."""
    runs = read_times(results / "times" / "times.json")
    if "idle" not in runs:
        raise MissingResults("results/times/times.json: no idle rows (python scripts/time_commands.py)")
    idle, i = runs["idle"], {r["step"]: r for r in runs["idle"]["rows"]}
    first = i["run"]["first_progress_s"], i["run_terminal"]["first_progress_s"]
    text = (f"Measured on a fresh clone by `.venv/bin/python scripts/time_commands.py` (`results/times/times.json`; commit "
            f"{idle['commit']}, {idle['when']}; {idle['machine']}) with nothing else running (mean load "
            f"{i['run']['load_mean']:.1f} on {idle['cores']} cores): `make run` takes {_minutes(i['run']['wall_s'])}, "
            f"its first progress line after {first[0]:.0f} s piped and {first[1]:.0f} s in a terminal; `make test` "
            f"takes {_minutes(i['test']['wall_s'])} (a pytest-xdist worker per core). On a fresh clone both first build `.venv` from the lock: "
            f"{_minutes(i['setup']['wall_s'])} here, where pip's cache held every wheel (a first download adds its time).")
    text += _busy_times(runs, i["run"]["wall_s"], i["test"]["wall_s"])
    return text


def _busy_run(row: dict, idle_s: float) -> str:
    """``make run``'s busy row: its time against idle, or that it was stopped unfinished."""
    first = row.get("first_progress_s")
    seen = f"its first progress line after {first:.0f} s" if first is not None else "no progress line"
    if row.get("stopped_at_s"):
        return f"`make run` had not finished after {_minutes(row['stopped_at_s'])} ({seen}; stopped there)"
    return f"`make run` takes {_minutes(row['wall_s'])} ({row['wall_s'] / idle_s:.1f}x idle; {seen})"


def _busy_times(runs: dict, idle_run_s: float, idle_test_s: float) -> str:
    """Beside other work: torch's default threads (``busy-default-threads``), then one thread (``busy`` with
    ``omp_threads`` 1), as measured; a label without rows says nothing."""
    default, one = runs.get("busy-default-threads"), runs.get("busy")
    if default is None and one is None:
        return ""
    ref = default or one
    text = (f" Beside {ref['load_processes']} CPU-bound processes (another job's worth on {ref['cores']} cores; "
            f"commit {ref['commit']}, {ref['when']})")
    parts = []
    for label in (default, one):
        if label is None:
            continue
        rows = {r["step"]: r for r in label["rows"]}
        threads = label.get("omp_threads")
        how = (f"with `OMP_NUM_THREADS={threads}`" if threads else "with torch's default thread per core") + \
            f" (mean load {rows['run']['load_mean']:.1f})"
        parts.append(f"{how} {_busy_run(rows['run'], idle_run_s)}"
                     + (f" and `make test` {_minutes(rows['test']['wall_s'])} "
                        f"({rows['test']['wall_s'] / idle_test_s:.1f}x)" if "test" in rows else ""))
    timed_test = any(r["step"] == "test" for lab in (default, one) if lab for r in lab["rows"])
    return (text + ": " + "; ".join(parts) + ". A CPU run says at start-up when other work holds the cores its "
            "threads need, and names the `OMP_NUM_THREADS` that fits" + ("" if timed_test else
                                                                       "; `make test` was not timed beside the load") + ".")


# ---- the paper profile's bill ---------------------------------------------------------------------

def render_dryrun_costs(results: Path) -> str:
    """The paper profile's hours on one GPU under its recipe (the bill), and the dry runs' memory at the longest
    documents."""
    from scaleformer.costs.bill import readme_summary
    from scaleformer.costs.report import summary_markdown

    # rendered in docs/reproducing.md: links relative to docs/
    text = summary_markdown(results / "dryrun", ("table1", "table2", "figure2", "table_qa"), link="../results/dryrun")
    if text is None:
        raise MissingResults("results/dryrun/: no cost table (make table1 PROFILE=dryrun)")
    memory = text[text.index("Peak GB to train"):].replace(
        "Peak GB to train at the longest documents,", "Peak GB of a training step at the longest documents the dry "
        "runs scaled to (BookSum's whole books: the recipe trains on their first 16,384 tokens, so an upper bound),", 1)
    return readme_summary(read_json(results / "dryrun" / "bill.json"), "../results/dryrun") + "\n\n" + memory
