"""A committed table restated under the current statistics rules when its runs are not at hand.

A table whose cells' per-document scores are archived beside it (``scores/<artifact>/``,
:mod:`scaleformer.artifacts.scores_archive`) gets every interval, p-value and mark recomputed from them:
the same numbers a rebuild from the runs would give. A table without them (its scores were never kept) is
restated from its CSV alone, which is enough for three rules: Holm's family (the test split's p-values,
corrected again; dev keeps its p-values and loses its marks), the Clopper-Pearson interval of a share
(exact match, a town named: k of n from the mean and the document count), and the exact bound of a
bounded score at 0 or 100 on every document (a mean of 0 with a zero-width interval). Everything else
(the p-values themselves, the other intervals) stays as the runs' rendering computed it, and the table
says so under its caption. ``python scripts/render_results.py --restate table_qa`` runs it; a table
re-rendered from its runs replaces it.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from scaleformer.artifacts.scores_archive import reannotate
from scaleformer.artifacts.significance import ALPHA, BOUNDED, FAMILY, SHARES
from scaleformer.artifacts.tables import render_csv, render_latex, render_markdown
from scaleformer.io import atomic_write_text
from scaleformer.metrics.stats import holm, proportion_ci

FLOATS = ("ours", "paper", "diff", "ci_low", "ci_high", "diff_vs_baseline", "diff_ci_low", "diff_ci_high",
          "p_value", "p_holm", "seed_sd", "doc_sd")
INTS = ("n_docs", "n_seeds")


def _parse(row: dict[str, str], where: str = "") -> dict[str, Any]:
    out: dict[str, Any] = dict(row)
    for k in (*FLOATS, *INTS):
        try:
            v = float(row[k]) if row.get(k) not in (None, "") else None
        except ValueError:
            raise ValueError(f"{where}: {row.get('split')} {row.get('method')} {row.get('dataset')} {row.get('metric')}: "
                             f"{k}={row[k]!r} is not a number") from None
        out[k] = int(v) if k in INTS and v is not None else v
    out["significant"] = {"True": True, "False": False}.get(row.get("significant", ""))
    return out


def restate_rows(rows: list[dict[str, Any]], family: str = FAMILY) -> list[dict[str, Any]]:
    """``rows`` (parsed) with Holm over ``family``'s comparisons and Clopper-Pearson for one-seed shares."""
    for r in rows:
        for k in ("ci_method", "test_method", "seed_sd", "doc_sd", "family"):
            r.setdefault(k, None)
        n, mean = r["n_docs"], r["ours"]
        if n and mean is not None and r["metric"] in SHARES and r["n_seeds"] == 1:
            ci = proportion_ci(round(mean * n / 100), n, 100.0)
            r.update(ci_low=ci.low, ci_high=ci.high, ci_method=ci.method)
        elif n and r["metric"] in BOUNDED and mean in (0.0, 100.0) and r["ci_low"] == r["ci_high"] == mean:
            # a bounded mean at its end is every document there: no spread seen, the documents bound it
            ci = proportion_ci(n if mean else 0, n, 100.0)
            r.update(ci_low=ci.low, ci_high=ci.high, ci_method=ci.method if r["metric"] in SHARES else "exact bound")
        r.update(p_holm=None, significant=None, family=None)
    tested = [r for r in rows if r["split"] == family and r["p_value"] is not None]
    for r, adjusted in zip(tested, holm([r["p_value"] for r in tested]) if tested else []):
        r.update(p_holm=adjusted, significant=adjusted < ALPHA, family=f"{family} ({len(tested)} comparisons)")
    return rows


def restate(spec: dict[str, Any], profile: str, out_dir: Path) -> dict[str, Path]:
    """Rewrite ``out_dir/<artifact>.{md,csv,tex}`` under the current rules, from its archived scores where
    they exist, else from its CSV (module docstring)."""
    name = spec["artifact"]
    csv_path, md_path = out_dir / f"{name}.csv", out_dir / f"{name}.md"
    table = list(csv.DictReader(csv_path.open()))
    archived = out_dir / "scores" / name
    if archived.is_dir():
        problems: list[str] = []
        fresh, _ = reannotate(spec, table, archived, problems, csv_path.name)
        if problems:
            raise ValueError(f"{csv_path}: cannot restate from {archived}: " + "; ".join(problems))
        rows = [_parse(r, csv_path.name) | f for r, f in zip(table, fresh, strict=True)]
        note = (f"Restated from the archived per-document scores (`scores/{name}/`) under the current rules: every "
                "interval, p-value and mark recomputed as a rebuild from the runs would; means and runs unchanged.")
    else:
        rows = restate_rows([_parse(r, csv_path.name) for r in table])
        note = ("Restated from this table's CSV (its runs' per-document scores are not in the repository): Holm's "
                "family is the test split's comparisons, shares use Clopper-Pearson and a score at 0 or 100 on "
                "every document its exact bound; every other interval and every p-value is as its runs computed "
                "them (BCa, at most 10,000 random sign patterns).")
    old = md_path.read_text().splitlines() if md_path.exists() else []
    source = "\n".join(line for line in old if line.startswith(("Provenance:", "Test columns:", "BERTScore:")))
    md = render_markdown(spec, rows, [], profile, source).splitlines()
    md[3:3] = ["", note]
    return {"md": atomic_write_text(md_path, "\n".join(md) + "\n"),
            "csv": atomic_write_text(csv_path, render_csv(rows)),
            "tex": atomic_write_text(out_dir / f"{name}.tex", render_latex(spec, rows, profile))}
