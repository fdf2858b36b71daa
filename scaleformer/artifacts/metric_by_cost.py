"""MASFormer's Figure 4 from results files: a summarization metric against the attention cost C, from Table 2's
runs (the spec's ``same_runs_as``), one line per span kind.

The paper plots R-2 against C to show that MASFormer gains more per unit of cost than block or window attention
(a steeper line). Here C is each run's own record (``attention_cost_paper``: the paper's formula at the run's n)
and the x axis its share of full attention's C, so the tiny profile's points sit where the paper's would (the
paper's shares are its Table 2 C over full attention's 1,610M; its points are drawn in their own panels: another
model on other data). Each point is the mean over the seeds with its interval over the documents, as a table cell
is (:func:`~scaleformer.artifacts.significance.point_fields`); the per-document scores are those Table 2 archives,
and ``render_results.py --check`` recomputes every point from them (``scores_archive.recheck_figure``).
Written: ``<artifact>.csv`` (one row per split, row and column), ``.md`` (the paper's Table 2 layout, C beside the
metric) and ``.png`` (the profile's ``figure_split``).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from scaleformer.artifacts import grid
from scaleformer.artifacts.grid import column_label, title
from scaleformer.artifacts.perplexity_figure import png_bytes
from scaleformer.artifacts.perplexity_tables import setting
from scaleformer.artifacts.significance import point_fields, read_scores
from scaleformer.artifacts.tables import collect
from scaleformer.io import atomic_write_bytes, atomic_write_text

FIELDS = ["split", "method", "kind", "setting", "dataset", "status", "cost", "cost_share", "ours", "ci_low",
          "ci_high", "ci_method", "n_docs", "n_seeds", "paper", "paper_cost_millions", "paper_cost_share", "run_id",
          "evaluation"]


def cost_rows(spec: dict[str, Any], profile: str, root: Path, methods: str | list[str] | None = None
              ) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per (split, row, column): C, its share of full attention's, the metric with its interval and the
    paper's values; and the problems (missing runs)."""
    grid.check_profile(spec, profile)
    metric = spec["metric"]
    cells = grid.expand_grid(spec, profile, methods)
    grid.resolve_run_ids(cells, root)
    got = collect(cells, lambda key: column_label(spec, profile, key))
    paper_costs = spec.get("paper", {}).get("cost_millions", {})
    paper_full = paper_costs.get(spec.get("full_row", "full"))
    at = spec["metrics"].index(metric)
    groups: dict[tuple[str, str], list[Any]] = {}
    for c in cells:
        groups.setdefault((c.method, c.key), []).append(c)
    rows = []
    for split_label, split in spec["splits"].items():
        for (method, key), group in groups.items():
            runs = [got.results.get((c.key, c.method, c.value, c.seed)) for c in group]
            per_seed = [read_scores(c.result_dir, split) for c, r in zip(group, runs) if r is not None]
            scored = len(per_seed) == len(group) and all(per_seed)
            point = point_fields(metric, [], per_seed) if scored else {}  # type: ignore[arg-type]
            described = next((r.method for r in runs if r is not None), {}) or {}
            paper = (spec.get("runs_paper", {}).get(split_label, {}).get(method) or {}).get(key)
            status = (f"skipped: {group[0].skipped}" if group[0].skipped else "not run" if not group[0].available
                      else "missing" if len(per_seed) < len(group) else f"no {split} scores" if not scored
                      else f"no {metric}" if not point else "ok")
            rows.append({
                "split": split_label, "method": method, "kind": grid.row_method(spec, method), "setting": setting(described),
                "dataset": key, "cost": described.get("attention_cost_paper"), "status": status, **point, "paper": paper[at] if paper else None, "paper_cost_millions": paper_costs.get(method),
                "paper_cost_share": paper_costs[method] / paper_full if paper_full and paper_costs.get(method) else None,
                "run_id": ";".join(c.run_id or "" for c in group),
                "evaluation": ";".join(c.result_dir.name if c.result_dir else "" for c in group)})
    full = {(r["split"], r["dataset"]): r["cost"] for r in rows if r["method"] == spec.get("full_row", "full")}
    for r in rows:
        f = full.get((r["split"], r["dataset"]))
        r["cost_share"] = r["cost"] / f if r["cost"] and f else None
    return rows, got.problems


def _pct(x: Any) -> str:
    return f"{100 * x:.0f}%" if x is not None else "–"


