"""MASFormer's Figure 3 from results files: perplexity by document length, one line per row of Table 1's grid.

The runs are Table 1's (the spec's ``same_runs_as``); here each cell's documents are grouped by their length in
the paper's buckets ``((k - 1) B, k B]`` (the profile's ``bucket``: B) and each bucket's perplexity is pooled over
the seeds with its 95% interval over the bucket's documents, as a Table 1 cell is
(:func:`~scaleformer.artifacts.perplexity_stats.pooled`). Written: ``<artifact>.csv`` (row, column, bucket,
perplexity, interval, documents), ``.md`` (the same as a table) and ``.png``; the per-document scores are those
Table 1 archives.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import check_profile, column_label, expand_grid, resolve_run_ids, title
from scaleformer.artifacts.perplexity_stats import bucket_values, read_doc_scores
from scaleformer.artifacts.tables import collect
from scaleformer.io import atomic_write_bytes, atomic_write_text


def bucket_rows(spec: dict[str, Any], profile: str, root: Path, methods: str | list[str] | None = None
                ) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per (method, column, bucket) with documents in every seed; and the problems (missing runs)."""
    check_profile(spec, profile)
    if profile not in (spec.get("bucket") or {}):
        raise ValueError(f"{spec['artifact']}: no bucket width for profile {profile!r} (bucket: {spec.get('bucket')})")
    width = int(spec["bucket"][profile])
    cells = expand_grid(spec, profile, methods)
    resolve_run_ids(cells, root)
    got = collect(cells, lambda key: column_label(spec, profile, key))
    split = next(iter(spec["splits"].values()))
    groups: dict[tuple[str, str], list[Any]] = {}
    for c in cells:
        groups.setdefault((c.method, c.key), []).append(c)
    rows = []
    for (method, key), group in groups.items():
        per_seed = [read_doc_scores(c.result_dir, split) for c in group
                    if got.results.get((c.key, c.method, c.value, c.seed)) is not None]
        if not per_seed or any(s is None for s in per_seed) or len(per_seed) != len(group):
            continue
        rows += [{"method": method, "dataset": key, **b} for b in bucket_values(per_seed, width)]  # type: ignore[arg-type]
    return rows, got.problems


def render_markdown(spec: dict[str, Any], profile: str, rows: list[dict[str, Any]], problems: list[str]) -> str:
    labels = spec.get("method_labels", {})
    buckets = sorted({(r["upper"], r["bucket"]) for r in rows})
    lines = [f"# {title(spec, profile)}", "", f"Profile `{profile}`. Test perplexity by document length (tokens), "
             "pooled over the seeds, 95% interval over the bucket's documents; `n`: documents in the bucket.", "",
             "| method | column | " + " | ".join(b for _, b in buckets) + " |", "|---|---|" + "---|" * len(buckets)]
    by = {(r["method"], r["dataset"], r["bucket"]): r for r in rows}
    for method, key in dict.fromkeys((r["method"], r["dataset"]) for r in rows):
        cells = [by.get((method, key, b)) for _, b in buckets]
        lines.append(f"| {labels.get(method, method)} | {column_label(spec, profile, key)} | " + " | ".join(
            f"{c['ppl']:.2f} [{c['low']:.2f}, {c['high']:.2f}] n={c['docs']}" if c else "–" for c in cells) + " |")
    if problems:
        lines += ["", "Problems:", *[f"- {p}" for p in problems]]
    return "\n".join(lines) + "\n"


def plot(spec: dict[str, Any], profile: str, rows: list[dict[str, Any]]) -> bytes:
    """One panel per column: perplexity against the bucket's upper length, a line per row, 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(dict.fromkeys(r["dataset"] for r in rows)) or ["-"]
    fig, axes = plt.subplots(1, len(keys), squeeze=False, figsize=(5.0 * len(keys), 3.8))
    labels = spec.get("method_labels", {})
    for ax, key in zip(axes[0], keys):
        for method in dict.fromkeys(r["method"] for r in rows if r["dataset"] == key):
            pts = sorted((r for r in rows if r["dataset"] == key and r["method"] == method), key=lambda r: r["upper"])
            x = [r["upper"] for r in pts]
            ax.errorbar(x, [r["ppl"] for r in pts], yerr=[[r["ppl"] - r["low"] for r in pts],
                                                          [r["high"] - r["ppl"] for r in pts]],
                        marker="o", capsize=2, label=labels.get(method, method))
        ax.set_title(column_label(spec, profile, key))
        ax.set_xlabel("document length: upper edge of the bucket (tokens)")
        ax.set_ylabel("perplexity")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return png_bytes(fig, title(spec, profile))


def png_bytes(fig: Any, heading: str) -> bytes:
    """A figure's PNG with its heading, reproducible byte for byte (no software stamp); the figure is closed."""
    import matplotlib.pyplot as plt

    fig.suptitle(heading, fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def build_perplexity_figure(spec: dict[str, Any], profile: str, root: Path, out_dir: Path,
                            methods: str | list[str] | None = None) -> dict[str, Path]:
    """Write ``<artifact>.{csv,md,png}`` from Table 1's runs under ``root``; returns the paths written."""
    rows, problems = bucket_rows(spec, profile, root, methods)
    name = spec["artifact"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["method", "dataset", "bucket", "upper", "ppl", "low", "high", "docs", "seeds"])
    w.writeheader()
    w.writerows(rows)
    return {"csv": atomic_write_text(out_dir / f"{name}.csv", buf.getvalue()),
            "md": atomic_write_text(out_dir / f"{name}.md", render_markdown(spec, profile, rows, problems)),
            "png": atomic_write_bytes(out_dir / f"{name}.png", plot(spec, profile, rows))}
