"""The MASFormer blocks of README.md and docs/results.md, rendered from ``results/tiny/masformer_table1.{csv,md}``
and its ``-tests.csv`` (``make masformer_table1 PROFILE=tiny``): the tiny Table 1 beside the paper's values, and in
words whether the paper's ordering holds at tiny scale. Imported by ``scripts/render_results.py``."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from results_runs import MissingResults

ALPHA = 0.05


def _read(path: Path) -> list[dict[str, str]]:
    try:
        return list(csv.DictReader(path.open(encoding="utf-8")))
    except OSError as e:
        raise MissingResults(f"{path}: {e}") from None


def _spec() -> dict[str, Any]:
    from scaleformer.artifacts.grid import load_spec
    from scaleformer.resources import experiments_dir

    return load_spec(experiments_dir() / "masformer_table1.yaml")


def _seeds(rows: list[dict[str, str]]) -> str:
    counts = sorted({r["seeds"] for r in rows if r["status"] == "ok"})
    docs = sorted({r["docs"] for r in rows if r["status"] == "ok"})
    return f"{'/'.join(counts)} {'seed' if counts == ['1'] else 'seeds'} pooled, {'/'.join(docs)} test documents"


def render_masformer_table1(results: Path, column: str = "arxiv") -> str:
    """The tiny Table 1 (one column) beside the paper's ArXiv column, then the reading."""
    spec, rows = _spec(), _read(results / "tiny" / "masformer_table1.csv")
    labels = spec["method_labels"]
    paper = spec["paper"]
    full_paper = paper["cost_millions"]["full"]
    lines = [f"From `results/tiny/masformer_table1.csv` (`make masformer_table1 PROFILE=tiny`): the tiny decoder-only "
             f"reader after continual training at n = 1,024 ({_seeds(rows)}; 95% interval over documents), beside "
             "the paper's ArXiv column (GPT-3 XL at n = 8,192). `C / full`: the share of full attention's cost, which "
             "the tiny rows keep from the paper's.", "",
             "| row | ours | C / full | ppl [95% CI] | paper: C / full | paper: ppl |", "|---|---|---|---|---|---|"]
    for r in (r for r in rows if r["dataset"] == column):
        share = f"{100 * float(r['cost_share']):.0f}%" if r["cost_share"] else "–"
        ppl = f"{float(r['ppl']):.2f} [{float(r['low']):.2f}, {float(r['high']):.2f}]" if r["status"] == "ok" \
            else r["status"]
        p_cost = paper["cost_millions"].get(r["method"])
        lines.append(f"| {labels.get(r['method'], r['method'])} | {r['setting'] or '–'} | {share} | {ppl} | "
                     f"{f'{100 * p_cost / full_paper:.0f}%' if p_cost else '–'} | {r['paper_ppl'] or '–'} |")
    return "\n".join(lines) + "\n\n" + reading(results, column)


def reading(results: Path, column: str = "arxiv") -> str:
    """Each of the spec's comparisons: the paper's direction (its ArXiv values) against ours, as the paired test
    on per-document log-perplexity says it (Holm-adjusted); then how many agree."""
    spec, tests = _spec(), _read(results / "tiny" / "masformer_table1-tests.csv")
    labels, paper = spec["method_labels"], spec["paper"]["test"]
    agree, against, unshown = [], [], []
    for t in (t for t in tests if t["dataset"] == column):
        a, b = t["row"], t["against"]
        want = "below" if paper[a][column] < paper[b][column] else "above"
        diff, p = float(t["diff"]), float(t["p_holm"])
        ours = "below" if diff < 0 else "above"
        text = (f"{labels[a]} {want} {labels[b]} in the paper ({paper[a][column]} vs {paper[b][column]}); ours "
                f"{diff:+.3f} [{float(t['low']):+.3f}, {float(t['high']):+.3f}] nats per token, p = {p:.2g}")
        (unshown if p >= ALPHA else agree if ours == want else against).append(text)
    n = len(agree) + len(against) + len(unshown)
    parts = [f"**Does the paper's ordering hold at tiny scale?** In {len(agree)} of the paper's {n} comparisons "
             f"(each paired on documents and seeds, Holm-corrected, p < {ALPHA}); against it in {len(against)}."]
    for name, group in (("As the paper", agree), ("Against the paper", against), ("No difference shown", unshown)):
        if group:
            parts.append(f"{name}: " + "; ".join(group) + ".")
    return " ".join(parts)
