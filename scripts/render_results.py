"""The numbers of README.md and docs/*.md, rendered from committed results files (never typed by hand).

    python scripts/render_results.py           # rewrite every results block from results/
    python scripts/render_results.py --check   # exit 1 if a block differs from its files (a test runs this)

A block is ``<!-- results: NAME -->`` ... ``<!-- /results -->`` in a page; NAME picks a renderer below,
which reads only files under ``results/`` (the default run's, written by ``scripts/default_results.py``;
the tiny tables', written by ``make table1 PROFILE=tiny`` and friends) and states where its numbers come
from. Sentences that compare methods are computed too, so a re-run that changes an order changes the
words.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import scaleformer  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(<!-- results: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S)
LABELS = {"rouge1": "R-1", "rouge2": "R-2", "rougeL": "R-L", "fact_recall": "Facts", "fact_field_recall": "Parts",
          "town_accuracy": "Town", "exact_match": "EM", "f1": "F1", "bertscore_f1": "BS"}
CEILING = "truncation_ceiling"


class MissingResults(Exception):
    """A block's results file is absent or unreadable."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise MissingResults(f"{path.relative_to(ROOT)}: {e}") from None


def _commit(c: str | None) -> str:
    return (c or "unknown")[:12] + ("-dirty" if c and c.endswith("-dirty") else "")


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


# ---- the default run ----------------------------------------------------------------------------

def _blind(split: str) -> dict[str, Any]:
    return _read_json(RESULTS / "default" / f"input_blind_{split}.json")


def render_default() -> str:
    metrics = _read_json(RESULTS / "default" / "metrics.json")
    keys = ["rouge1", "rouge2", "rougeL", "fact_recall", "fact_field_recall", "town_accuracy"]
    lines = [f"| split | input | {' | '.join(LABELS[k] for k in keys)} |", "|---|---|" + "---|" * len(keys)]
    for split in ("validation", "test"):
        b = _blind(split)
        for name, base in b["baselines"].items():
            lines.append(f"| {split} ({b['n']}) | {name} | " + " | ".join(_fmt(base["scores"].get(k)) for k in keys)
                         + " |")
    method = metrics["method"]
    return "\n".join([
        f"From `results/default/` (`make default-results`): {method['option']} fine-tuning "
        f"{metrics['backbone']['name']} for {metrics['step']} steps (wall time {metrics['wall_time_s'] / 60:.0f} "
        f"minutes on 2 CPU cores), commit {_commit(metrics['commit'])}.", "", *lines])


def render_default_town() -> str:
    parts = []
    for split in ("validation", "test"):
        b = _blind(split)
        n, own = b["n"], b["baselines"]["own document"]["scores"]
        top = b["baselines"]["training summary"]["scores"]
        parts.append(f"{round(own['town_accuracy'] * n / 100)} of {n} {split} ledgers "
                     f"(the most frequent training summary: {round(top['town_accuracy'] * n / 100)})")
    m = _read_json(RESULTS / "default" / "metrics.json")["method"]
    return (f"`Town`: the summaries name the ledger's own town in {parts[0]} and in {parts[1]}. The town is "
            f"stated once, in the ledger's first words; with k={m['boundary_tokens']} boundary state per chunk "
            f"side and m={m['middle_tokens']} {m['middle_strategy']} middle tokens per chunk, its tokens are among "
            "the states the decoder sees only when the draw keeps them.")


# ---- the tiny tables ----------------------------------------------------------------------------

def _table(artifact: str) -> tuple[dict[str, Any], list[dict[str, str]]]:
    from scaleformer.artifacts.grid import load_spec
    from scaleformer.resources import experiments_dir

    path = RESULTS / "tiny" / f"{artifact}.csv"
    try:
        rows = list(csv.DictReader(path.open(encoding="utf-8")))
    except OSError as e:
        raise MissingResults(f"{path.relative_to(ROOT)}: {e}") from None
    return load_spec(experiments_dir() / f"{artifact}.yaml"), rows


def _value(rows: list[dict[str, str]], split: str, method: str, dataset: str, metric: str) -> float | None:
    for r in rows:
        if (r["split"], r["method"], r["dataset"], r["metric"]) == (split, method, dataset, metric) and r["ours"]:
            return float(r["ours"])
    return None


def _provenance(artifact: str, rows: list[dict[str, str]]) -> str:
    commits = sorted({_commit(r["commit"]) for r in rows if r.get("commit")})
    return (f"From `results/tiny/{artifact}.csv` (`make {artifact} PROFILE=tiny`; runs at commit "
            f"{', '.join(commits) or 'unknown'}).")


def render_table(artifact: str, split: str, metrics: list[str]) -> str:
    from scaleformer.artifacts.grid import column_label

    spec, rows = _table(artifact)
    cols = [(ds, m) for ds in spec["datasets"] for m in metrics]
    head = [f"{column_label(spec, 'tiny', ds).removeprefix('synthetic ')} {LABELS[m]}" if len(spec["datasets"]) > 1
            else LABELS[m] for ds, m in cols]
    lines = [f"| {split} | {' | '.join(head)} |", "|---|" + "---|" * len(cols)]
    for method in spec["methods"]:
        lines.append(f"| {spec['method_labels'].get(method, method)} | "
                     + " | ".join(_fmt(_value(rows, split, method, ds, m)) for ds, m in cols) + " |")
    ceiling = spec.get("ceiling_metric", "fact_recall")
    if any(r["method"] == CEILING for r in rows):
        label = spec.get("ceiling_label", "Trunc. ceiling (events in 1st window)")
        lines.append(f"| {label} | " + " | ".join(_fmt(_value(rows, split, CEILING, ds, m)) if m == ceiling else ""
                                                  for ds, m in cols) + " |")
    return _provenance(artifact, rows) + "\n\n" + "\n".join(lines)


