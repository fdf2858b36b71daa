"""Figure 2 from results files: one point per sweep value (the mean over seeds, its interval), plotted beside
the paper's stated points; and a committed figure restated from its archived scores when its runs are not at
hand (:func:`restate_figure`)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import Cell, expand_grid, profile_metrics, resolve_run_ids, title
from scaleformer.artifacts.scores_archive import archive, read_archived
from scaleformer.artifacts.significance import point_fields, read_scores
from scaleformer.artifacts.tables import _num, collect, render_csv
from scaleformer.io import atomic_write_bytes, atomic_write_text


def build_figure(spec: dict[str, Any], profile: str, root: Path, out_dir: Path,
                 methods: str | list[str] | None = None) -> dict[str, Path]:
    """Write <artifact>.png (one panel per sweep, ours vs the paper's stated points) and its CSV."""
    cells = expand_grid(spec, profile)
    resolve_run_ids(cells, root)
    got = collect(cells, lambda key: f"{spec['sweeps'][key]['key']}")
    extra = [m for m in profile_metrics(spec, profile) if m != spec["metric"]]
    points: dict[tuple[str, Any], list[Cell]] = {}
    for c in cells:
        points.setdefault((c.key, c.value), []).append(c)
    rows = []
    for (key, value), group in points.items():  # one point per sweep value: the mean over the spec's seeds
        results = [got.results.get((c.key, c.method, c.value, c.seed)) for c in group]
        ms = [(r.splits.get(spec["split"]) or {}) if r else {} for r in results]

        def mean(metric: str, ms: list[dict[str, Any]] = ms) -> float | None:
            vals = [_num(m.get(metric)) for m in ms]
            return None if None in vals else sum(vals) / len(vals)

        paper = (spec.get("paper", {}).get(key) or {}).get(value)
        row = {"sweep": key, "key": spec["sweeps"][key]["key"], "value": value,
               "ours": mean(spec["metric"]), "paper": _num(paper),
               **{metric: mean(metric) for metric in extra},
               "status": "ok" if mean(spec["metric"]) is not None else "missing",
               "run_id": ";".join(c.run_id or "" for c in group),
               "evaluation": ";".join(c.result_dir.name if c.result_dir else "" for c in group),
               "commit": ";".join(dict.fromkeys(r.commit for r in results if r)),
               "seeds": ";".join(str(c.seed) for c in group if c.seed is not None),
               "ci_low": None, "ci_high": None, "ci_method": None, "n_docs": None, "n_seeds": None,
               **{f"{m}_{end}": None for m in extra for end in ("ci_low", "ci_high")}}
        # the point's interval from its runs' per-document scores (none where a run wrote none)
        seed_scores = [read_scores(c.result_dir, spec["split"]) for c in group]
        if row["status"] == "ok" and all(seed_scores):
            row.update({k: v for k, v in point_fields(spec["metric"], extra, seed_scores).items()
                        if k != "ours" and k not in extra})
        rows.append(row)
    name = spec["artifact"]
    archive(spec, rows, {c.run_id: c.result_dir for c in cells if c.run_id and c.result_dir},
            out_dir / "scores" / name)
    return {"png": atomic_write_bytes(out_dir / f"{name}.png", plot(spec, profile, rows, extra)),
            "csv": atomic_write_text(out_dir / f"{name}.csv", render_csv(rows))}


def plot(spec: dict[str, Any], profile: str, rows: list[dict[str, Any]], extra: list[str]) -> bytes:
    """The figure's PNG: one panel per sweep and metric, each point with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
            lo, hi = ("ci_low", "ci_high") if col == "ours" else (f"{metric}_ci_low", f"{metric}_ci_high")
            bars = [r for r in pts if r[col] is not None and r[lo] is not None]
            if bars:  # the 95% interval of each point (scaleformer.artifacts.significance.point_fields)
                ax.errorbar([r["value"] for r in bars], [r[col] for r in bars], fmt="none", capsize=2, color="C0",
                            yerr=[[r[col] - r[lo] for r in bars], [r[hi] - r[col] for r in bars]],
                            label="95% interval")
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
    return buf.getvalue()


def _cell(x: str) -> Any:
    """A figure CSV's cell as the figure keeps it: '' -> None, numbers -> float (counts -> int), else text."""
    if x == "":
        return None
    try:
        v = float(x)
    except ValueError:
        return x
    return int(v) if v.is_integer() and "." not in x and "e" not in x.lower() else v


def restate_figure(spec: dict[str, Any], profile: str, out_dir: Path) -> dict[str, Path]:
    """``out_dir/<artifact>.{csv,png}`` with every point's interval recomputed from its archived scores
    (``scores/<artifact>/``) under the current rules; means, runs and values unchanged."""
    name = spec["artifact"]
    rows = [{k: _cell(v) for k, v in r.items()} for r in csv.DictReader((out_dir / f"{name}.csv").open())]
    extra = [m for m in profile_metrics(spec, profile) if m != spec["metric"]]
    archived = out_dir / "scores" / name
    for r in rows:
        if r.get("status") != "ok" or not r.get("evaluation"):
            continue
        seeds = [read_archived(archived / run / ev / f"scores_{spec['split']}.jsonl")
                 for run, ev in zip(str(r["run_id"]).split(";"), str(r["evaluation"]).split(";"), strict=True)]
        r.update({k: v for k, v in point_fields(spec["metric"], extra, seeds).items() if k != "ours" and k not in extra})
    return {"png": atomic_write_bytes(out_dir / f"{name}.png", plot(spec, profile, rows, extra)),
            "csv": atomic_write_text(out_dir / f"{name}.csv", render_csv(rows))}
