"""How sure each cell of a table is: intervals over documents (and seeds), and paired tests against
the spec's baseline row, Holm-corrected within the table.

Everything is read from the runs' ``scores_<split>.jsonl`` (one row per document, written by every
evaluation): a cell's interval resamples its documents (with several seeds, each document's mean over
the seeds, :func:`scaleformer.metrics.stats.seeds_ci`); a method is compared with the baseline on the
documents both scored (:func:`scaleformer.metrics.stats.paired`, per-document means over seeds). The
family for Holm's correction is every comparison the table makes (splits x columns x metrics x rows),
so a mark survives the number of cells a reader scans.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scaleformer.io import iter_jsonl
from scaleformer.metrics.stats import holm, mean_ci, paired

ALPHA = 0.05
MARK = "*"  # differs from the baseline: paired permutation test, Holm-corrected p < ALPHA


def read_scores(result_dir: Path | None, split: str) -> dict[str, dict[str, Any]] | None:
    """A run's per-document scores of one split, by document id (None: the evaluation wrote none)."""
    if result_dir is None:
        return None
    path = Path(result_dir) / f"scores_{split}.jsonl"
    if not path.exists():
        return None
    return {str(r["id"]): r for _, r in iter_jsonl(path)}


def _matrix(seed_scores: Sequence[dict[str, dict[str, Any]]], metric: str,
            ids: Sequence[str]) -> list[list[float]] | None:
    """``[seeds, docs]`` values of one metric, or None where a document lacks it."""
    out = []
    for scores in seed_scores:
        row = [scores[i].get(metric) for i in ids]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in row):
            return None
        out.append([float(v) for v in row])
    return out


def _shared_ids(seed_scores: Sequence[dict[str, dict[str, Any]]]) -> list[str]:
    ids = set(seed_scores[0])
    for s in seed_scores[1:]:
        ids &= set(s)
    return sorted(ids)


def annotate(rows: list[dict[str, Any]], scores: dict[tuple[str, str, str], list[dict[str, dict[str, Any]]]],
             baseline: str | None) -> None:
    """Add to each table row (``split``, ``method``, ``dataset``, ``metric``, ``ours``) its interval and,
    against ``baseline``, the paired difference, its interval, p and Holm-adjusted p (in place).

    ``scores``: (split label, method, dataset) -> the per-document scores of each seed's run. Rows
    without scores (a missing run, the ceiling row, runs evaluated before scores files existed) keep
    empty fields: no interval is ever invented.
    """
    tested = []
    for r in rows:
        r.update({"ci_low": None, "ci_high": None, "n_docs": None, "n_seeds": None, "baseline": baseline or "",
                  "diff_vs_baseline": None, "diff_ci_low": None, "diff_ci_high": None, "p_value": None,
                  "p_holm": None, "significant": None})
        seed_scores = scores.get((r["split"], r["method"], r["dataset"]))
        if r["ours"] is None or not seed_scores:
            continue
        ids = _shared_ids(seed_scores)
        values = _matrix(seed_scores, r["metric"], ids) if ids else None
        if values is None:
            continue
        per_doc = [sum(col) / len(col) for col in zip(*values)]  # [docs]: each document's mean over seeds
        ci = mean_ci(per_doc)
        r.update(ci_low=ci.low, ci_high=ci.high, n_docs=len(ids), n_seeds=len(seed_scores))
        base = scores.get((r["split"], baseline, r["dataset"])) if baseline and r["method"] != baseline else None
        if not base:
            continue
        shared = sorted(set(ids) & set(_shared_ids(base)))
        theirs = _matrix(base, r["metric"], shared) if shared else None
        if theirs is None:
            continue
        mine = {i: v for i, v in zip(ids, per_doc)}
        b = [sum(col) / len(col) for col in zip(*theirs)]
        p = paired([mine[i] for i in shared], b)
        r.update(diff_vs_baseline=p.diff, diff_ci_low=p.low, diff_ci_high=p.high, p_value=p.p_value)
        tested.append(r)
    for r, adjusted in zip(tested, holm([r["p_value"] for r in tested]) if tested else []):
        r.update(p_holm=adjusted, significant=adjusted < ALPHA)


def cell_text(r: dict[str, Any]) -> str:
    """``48.2 ±1.9*``: the mean, the half-width of its 95% interval, the mark where it differs from the
    baseline; the mean alone where no per-document scores exist."""
    if r.get("ours") is None:
        return "–"
    text = f"{r['ours']:.1f}"
    if r.get("ci_low") is not None:
        text += f" ±{(r['ci_high'] - r['ci_low']) / 2:.1f}"
    return text + (MARK if r.get("significant") else "")


def caption(baseline: str | None, label: str, seeds: Sequence[Any]) -> str:
    """What the ± and the mark mean, for the rendered table."""
    over = "documents" if len(seeds) <= 1 else f"{len(seeds)} seeds x documents"
    text = f"`±`: half-width of the 95% bootstrap interval over {over}."
    if baseline:
        text += (f" `{MARK}`: differs from {label} (paired sign-flip permutation test on the same documents, "
                 f"Holm-corrected within the table, p < {ALPHA}); no mark: no difference shown.")
    return text
