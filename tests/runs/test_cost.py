"""The cost probe (scaleformer.runs.cost) in a real run: its schedule, warm-ups, phases, FLOPs and memory per
group, the lengths it cuts the batch to, and training ending with the schedule."""

from __future__ import annotations

import pytest
import torch
from conftest import compose

from scaleformer.ops import compat
from scaleformer.ops.measure import compute_dtype
from scaleformer.runs import cost_fit
from scaleformer.runs.cost import CostProbe, _split
from scaleformer.runs.cost_generate import new_tokens
from scaleformer.runs.run import run

SMALL = ["backbone=tiny_bart", "data=synthetic", "data.synthetic_docs.train=4", "data.synthetic_words=400",
         "data.max_eval_examples=1", "generation.max_new_tokens=2", "generation.num_beams=1",
         "metrics.bertscore.enabled=false", "trainer.enable_progress_bar=false", "trainer.max_steps=100",
         "trainer.eval_splits=[test]", "callbacks.checkpoint=null", "++trainer.export_model=false",
         "++trainer.measure_cost=true", "++trainer.cost_repeats=3"]


@pytest.fixture(scope="module")
def sled_cost(tmp_path_factory):
    root = tmp_path_factory.mktemp("cost")
    out = run(compose([*SMALL, "method=sled", "method.chunk_size=128", "method.overlap=16", f"paths.root={root}"]))
    return out


def test_the_schedule_is_settings_by_lengths_of_warm_ups_then_timed_micro_batches(sled_cost):
    cost = sled_cost["cost"]
    groups, steps = cost["train_groups"], cost["train_steps"]
    assert [(g["setting"], g["fraction"]) for g in groups] == [
        ("plain", 1.0), ("plain", 0.5), ("checkpoint", 1.0), ("checkpoint", 0.5)]
    assert cost["schedule"] == {"warmup": 3, "repeats": 3, "lengths": [1.0, 0.5], "bare": False}
    assert len(steps) == 4 * 6 and sled_cost["train_steps"] == 24  # training ends with the schedule (max 100)
    for g in range(4):
        mine = [s for s in steps if s["group"] == g]
        assert [s["warmup"] for s in mine] == [True] * 3 + [False] * 3
        assert all(s["checkpoint_chunks"] == (groups[g]["setting"] == "checkpoint") for s in mine)


def test_each_group_counts_its_flops_and_memory_at_its_own_length(sled_cost):
    full, half, ckpt, ckpt_half = sled_cost["cost"]["train_groups"]
    assert 0.4 < half["input_tokens"] / full["input_tokens"] <= 0.55  # the batch cut to half its width
    assert half["flops"] < 0.75 * full["flops"]  # fewer chunks: fewer FLOPs
    assert ckpt["flops"] > full["flops"]  # the chunks' forward again in backward
    assert ckpt["encoder_forward_flops"] == full["encoder_forward_flops"] > 0
    assert all(g["mem_peak_bytes"] > 0 and g["base_bytes"] > 0 for g in (full, half, ckpt, ckpt_half))
    assert "syncs_per_step" not in full  # a CPU has no host-device synchronisation to count
    assert sled_cost["cost"]["matmul_peak"]["tflops"] > 0 and sled_cost["cost"]["matmul_peak"]["dtype"] == "float32"


def test_timed_micro_batches_split_their_cycle_into_phases(sled_cost):
    for s in sled_cost["cost"]["train_steps"]:
        ph = s["phases"]
        assert set(ph) == {"data", "forward", "backward", "optimizer", "other"}
        assert sum(ph.values()) == pytest.approx(s["time_s"], abs=1e-5)
        if not s["warmup"]:
            assert ph["forward"] > 0 and ph["backward"] > 0 and ph["optimizer"] > 0 and ph["data"] > 0
            assert ph["other"] > -1e-5


def test_every_micro_batch_records_what_its_cycle_waited_on(sled_cost):
    """The counters a slow step is told apart by (scaleformer.runs.cost_waits): the launching thread's CPU time
    over the cycle, its involuntary switches, garbage collection; a CPU has no CUDA allocator or SM clock."""
    steps = sled_cost["cost"]["train_steps"]
    for s in steps:
        w = s["waits"]
        assert set(w) == {"thread_cpu_s", "gc_s", "gc_runs", "involuntary_switches"}
        assert w["thread_cpu_s"] > 0 and w["gc_s"] >= 0 and w["gc_runs"] >= 0
        assert w["involuntary_switches"] is None or w["involuntary_switches"] >= 0
        # one thread's CPU time within its cycle's wall time (plus the clocks' granularity)
        assert w["thread_cpu_s"] <= s["time_s"] + 0.02
    ended = [s["ended_at"] for s in steps]  # wall clock, to line a step up with a device log
    assert ended == sorted(ended) and ended[-1] - ended[0] < 600
    g = cost_fit.groups(sled_cost["cost"])[0]
    assert g["slow"]["of"] == 3 and 0 <= g["slow"]["count"] <= 3 and set(g["slow"]["thread_cpu_s"]) == {"slow", "others"}


def test_wait_counters_see_the_collector_and_the_threads_own_time():
    import gc

    from scaleformer.runs.cost_waits import WaitCounters, since

    counters = WaitCounters(torch.device("cpu"))
    try:
        start = counters.read()
        gc.collect()
        sum(i * i for i in range(200_000))  # the thread's own CPU time
        grown = since(start, counters.read())
    finally:
        counters.close()
    assert grown["gc_runs"] >= 1 and grown["gc_s"] > 0 and grown["thread_cpu_s"] > 0
    assert counters._on_gc not in gc.callbacks  # closed: no callback left behind
    assert "device_allocs" not in grown  # a CPU: no CUDA allocator to count


