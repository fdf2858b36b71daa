"""The README's front-door blocks, each rendered from committed files (``scripts/render_results.py`` calls them):
the two commands' times in one line each, one small table per paper (its tiny Table 1, test split, the headline
metric) and the bill in one table. Their full versions are blocks of docs pages (performance, results,
reproducing), rendered from the same files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from results_runs import MissingResults, _minutes, read_times

from scaleformer.artifacts.grid import column_label, load_spec, profile_datasets
from scaleformer.artifacts.significance import cell_text
from scaleformer.costs.bill import basis_counts
from scaleformer.resources import experiments_dir


def _csv(path: Path) -> list[dict[str, str]]:
    try:
        return list(csv.DictReader(path.open(encoding="utf-8")))
    except OSError as e:
        raise MissingResults(f"{path}: {e}") from None


def render_times_short(results: Path) -> str:
    """The two commands' wall times on a fresh clone of this machine, one line each."""
    runs = read_times(results / "times" / "times.json")
    if "idle" not in runs:
        raise MissingResults("results/times/times.json: no idle rows (python scripts/time_commands.py)")
    idle = runs["idle"]
    i = {r["step"]: r for r in idle["rows"]}
    return (f"On {idle['cores']} CPU cores (`results/times/times.json`, commit {idle['commit']}; every time: "
            "[performance](docs/performance.md#the-two-commands)):\n\n"
            f"- `make run`: {_minutes(i['run']['wall_s'])}, after `.venv` is built ({_minutes(i['setup']['wall_s'])} "
            "from a warm pip cache);\n"
            f"- `make test`: {_minutes(i['test']['wall_s'])}.")


def render_table1_headline(results: Path) -> str:
    """ScaleFormer's tiny Table 1, test split, R-1 per column, each cell's interval and mark as the full table's."""
    spec = load_spec(experiments_dir() / "table1.yaml")
    rows = _csv(results / "tiny" / "table1.csv")
    columns = profile_datasets(spec, "tiny")
    by = {(r["method"], r["dataset"]): r for r in rows if r["split"] == "test" and r["metric"] == "rouge1" and r["ours"]}
    lines = ["| test R-1 | " + " | ".join(column_label(spec, "tiny", c).removeprefix("synthetic ") for c in columns)
             + " |", "|---|" + "---|" * len(columns)]
    for method in (m for m in spec["methods"] if any((m, c) in by for c in columns)):
        cells = []
        for c in columns:
            r = by.get((method, c))
            cells.append(cell_text({**r, **{k: float(r[k]) if r.get(k) else None for k in (
                "ours", "ci_low", "ci_high")}, "significant": r.get("significant") == "True"} if r else {}))
        lines.append(f"| {spec['method_labels'].get(method, method)} | " + " | ".join(cells) + " |")
    seeds = {r.get("n_seeds") for r in by.values()} - {None, ""}
    return (f"From `results/tiny/table1.csv` ({'/'.join(sorted(seeds)) or '?'} seeds a cell, 64 test ledgers a column; "
            f"`*`: differs from truncation, paired, Holm-corrected):\n\n" + "\n".join(lines))


def render_masformer_headline(results: Path, column: str = "arxiv") -> str:
    """MASFormer's tiny Table 1, test perplexity per row beside its share of full attention's C and the paper's."""
    spec = load_spec(experiments_dir() / "masformer_table1.yaml")
    rows = [r for r in _csv(results / "tiny" / "masformer_table1.csv") if r["dataset"] == column]
    labels = spec["method_labels"]
    lines = ["| row | C / full | test ppl [95% CI] | paper ppl |", "|---|---|---|---|"]
    for r in rows:
        if r["status"] != "ok":
            continue
        lines.append(f"| {labels.get(r['method'], r['method'])} | {100 * float(r['cost_share']):.0f}% | "
                     f"{float(r['ppl']):.2f} [{float(r['low']):.2f}, {float(r['high']):.2f}] | {r['paper_ppl'] or '–'} |")
    return ("From `results/tiny/masformer_table1.csv` (3 seeds pooled, 32 test documents; the paper's column: "
            "GPT-3 XL on ArXiv at n = 8,192):\n\n" + "\n".join(lines))


def _range(x: list[float] | None) -> str:
    if x is None:
        return "unknown"
    lo, hi = x
    return f"{lo:,.0f}" if round(lo) == round(hi) else f"{lo:,.0f}-{hi:,.0f}"


def render_bill_summary(results: Path) -> str:
    """Each paper artifact's GPU-hours under its recipe: the summarization tables' measured bill on one GPU, and
    MASFormer's counted floors at an H100's peak."""
    try:
        bill = json.loads((results / "dryrun" / "bill.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise MissingResults(f"results/dryrun/bill.json: {e}") from None
    lines = ["| artifact | GPU-hours | what the number rests on |", "|---|---|---|"]
    for a in bill["artifacts"]:  # training's bases, each with its cells (generation's: the bill)
        lines.append(f"| ScaleFormer {a['artifact']} | {_range(a['total_h'])} on one GPU | training: "
                     f"{basis_counts(a['cells'], 'train_basis')} |")
    for name in ("masformer_table1", "masformer_table2", "masformer_continual", "masformer_ablation"):
        try:
            counted = json.loads((results / "dryrun" / f"{name}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise MissingResults(f"results/dryrun/{name}.json: {e}") from None
        lines.append(f"| MASFormer {name.removeprefix('masformer_')} | at least {counted['floor_h100_hours']:,.0f} H100-hours "
                     "| counted FLOPs of each cell's spans at 100% of an H100's dense bf16 peak (a floor) |")
    return ("Upper bounds for ScaleFormer's tables ([the bill](results/dryrun/bill.md): the lineage's recipe, one "
            "GPU, nothing in parallel), floors for MASFormer's ([Table 1's bill](results/dryrun/masformer_table1.md), "
            "before utilisation):\n\n" + "\n".join(lines))


FRONT = {"times-short": render_times_short, "table1-tiny-headline": render_table1_headline,
         "masformer_table1-tiny-headline": render_masformer_headline, "bill-summary": render_bill_summary}
