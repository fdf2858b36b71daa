"""scripts/qa_by_window.py: a QA run's scores apart for answers inside and past truncation's window."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT, compose

from scaleformer.runs.run import run

sys.path.insert(0, str(ROOT / "scripts"))
import qa_by_window  # noqa: E402


def test_the_parts_add_up_to_the_runs_own_scores(tmp_path, capsys):
    result = run(compose([f"paths.root={tmp_path}/results", f"paths.cache={tmp_path}/cache",
                          "backbone=tiny_bart_qa_reader", "optim=tiny_finetune", "method=truncation", "data=ledgers_qa",
                          "data.synthetic_words=1800", "data.synthetic_docs.train=1", "data.synthetic_docs.validation=8",
                          "data.synthetic_docs.test=2", "trainer.max_steps=1", "trainer.enable_progress_bar=false",
                          "generation.num_beams=1", "generation.max_new_tokens=24", "metrics.bertscore.enabled=false"]))
    run_dir = tmp_path / "results" / "runs" / result["run_id"]
    method, scores = qa_by_window.run_scores(run_dir)
    assert method == "truncation" and set(scores) == {"validation", "test"}
    for split, parts in scores.items():
        whole = result["splits"][split]
        assert parts["inside"]["n"] + parts["past"]["n"] == whole["n_examples"]
        for metric in ("exact_match", "f1"):
            joined = sum(p["n"] * p[metric] for p in parts.values()) / whole["n_examples"]
            assert joined == pytest.approx(whole[metric])
    # 1,024 tokens (minus the question) hold the early answers of ~2,100-token ledgers, not the late ones;
    # the QA reader's answers share words with the references (the sums above are not 0 = 0).
    assert scores["validation"]["inside"]["n"] and scores["validation"]["past"]["n"]
    assert result["splits"]["validation"]["f1"] > 10
    assert qa_by_window.main([str(run_dir), "--out", str(tmp_path / "by_window.json")]) == 0
    assert "| truncation | validation |" in capsys.readouterr().out
    written = json.loads((tmp_path / "by_window.json").read_text())
    assert written["truncation"]["validation"] == json.loads(json.dumps(scores["validation"]))


def test_a_run_on_other_data_is_refused_with_its_name(tmp_path):
    result = run(compose([f"paths.root={tmp_path}/results", f"paths.cache={tmp_path}/cache", "backbone=tiny_bart",
                          "method=truncation", "data.synthetic_words=100", "data.synthetic_docs.train=1",
                          "data.synthetic_docs.validation=1", "data.synthetic_docs.test=1", "trainer.max_steps=1",
                          "trainer.enable_progress_bar=false", "trainer.eval_splits=[validation]",
                          "generation.max_new_tokens=4", "metrics.bertscore.enabled=false"]))
    with pytest.raises(SystemExit, match="not a run on the bundled QA ledgers"):
        qa_by_window.run_scores(tmp_path / "results" / "runs" / result["run_id"])


def test_paired_by_window_tests_each_subset_over_seeds_and_corrects_over_them():
    """Hand-made questions: 'a' answers every past question that truncation misses, and equals it inside."""
    def seed(em_inside: float, em_past: float, shift: float) -> dict:
        rows = [{"id": f"q{i:02d}", "inside": i < 10, "exact_match": (em_inside if i < 10 else em_past) * (i % 2),
                 "f1": 50.0 + shift + i} for i in range(30)]
        return {"test": rows}

    questions = {"truncation": [seed(100, 0, 0.0), seed(100, 0, 1.0)],
                 "a": [seed(100, 100, 0.5), seed(100, 100, 2.0)]}
    tests = qa_by_window.paired_by_window(questions, "truncation")
    assert len(tests) == 4 and all(t["seeds"] == [2, 2] and t["test"] == "two-level t" for t in tests)
    got = {(t["subset"], t["metric"]): t for t in tests}
    assert got[("inside", "exact_match")]["diff"] == 0 and got[("inside", "exact_match")]["n"] == 10
    assert got[("past", "exact_match")]["diff"] == pytest.approx(50.0) and got[("past", "exact_match")]["n"] == 20
    assert all(t["p_holm"] >= t["p"] for t in tests)
    with pytest.raises(SystemExit, match="--paired sled"):
        qa_by_window.paired_by_window(questions, "sled")
