"""`scaleformer score` prints a table, as a run does: the split's row, each metric with its interval over the
documents, the BERTScore model; `--json` prints the record as before, and the files it writes are unchanged."""

from __future__ import annotations

import json

from scaleformer.cli import score

ROWS = [{"id": "a", "prediction": "the toll was paid at the mill", "reference": "Alder paid the toll at the mill"},
        {"id": "b", "prediction": "lanterns were sold", "reference": "Ada sold lanterns"},
        {"id": "c", "prediction": "crates", "reference": "Ada sold crates"}]


def _file(tmp_path):
    path = tmp_path / "predictions_test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def test_the_table_has_the_split_the_metrics_in_order_and_their_intervals(tmp_path, capsys):
    metrics = score.main([str(_file(tmp_path)), "--no-bertscore", "--sentence-splitter", "regex"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["split", "n", "R-1", "R-2", "R-L", "R-Lsum"]
    row = out[1].split()
    assert row[:3] == ["test", "3", f"{metrics['rouge1']:.1f}"] and row[3].startswith(("±", "["))
    assert not any(line.lstrip().startswith("{") for line in out)  # no JSON without --json


def test_json_prints_the_record_and_the_files_are_the_same(tmp_path, capsys):
    path = _file(tmp_path)
    score.main([str(path), "--no-bertscore", "--sentence-splitter", "regex", "--out", str(tmp_path / "a.json")])
    capsys.readouterr()
    metrics = score.main([str(path), "--no-bertscore", "--sentence-splitter", "regex", "--json",
                          "--out", str(tmp_path / "b.json")])
    printed = json.loads(capsys.readouterr().out)
    assert printed == metrics and printed["rouge1"] == metrics["rouge1"]
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert {k: v for k, v in a.items() if k != "score_settings"} == {k: v for k, v in b.items() if k != "score_settings"}
    assert (tmp_path / "a.scores.jsonl").read_text() == (tmp_path / "b.scores.jsonl").read_text()


def test_a_hidden_split_says_there_is_nothing_to_score(tmp_path, capsys):
    path = tmp_path / "predictions_test.jsonl"
    path.write_text(json.dumps({"id": "a", "prediction": "x", "reference": []}) + "\n")
    score.main([str(path), "--no-bertscore"])
    assert "none with a reference: nothing to score (hidden)" in capsys.readouterr().out