def render_markdown(spec: dict[str, Any], profile: str, rows: list[dict[str, Any]], problems: list[str]) -> str:
    labels, name = spec.get("method_labels", {}), spec.get("metric_labels", {}).get(spec["metric"], spec["metric"])
    lines = [f"# {title(spec, profile)}", "", f"Profile `{profile}`. {name} (mean over seeds, 95% interval over "
             "documents) against the attention cost C (the paper's formula at the run's n) and its share of full "
             "attention's; the paper's values beside them (its validation split; another model on other data). "
             "Plotted: the " + f"`{figure_split(spec, profile)}` split.", "",
             f"| split | method | setting | column | C | share | {name} | paper C | paper share | paper {name} |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        value = f"{r['ours']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}] n={r['n_docs']}" if r.get("ours") is not None \
            else r["status"]
        paper_c = f"{r['paper_cost_millions']:,}M" if r.get("paper_cost_millions") else "–"
        cost = f"{r['cost']:,}" if r["cost"] else "–"
        lines.append(f"| {r['split']} | {labels.get(r['method'], r['method'])} | {r['setting'] or '–'} | "
                     f"{column_label(spec, profile, r['dataset'])} | {cost} | "
                     f"{_pct(r['cost_share'])} | {value} | {paper_c} | {_pct(r['paper_cost_share'])} | "
                     f"{r['paper'] if r['paper'] is not None else '–'} |")
    if problems:
        lines += ["", "Problems:", *[f"- {p}" for p in problems]]
    return "\n".join(lines) + "\n"


def figure_split(spec: dict[str, Any], profile: str) -> str:
    """The split the figure plots: the profile's ``figure_split`` (the paper profile: validation, as the paper;
    the tiny one: the held-out test split), else the first."""
    return (spec.get("figure_split") or {}).get(profile) or next(iter(spec["splits"]))


def _lines(ax: Any, pts: list[dict[str, Any]], x: str, y: str, labels: dict[str, str], ci: bool) -> None:
    """One line per span kind through its rows in order of cost; full attention a lone marker."""
    for kind in dict.fromkeys(r["kind"] for r in pts):
        mine = sorted((r for r in pts if r["kind"] == kind and r[x] is not None and r[y] is not None),
                      key=lambda r: r[x])
        if not mine:
            continue
        xs, ys = [100 * r[x] for r in mine], [r[y] for r in mine]
        err = [[r[y] - r["ci_low"] for r in mine], [r["ci_high"] - r[y] for r in mine]] if ci else None
        ax.errorbar(xs, ys, yerr=err, marker="*" if kind == "full_attention" else "o", capsize=2,
                    linestyle="none" if len(mine) == 1 else "-", label=labels.get(kind, kind))


KIND_LABELS = {"full_attention": "Full attention", "block_attention": "Block", "sliding_window": "Window",
               "masformer": "MASFormer"}


def plot(spec: dict[str, Any], profile: str, rows: list[dict[str, Any]]) -> bytes:
    """Ours (one panel per column) then the paper's (one per data set it reports), the metric against C's share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    split = figure_split(spec, profile)
    ours = [r for r in rows if r["split"] == split]
    keys = list(dict.fromkeys(r["dataset"] for r in ours))
    paper_keys = [k for k in dict.fromkeys(r["dataset"] for r in rows if r["paper"] is not None and r["split"] == "dev")]
    panels = [(k, False) for k in keys] + [(k, True) for k in paper_keys]
    fig, axes = plt.subplots(1, max(len(panels), 1), squeeze=False, figsize=(4.6 * max(len(panels), 1), 3.8))
    name = spec.get("metric_labels", {}).get(spec["metric"], spec["metric"])
    for ax, (key, theirs) in zip(axes[0], panels):
        if theirs:
            pts = [{**r, "x": r["paper_cost_share"], "y": r["paper"]} for r in rows
                   if r["dataset"] == key and r["split"] == "dev"]
            ax.set_title(f"the paper's Table 2: {key} (validation)", fontsize=9)
        else:
            pts = [{**r, "x": r["cost_share"], "y": r.get("ours")} for r in ours if r["dataset"] == key]
            ax.set_title(f"ours: {column_label(spec, profile, key)} ({split})", fontsize=9)
        _lines(ax, pts, "x", "y", KIND_LABELS, ci=not theirs)
        ax.set_xlabel("attention cost C (% of full attention's)")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return png_bytes(fig, title(spec, profile))


def build_cost_figure(spec: dict[str, Any], profile: str, root: Path, out_dir: Path,
                      methods: str | list[str] | None = None) -> dict[str, Path]:
    """Write ``<artifact>.{csv,md,png}`` from Table 2's runs under ``root``; returns the paths written."""
    rows, problems = cost_rows(spec, profile, root, methods)
    name = spec["artifact"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    md, png = render_markdown(spec, profile, rows, problems), plot(spec, profile, rows)  # all made before any is written
    return {"csv": atomic_write_text(out_dir / f"{name}.csv", buf.getvalue()),
            "md": atomic_write_text(out_dir / f"{name}.md", md),
            "png": atomic_write_bytes(out_dir / f"{name}.png", png)}
