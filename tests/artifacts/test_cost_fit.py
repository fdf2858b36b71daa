"""Steady-state cost tables from hand-made probe records (scaleformer.artifacts.cost_fit and its use in costs):
warm-ups are excluded, the line through two lengths recovers a known fixed cost, the paper's length is read
from it, MFU divides by the measured matmul rate, and a CPU table's GPU-hours come from a GPU's measured MFU."""

from __future__ import annotations

import json

import pytest

from scaleformer.artifacts import cost_fit, cost_report, costs
from scaleformer.runs.results import Results

FIXED, PER_TOKEN, PEAK = 0.3, 2e-4, 100.0  # s, s per token, TFLOP/s
NOISE = (-0.02, 0.01, 0.0, 0.02, -0.01, 0.0, 0.01, -0.02, 0.02, 0.0)  # symmetric: the median is the line


def _record(settings=("plain", "checkpoint"), lengths=(4000, 2000), ckpt_extra=0.25, warmup_s=50.0):
    groups, steps = [], []
    for setting in settings:
        for n in lengths:
            g = len(groups)
            t = (FIXED + PER_TOKEN * n) * (1 + ckpt_extra * (setting == "checkpoint"))
            flops = (1e9 + 1e6 * n) * (1.3 if setting == "checkpoint" else 1)
            groups.append({"setting": setting, "fraction": n / lengths[0], "input_tokens": n, "target_tokens": 100,
                           "tokens_per_step": [n] * 13, "flops": flops, "encoder_forward_flops": 2e5 * n,
                           "mem_peak_bytes": 1e9 + 1e5 * n, "base_bytes": 1e9})
            phases = {"data": 0.001, "forward": t / 3, "backward": t / 2, "optimizer": 0.05}
            steps += [{"group": g, "warmup": True, "time_s": warmup_s, "phases": {**phases, "other": warmup_s - t}}
                      for _ in range(3)]
            steps += [{"group": g, "warmup": False, "time_s": t + e,
                       "phases": {**phases, "other": t + e - sum(phases.values())}} for e in NOISE]
    return {"device": "cuda:0", "precision": "bf16-mixed", "probe": "steady-state", "timer": "cuda events",
            "schedule": {"warmup": 3, "repeats": 10, "lengths": [1.0, 0.5]}, "matmul_peak": {"tflops": PEAK},
            "length_scaling": "linear", "train_length_scaling": "linear", "train_groups": groups,
            "train_steps": steps, "generate": [], "model": {}}


def test_warm_ups_are_excluded_and_the_median_and_iqr_are_the_timed_micro_batches():
    g = cost_fit.groups(_record())[0]
    assert g["repeats"] == 10 and g["time_s"] == pytest.approx(FIXED + PER_TOKEN * 4000)  # not 50 s
    p25, _, p75 = cost_fit.quartiles([FIXED + PER_TOKEN * 4000 + e for e in NOISE])
    assert g["time_iqr_s"] == pytest.approx(p75 - p25) and 0 < g["time_iqr_s"] < 0.05
    assert g["phases"]["backward"] == pytest.approx((FIXED + PER_TOKEN * 4000) / 2)


def test_the_fit_recovers_a_known_fixed_cost_and_reads_the_papers_length_from_it():
    fit = cost_fit.fits(_record())["plain"]
    assert fit["fixed_s"] == pytest.approx(FIXED) and fit["per_token_s"] == pytest.approx(PER_TOKEN)
    s = cost_fit.summary(_record(), paper_tokens=150_000, linear=True)
    assert s["step_s"] == pytest.approx(FIXED + PER_TOKEN * 150_000)  # 30.3 s
    # scaling the whole 4,000-token step would multiply its fixed cost too: 37.5 x 1.1 s = 41.25 s
    assert s["step_s"] < 0.75 * (FIXED + PER_TOKEN * 4000) * 150_000 / 4000
    assert s["step_ckpt_s"] == pytest.approx(1.25 * (FIXED + PER_TOKEN * 150_000))
    assert s["flops_step"] == pytest.approx(1e9 + 1e6 * 150_000)
    assert s["train_peak_gb"] == pytest.approx((1e9 + 1e5 * 150_000) / 1e9)
    # MFU: the plain setting's FLOPs (the model's work) over the median time over the measured rate
    assert s["mfu_measured"] == pytest.approx((1e9 + 4e9) / (FIXED + 0.8) / (PEAK * 1e12))
    assert s["mfu"] == pytest.approx((1e9 + 1.5e11) / (FIXED + 30.0) / (PEAK * 1e12))
    assert s["measured_tokens"] == [2000, 4000] and s["fixed_s"] == pytest.approx(FIXED)


def test_a_method_that_reads_a_window_costs_what_its_longest_length_cost():
    s = cost_fit.summary(_record(), paper_tokens=150_000, linear=False)
    assert s["step_s"] == pytest.approx(FIXED + PER_TOKEN * 4000)


def test_one_length_splits_the_step_by_the_flops_that_grow():
    """Without a second length the encoder's FLOPs share (3 x its forward of the step's) is what grows."""
    record = _record(lengths=(4000,))
    plain = cost_fit.fits(record)["plain"]
    t, total, enc = FIXED + PER_TOKEN * 4000, 1e9 + 4e9, 2e5 * 4000
    assert plain["fixed_s"] == pytest.approx(t * (1 - 3 * enc / total))
    assert plain["fixed_s"] + plain["per_token_s"] * 4000 == pytest.approx(t)
    assert plain["flops"] == (pytest.approx(total - 3 * enc), pytest.approx(3 * enc / 4000))
    assert plain["peak_bytes"] == (1e9, pytest.approx(1e5))
    assert cost_fit.line([(1, 3.0), (3, 7.0), (2, 5.0)]) == (pytest.approx(1.0), pytest.approx(2.0))


def _result(record, summary_tokens=150_000.0):
    return Results(data={"summary": {"train": {"n_examples": 4, "input_tokens_mean": summary_tokens}}},
                   splits={"test": {"n_examples": 1, "generation_time_s": 10.0, "input_tokens_per_s": 400.0}},
                   cost=record)


def test_measured_reads_a_steady_state_record_through_the_fit():
    m = costs.measured(_result(_record()))
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
