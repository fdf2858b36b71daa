"""`scaleformer compare` corrects across the metrics it reports: each metric is a test, and a pair of runs
compared on eight metrics has eight chances to look different by luck."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from scaleformer.cli import compare

N = 40


def _scores(folder: Path, columns: dict[str, np.ndarray]) -> Path:
    folder.mkdir(parents=True)
    rows = [{"id": f"d{i}", **{k: float(v[i]) for k, v in columns.items()}} for i in range(N)]
    (folder / "scores_validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    """A beats B clearly on rouge1, narrowly on rouge2 (p ~0.03 alone, ~0.06 after Holm), and not at all on rougeL."""
    rng = np.random.default_rng(3)
    b = {k: rng.normal(40, 8, N) for k in ("rouge1", "rouge2", "rougeL")}
    noise = rng.normal(0, 3, N)
    a = {"rouge1": b["rouge1"] + 4.0 + noise, "rouge2": b["rouge2"] + 0.95 + noise - noise.mean(),
         "rougeL": b["rougeL"] + noise - noise.mean()}
    return _scores(tmp_path / "a", a), _scores(tmp_path / "b", b)


def test_holm_is_applied_across_the_metrics_compared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _runs(tmp_path)
    out_json = tmp_path / "cmp.json"
    assert compare.main([str(a), str(b), "--metric", "rouge1", "--metric", "rouge2", "--metric", "rougeL",
                         "--json", str(out_json)]) == 0
    got = json.loads(out_json.read_text())
    assert got["correction"] == {"method": "holm", "family": ["rouge1", "rouge2", "rougeL"]}
    ms = got["metrics"]
    raw = {k: m["p_value"] for k, m in ms.items()}
    assert all(ms[k]["p_holm"] >= raw[k] for k in ms)
    smallest = min(raw, key=raw.get)
    assert ms[smallest]["p_holm"] == pytest.approx(min(1.0, 3 * raw[smallest]))
    # passes on its own, not once the family is counted
    assert raw["rouge2"] < 0.05 <= ms["rouge2"]["p_holm"]
    out = capsys.readouterr().out
    assert "p (Holm)" in out and "Holm's correction across the 3 metrics compared here" in out
    assert "(the family: rouge1, rouge2, rougeL)" in out
    row = next(line for line in out.splitlines() if line.startswith("rouge2"))
    assert row.split()[-2:] == [f"{raw['rouge2']:.4f}", f"{ms['rouge2']['p_holm']:.4f}"]


def test_one_metric_is_its_own_family(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _runs(tmp_path)
    got = compare.compare(a / "scores_validation.jsonl", b / "scores_validation.jsonl", ["rouge2"])
    m = got["metrics"]["rouge2"]
    assert got["correction"]["family"] == ["rouge2"] and m["p_holm"] == m["p_value"]
    assert "one metric compared, so no correction" in compare.render(got)
