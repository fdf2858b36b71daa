"""Per-document scores committed beside a table, so that a reader can recompute every interval and p-value.

The runs (``results/<profile>/runs/``) are not committed: they hold weights. Their per-document scores
are small, so :func:`archive` copies, for every cell of a rendered table, each seed's
``scores_<split>.jsonl`` (with each document's reference digest, which pairing checks) to
``<dest>/<run id>/<evaluation>/scores_<split>.jsonl``; ``results/tiny/scores/<artifact>/`` in this
repository. :func:`recheck` reads a table's CSV and those files alone, runs the same statistics
(:func:`scaleformer.artifacts.significance.annotate`) and lists every number that differs: a changed
score file, a hand-edited CSV, or statistics code that no longer gives the committed numbers.
``python scripts/render_results.py --check`` runs it for every archived table.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import load_spec
from scaleformer.artifacts.perplexity_recheck import recheck_figure as recheck_by_length
from scaleformer.artifacts.perplexity_recheck import recheck_table as recheck_perplexity
from scaleformer.artifacts.significance import annotate, point_fields, read_scores
from scaleformer.io import atomic_write_text, iter_jsonl
from scaleformer.resources import experiments_dir

# what annotate computes and the CSV keeps: recomputed and compared
CHECKED = ("ci_low", "ci_high", "n_docs", "n_seeds", "diff_vs_baseline", "diff_ci_low", "diff_ci_high",
           "diff_df", "diff_seed_min", "diff_seed_max", "p_value", "p_holm", "significant")
REL = 1e-9  # floating-point noise between machines is far below; a changed score is far above


def _runs(row: dict[str, Any]) -> list[tuple[str, str]]:
    """(run id, evaluation folder) of each seed of a CSV row."""
    return list(zip(row["run_id"].split(";"), row["evaluation"].split(";"), strict=True))


def archive(spec: dict[str, Any], rows: list[dict[str, Any]], result_dirs: dict[str, Path], dest: Path) -> int:
    """Copy the scores of every ``ok`` row's runs into ``dest``; ``result_dirs``: run id -> its evaluation
    folder. Returns the number of files written."""
    written = set()
    for r in rows:
        if r.get("status") != "ok" or not r.get("run_id"):
            continue
        split = spec["splits"][r["split"]] if "splits" in spec else spec["split"]  # a table's; a figure's one
        for run_id, evaluation in _runs(r):
            target = dest / run_id / evaluation / f"scores_{split}.jsonl"
            if target in written or run_id not in result_dirs:
                continue
            scores = read_scores(result_dirs[run_id], split)
            if scores is None:
                continue
            atomic_write_text(target, "".join(json.dumps(s, sort_keys=True) + "\n" for s in scores.values()))
            written.add(target)
    return len(written)


def _archived(scores_dir: Path, row: dict[str, Any], split: str, name: str,
              problems: list[str]) -> list[dict[str, dict[str, Any]]] | None:
    """Each seed's archived scores of a CSV row (None, with a problem line, where one is missing)."""
    per_seed = []
    for run_id, evaluation in _runs(row):
        path = scores_dir / run_id / evaluation / f"scores_{split}.jsonl"
        if not path.exists():
            problems.append(f"{name}: {path} is missing (a cell's scores are not archived)")
            return None
        per_seed.append(read_archived(path))
    return per_seed


def read_archived(path: Path) -> dict[str, dict[str, Any]]:
    """An archived scores file: a regular file (a link out of the archive is not followed) of JSON objects,
    each with an ``id`` and finite numbers for its scores; else ValueError naming the file and line."""
    if path.is_symlink() or not path.is_file():
        raise ValueError(f"{path}: not a regular file (an archive holds its scores, it links to nothing)")
    out = {}
    for n, row in iter_jsonl(path, ValueError):
        if not isinstance(row, dict) or not isinstance(row.get("id"), str | int) or isinstance(row.get("id"), bool):
            raise ValueError(f"{path}:{n}: each line must be a JSON object with an id")
        bad = next((k for k, v in row.items() if k != "id" and not k.startswith("_")  # _reference_sha: a digest
                    and not (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v))), None)
        if bad is not None:
            raise ValueError(f"{path}:{n}: document {row['id']!r}: score {bad}={row[bad]!r} is not a finite number")
        out[str(row["id"])] = row
    return out


def _value(x: Any) -> Any:
    """A CSV cell as annotate's value: '' -> None, 'True'/'False' -> bool, numbers -> float."""
    if x in ("", None):
        return None
    if x in ("True", "False"):
        return x == "True"
    try:
        return float(x)
    except ValueError:
        return x


def _differs(a: Any, b: Any) -> bool:
    b = float(b) if isinstance(b, int) and not isinstance(b, bool) else b
    if isinstance(a, float) and isinstance(b, float):
        return not math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)
    return a != b


