"""The paper's artifacts from results files: grid expansion, launching, Table 1/2 and Figure 2.

An artifact is one declarative file in experiments/ (grid, columns, the paper's value per cell, and
one block per profile). Numbers come only from each run's ``eval/<evaluation>/metrics.json``: a
missing or corrupt file is reported by name and shown as such, never read as zero; a method the
framework lacks shows as "not run". Rows are the spec's methods; ``methods="all"`` adds every other
``conf/method/`` option (a newly added method appears without editing the spec, with no paper value
beside it). Profiles may rename the columns (``labels``: what the synthetic stand-ins are), give a
method its own settings (``method_overrides``), add metrics (``extra_metrics``: fact recall, shown
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
    profile_metrics,
    resolve_run_ids,
    title,
    truncation_ceilings,
)
from scaleformer.io import atomic_write_bytes, atomic_write_text
from scaleformer.runs.results import FILE as RESULTS_FILE
from scaleformer.runs.results import Results


@dataclass
class Collected:
    results: dict[tuple[str, str, Any], Results] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def collect(cells: list[Cell], label: Callable[[str], str] = str) -> Collected:
    """Read each cell's metrics.json; report missing and corrupt files by name (``label``: a column's name
    as the table prints it, so "missing:" lines say "synthetic 0.2k", not the paper's data set)."""
    out = Collected()
    for c in cells:
        if not c.available:
            continue
        path = Path(str(c.result_dir)) / RESULTS_FILE
        if not path.exists():
            out.problems.append(f"missing: {path} ({c.method} on {label(c.key)})")
            continue
        result = Results.read(path.parent)
        if result is None or not isinstance(result.splits, dict):
            out.problems.append(f"corrupt: {path} ({c.method} on {label(c.key)}): skipped")
            continue
        out.results[(c.key, c.method, c.value)] = result
    for p in out.problems:
        print(p, file=sys.stderr)
    return out


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) else None


def table_rows(spec: dict[str, Any], cells: list[Cell], got: Collected, metrics: list[str] | None = None,
               ceilings: dict[tuple[str, str], float] | None = None) -> list[dict[str, Any]]:
    """One row per (split, method, dataset, metric): ours, the paper's, the difference, provenance.

    ``ceilings`` ((split label, column) -> the truncation ceiling of fact recall) adds rows of the
    pseudo-method ``truncation_ceiling``: computed from the data, not from a run.
    """
    metrics = metrics or spec["metrics"]
    rows = []
    for split_label, split in spec["splits"].items():
        for c in cells:
            result = got.results.get((c.key, c.method, None))
            paper = (spec["paper"].get(split_label, {}).get(c.method, {}) or {}).get(c.key)
            m = (result.splits.get(split) or {}) if result else {}
            status = ("not run (method not implemented)" if not c.available
                      else "missing" if result is None
                      else "no references (leaderboard predictions only)" if m and m.get("scored") is False
                      else "ok" if m else f"no {split} split")
            for metric in metrics:
                i = spec["metrics"].index(metric) if metric in spec["metrics"] else None
                ours = _num(m.get(metric)) if status == "ok" else None
                ref = _num(paper[i]) if paper and i is not None else None
                rows.append({
                    "split": split_label, "method": c.method, "dataset": c.key, "metric": metric,
                    "ours": ours, "paper": ref, "diff": None if ours is None or ref is None else ours - ref,
                    "status": status, "run_id": c.run_id or "",
                    "evaluation": c.result_dir.name if c.result_dir else "",
                    "trained_in": c.train_from.run_id if c.train_from and c.train_from.run_id else c.run_id or "",
                    "commit": result.commit if result else "",
                })
        for ds in spec["datasets"]:
            if ceilings and (split_label, ds) in ceilings:
                rows.append({"split": split_label, "method": CEILING, "dataset": ds,
                             "metric": spec.get("ceiling_metric", "fact_recall"),
                             "ours": ceilings[(split_label, ds)], "paper": None, "diff": None,
                             "status": "computed from the data", "run_id": "", "evaluation": "",
                             "trained_in": "", "commit": ""})
    return rows


