"""Restate the committed dry runs' cost tables under the paper profile's current recipe, then its bill on one GPU.

    python scripts/restate_costs.py --previous-commit 019ad5d   # results/dryrun/*.{md,json} and bill.{md,json}

The tables' measurements stay; their plans (epochs, validations, evaluation documents) and training lengths
become the current config's (scaleformer/costs/restate.py). The bill (scaleformer/costs/bill.py)
reads the restated tables and the newest gpu-perf window. ``--previous-commit``: the commit whose committed GPU
table the bill compares against (read with ``git show``), so the comparison's numbers come from a file too.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaleformer.artifacts.grid import load_spec  # noqa: E402
from scaleformer.costs import bill  # noqa: E402
from scaleformer.costs import restate as cost_restate  # noqa: E402
from scaleformer.costs.table import cost_table_paths  # noqa: E402
from scaleformer.errors import ConfigError, UserError  # noqa: E402
from scaleformer.io import atomic_write_bytes  # noqa: E402
from scaleformer.resources import experiments_dir, package_commit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def previous(commit: str) -> dict:
    """table1's GPU totals at ``commit``: the whole table and its BookSum columns, training apart."""
    path = "results/dryrun/table1-gpu.json"
    shown = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        why = (shown.stderr.strip().splitlines() or ["git show failed"])[-1]
        raise ConfigError(f"--previous-commit={commit}: no {path} there ({why})")
    try:
        rows = json.loads(shown.stdout)["rows"]
        book = [r for r in rows if r["column"].startswith("BookSum")]
        total, book_total = (sum(r["total_s"] for r in rs) / 3600 for rs in (rows, book))
        book_train = sum(r["train_s"] for r in book) / 3600
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"--previous-commit={commit}: {path} there is not a cost table with totals "
                          f"({type(e).__name__}: {e})") from None
    return {"commit": commit, "file": path, "table1_h": total, "booksum_h": book_total, "booksum_train_h": book_train,
            "text": (f"Before this recipe (commit {commit}, {path}: 20,000 optimiser steps x 8 documents for every "
                     f"cell, BookSum's books read whole): table1 {total:,.0f} h on the H200, of which its BookSum columns "
                     f"{book_total:,.0f} h ({book_train:,.0f} h training).")}


def restate_all(results: Path, prev: dict | None) -> list[Path]:
    """Every cost table restated and the bill built in a copy of ``results``; only when all of it succeeded are the
    written files put in place (each atomically), so a table that cannot be read leaves every file as it was."""
    tables = [p for a in bill.ARTIFACTS for p in cost_table_paths(a, results / "dryrun") if p.exists()]
    if not tables:
        raise ConfigError(f"--results={results}: no cost tables in {results / 'dryrun'} "
                          f"({', '.join(f'{a}.json' for a in bill.ARTIFACTS)}): nothing to price")
    for path in tables:  # each named as it is here, before the copy
        cost_restate.check_table(path)
    commit = package_commit()[:12]
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "results"
        shutil.copytree(results, staged, symlinks=True)
        written = [p for a in bill.ARTIFACTS
                   for p in cost_restate.restate(load_spec(experiments_dir() / f"{a}.yaml"), staged / "dryrun", commit)]
        written += list(bill.write(staged, prev).values())
        return [atomic_write_bytes(results / p.relative_to(staged), p.read_bytes()) for p in written]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--previous-commit", default=None, help="the commit the bill compares table1 against")
    ap.add_argument("--results", type=Path, default=ROOT / "results")
    args = ap.parse_args(argv)
    try:
        prev = previous(args.previous_commit) if args.previous_commit else None
        for p in restate_all(args.results, prev):
            print(f"wrote {p}")
    except UserError as e:
        print(f"error: {e}; nothing was written", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
