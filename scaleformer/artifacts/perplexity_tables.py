"""MASFormer's perplexity artifacts from results files: Table 1 (perplexity against attention cost C), Figure 3
(perplexity by document length) and the placement ablation, all from the same kind of runs.

The grid is the summarization tables' (:func:`~scaleformer.artifacts.grid.expand_grid`: a row is one method at
one size, ``rows`` in the spec, its size in the profile's ``method_overrides``); what differs is the number. A
perplexity is a ratio, token-weighted over documents, not a mean of per-document scores, so:

- a cell pools its seeds: ``exp(sum nll / sum tokens)`` over every (seed, document), with a 95% percentile
  bootstrap interval over *documents* (each resampled document brings all its seeds;
  :func:`~scaleformer.metrics.perplexity.ratio_ci`); each seed's own perplexity is in the csv;
- a comparison (``comparisons`` in the spec: ``[row, against]``) is paired on the documents: the per-document
  log-perplexity (mean NLL per token) of the row minus that of the other, on the same seeds: one seed, a
  sign-flip test and a bootstrap interval (:func:`~scaleformer.metrics.stats.paired`); several, seeds as their own
  level (:func:`~scaleformer.metrics.stats.seeds_paired`); Holm-corrected over the artifact's comparisons. A
  negative difference: the row predicts better.
- C is each run's own record (``attention_cost_paper``, the paper's formula at ``n``) beside its share of full
  attention's, so the tiny profile's C maps onto the paper's by that share.

Numbers come only from each run's ``metrics.json`` and ``scores_<split>.jsonl``; a missing file is named, never
read as zero.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import Cell, column_label, expand_grid, resolve_run_ids, seeds, title
from scaleformer.artifacts.perplexity_stats import (
    comparisons,
    cost_shares,
    paper_values,
    pooled,
    read_doc_scores,
    setting,
)
from scaleformer.artifacts.tables import collect
from scaleformer.io import atomic_write_text


def _groups(cells: list[Cell]) -> dict[tuple[str, str], list[Cell]]:
    out: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        out.setdefault((c.method, c.key), []).append(c)
    return out


def table_rows(spec: dict[str, Any], cells: list[Cell], got: Any, split: str
               ) -> tuple[list[dict[str, Any]], dict[tuple[str, str], list[dict[str, dict[str, Any]]]]]:
    """One row per (method, column) with its perplexity, C and the paper's values; and each cell's per-seed
    document scores (what comparisons and the figure read)."""
    rows, scores = [], {}
    for (method, key), group in _groups(cells).items():
        skipped = group[0].skipped
        runs = [got.results.get((c.key, c.method, c.value, c.seed)) for c in group]
        per_seed = [s for c, r in zip(group, runs) if r is not None and (s := read_doc_scores(c.result_dir, split))]
        scores[(method, key)] = per_seed
        value = pooled(per_seed) if per_seed and len(per_seed) == len(group) else None
        described = next((r.method for r in runs if r is not None), {}) or {}
        cost = described.get("attention_cost_paper")
        status = f"skipped: {skipped}" if skipped else "ok" if value else \
            "not run" if not group[0].available else f"missing ({len(per_seed)} of {len(group)} seeds)"
        rows.append({"method": method, "dataset": key, "status": status, "cost": cost, "setting": setting(described),
                     **paper_values(spec, split, method, key),
                     "run_ids": " ".join(sorted({str(c.run_id) for c in group if c.run_id})),
                     **({k: value[k] for k in ("ppl", "low", "high", "docs", "seeds", "seed_ppl")} if value else {})})
    shares = cost_shares(spec, {(r["method"], r["dataset"]): r["cost"] for r in rows})
    for r in rows:
        r["cost_share"] = shares[(r["method"], r["dataset"])]
    return rows, scores


def _ppl(r: dict[str, Any]) -> str:
    return f"{r['ppl']:.2f} [{r['low']:.2f}, {r['high']:.2f}]" if r.get("ppl") is not None else "–"


def _cost(c: Any) -> str:
    return f"{c / 1e6:,.2f}M" if isinstance(c, int | float) else "–"


def render_markdown(spec: dict[str, Any], profile: str, rows: list[dict[str, Any]], tests: list[dict[str, Any]],
                    problems: list[str], n_seeds: int) -> str:
    labels = spec.get("method_labels", {})
    lines = [f"# {title(spec, profile)}", "",
             f"Profile `{profile}`. Each cell: test perplexity pooled over {n_seeds} seed(s) (token-weighted), its 95% "
             "interval over documents (percentile bootstrap), C (the paper's formula at this profile's n) and its "
             "share of full attention's; the paper's values beside them (another model on other data where the "
             "profile's column is a stand-in: context, not a target).", "",
             "| method | ours | column | C | C / full | ppl [95% CI] | paper C | paper ppl |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        share = f"{100 * r['cost_share']:.0f}%" if r.get("cost_share") is not None else "–"
        paper_cost = f"{r['paper_cost_millions']:,}M" if r.get("paper_cost_millions") else "–"
        lines.append(f"| {labels.get(r['method'], r['method'])} | {r['setting'] or '–'} | "
                     f"{column_label(spec, profile, r['dataset'])} | "
                     f"{_cost(r['cost'])} | {share} | {_ppl(r) if r['status'] == 'ok' else r['status']} | "
                     f"{paper_cost} | {r['paper_ppl'] if r['paper_ppl'] is not None else '–'} |")
    if tests:
        lines += ["", "Paired on documents (and seeds): per-document log-perplexity of the row minus the other's "
                  "(negative: the row predicts better), 95% interval, p (Holm-adjusted over these comparisons).", "",
                  "| row | against | column | difference [95% CI] | p | p (Holm) | docs x seeds |",
                  "|---|---|---|---|---|---|---|"]
        for t in tests:
            lines.append(f"| {labels.get(t['row'], t['row'])} | {labels.get(t['against'], t['against'])} | "
                         f"{column_label(spec, profile, t['dataset'])} | {t['diff']:+.4f} [{t['low']:+.4f}, "
                         f"{t['high']:+.4f}] | {t['p']:.3g} | {t['p_holm']:.3g} | {t['docs']} x {t['seeds']} |")
    lines += ["", "Runs: " + "; ".join(f"{r['method']}: {r['run_ids'] or '–'}" for r in rows)]
    if problems:
        lines += ["", "Problems:", *[f"- {p}" for p in problems]]
    return "\n".join(lines) + "\n"


def render_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    names = ["method", "setting", "dataset", "status", "ppl", "low", "high", "docs", "seeds", "seed_ppl", "cost", "cost_share",
             "paper_ppl", "paper_cost_millions", "run_ids"]
    w = csv.DictWriter(buf, fieldnames=names, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def build_perplexity(spec: dict[str, Any], profile: str, root: Path, out_dir: Path,
                     methods: str | list[str] | None = None) -> dict[str, Path]:
    """Write ``<artifact>.md`` / ``.csv`` (and the comparisons as ``<artifact>-tests.csv``) from the results under
    ``root``; returns the paths written."""
    cells = expand_grid(spec, profile, methods)
    resolve_run_ids(cells, root)
    got = collect(cells, lambda key: column_label(spec, profile, key))
    split = next(iter(spec["splits"].values()))
    rows, scores = table_rows(spec, cells, got, split)
    tests = comparisons(spec, scores)
    name = spec["artifact"]
    for c in cells:  # every run's per-document scores beside the table, so that its numbers can be rechecked
        src = Path(str(c.result_dir)) / f"scores_{split}.jsonl"
        if c.run_id and c.result_dir and src.is_file():
            atomic_write_text(out_dir / "scores" / name / c.run_id / src.name, src.read_text(encoding="utf-8"))
    buf = io.StringIO()
    if tests:
        w = csv.DictWriter(buf, fieldnames=list(tests[0]))
        w.writeheader()
        w.writerows(tests)
    return {"md": atomic_write_text(out_dir / f"{name}.md", render_markdown(
                spec, profile, rows, tests, got.problems, len(seeds(spec, profile)))),
            "csv": atomic_write_text(out_dir / f"{name}.csv", render_csv(rows)),
            "tests": atomic_write_text(out_dir / f"{name}-tests.csv", buf.getvalue())}
