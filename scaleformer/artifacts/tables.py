"""The paper's artifacts from results files: grid expansion, launching, Table 1/2 and Figure 2.

An artifact is one declarative file in experiments/ (grid, columns, the paper's value per cell, and
one block per profile). Numbers come only from each run's ``eval/<evaluation>/metrics.json``: a
missing or corrupt file is reported by name and shown as such, never read as zero; a method the
framework lacks shows as "not run". Rows are the spec's methods; ``methods="all"`` adds every other
``conf/method/`` option (a newly added method appears without editing the spec, with no paper value
beside it). Profiles may rename the columns (``labels``: what the synthetic stand-ins are), give a
method its own settings (``method_overrides``), one method on one column its own (``cell_overrides``: what a
paper chose per cell, e.g. a learning rate), add metrics (``extra_metrics``: fact recall, shown
with the truncation ceiling of each column) and share
one training per method across columns (``share_training``, see :func:`expand_grid`). Running a
grid, on this machine with progress lines or as Hydra multiruns (any launcher), is
:mod:`scaleformer.artifacts.gridrun`.
"""

from __future__ import annotations

import csv
import io
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import (
    Cell,
    column_label,
    expand_grid,
    profile_datasets,
    profile_metrics,
    resolve_run_ids,
    seeds,
    title,
    truncation_ceilings,
)
from scaleformer.artifacts.scores_archive import archive
from scaleformer.artifacts.significance import (
    MARK,
    annotate,
    cell_text,
    read_scores,
    seed_counts,
    table_caption,
)
from scaleformer.io import atomic_write_text
from scaleformer.runs.results import FILE as RESULTS_FILE
from scaleformer.runs.results import Results


@dataclass
class Collected:
    results: dict[tuple[str, str, Any, Any], Results] = field(default_factory=dict)  # (key, method, value, seed)
    problems: list[str] = field(default_factory=list)


def collect(cells: list[Cell], label: Callable[[str], str] = str) -> Collected:
    """Read each cell's metrics.json; report missing and corrupt files by name (``label``: a column's name
    as the table prints it, so "missing:" lines say "synthetic 0.2k", not the paper's data set)."""
    out, read = Collected(), {}  # read: one Results per run folder, so cells that are one run share it
    for c in cells:
        if not c.available:
            continue
        path = Path(str(c.result_dir)) / RESULTS_FILE
        if path in read:
            out.results[(c.key, c.method, c.value, c.seed)] = read[path]
            continue
        if not path.exists():
            out.problems.append(f"missing: {path} ({c.method} on {label(c.key)})")
            continue
        result = Results.read(path.parent)
        if result is None or not isinstance(result.splits, dict):
            out.problems.append(f"corrupt: {path} ({c.method} on {label(c.key)}): skipped")
            continue
        out.results[(c.key, c.method, c.value, c.seed)] = read[path] = result
    for p in out.problems:
        print(p, file=sys.stderr)
    return out


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) else None


def _groups(cells: list[Cell]) -> dict[tuple[str, str], list[Cell]]:
    """(column, method) -> its cells, one per seed, in grid order."""
    out: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        out.setdefault((c.key, c.method), []).append(c)
    return out