def test_a_method_without_chunks_is_timed_in_its_one_setting(tmp_path):
    out = run(compose([*SMALL, "method=truncation", "++trainer.cost_lengths=[1.0]", f"paths.root={tmp_path}"]))
    assert [g["setting"] for g in out["cost"]["train_groups"]] == ["plain"] and out["train_steps"] == 6


def test_a_compiled_encoder_is_timed_compiled(tmp_path):
    """The FLOP counter's micro-batch runs compiled modules eagerly: a dispatch mode at a compiled module's
    first call makes dynamo skip its code for the rest of the process, so a measured run of
    backbone.compile_encoder timed eager layers (0 graphs captured before the probe said otherwise)."""
    torch.compiler.reset()  # caches of earlier tests' compiled layers: this run must capture its own
    before = compat.compiled_graphs()
    out = run(compose([*SMALL, "method=truncation", "++backbone.compile_encoder=aot_eager", "++trainer.cost_lengths=[1.0]",
                       f"paths.root={tmp_path}"]))
    assert compat.compiled_graphs() > before
    cost = out["cost"]
    assert cost["compiled_modules"] == 2  # tiny_bart's two encoder layers
    group = cost["train_groups"][0]
    assert group["flops"] > 0 and group["aten_ops_per_step"] > 0
    steps = cost["train_steps"]
    assert steps[0]["graphs_compiled"] == 0 and sum(s["graphs_compiled"] for s in steps if s["warmup"]) >= 1
    assert cost_fit.groups(cost)[0]["timed_compiles"] == sum(s["graphs_compiled"] for s in steps if not s["warmup"])


def test_each_timed_micro_batch_pairs_with_its_bare_forward_and_backward(tmp_path):
    """trainer.cost_bare: the framework's overhead is each pair's difference (cost_fit reads its median)."""
    out = run(compose([*SMALL, "method=sled", "method.chunk_size=128", "method.overlap=16", "++trainer.cost_bare=true",
                       "++trainer.cost_lengths=[1.0]", "++trainer.cost_repeats=4", f"paths.root={tmp_path}"]))
    steps = out["cost"]["train_steps"]
    assert all(s["bare_s"] > 0 for s in steps if not s["warmup"]) and not any("bare_s" in s for s in steps if s["warmup"])
    plain = next(g for g in cost_fit.groups(out["cost"]) if g["setting"] == "plain")
    mine = [s for s in steps if s["group"] == 0 and not s["warmup"]]
    assert plain["overhead_s"] == pytest.approx(cost_fit.quartiles([s["time_s"] - s["bare_s"] for s in mine])[1])
    group = out["cost"]["train_groups"][0]
    assert 0 < group["bare_aten_ops_per_step"] < group["aten_ops_per_step"]  # the loop and optimiser add operators


def test_generation_records_the_tokens_it_generated_per_document(sled_cost):
    """A generation's time is read against its length: the record counts each document's new tokens (the
    dry run, which fixes the length, is checked in tests/costs/test_dryrun.py)."""
    (gen,) = sled_cost["cost"]["generate"]
    assert len(gen["new_tokens"]) == 1 and 1 <= gen["new_tokens"][0] <= 2  # max_new_tokens=2, one document


def test_new_tokens_stop_at_the_first_end_and_skip_the_start_token():
    eos = 2
    rows = torch.tensor([[2, 5, 6, 2, 1, 1],   # ended after 3 tokens, padded (pad 1)
                         [2, 5, 6, 7, 8, 9],   # reached the length limit
                         [2, 2, 1, 1, 1, 1]])  # ended at once: the end token is generated
    assert new_tokens(rows, eos) == [3, 5, 1]
    assert new_tokens(rows, None) == [5, 5, 5]  # no end token: every position counts
    with pytest.raises(ValueError, match=r"must be \[batch, length\], got shape \(6,\)"):
        new_tokens(rows[0], eos)


def test_split_reads_phases_from_the_hooks_marks():
    marks = {"start": 1.0, "forward": 1.5, "backward": 2.5, "optimizer": 2.6, "end": 2.9}
    cycle, ph = _split(marks, 0.8, 0.05)
    assert cycle == pytest.approx(2.1)
    assert ph == pytest.approx({"data": 0.05, "forward": 0.5, "backward": 1.0, "optimizer": 0.3, "other": 0.25})
    # a micro-batch that accumulates reaches no optimizer hook: no optimiser phase
    _, ph = _split({"start": 0.0, "forward": 1.0, "backward": 2.0, "end": 2.0}, 0.0, 0.0)
    assert ph["optimizer"] == 0.0 and ph["other"] == pytest.approx(0.0)


def test_the_schedule_needs_a_warm_up_and_a_timed_micro_batch():
    with pytest.raises(ValueError, match="warm-up >= 1"):
        CostProbe(warmup=0)
    assert compute_dtype("bf16-mixed") == torch.bfloat16 and compute_dtype("32-true") == torch.float32
    assert CostProbe(3, 10, [1.0, 0.5]).micro_batches(type("C", (), {"checkpoint_chunks": False})()) == 52
