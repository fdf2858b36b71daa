"""The summary-head benchmark writes both variants at both scales, with the head's positions it counted."""

from __future__ import annotations

import json

import pytest

from scaleformer.bench import summary_head


def test_the_benchmark_times_the_head_on_every_position_and_on_the_summarys(tmp_path):
    out = tmp_path / "head"
    assert summary_head.main(["--out", str(out), "--n", "1536", "--width", "64", "--vocab", "512",
                              "--repeats", "2"]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    paper = result["paper_shape"]
    assert [r["positions"] for r in paper] == [1536, *(room + 1 for room in summary_head.ROOMS.values())]
    assert all(r["flops"] == 6 * r["positions"] * 64 * 512 and r["time_s"] > 0 for r in paper)
    every, only = result["reader"]
    assert every["positions"] == every["sequence"] > only["positions"] > 1 and only["repeats"] == 2
    assert "| summary only |" in out.with_suffix(".md").read_text()


def test_a_sequence_no_longer_than_a_summary_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        summary_head.main(["--n", "1000"])
    assert e.value.code == 2
    assert "--n 1000: must exceed the longest summary" in capsys.readouterr().err