def table_rows(spec: dict[str, Any], cells: list[Cell], got: Collected, metrics: list[str] | None = None,
               ceilings: dict[tuple[str, str], float] | None = None) -> list[dict[str, Any]]:
    """One row per (split, method, dataset, metric): ours (the mean over the spec's seeds), the paper's,
    the difference, provenance; then each row's interval and test against the baseline
    (:mod:`scaleformer.artifacts.significance`).

    ``ceilings`` ((split label, column) -> the truncation ceiling of fact recall) adds rows of the
    pseudo-method ``truncation_ceiling``: computed from the data, not from a run.
    """
    metrics = metrics or spec["metrics"]
    rows = []
    scores: dict[tuple[str, str, str], list[dict[str, dict[str, Any]]]] = {}
    for split_label, split in spec["splits"].items():
        for (key, method), group in _groups(cells).items():
            c = group[0]
            results = [got.results.get((g.key, g.method, None, g.seed)) for g in group]
            paper = (spec["paper"].get(split_label, {}).get(method, {}) or {}).get(key)
            ms = [(r.splits.get(split) or {}) if r else {} for r in results]
            board = next((m["leaderboard"] for m in ms if isinstance(m.get("leaderboard"), dict)), None)
            status = (f"skipped: {c.skipped}" if c.skipped else "not run (method not implemented)" if not c.available
                      else "missing" if any(r is None for r in results)
                      else f"leaderboard ({board.get('name')}: {board.get('file')})" if board
                      else "no references (leaderboard predictions only)" if any(m.get("scored") is False for m in ms)
                      else "ok" if all(ms) else f"no {split} split")
            if status == "ok":
                per_seed = [read_scores(g.result_dir, split) for g in group]
                if all(per_seed):
                    scores[(split_label, method, key)] = per_seed
            for metric in metrics:
                i = spec["metrics"].index(metric) if metric in spec["metrics"] else None
                values = [_num(m.get(metric)) for m in ms] if status == "ok" else [None]
                ours = None if None in values else sum(values) / len(values)
                ref = _num(paper[i]) if paper and i is not None else None
                rows.append({
                    "split": split_label, "method": method, "dataset": key, "metric": metric,
                    "ours": ours, "paper": ref, "diff": None if ours is None or ref is None else ours - ref,
                    "status": status, "run_id": ";".join(g.run_id or "" for g in group),
                    "evaluation": ";".join(g.result_dir.name if g.result_dir else "" for g in group),
                    "trained_in": ";".join(g.train_from.run_id if g.train_from and g.train_from.run_id
                                           else g.run_id or "" for g in group),
                    "commit": ";".join(dict.fromkeys(r.commit for r in results if r)),
                    "seeds": ";".join(str(g.seed) for g in group if g.seed is not None),
                    "weights": ";".join(weights_text(r) for r in results if r),
                })
        for ds in spec["datasets"]:
            if ceilings and (split_label, ds) in ceilings:
                rows.append({"split": split_label, "method": CEILING, "dataset": ds,
                             "metric": spec.get("ceiling_metric", "fact_recall"),
                             "ours": ceilings[(split_label, ds)], "paper": None, "diff": None,
                             "status": "computed from the data", "run_id": "", "evaluation": "",
                             "trained_in": "", "commit": "", "seeds": "", "weights": ""})
    annotate(rows, scores, spec.get("baseline"))  # marks on the test split only (dev is for choosing)
    return rows


CEILING = "truncation_ceiling"
CEILING_LABEL = "Trunc. ceiling (events in 1st window)"


def weights_text(r: Results) -> str:
    """Which weights a run evaluated: ``best: step 1,570 of 3,140 (val/task_score 21.3)`` or ``last: step 300``."""
    sel = r.selection or {}
    if sel.get("rule") == "best":
        return (f"best: step {sel.get('step'):,} of {sel.get('last_step'):,} ({sel.get('monitor')} "
                f"{sel.get('score'):.4g} on {sel.get('split')}, {len(sel.get('validations') or [])} validations)")
    return f"{sel.get('rule') or 'last'}: step {r.step:,}"


