"""MASFormer's paper profiles offline, in their smallest form: `scaleformer reproduce masformer_table1|masformer_table2
--profile rehearsal` writes local mirrors of ArXiv and PubMed (ccdv's parquet and dataset card), QMSUM and GovReport
(SCROLLS' zips) in their real layout, reads them through the paper profile's own data options and loaders, and
renders the tables: perplexity on both test sets after continual training on a Pile mirror, and summarization as
language modeling, fine-tuned from that continually trained model, with QMSUM's query, the test column scored where
references are public (ArXiv) and written for the leaderboard where hidden (SCROLLS)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path


def _reproduce(artifact: str, root: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scaleformer.cli.reproduce", artifact, "--profile", "rehearsal",
                           "--methods", "masformer_l4", "--root", str(root)], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


def _results(root: Path, tag: str) -> dict[str, dict]:
    found = [json.loads(p.read_text()) for p in root.glob("runs/*/eval/*/metrics.json")]
    return {r["data"]["name"]: r for r in found if r["tag"] == tag}


def test_masformer_rehearsal_reads_every_paper_source_through_its_real_loader(tmp_path):
    root = tmp_path / "results"
    for artifact in ("masformer_table1", "masformer_table2"):
        proc = _reproduce(artifact, root, tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
    mirrors = tmp_path / ".cache" / "scaleformer" / "mirrors" / "rehearsal"
    for name in ("arxiv-summarization", "pubmed-summarization"):  # the hub's layout: the card, both configurations
        assert (mirrors / name / "README.md").is_file() and (mirrors / name / "section").is_dir()
        assert sorted(p.name for p in (mirrors / name / "document").iterdir()) == [
            f"{s}-00000-of-00001.parquet" for s in ("test", "train", "validation")]
    assert sorted(p.relative_to(mirrors).as_posix() for p in (mirrors / "pile-uncopyrighted").rglob("*.zst")) == [
        f"pile-uncopyrighted/{f}.jsonl.zst" for f in ("test", "train/00", "train/01", "val")]
    lm = _results(root, "masformer_table1-rehearsal")
    assert set(lm) == {"arxiv_lm", "pubmed_lm"}
    for r in lm.values():  # the mirror's own documents (1 / 2), each cut to n = 256 tokens
        summary = r["data"]["summary"]
        assert [summary[s]["n_examples"] for s in ("validation", "test")] == [1, 2], summary
        assert summary["test"]["cut_at"] == 256 and r["splits"]["test"]["n_docs"] == 2 and r["splits"]["test"]["ppl"] > 1
    train = lm["arxiv_lm"]["data"]["summary"]["train"]  # continued on the Pile mirror: 2 steps of 2 rows
    assert train["corpus"].endswith("/pile-uncopyrighted") and train["rows_read"] == 4 <= train["packed_rows"]
    assert lm["arxiv_lm"]["train_steps"] == lm["pubmed_lm"]["train_steps"] == 2
    assert (root / "runs" / lm["arxiv_lm"]["run_id"] / "checkpoints").is_dir()
    assert not (root / "runs" / lm["pubmed_lm"]["run_id"] / "checkpoints").exists(), "PubMed trained nothing itself"
    table1 = {row["dataset"]: row for row in csv.DictReader((root / "masformer_table1.csv").open())}
    assert {k: v["status"] for k, v in table1.items()} == {"arxiv": "ok", "pubmed": "ok"}
    summ = _results(root, "masformer_table2-rehearsal")
    assert set(summ) == {"qmsum", "arxiv", "govreport"}
    continued = root / "runs" / lm["arxiv_lm"]["run_id"] / "model"  # the chain: Table 1's run, exported
    assert all(r["backbone"]["pretrained"] == str(continued) for r in summ.values())
    assert summ["arxiv"]["splits"]["test"]["scored"]  # ArXiv's abstracts are public
    for name in ("qmsum", "govreport"):  # SCROLLS hides its test references: the leaderboard's file
        board = summ[name]["splits"]["test"]["leaderboard"]
        assert board["name"] == "scrolls" and board["file"].endswith("_test.json")
    assert summ["qmsum"]["data"]["summary"]["train"]["n_query_crowded"] >= 0  # the query was read as a query
    table2 = (root / "masformer_table2.md").read_text()
    assert "| dev | MASFormer (l=4) |" in table2 and "Problems" not in table2
