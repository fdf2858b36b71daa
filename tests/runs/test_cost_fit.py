"""Steady-state statistics of hand-made probe records (scaleformer.runs.cost_fit): warm-ups are excluded, the
line through two lengths recovers a known fixed cost, the paper's length is read from it, and MFU divides by
the measured matmul rate. The records are built here, so every expected number is known."""

from __future__ import annotations

import pytest
from cost_records import FIXED, NOISE, PEAK, PER_TOKEN, record

from scaleformer.runs import cost_fit


def test_warm_ups_are_excluded_and_the_median_and_iqr_are_the_timed_micro_batches():
    g = cost_fit.groups(record())[0]
    assert g["repeats"] == 10 and g["time_s"] == pytest.approx(FIXED + PER_TOKEN * 4000)  # not 50 s
    p25, _, p75 = cost_fit.quartiles([FIXED + PER_TOKEN * 4000 + e for e in NOISE])
    assert g["time_iqr_s"] == pytest.approx(p75 - p25) and 0 < g["time_iqr_s"] < 0.05
    assert g["phases"]["backward"] == pytest.approx((FIXED + PER_TOKEN * 4000) / 2)


def test_the_fit_recovers_a_known_fixed_cost_and_reads_the_papers_length_from_it():
    fit = cost_fit.fits(record())["plain"]
    assert fit["fixed_s"] == pytest.approx(FIXED) and fit["per_token_s"] == pytest.approx(PER_TOKEN)
    s = cost_fit.summary(record(), paper_tokens=150_000, linear=True)
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
    s = cost_fit.summary(record(), paper_tokens=150_000, linear=False)
    assert s["step_s"] == pytest.approx(FIXED + PER_TOKEN * 4000)


def test_one_length_splits_the_step_by_the_flops_that_grow():
    """Without a second length the encoder's FLOPs share (3 x its forward of the step's) is what grows."""
    one = record(lengths=(4000,))
    plain = cost_fit.fits(one)["plain"]
    t, total, enc = FIXED + PER_TOKEN * 4000, 1e9 + 4e9, 2e5 * 4000
    assert plain["fixed_s"] == pytest.approx(t * (1 - 3 * enc / total))
    assert plain["fixed_s"] + plain["per_token_s"] * 4000 == pytest.approx(t)
    assert plain["flops"] == (pytest.approx(total - 3 * enc), pytest.approx(3 * enc / 4000))
    assert plain["peak_bytes"] == (1e9, pytest.approx(1e5))
    assert cost_fit.line([(1, 3.0), (3, 7.0), (2, 5.0)]) == (pytest.approx(1.0), pytest.approx(2.0))


def test_slow_micro_batches_are_set_against_the_others_counter_by_counter():
    """Three of ten micro-batches at 3x the median, each with a collection and driver allocations: the summary
    counts them, their extra time, and each counter's mean over them against the rest's."""
    fast = {"thread_cpu_s": 0.05, "gc_s": 0.0, "gc_runs": 0, "device_allocs": 0, "involuntary_switches": 1}
    slow = {"thread_cpu_s": 0.06, "gc_s": 0.12, "gc_runs": 1, "device_allocs": 40, "involuntary_switches": 1}
    timed = [{"time_s": 0.1, "waits": fast} for _ in range(7)] + [{"time_s": 0.3, "waits": slow} for _ in range(3)]
    out = cost_fit.slow_steps(timed, 0.1)
    assert (out["count"], out["of"], out["threshold"]) == (3, 10, cost_fit.SLOW)
    assert out["excess_s"] == pytest.approx(3 * 0.2)
    assert out["gc_s"] == {"slow": 0.12, "others": 0.0} and out["device_allocs"] == {"slow": 40, "others": 0}
    assert out["thread_cpu_s"] == {"slow": 0.06, "others": 0.05}  # not the launching thread's own work
    assert cost_fit.slow_steps([{"time_s": 0.1}], 0.1) is None  # a record from before the counters