def _signed(x: float) -> str:
    return f"{x:+.1f}"


def render_table1_reading() -> str:
    """Past the first window: each method's R-1 and Parts against truncation's, on the long columns."""
    from scaleformer.artifacts.grid import column_label

    spec, rows = _table("table1")
    long_cols = spec["datasets"][1:]
    names = " and ".join(column_label(spec, "tiny", ds).removeprefix("synthetic ") for ds in long_cols)
    above, below = [], []
    for method in spec["methods"]:
        if method == "truncation":
            continue
        deltas = []
        for ds in long_cols:
            r1 = [_value(rows, "dev", m, ds, "rouge1") for m in (method, "truncation")]
            parts = [_value(rows, "dev", m, ds, "fact_field_recall") for m in (method, "truncation")]
            if None in r1 or None in parts:
                continue
            deltas.append((column_label(spec, "tiny", ds).removeprefix("synthetic "), r1[0] - r1[1], parts[0] - parts[1]))
        if not deltas:
            continue
        said = f"{spec['method_labels'][method]} ({', '.join(f'{_signed(a)} / {_signed(b)} on {c}' for c, a, b in deltas)})"
        (above if all(a > 0 and b > 0 for _, a, b in deltas) else below).append(said)
    held = " and ".join(_fmt(_value(rows, "dev", CEILING, ds, "fact_recall")) + "%" for ds in long_cols)
    out = [f"Dev R-1 / Parts minus truncation's on the {names} columns, where truncation's window holds {held} "
           "of the events. Higher on both scores and both columns: "]
    out.append("; ".join(above) or "none")
    out.append(f". Not: {'; '.join(below) or 'none'}")
    return "".join(out) + (". One run per cell on 8 dev ledgers, with no interval yet: read a difference of a "
                           "point or two as noise.")


def render_figure2() -> str:
    spec_rows = _table("figure2")
    spec, rows = spec_rows
    extra = next((k for k in rows[0] if k in LABELS and k not in ("ours",)), None) if rows else None
    lines = [f"| sweep | value | {LABELS[spec['metric']]} |" + (f" {LABELS[extra]} |" if extra else ""),
             "|---|---|---|" + ("---|" if extra else "")]
    for r in rows:
        lines.append(f"| {r['sweep']} | {r['value']} | {_fmt(float(r['ours']) if r['ours'] else None)} |"
                     + (f" {_fmt(float(r[extra]) if r[extra] else None)} |" if extra else ""))
    commits = sorted({_commit(r["commit"]) for r in rows if r.get("commit")})
    return (f"From `results/tiny/figure2.csv` (`make figure2 PROFILE=tiny`; runs at commit {', '.join(commits)}): "
            f"ScaleFormer + Middle on the synthetic 2.5k dev ledgers, one training per point, the other settings at "
            f"their defaults.\n\n" + "\n".join(lines))


def render_qa_by_window() -> str:
    data = _read_json(RESULTS / "tiny" / "table_qa_by_window.json")
    lines = ["| method | split | inside: n | EM | F1 | past: n | EM | F1 |", "|---|---|---|---|---|---|---|---|"]
    for method, by_split in data.items():
        for split in ("validation", "test"):
            if split not in by_split:
                continue
            i, p = by_split[split]["inside"], by_split[split]["past"]
            lines.append(f"| {method} | {split} | {i['n']} | {_fmt(i['exact_match'])} | {_fmt(i['f1'])} | {p['n']} "
                         f"| {_fmt(p['exact_match'])} | {_fmt(p['f1'])} |")
    return ("From `results/tiny/table_qa_by_window.json` (`scripts/qa_by_window.py` on the table's runs).\n\n"
            + "\n".join(lines))


RENDERERS: dict[str, Callable[[], str]] = {
    "default": render_default,
    "default-town": render_default_town,
    "table1-tiny-dev": lambda: render_table("table1", "dev", ["rouge1", "fact_recall", "fact_field_recall"]),
    "table1-tiny-test": lambda: render_table("table1", "test", ["rouge1", "fact_recall", "fact_field_recall"]),
    "table1-tiny-reading": render_table1_reading,
    "table2-tiny-dev": lambda: render_table("table2", "dev", ["rouge1", "fact_recall", "fact_field_recall"]),
    "figure2-tiny": render_figure2,
    "table_qa-tiny-dev": lambda: render_table("table_qa", "dev", ["exact_match", "f1"]),
    "table_qa-tiny-test": lambda: render_table("table_qa", "test", ["exact_match", "f1"]),
    "table_qa-by-window": render_qa_by_window,
}


def render_page(text: str, page: str) -> str:
    def one(m: re.Match[str]) -> str:
        name = m["name"]
        if name not in RENDERERS:
            raise SystemExit(f"error: {page}: unknown results block {name!r}; known: {', '.join(RENDERERS)}")
        return f"{m.group(1)}{RENDERERS[name]().rstrip()}\n{m.group(4)}"

    return BLOCK.sub(one, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="report blocks that differ from their files; write nothing")
    args = ap.parse_args(argv)
    stale = []
    for page in PAGES:
        path = ROOT / page
        text = path.read_text(encoding="utf-8")
        try:
            new = render_page(text, page)
        except MissingResults as e:
            print(f"error: {page}: {e}", file=sys.stderr)
            return 1
        if new != text:
            stale.append(page)
            if not args.check:
                from scaleformer.io import atomic_write_text

                atomic_write_text(path, new)
    if args.check and stale:
        print(f"error: results blocks differ from results/ in {', '.join(stale)}: run "
              "python scripts/render_results.py", file=sys.stderr)
        return 1
    print(f"{'stale' if args.check else 'rendered'}: {', '.join(stale) or 'nothing'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
