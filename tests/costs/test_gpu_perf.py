"""`make gpu-perf` at tiny shapes on the CPU: the whole path a lent GPU will run (grid -> runs before and after
-> side-by-side table -> the cost table rebuilt from the after runs -> the generation rows), known to work
before a GPU comes."""

from __future__ import annotations

import json
import time

import pytest
import torch

from scaleformer.artifacts.grid import expand_grid
from scaleformer.bench.floor import kv_bytes
from scaleformer.bench.shapes import load_shape, random_model
from scaleformer.compose import compose_config
from scaleformer.costs import gpu_decode, gpu_generate, gpu_perf, gpu_train
from scaleformer.resources import conf_dir
from scaleformer.runs.context import to_config

# The generation rows at their cheapest: 2 timed runs of 2 tokens per decoding row, 3 documents passed once.
FAST_GEN = ["--gen-repeats", "2", "--gen-new-tokens", "2", "--gen-docs", "3", "--gen-doc-repeats", "1",
            "--gen-budget-s", "3600"]


def test_gpu_perf_runs_every_cell_before_and_after_and_rebuilds_the_cost_table(tmp_path, capsys):
    out = tmp_path / "out"
    assert gpu_perf.main(["--tiny", "--out", str(out), "--runs", str(tmp_path / "runs"), *FAST_GEN]) == 0
    doc = json.loads((out / "gpu-perf.json").read_text())
    cells = {(r["method"], r["dataset"]) for r in doc["rows"]}
    assert cells == {(m, d) for m in gpu_train.METHODS for d in gpu_train.DATASETS}
    for r in doc["rows"]:
        for variant in ("before", "after"):
            v = r[variant]
            assert v["step_s"] > 0 and v["step_iqr_s"] >= 0 and 0 < v["mfu"] < 1 and v["peak_gb"] > 0
            assert v["ops_per_step"] > 0 and v["syncs_per_step"] is None  # a CPU: no device to sync with
            assert v["slow"]["of"] >= 1 and "thread_cpu_s" in v["slow"]  # what slow micro-batches waited on
        assert r["after"]["ops_per_step"] < r["before"]["ops_per_step"]  # fused AdamW: fewer operators
        top = r["after"]["top"]  # a CPU: the operators by their own time, no kernels
        assert top["of"] == "operators, own CPU time" and r["after"]["kernel_s_per_step"] is None
        assert top["rows"] and all(t["name"].startswith("aten::") and t["calls"] >= 1 for t in top["rows"])
    text = (out / "gpu-perf.md").read_text()
    assert "| sled | booksum |" in text and "->" in text
    # the cost table from the after runs (a CPU's, so under OUT and without -gpu): 6 cells, generation timed
    table = json.loads((out / "table1.json").read_text())
    assert len(table["rows"]) == 6 and all(r["probe"] == "steady-state" for r in table["rows"])
    assert all(r["gen_s_doc"] is not None for r in table["rows"])
    # then the generation rows, in the same JSON and below the training table
    assert len(doc["generation"]["decode"]) == 18 and doc["generation"]["docs"]["rows"]  # 3 lengths x 2 beams x 3
    assert text.index("| sled | booksum |") < text.index("Where the time went") < text.index("## Decoding")
    assert text.index("## Decoding") < text.index("## Batched evaluation")
    assert "wrote" in capsys.readouterr().out


def test_generation_rows_cover_both_caches_and_beam_counts_with_their_floor_and_the_batched_documents(tmp_path):
    out = tmp_path / "out"
    assert gpu_perf.main(["--tiny", "--parts", "decode,docs", "--out", str(out), *FAST_GEN]) == 0
    doc = json.loads((out / "gpu-perf.json").read_text())
    assert doc["rows"] == [] and doc["parts"] == ["decode", "docs"]  # no training cell ran
    gen = doc["generation"]
    assert gen["skipped"] == [] and gen["failed"] == []
    rows = gen["decode"]
    assert [(r["length"], r["beams"], r["cache"]) for r in rows] == [
        (n, b, c) for n in gpu_decode.TINY_LENGTHS for b in (1, 4) for c in ("dynamic", "static", "step")]
    config = load_shape("tiny_bart").config
    for r in rows:
        assert r["status"] == "ok" and r["new_tokens"] == 2 and r["repeats"] == 2 == len(r["times_s"])
        assert r["ms_per_token"] > 0 and r["ms_per_token_iqr"] >= 0 and r["compiled_graphs"] == 0  # a CPU: eager
        f = r["floor"]
        assert f["floor_ms"] > 0 and f["floor_multiple"] > 0 and f["step_bytes"] > f["weight_bytes"] > 0
        # beam-shared: the cross-attention keys/values are held once per document at 1 and at 4 beams
        assert f["cross_attention_measured"] and f["cross_attention_bytes"] == kv_bytes(config, r["length"], 4)
        assert r["target"]["what"] == ("x floor <= 1.5" if r["length"] == 1024 else f"ms/token <= {2 if r['beams'] == 1 else 3}")
        assert r["target"]["met"] in (True, False)
    assert gen["bandwidth"]["bytes_per_s"] > 0
    docs = gen["docs"]
    assert docs["documents"] == 3 and len(docs["tokens"]) == 3 and docs["beams"] == 4
    assert {r["method"] for r in docs["rows"]} == set(gpu_generate.DOC_METHODS)
    for method in gpu_generate.DOC_METHODS:
        mine = [r for r in docs["rows"] if r["method"] == method]
        assert mine[0]["batch"] == 1 and any(r["auto"] for r in mine) and len(mine) >= 3  # 1, fixed, auto
        assert all(r["docs_per_s"] > 0 and r["same_summaries"] for r in mine)  # fp32: batching keeps the tokens
        assert method in docs["auto_batch"]
    assert {s["method"] for s in docs["speedups"]} == set(gpu_generate.DOC_METHODS)
    text = (out / "gpu-perf.md").read_text()
    assert text.startswith("# Generation at the GPU's speed")
    for needle in ("| 64 | 1 | dynamic |", "| 64 | 4 | static |", "| 1,024 | 4 | static |", "| 1,024 | 4 | step |",
                   "floor ms | x floor",
                   "<= 2 ms/token at 1 beam", "| sled | 1 |", "speed-up"):
        assert needle in text


