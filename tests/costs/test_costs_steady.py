"""Cost tables from steady-state probe records (scaleformer.costs.table, cost_report): a record read
through the fit, its steady-state section, and a CPU table's GPU-hours from the MFU a GPU measured."""

from __future__ import annotations

import json

import pytest
from cost_records import FIXED, PER_TOKEN, record

from scaleformer.costs import report as cost_report
from scaleformer.costs import table as costs
from scaleformer.runs.results import Results


def _result(record, summary_tokens=150_000.0):
    return Results(data={"summary": {"train": {"n_examples": 4, "input_tokens_mean": summary_tokens}}},
                   splits={"test": {"n_examples": 1, "generation_time_s": 10.0, "input_tokens_per_s": 400.0}},
                   cost=record)


def test_measured_reads_a_steady_state_record_through_the_fit():
    m = costs.measured(_result(record()))
    assert m["probe"] == "steady-state" and m["tokens"] == 4000 and m["paper_tokens"] == 150_000
    assert m["step_s"] == pytest.approx(FIXED + PER_TOKEN * 150_000)
    assert m["step_iqr_s"] > 0 and m["phases"]["optimizer"] == 0.05
    text = cost_report.render_markdown({"artifact": "table1"}, [
        {"method": "sled", "column": "BookSum shape", "run_id": "r", **m, **costs.estimate(m, None)}], "")
    assert "Steady state (3 untimed warm-up + 10 timed" in text and "| 0.3 + 0.2 |" in text


def test_a_cpu_tables_gpu_hours_come_from_the_mfu_a_gpu_measured(tmp_path):
    gpu_row = {"method": "sled", "probe": "steady-state", "mfu": 0.25, "peak_tflops": 800.0, "device": "cuda:0"}
    (tmp_path / "table1-gpu.json").write_text(json.dumps({"rows": [gpu_row, {**gpu_row, "mfu": 0.35}]}))
    basis = costs.gpu_basis("table2", tmp_path)
    assert basis["mfu"] == {"sled": pytest.approx(0.30)} and basis["source"] == "table1-gpu.json"
    plan = {"steps": 10, "accumulate": 2, "micro_batches": 20, "val_rounds": 0, "val_docs": 0, "eval_docs": 0}
    cpu = {"device": "cpu", "step_s": 5.0, "gen_s_doc": None, "flops_step": 1e15}
    est = costs.estimate(cpu, plan, "sled", basis)
    assert est["gpu_train_h"] == [pytest.approx(20 * 1e15 / (0.30 * 800e12) / 3600)] * 2
    assert "MFU 30.0% measured in steady state on cuda:0 (table1-gpu.json)" in est["gpu_basis"]
    other = costs.estimate(cpu, plan, "truncation", basis)  # no measured MFU for it: the range, said so
    assert other["gpu_basis"] == costs.RANGE_BASIS and other["gpu_train_h"][0] < other["gpu_train_h"][1]
    hours, said = costs.gpu_hours([{**est, "run_id": "a"}, {**other, "run_id": "b"}])
    assert "measured in steady state" in said and costs.RANGE_BASIS in said and "-" in hours
    (tmp_path / "table1-gpu.json").write_text(json.dumps({"rows": [{"method": "sled", "step_s": 1.0}]}))
    assert costs.gpu_basis("table2", tmp_path) is None  # a single-step GPU table measured no MFU
