"""Restate the committed dry runs' cost tables under the paper profile's current recipe, then its bill on one GPU.

    python scripts/restate_costs.py --previous-commit 019ad5d   # results/dryrun/*.{md,json} and bill.{md,json}

The tables' measurements stay; their plans (epochs, validations, evaluation documents) and training lengths
become the current config's (scaleformer/artifacts/cost_restate.py). The bill (scaleformer/artifacts/bill.py)
reads the restated tables and the newest gpu-perf window. ``--previous-commit``: the commit whose committed GPU
table the bill compares against (read with ``git show``), so the comparison's numbers come from a file too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaleformer.artifacts import bill, cost_restate  # noqa: E402
from scaleformer.artifacts.grid import load_spec  # noqa: E402
from scaleformer.resources import experiments_dir, package_commit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def previous(commit: str) -> dict:
    """table1's GPU totals at ``commit``: the whole table and its BookSum columns, training apart."""
    path = "results/dryrun/table1-gpu.json"
    rows = json.loads(subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True, capture_output=True,
                                     text=True).stdout)["rows"]
    book = [r for r in rows if r["column"].startswith("BookSum")]
    total, book_total = (sum(r["total_s"] for r in rs) / 3600 for rs in (rows, book))
    book_train = sum(r["train_s"] for r in book) / 3600
    return {"commit": commit, "file": path, "table1_h": total, "booksum_h": book_total, "booksum_train_h": book_train,
            "text": (f"Before this recipe (commit {commit}, {path}: 20,000 optimiser steps x 8 documents for every "
                     f"cell, BookSum's books read whole): table1 {total:,.0f} h on the H200, of which its BookSum columns "
                     f"{book_total:,.0f} h ({book_train:,.0f} h training).")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--previous-commit", default=None, help="the commit the bill compares table1 against")
    ap.add_argument("--results", type=Path, default=ROOT / "results")
    args = ap.parse_args(argv)
    prev = previous(args.previous_commit) if args.previous_commit else None
    commit = package_commit()[:12]
    for artifact in bill.ARTIFACTS:
        for p in cost_restate.restate(load_spec(experiments_dir() / f"{artifact}.yaml"), args.results / "dryrun", commit):
            print(f"restated {p}")
    for kind, p in bill.write(args.results, prev).items():
        print(f"wrote bill ({kind}): {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