def test_the_compiled_variant_runs_the_defaults_with_the_layers_compiled_beside_them(tmp_path):
    """--variants after,compiled: the defaults with backbone.compile_encoder and compile_decoder, measured compiled (the probe
    leaves the compile to the micro-batch after its FLOP count), in a table of its own against them."""
    torch.compiler.reset()
    doc = gpu_train.measure(tmp_path / "runs", tiny=True, variants=("after", "compiled"),
                           cells=[("truncation", "summscreen")], save=lambda d: None)
    (row,) = doc["rows"]
    assert (row["method"], row["dataset"]) == ("truncation", "summscreen") and "before" not in row
    assert row["after"]["compiled_modules"] == 0 and row["compiled"]["compiled_modules"] == 4  # tiny_bart's 2 + 2 layers
    assert row["compiled"]["step_s"] > 0 and row["compiled"]["ops_per_step"] > 0
    text = gpu_perf.render(doc | {"device": "cpu", "when": "now", "wall_time_s": 1.0})
    assert doc["compile_backend"] == "aot_eager"  # tiny shapes: no code generation
    section = text[text.index("The layers compiled (`backbone.compile_encoder=aot_eager`"):text.index("Where the time went")]
    assert "| truncation | summscreen |" in section and "| 4 |" in section  # its four compiled layers
    assert row["compiled"]["timed_compiles"] is not None and row["after"]["timed_compiles"] is None
    assert "- truncation/summscreen/compiled: operators, own CPU time: `aten::" in text
    assert gpu_perf.variant_lines([{"method": "sled", "dataset": "booksum", "after": {"step_s": 1.0}}]) == []


def test_the_bucketed_variant_measures_several_documents_a_micro_batch_per_document(tmp_path):
    """bucketed: the defaults on micro-batches of documents of similar length (as many as the memory model says fit of
    8: all, at tiny shapes), SummScreenFD's cells only, in a table per document against the defaults' one."""
    doc = gpu_train.measure(tmp_path / "runs", tiny=True, variants=("after", "bucketed"),
                           cells=[("sled", "summscreen"), ("sled", "booksum")], save=lambda d: None)
    rows = {r["dataset"]: r for r in doc["rows"]}
    assert "bucketed" not in rows["booksum"] and rows["booksum"]["after"]["documents"] == 1
    a, b = rows["summscreen"]["after"], rows["summscreen"]["bucketed"]
    assert (a["documents"], b["documents"]) == (1, 8) and b["step_s"] > 0 and b["ops_per_step"] > a["ops_per_step"]
    lines = gpu_perf.variant_lines(doc["rows"])
    row = next(x for x in lines if x.startswith("| sled | summscreen | 8 |"))
    assert f"{a['ops_per_step']:,.0f} -> {b['ops_per_step'] / 8:,.0f}" in row
    assert lines[1].startswith("Bucketed micro-batches") and not any("booksum" in x for x in lines)


@pytest.mark.parametrize("variant", [*gpu_train.ALL_VARIANTS])
def test_every_cell_of_every_variant_validates_at_the_papers_shapes(variant):
    """What a lent GPU would run, composed and checked here (a compiled cell's longer warm-up once outgrew
    the dry run's step budget: the window would have lost it to a one-line refusal)."""
    cells = expand_grid(gpu_train.spec_for(variant, tiny=False), "dryrun", gpu_train.METHODS)
    assert {(c.method, c.key) for c in cells} == set(gpu_train.ORDER)
    for c in cells:
        rc = to_config(compose_config(c.overrides, str(conf_dir())))
        assert (rc.backbone.compile_decoder == "inductor") == (variant == "compiled"), c.key