def footer(spec: dict[str, Any], profile: str, got: Collected) -> list[str]:
    """Lines under a table that its runs determine: where each test column's numbers come from (scored here,
    or by a leaderboard from the runs' prediction files) and the BERTScore model behind its BS column."""
    results = {(key, method): r for (key, method, _, _), r in got.results.items()}
    test = spec["splits"].get("test")
    sources = []
    for ds in spec["datasets"]:
        ms = [(r.splits.get(test) or {}, r) for (key, _), r in results.items() if key == ds and test]
        board = next((m["leaderboard"] for m, _ in ms if isinstance(m.get("leaderboard"), dict)), None)
        scored = next((r for m, r in ms if m.get("scored")), None)
        where = (f"the {board.get('name')} leaderboard (references hidden; each run writes {board.get('file')})" if board
                 else f"scored here ({((scored.data.get('summary') or {}).get(test) or {}).get('source', '?')})" if scored
                 else "no test results")
        sources.append(f"{column_label(spec, profile, ds)}: {where}")
    models = sorted({f"{m.get('bertscore_model')} (layer {m.get('bertscore_num_layers')}, "
                     f"{m.get('bertscore_model_source')})" for r in got.results.values() for m in r.splits.values()
                     if m.get("bertscore_model")})
    lines = [f"Test columns: {'; '.join(sources)}."] if test and sources else []
    return lines + [f"BERTScore: {', '.join(models) if models else 'not computed'}."]


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def provenance(got: Collected) -> str:
    """Where the table's runs come from: commits, versions, machines and their summed wall time (a run
    that several cells read, such as a sweep's default point, counted once)."""
    results = list({id(r): r for r in got.results.values()}.values())
    if not results:
        return ""

    def joined(values: Any) -> str:
        return ", ".join(sorted({str(v) for v in values if v})) or "unknown"

    versions = "; ".join(f"{d} {joined(r.versions.get(d) for r in results)}" for d in ("torch", "transformers",
                                                                                       "lightning"))
    wall = sum(r.wall_time_s for r in results)
    commits = joined(r.commit[:12] + ("-dirty" if r.commit.endswith("-dirty") else "") for r in results)
    dirty = {r.commit[:12]: r.changes for r in results if r.commit.endswith("-dirty")}
    changes = "; ".join(f"{c}-dirty changed {', '.join(ch['files'])} (diff sha256 {ch['diff_sha256'][:12]})"
                        if ch else f"{c}-dirty: its changes were not recorded" for c, ch in sorted(dirty.items()))
    return (f"Provenance: {len(results)} runs; commit {commits}; {versions}; "
            f"machine {joined(r.machine for r in results)}; wall time {wall / 60:.1f} min summed over the runs "
            "(training and evaluation)." + (f" Uncommitted changes: {changes}." if changes else ""))


