"""The paper profile's path offline, end to end, in its smallest form: `scaleformer reproduce <artifact> --profile
rehearsal` writes local mirrors of SCROLLS' zips and BookSum's parquet (their real layout), reads them through the
real data options and loaders, trains BART-base's (T5-base's) shape with the lineage's recipe (one epoch, validation
twice an epoch, the best checkpoint), evaluates both splits and renders table1, table2 and table_qa. Every cell's
run records the checkpoint it chose on validation, and its test column is scored (BookSum) or marked for the
leaderboard with the prediction file it wrote (SCROLLS)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def _reproduce(artifact: str, root: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scaleformer.cli.reproduce", artifact, "--profile", "rehearsal",
                           "--methods", "sled", "--root", str(root)], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory):
    work = tmp_path_factory.mktemp("rehearsal")
    root = work / "results"
    done = {a: _reproduce(a, root, work) for a in ("table1", "table2", "table_qa")}
    return work, root, done


@pytest.mark.parametrize("artifact, columns", [("table1", 3), ("table2", 2), ("table_qa", 1)])
def test_the_rehearsal_renders_every_table_through_the_real_loaders(rehearsed, artifact, columns):
    work, root, done = rehearsed
    proc = done[artifact]
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = (root / f"{artifact}.md").read_text()
    assert "Test columns:" in table and "BERTScore:" in table
    found = {p.parent: json.loads(p.read_text()) for p in root.glob("runs/*/eval/epochs_1-*/metrics.json")}
    results = {d: r for d, r in found.items() if r["tag"] == f"{artifact}-rehearsal"}
    assert len(results) == columns
    for folder, r in results.items():
        sel = r["selection"]
        assert sel["rule"] == "best" and sel["split"] == "validation" and len(sel["validations"]) >= 2
        assert sel["step"] in [v["step"] for v in sel["validations"]] and f"best: step {sel['step']}" in table
        summary = r["data"]["summary"]
        assert "mirrors/rehearsal" in summary["train"]["source"]  # the real options, reading the mirror
        test = r["splits"]["test"]
        if r["data"]["name"] == "booksum":  # public references: scored here, a book once against its summaries
            assert test["scored"] and summary["test"]["n_references"] > summary["test"]["n_examples"]
        else:  # SCROLLS: hidden, the leaderboard's file beside the predictions
            board = test["leaderboard"]
            written = json.loads((folder / board["file"]).read_text())
            assert board["name"] == "scrolls" and len(written) == test["n_examples"] and "leaderboard" in table
    if artifact == "table_qa":  # a query task: queries cut to SLED's 64 tokens, the window shrunk to fit beside them
        (r,) = results.values()
        assert r["method"]["chunk_size"] == 1024 - 64 and r["data"]["summary"]["train"]["n_prefix_truncated"] > 0
        assert r["data"]["summary"]["train"]["n_documents"] < r["data"]["summary"]["train"]["n_examples"]
    assert (work / ".cache" / "scaleformer" / "mirrors" / "rehearsal" / "scrolls").is_dir()