def test_cells_and_variants_outside_the_script_are_refused_in_one_line(capsys):
    for argv, named in ((["--cells", "sled/govreport"], "--cells=sled/govreport"),
                        (["--variants", "after,fast"], "--variants=after,fast"),
                        (["--compile-backend", "fast"], "--compile-backend=fast")):
        with pytest.raises(SystemExit) as stop:
            gpu_perf.main(["--tiny", *argv])
        assert stop.value.code == 2 and named in capsys.readouterr().err


def test_where_the_time_went_sets_the_kernels_against_the_step():
    top = {"of": "kernels, device time", "rows": [
        {"name": "flash_fwd_kernel", "calls": 12, "ms": 40.0, "share": 0.5},
        {"name": "sm90_gemm", "calls": 90, "ms": 30.0, "share": 0.375}]}
    rows = [{"method": "sled", "dataset": "booksum", "after": {"step_s": 0.5, "kernel_s_per_step": 0.08, "top": top}},
            {"method": "truncation", "dataset": "booksum", "after": {"step_s": 0.1, "top": None}}]
    text = "\n".join(gpu_perf.time_lines(rows))
    assert "- sled/booksum/after: kernels 0.08 s of a 0.5 s step (16%); kernels, device time: " in text
    assert "`flash_fwd_kernel` 40 ms x12 (50%), `sm90_gemm` 30 ms x90 (38%)" in text and "truncation" not in text


def test_slow_micro_batches_are_listed_with_what_they_waited_on():
    slow = {"threshold": 1.5, "count": 2, "of": 10, "excess_s": 3.1,
            "thread_cpu_s": {"slow": 1.2, "others": 0.05}, "gc_s": {"slow": 0.0, "others": 0.0},
            "device_allocs": {"slow": 12.0, "others": 0.0}, "involuntary_switches": {"slow": 3.5, "others": 0.4},
            "sm_clock_mhz": {"slow": None, "others": None}}
    calm = {**slow, "count": 0}
    rows = [{"method": "sled", "dataset": "summscreen", "after": {"slow": slow}, "before": {"slow": calm}},
            {"method": "truncation", "dataset": "booksum", "after": {"slow": None}}]
    text = "\n".join(gpu_perf.slow_lines(rows))
    assert "- sled/summscreen/after: 2 of 10, 3.1 s over the median in all; 1.2 vs 0.05 launching thread's CPU s" in text
    assert "12 vs 0 cudaMalloc" in text and "SM MHz" not in text  # no clock read: not listed
    assert "3.5 vs 0.4 involuntary switches" in text  # means keep their fraction
    assert "before" not in text and "truncation" not in text  # no slow micro-batch, or no counters: no line
    assert gpu_perf.slow_lines([rows[1]]) == []


def test_a_spent_budget_measures_no_generation_row_and_names_each():
    gen = gpu_generate.measure(True, torch.device("cpu"), deadline=0.0, n_docs=2, log=lambda s: None)
    assert gen["decode"] == [] and gen["docs"]["rows"] == []
    assert len(gen["skipped"]) == 3 * 2 * len(gpu_decode.CACHES) + len(gpu_generate.DOC_METHODS)
    text = "\n".join(gpu_generate.render(gen))
    assert "Generation rows not measured" in text and "decode/64/1-beam/dynamic" in text and "docs/sled" in text


def test_a_row_whose_timed_runs_would_not_fit_is_skipped_with_its_estimate():
    model, _ = random_model(load_shape("tiny_bart").config, "sdpa", torch.device("cpu"), torch.float32, seed=0)
    hidden, mask = torch.randn(1, 16, model.config.d_model), torch.ones(1, 16, dtype=torch.long)
    budget = gpu_decode.Budget(time.time() + 600)
    est = gpu_decode.decode_row(model, hidden, mask, 1, "dynamic", new_tokens=2, repeats=10**7,
                                       bandwidth=None, budget=budget)
    assert isinstance(est, float) and est > 600


def test_a_spent_budget_starts_no_cell_and_says_which_were_skipped(tmp_path):
    out = tmp_path / "out"
    doc = gpu_train.measure(tmp_path / "runs", tiny=True, deadline=0.0, save=lambda d: None)
    # before and after of every cell, bucketed of SummScreenFD's
    assert doc["rows"] == [] and len(doc["skipped"]) == len(gpu_train.ORDER) * 2 + len(gpu_train.METHODS)
    assert {s.split("/")[1] for s in doc["skipped"] if s.endswith("/bucketed")} == {"summscreen"}
    doc |= {"device": "cpu", "when": "now", "wall_time_s": 0.0}
    assert "Not measured (the window's budget ran out first): sled/summscreen/before" in gpu_perf.render(doc)
    assert not out.exists()
