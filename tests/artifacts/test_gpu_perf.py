"""`make gpu-perf` at tiny shapes on the CPU: the whole path a lent GPU will run (grid -> runs before and after
-> side-by-side table -> the cost table rebuilt from the after runs), known to work before a GPU comes."""

from __future__ import annotations

import json

from scaleformer.artifacts import gpu_perf


def test_gpu_perf_runs_every_cell_before_and_after_and_rebuilds_the_cost_table(tmp_path, capsys):
    out = tmp_path / "out"
    assert gpu_perf.main(["--tiny", "--out", str(out), "--runs", str(tmp_path / "runs")]) == 0
    doc = json.loads((out / "gpu-perf.json").read_text())
    cells = {(r["method"], r["dataset"]) for r in doc["rows"]}
    assert cells == {(m, d) for m in gpu_perf.METHODS for d in gpu_perf.DATASETS}
    for r in doc["rows"]:
        for variant in ("before", "after"):
            v = r[variant]
            assert v["step_s"] > 0 and v["step_iqr_s"] >= 0 and 0 < v["mfu"] < 1 and v["peak_gb"] > 0
            assert v["ops_per_step"] > 0 and v["syncs_per_step"] is None  # a CPU: no device to sync with
        assert r["after"]["ops_per_step"] < r["before"]["ops_per_step"]  # fused AdamW: fewer operators
    text = (out / "gpu-perf.md").read_text()
    assert "| sled | booksum |" in text and "->" in text
    # the cost table from the after runs (a CPU's, so under OUT and without -gpu): 6 cells, generation timed
    table = json.loads((out / "table1.json").read_text())
    assert len(table["rows"]) == 6 and all(r["probe"] == "steady-state" for r in table["rows"])
    assert all(r["gen_s_doc"] is not None for r in table["rows"])
    assert "wrote" in capsys.readouterr().out


def test_a_spent_budget_starts_no_cell_and_says_which_were_skipped(tmp_path):
    out = tmp_path / "out"
    doc = gpu_perf.measure(tmp_path / "runs", tiny=True, deadline=0.0, save=lambda d: None)
    assert doc["rows"] == [] and len(doc["skipped"]) == len(gpu_perf.ORDER) * 2
    doc |= {"device": "cpu", "when": "now", "wall_time_s": 0.0}
    assert "Not measured (the window's budget ran out first): sled/summscreen/before" in gpu_perf.render(doc)
    assert not out.exists()