CEILING = "truncation_ceiling"
CEILING_LABEL = "Trunc. ceiling (events in 1st window)"


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def render_markdown(spec: dict[str, Any], rows: list[dict[str, Any]], problems: list[str],
                    profile: str = "paper") -> str:
    """Per cell 'ours (paper, ±diff)'; a provenance table of runs below."""
    datasets = spec["datasets"]
    metrics = list(dict.fromkeys(r["metric"] for r in rows if r["method"] != CEILING)) or spec["metrics"]
    labels = spec.get("metric_labels", {})
    head = ["split", "method", *[f"{column_label(spec, profile, d)} {labels.get(m, m)}" for d in datasets
                                 for m in metrics]]
    renamed = [f"{column_label(spec, profile, d)} = the paper's {d}" for d in datasets
               if column_label(spec, profile, d) != d]
    has_paper = bool(spec.get("paper"))
    lines = [f"# {title(spec, profile)}", "",
             ("Each cell: ours (paper, ours - paper). " if has_paper else "Each cell: ours (no paper reports "
              "this table). ") + "`–`: no number (see status below). dev = validation "
             "split; test = test split (scored locally only where references are public).", ""]
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
                    diff = "" if r["diff"] is None else f", {r['diff']:+.1f}"
                    cells.append(_fmt(r["ours"]) + ("" if (r["paper"] is None and meth == CEILING) or not has_paper
                                                    else f" ({_fmt(r['paper'])}{diff})"))
            label = spec.get("ceiling_label", CEILING_LABEL) if meth == CEILING else spec["method_labels"].get(meth, meth)
            lines.append(f"| {split} | {label} | " + " | ".join(cells) + " |")
    lines += ["", "| method | dataset | status | run | trained in | evaluation | commit |",
              "|---|---|---|---|---|---|---|"]
    seen = set()
    for r in rows:
        k = (r["method"], r["dataset"])
        if k not in seen and r["method"] != CEILING:
            seen.add(k)
            trained = "" if r["trained_in"] == r["run_id"] else r["trained_in"]
            lines.append(f"| {r['method']} | {column_label(spec, profile, r['dataset'])} | {r['status']} "
                         f"| {r['run_id']} | {trained or 'same'} | {r['evaluation']} | {r['commit'][:12]} |")
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
    datasets = spec["datasets"]
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
            vals = [_fmt((by.get((split, meth, d, m)) or {}).get("ours")).replace("–", "--")
                    for d in datasets for m in metrics]
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
    return {
        "md": atomic_write_text(out_dir / f"{name}.md", render_markdown(spec, rows, got.problems, profile)),
        "csv": atomic_write_text(out_dir / f"{name}.csv", render_csv(rows)),
        "tex": atomic_write_text(out_dir / f"{name}.tex", render_latex(spec, rows, profile)),
    }


def build_figure(spec: dict[str, Any], profile: str, root: Path, out_dir: Path,
                 methods: str | list[str] | None = None) -> dict[str, Path]:
    """Write <artifact>.png (one panel per sweep, ours vs the paper's stated points) and its CSV."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = expand_grid(spec, profile)
    resolve_run_ids(cells, root)
    got = collect(cells, lambda key: f"{spec['sweeps'][key]['key']}")
    extra = [m for m in profile_metrics(spec, profile) if m != spec["metric"]]
    rows = []
    for c in cells:
        result = got.results.get((c.key, c.method, c.value))
        m = (result.splits.get(spec["split"]) or {}) if result else {}
        paper = (spec.get("paper", {}).get(c.key) or {}).get(c.value)
        rows.append({"sweep": c.key, "key": spec["sweeps"][c.key]["key"], "value": c.value,
                     "ours": _num(m.get(spec["metric"])), "paper": _num(paper),
                     **{metric: _num(m.get(metric)) for metric in extra},
                     "status": "ok" if _num(m.get(spec["metric"])) is not None else "missing",
                     "run_id": c.run_id, "commit": result.commit if result else ""})
    panels = [spec["metric"], *extra]  # one row of panels per metric
    labels = spec.get("metric_labels", {})
    fig, axes = plt.subplots(len(panels), len(spec["sweeps"]), squeeze=False,
                             figsize=(4.2 * len(spec["sweeps"]), 3.4 * len(panels)))
    for row, metric in enumerate(panels):
        for ax, (name, sweep) in zip(axes[row], spec["sweeps"].items()):
            pts = [r for r in rows if r["sweep"] == name]
            col = "ours" if metric == spec["metric"] else metric
            ours = [(r["value"], r[col]) for r in pts if r[col] is not None]
            paper = [(r["value"], r["paper"]) for r in pts if r["paper"] is not None] if col == "ours" else []
            if ours:
                ax.plot(*zip(*ours), "o-", label=f"ours ({profile})")
            if paper:
                ax.plot(*zip(*paper), "s", color="black", fillstyle="none", label="paper (stated in text)")
            ax.set_title(sweep["label"])
            ax.set_xlabel(sweep["key"])
            ax.set_ylabel(labels.get(metric, metric))
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(title(spec, profile), fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    name = spec["artifact"]
    return {"png": atomic_write_bytes(out_dir / f"{name}.png", buf.getvalue()),
            "csv": atomic_write_text(out_dir / f"{name}.csv", render_csv(rows))}