def render_markdown(spec: dict[str, Any], rows: list[dict[str, Any]], problems: list[str],
                    profile: str = "paper", source: str = "") -> str:
    """Per cell 'ours ±h (paper, ours - paper)'; a provenance table of runs below (``source``: where
    the runs come from, :func:`provenance`)."""
    datasets = profile_datasets(spec, profile)
    metrics = list(dict.fromkeys(r["metric"] for r in rows if r["method"] != CEILING)) or spec["metrics"]
    labels = spec.get("metric_labels", {})
    head = ["split", "method", *[f"{column_label(spec, profile, d)} {labels.get(m, m)}" for d in datasets
                                 for m in metrics]]
    renamed = [f"{column_label(spec, profile, d)} = the paper's {d}" for d in datasets
               if column_label(spec, profile, d) != d]
    has_paper = bool(spec.get("paper"))
    base = spec.get("baseline")
    # the seeds the cells rest on (a spec's list may be longer than what has run)
    counts = seed_counts([r for r in rows if r["method"] != CEILING])
    seeds_text = table_caption(base, spec["method_labels"].get(base, base) if base else "", counts,
                               spec["method_labels"], len(seeds(spec, profile)))
    stand_in = bool(renamed)  # other data (and model) than the paper's: its value is context, not a target
    lines = [f"# {title(spec, profile)}", "",
             ("Each cell: ours (paper, ours - paper). " if has_paper and not stand_in else
              "Each cell: ours (the paper's value, from another model on other data: not comparable, so no "
              "difference is taken). " if has_paper else "Each cell: ours (no paper reports this table). ") + seeds_text
             + " `–`: no number (see status below). dev = validation "
             "split; test = test split (scored locally only where references are public)"
             + (f"; choices were made on {spec['tuning_split']} only" if spec.get("tuning_split") else "") + ".", ""]
    if renamed and has_paper:
        lines += [f"Profile `{profile}`: our columns are stand-ins, the paper's values are beside them: "
                  + "; ".join(renamed) + ".", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by = {(r["split"], r["method"], r["dataset"], r["metric"]): r for r in rows}
    for split in spec["splits"]:
        for meth in dict.fromkeys(r["method"] for r in rows):
            cells = []
            for d in datasets:
                for m in metrics:
                    r = by.get((split, meth, d, m))
                    if r is None:
                        cells.append("")
                        continue
                    diff = "" if r["diff"] is None or stand_in else f", {r['diff']:+.1f}"
                    cells.append(cell_text(r) + ("" if (r["paper"] is None and meth == CEILING) or not has_paper
                                                    else f" ({_fmt(r['paper'])}{diff})"))
            label = spec.get("ceiling_label", CEILING_LABEL) if meth == CEILING else spec["method_labels"].get(meth, meth)
            lines.append(f"| {split} | {label} | " + " | ".join(cells) + " |")
    weights = any(r.get("weights", "").startswith("best") for r in rows)  # the column where a checkpoint was chosen
    lines += ["", "| method | dataset | status | run | trained in | evaluation | commit |" + (" weights |" if weights else ""),
              "|---|---|---|---|---|---|---|" + ("---|" if weights else "")]
    seen = set()
    for r in rows:
        k = (r["method"], r["dataset"])
        if k not in seen and r["method"] != CEILING:
            seen.add(k)
            trained = "" if r["trained_in"] == r["run_id"] else r["trained_in"]
            lines.append(f"| {r['method']} | {column_label(spec, profile, r['dataset'])} | {r['status']} "
                         f"| {r['run_id']} | {trained or 'same'} | {r['evaluation']} | {r['commit'][:12]} |"
                         + (f" {r.get('weights', '')} |" if weights else ""))
    if source:
        lines += ["", *source.split("\n")]
    if problems:
        lines += ["", "Problems:", *[f"- {p}" for p in problems]]
    return "\n".join(lines) + "\n"


def render_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["split"])
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def render_latex(spec: dict[str, Any], rows: list[dict[str, Any]], profile: str = "paper") -> str:
    datasets = profile_datasets(spec, profile)
    metrics = list(dict.fromkeys(r["metric"] for r in rows if r["method"] != CEILING)) or spec["metrics"]
    labels = spec.get("metric_labels", {})
    by = {(r["split"], r["method"], r["dataset"], r["metric"]): r for r in rows}
    cols = "ll" + "r" * (len(datasets) * len(metrics))
    out = [r"\begin{tabular}{" + cols + "}", r"\toprule",
           " & & " + " & ".join(rf"\multicolumn{{{len(metrics)}}}{{c}}{{{column_label(spec, profile, d)}}}"
                                for d in datasets) + r" \\",
           " & Method & " + " & ".join(labels.get(m, m) for _ in datasets for m in metrics) + r" \\", r"\midrule"]
    for split in spec["splits"]:
        for meth in dict.fromkeys(r["method"] for r in rows):
            vals = [cell_text(by.get((split, meth, d, m)) or {}).replace("–", "--").replace("±", r"$\pm$")
                    .replace(MARK, "$^*$") for d in datasets for m in metrics]
            label = spec.get("ceiling_label", CEILING_LABEL) if meth == CEILING else spec["method_labels"].get(meth, meth)
            out.append(f"{split} & {label} & " + " & ".join(vals) + r" \\")
        out.append(r"\midrule")
    out[-1] = r"\bottomrule"
    out.append(r"\end{tabular}")
    return "\n".join(out) + "\n"


def build_table(spec: dict[str, Any], profile: str, root: Path, out_dir: Path,
                methods: str | list[str] | None = None) -> dict[str, Path]:
    """Write <artifact>.md/.csv/.tex from the results files under ``root``; returns the paths written."""
    cells = expand_grid(spec, profile, methods)
    resolve_run_ids(cells, root)
    got = collect(cells, lambda key: column_label(spec, profile, key))
    metrics = profile_metrics(spec, profile)
    ceilings = None
    if spec.get("ceiling_metric", "fact_recall") in metrics:
        ceilings = truncation_ceilings(spec, profile, cells, root)
    rows = table_rows(spec, cells, got, metrics, ceilings)
    name = spec["artifact"]
    # every cell's per-document scores beside the table, so that its statistics can be rechecked
    archive(spec, rows, {c.run_id: c.result_dir for c in cells if c.run_id and c.result_dir},
            out_dir / "scores" / name)
    return {
        "md": atomic_write_text(out_dir / f"{name}.md", render_markdown(spec, rows, got.problems, profile, "\n".join(
            [provenance(got), *footer(spec, profile, got)]))),
        "csv": atomic_write_text(out_dir / f"{name}.csv", render_csv(rows)),
        "tex": atomic_write_text(out_dir / f"{name}.tex", render_latex(spec, rows, profile)),
    }