def reannotate(spec: dict[str, Any], table: list[dict[str, str]], scores_dir: Path, problems: list[str],
               name: str = "") -> tuple[list[dict[str, Any]], dict[tuple[str, str, str], Any]]:
    """Every statistic of a table's CSV rows recomputed from ``scores_dir`` alone: one fresh row per CSV
    row (its keys, ``ours`` and what :func:`annotate` adds) and each cell's archived seeds; a missing score
    file is a line in ``problems``."""
    scores: dict[tuple[str, str, str], list[dict[str, dict[str, Any]]]] = {}
    for r in table:
        key = (r["split"], r["method"], r["dataset"])
        if r["status"] != "ok" or not r["run_id"] or key in scores:
            continue
        per_seed = _archived(scores_dir, r, spec["splits"][r["split"]], name, problems)
        if per_seed is not None:
            scores[key] = per_seed
    fresh = [{"split": r["split"], "method": r["method"], "dataset": r["dataset"], "metric": r["metric"],
              "ours": _value(r["ours"])} for r in table]
    annotate(fresh, scores, spec.get("baseline"))
    return fresh, scores


def recheck(spec: dict[str, Any], csv_path: Path, scores_dir: Path) -> list[str]:
    """Every statistic of ``csv_path`` recomputed from ``scores_dir`` alone; the differences, one line each."""
    table = list(csv.DictReader(csv_path.open()))
    problems: list[str] = []
    fresh, scores = reannotate(spec, table, scores_dir, problems, csv_path.name)
    for old, new in zip(table, fresh, strict=True):
        seeds = scores.get((old["split"], old["method"], old["dataset"]))
        if seeds and new["ours"] is not None and all(old["metric"] in d for s in seeds for d in s.values()):
            mean = sum(sum(d[old["metric"]] for d in s.values()) / len(s) for s in seeds) / len(seeds)
            if _differs(new["ours"], mean):
                problems.append(f"{csv_path.name}: {old['split']} {old['method']} {old['dataset']} {old['metric']}: "
                                f"ours is {old['ours']} in the CSV, {mean!r} from the archived scores")
        for k in CHECKED:
            if _differs(_value(old.get(k, "")), new.get(k)):
                problems.append(f"{csv_path.name}: {old['split']} {old['method']} {old['dataset']} {old['metric']}: "
                                f"{k} is {old.get(k)!r} in the CSV, {new.get(k)!r} from the archived scores")
    return problems


def recheck_figure(spec: dict[str, Any], csv_path: Path, scores_dir: Path) -> list[str]:
    """A figure's points (each plotted metric's mean and interval) recomputed from ``scores_dir`` alone: a sweep's
    (one split: ``spec["split"]``) or a grid's (a ``split`` column naming one of ``spec["splits"]``)."""
    problems = []
    for r in csv.DictReader(csv_path.open()):
        if r["status"] != "ok" or not r.get("evaluation"):
            continue
        split, point = ((spec["splits"][r["split"]], f"{r['split']} {r['method']} on {r['dataset']}") if "sweep" not in r
                        else (spec["split"], f"{r['sweep']}={r['value']}"))
        per_seed = _archived(scores_dir, r, split, csv_path.name, problems)
        if per_seed is None:
            continue
        extra = [k.removesuffix("_ci_low") for k in r if k.endswith("_ci_low") and k != "ci_low"]
        for k, v in point_fields(spec["metric"], extra, per_seed).items():
            if _differs(_value(r.get(k, "")), v):
                problems.append(f"{csv_path.name}: {point}: {k} is {r.get(k)!r} in the CSV, {v!r} from the archived "
                                "scores")
    return problems


def recheck_all(tables: Path) -> list[str]:
    """Every table with archived scores (``scores/<artifact>/``) in ``tables`` or one folder below it (a
    table of a few rows rendered apart, e.g. ``table_qa_seeds/``), rechecked."""
    problems = []
    known = {p.stem for p in experiments_dir().glob("*.yaml")}
    for folder in sorted([*(tables / "scores").glob("*"), *tables.glob("*/scores/*")]):
        if not folder.is_dir():
            continue
        if folder.name not in known:  # a stray folder: said, not read
            problems.append(f"{folder}: no artifact {folder.name!r} (experiments/ has {', '.join(sorted(known))})")
            continue
        table = folder.parent.parent / f"{folder.name}.csv"
        if not table.is_file():
            problems.append(f"{table}: missing, while its scores are archived in {folder}")
            continue
        spec = load_spec(experiments_dir() / f"{folder.name}.yaml")
        check = recheck_figure if "sweeps" in spec else recheck_perplexity if spec.get("kind") == "perplexity" \
            else recheck
        try:
            problems += check(spec, table, folder)
        except (ValueError, KeyError, TypeError) as e:  # a malformed file: one line naming it, not a traceback
            problems.append(f"{table}: cannot be rechecked: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    for path in sorted(experiments_dir().glob("*.yaml")):  # figures drawn from another artifact's archived runs
        spec = load_spec(path)
        figure = tables / f"{path.stem}.csv"
        check = {"metric_by_cost": recheck_figure, "perplexity_by_length": recheck_by_length}.get(spec.get("kind"))
        if check is not None and figure.is_file():
            try:
                problems += check(spec, figure, tables / "scores" / spec["same_runs_as"])
            except (ValueError, KeyError, TypeError) as e:
                problems.append(f"{figure}: cannot be rechecked: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    return problems
