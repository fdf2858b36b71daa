"""A committed table restated under the current statistics rules from its CSV alone, for tables whose runs
are not at hand (their per-document scores were never committed).

What the CSV holds is enough for two rules: Holm's family (the test split's p-values, corrected again;
dev keeps its p-values and loses its marks) and the Clopper-Pearson interval of a share (exact match, a
town named: k of n from the mean and the document count). Everything else (the p-values themselves, the
other intervals) stays as the runs' rendering computed it, and the table says so under its caption.
``python scripts/render_results.py --restate table_qa`` runs it; a table re-rendered from its runs
replaces it.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from scaleformer.artifacts.significance import ALPHA, FAMILY, SHARES
from scaleformer.artifacts.tables import render_csv, render_latex, render_markdown
from scaleformer.io import atomic_write_text
from scaleformer.metrics.stats import holm, proportion_ci

FLOATS = ("ours", "paper", "diff", "ci_low", "ci_high", "diff_vs_baseline", "diff_ci_low", "diff_ci_high",
          "p_value", "p_holm", "seed_sd", "doc_sd")
INTS = ("n_docs", "n_seeds")


def _parse(row: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = dict(row)
    for k in FLOATS:
        out[k] = float(row[k]) if row.get(k) not in (None, "") else None
    for k in INTS:
        out[k] = int(float(row[k])) if row.get(k) not in (None, "") else None
    out["significant"] = {"True": True, "False": False}.get(row.get("significant", ""))
    return out


def restate_rows(rows: list[dict[str, Any]], family: str = FAMILY) -> list[dict[str, Any]]:
    """``rows`` (parsed) with Holm over ``family``'s comparisons and Clopper-Pearson for one-seed shares."""
    for r in rows:
        for k in ("ci_method", "test_method", "seed_sd", "doc_sd", "family"):
            r.setdefault(k, None)
        if r["metric"] in SHARES and r["n_seeds"] == 1 and r["n_docs"] and r["ours"] is not None:
            ci = proportion_ci(round(r["ours"] * r["n_docs"] / 100), r["n_docs"], 100.0)
            r.update(ci_low=ci.low, ci_high=ci.high, ci_method=ci.method)
        r.update(p_holm=None, significant=None, family=None)
    tested = [r for r in rows if r["split"] == family and r["p_value"] is not None]
    for r, adjusted in zip(tested, holm([r["p_value"] for r in tested]) if tested else []):
        r.update(p_holm=adjusted, significant=adjusted < ALPHA, family=f"{family} ({len(tested)} comparisons)")
    return rows


def restate(spec: dict[str, Any], profile: str, out_dir: Path) -> dict[str, Path]:
    """Rewrite ``out_dir/<artifact>.{md,csv,tex}`` from its CSV under the current rules (module docstring)."""
    name = spec["artifact"]
    csv_path, md_path = out_dir / f"{name}.csv", out_dir / f"{name}.md"
    rows = restate_rows([_parse(r) for r in csv.DictReader(csv_path.open())])
    old = md_path.read_text().splitlines() if md_path.exists() else []
    source = next((line for line in old if line.startswith("Provenance:")), "")
    note = ("Restated from this table's CSV (its runs' per-document scores are not in the repository): Holm's "
            "family is the test split's comparisons and shares use Clopper-Pearson; every other interval and "
            "every p-value is as its runs computed them (BCa, at most 10,000 random sign patterns).")
    md = render_markdown(spec, rows, [], profile, source).splitlines()
    md[3:3] = ["", note]
    return {"md": atomic_write_text(md_path, "\n".join(md) + "\n"),
            "csv": atomic_write_text(csv_path, render_csv(rows)),
            "tex": atomic_write_text(out_dir / f"{name}.tex", render_latex(spec, rows, profile))}
