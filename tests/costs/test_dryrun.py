"""The dry run: cost measured inside a run (scaleformer.runs.cost), one cell at BART-base's real shape,
and the cost table's arithmetic (scaleformer.costs.table)."""

from __future__ import annotations

import pytest
from conftest import compose

from scaleformer.artifacts.grid import expand_grid, load_spec
from scaleformer.costs import report as cost_report
from scaleformer.costs import table as costs
from scaleformer.resources import experiments_dir
from scaleformer.runs.context import to_config
from scaleformer.runs.results import Results
from scaleformer.runs.run import run

SPECS = ("table1", "table2", "figure2", "table_qa")
# The probe's shortest schedule: one warm-up and one timed micro-batch per setting, at one length.
QUICK = ["++trainer.cost_warmup=1", "++trainer.cost_repeats=1", "++trainer.cost_lengths=[1.0]", "trainer.max_steps=4"]


def _cell(artifact: str, key: str, method: str):
    spec = load_spec(experiments_dir() / f"{artifact}.yaml")
    return spec, next(c for c in expand_grid(spec, "dryrun") if c.key == key and c.method == method)


@pytest.mark.parametrize("artifact", SPECS)
def test_every_spec_has_a_dryrun_profile_at_the_papers_shapes(artifact):
    spec = load_spec(experiments_dir() / f"{artifact}.yaml")
    prof = spec["profiles"]["dryrun"]
    assert spec["backbone"]["dryrun"] in ("bart_base_shape", "t5_base_shape")
    assert prof["cost_table"] is True and "++trainer.measure_cost=true" in prof["overrides"]
    cells = expand_grid(spec, "dryrun")
    assert cells and all(c.train_from is None for c in cells)  # each column's own training is measured
    cfg = compose(cells[0].overrides)
    trainer = to_config(cfg).trainer
    assert trainer.max_steps == 52 and trainer.accumulate_grad_batches == 1  # the probe's whole schedule
    assert (trainer.cost_warmup, trainer.cost_repeats, trainer.cost_lengths) == (3, 10, [1.0, 0.5])
    assert cfg.generation.num_beams == 4 and len(cfg.trainer.eval_splits) == 1 and cfg.data.max_eval_examples == 1
    # a generation timed at a known length: every token it may generate (QA's answers are capped at 32)
    want = 32 if artifact == "table_qa" else 1024
    assert cfg.generation.min_new_tokens == cfg.generation.max_new_tokens == want


@pytest.mark.slow  # ~50 s of BART-base on a CPU; the same probe at tiny shapes: test_a_dryrun_grid_writes_its_cost_table
def test_one_dryrun_cell_at_bart_base_shape(tmp_path):
    """BART-base's architecture (random weights), a GovReport-shaped document read past 1,024 positions by
    SLED, one warm-up and one timed micro-batch per setting, a 4-beam generation; the cost record and the
    cost table's row from it (one length: its step split by the FLOPs that grow)."""
    spec, cell = _cell("table1", "govreport", "sled")
    out = run(compose([*cell.overrides, f"paths.root={tmp_path}", *QUICK, "data.max_input_tokens=1100",
                       "data.max_target_tokens=16", "data.synthetic_docs.train=2", "generation.max_new_tokens=4"]))
    assert out["backbone"]["name"] == "bart_base_shape"
    assert not list(tmp_path.glob("runs/*/model")), "a dry run exports no random weights"
    cost = out["cost"]
    assert cost["model"]["d_model"] == 768 and cost["model"]["decoder_layers"] == 6
    assert cost["length_scaling"] == cost["train_length_scaling"] == "linear"
    plain, ckpt = cost["train_groups"]
    assert [s["warmup"] for s in cost["train_steps"]] == [True, False, True, False] and out["train_steps"] == 4
    assert plain["input_tokens"] == 1100 and all(s["time_s"] > 0 for s in cost["train_steps"])
    # at least the encoder's linear layers, forward and backward: 6 x 6 layers x 7.08M weights x 2 chunks x 1024
    assert plain["flops"] > 6 * 6 * 7_080_000 * 2048 and ckpt["flops"] > plain["flops"]
    assert plain["mem_peak_bytes"] > 139_000_000 * 4 * 2  # fp32 weights and gradients at least
    (gen,) = cost["generate"]
    assert 0 < gen["encode_s"] < gen["time_s"]
    assert gen["new_tokens"] == [4]  # the profile's min_new_tokens follows max_new_tokens: random weights stop at 4
    row = costs.measured(Results.from_dict(out), paper_cap=16384)
    assert row["probe"] == "steady-state" and row["paper_tokens"] > 1100
    assert row["scale"] == pytest.approx(row["paper_tokens"] / 1100, rel=1e-3)
    assert 0.5 < row["encoder_share"] < 1  # 2 chunks of 1,024 positions against 16 target tokens
    assert plain["encoder_forward_flops"] * 3 < plain["flops"]
    timed = next(s for s in cost["train_steps"] if not s["warmup"] and not s["checkpoint_chunks"])
    share = row["encoder_share"]
    assert row["step_s"] == pytest.approx(timed["time_s"] * (1 - share + share * row["scale"]), rel=1e-3)
    assert row["mfu_measured"] > 0 and row["peak_tflops"] > 0
    plan = costs.paper_plan(spec, cell)
    # the lineage's budget: 10 epochs of GovReport's 17,457 training reports, one a micro-batch
    assert plan["micro_batches"] == 10 * 17457 and plan["eval_docs"] == 972 + 973 and plan["max_input_tokens"] == 16384
    est = costs.estimate(row, plan)
    docs = plan["val_docs"] + plan["eval_docs"]
    assert est["total_s"] == pytest.approx(plan["micro_batches"] * row["step_s"] + docs * row["gen_s_doc"])


def test_generation_is_timed_after_a_warm_up_and_times_every_methods_encoding(tmp_path, monkeypatch):
    """ScaleFormer encodes around the encoder module's forward (its kept-position last layer): the probe times
    the method's encode. The first generation's one-time costs go to an untimed two-token warm-up."""
    from scaleformer.runs import module

    asked, stock = [], module.summaries
    monkeypatch.setattr(module, "summaries", lambda m, tok, gen, *a: asked.append(gen.max_new_tokens) or stock(m, tok, gen, *a))
    _, cell = _cell("table1", "govreport", "scaleformer_middle")
    out = run(compose([*cell.overrides, "backbone=tiny_bart", "data=synthetic", f"paths.root={tmp_path}",
                       *QUICK, "generation.max_new_tokens=6", "data.max_input_tokens=700"]))
    assert asked == [2, 6]  # the warm-up, then the timed generation of the same batch
    (gen,) = out["cost"]["generate"]
    assert 0 < gen["encode_s"] < gen["time_s"]


def test_unlimiformer_records_that_its_standard_training_reads_a_window(tmp_path):
    """table1's Unlimiformer trains in the reference's standard mode (truncation's input) and retrieves over
    the whole document at test time: the record says so, so the cost table scales only its generation."""
    _, cell = _cell("table1", "govreport", "unlimiformer")
    out = run(compose([*cell.overrides, "backbone=tiny_bart", "data=synthetic", f"paths.root={tmp_path}",
                       *QUICK, "generation.max_new_tokens=2", "generation.num_beams=1"]))
    assert out["method"]["training_mode"] == "standard"
    assert (out["cost"]["length_scaling"], out["cost"]["train_length_scaling"]) == ("linear", "bounded")


def _result(steps, generate=(), scaling="linear", summary_tokens=4000.0, read=1000.0, train_scaling=None):
    extra = {} if train_scaling is None else {"train_length_scaling": train_scaling}  # older records lack it
    return Results(
        data={"summary": {"train": {"n_examples": 4, "input_tokens_mean": summary_tokens}}},
        splits={"test": {"n_examples": 1, "generation_time_s": 10.0, "input_tokens_per_s": read / 10.0}},
        cost={"device": "cpu", "length_scaling": scaling, "train_steps": steps, "generate": list(generate),
              "model": {"d_model": 8, "decoder_layers": 2, "decoder_params": 1000}, **extra})


def _step(t, peak, base, ckpt=False, tokens=1000, flops=None):
    return {"time_s": t, "mem_peak_bytes": peak, "base_bytes": base, "input_tokens": tokens,
            "checkpoint_chunks": ckpt, "flops": flops}


def test_costs_scale_time_and_memory_growth_per_chunk_and_keep_bounded_methods():
    steps = [_step(9.0, 5e9, 1e9, flops=100), _step(2.0, 5e9, 3e9), _step(3.0, 4e9, 3e9, ckpt=True)]
    gen = [{"time_s": 10.0, "encode_s": 4.0, "mem_peak_bytes": 2e9, "base_bytes": 1e9}]
    m = costs.measured(_result(steps, gen))
    assert m["scale"] == 4.0 and m["paper_tokens"] == 4000
    assert m["step_s"] == 8.0 and m["step_ckpt_s"] == 12.0  # the warm-up (9 s) is not a timed step
    assert m["train_peak_gb"] == pytest.approx((3e9 + 2e9 * 4) / 1e9)
    assert m["train_peak_ckpt_gb"] == pytest.approx((3e9 + 1e9 * 4) / 1e9)
    assert m["flops_step"] == 400
    # encoding x 4; decoding by FLOPs per token: (2 x 1000 + 4 x 8 x 2 x 4000) / (2 x 1000 + 4 x 8 x 2 x 1000)
    assert m["gen_s_doc"] == pytest.approx(4.0 * 4 + 6.0 * (2000 + 256000) / (2000 + 64000))
    capped = costs.measured(_result(steps, gen), paper_cap=2000)
    assert capped["scale"] == 2.0
    bounded = costs.measured(_result(steps, gen, scaling="bounded"))
    assert bounded["scale"] == 1.0 and bounded["step_s"] == 2.0 and bounded["gen_s_doc"] == 10.0
    # training on a window, evaluating on the whole document (Unlimiformer's standard mode)
    window = costs.measured(_result(steps, gen, train_scaling="bounded"))
    assert window["step_s"] == 2.0 and window["train_peak_gb"] == pytest.approx(5.0) and window["flops_step"] == 100
    assert window["gen_s_doc"] == m["gen_s_doc"] and window["train_length_scaling"] == "bounded"
    assert costs.measured(_result([])) is None
    # Only the encoder's share grows: 3 x 20 of 100 FLOPs (4 x 20 of 120 when the chunks are recomputed)
    steps[0]["encoder_forward_flops"] = 20
    shared = costs.measured(_result(steps, gen))
    assert shared["encoder_share"] == 0.6
    assert shared["step_s"] == pytest.approx(2.0 * (0.4 + 0.6 * 4))
    assert shared["step_ckpt_s"] == pytest.approx(3.0 * (1 / 3 + 2 / 3 * 4))
    assert shared["train_peak_gb"] == pytest.approx((3e9 + 2e9 * 2.8) / 1e9)
    assert shared["flops_step"] == pytest.approx(100 * 2.8)


def test_each_step_is_scaled_from_its_own_length():
    """The dry run's micro-batches read documents of different lengths (a step of 1,806 tokens beside one of
    4,096): each is scaled from its own, not from the cell's mean, or the longer one is over-counted."""
    warm = {**_step(9.0, 5e9, 1e9, flops=100), "encoder_forward_flops": 20}  # 1,000 tokens: 0.02 per token
    steps = [warm, _step(2.0, 5e9, 3e9, tokens=500), _step(3.0, 4e9, 3e9, ckpt=True, tokens=2000)]
    m = costs.measured(_result(steps))  # the paper's documents: 4,000 tokens
    # FLOPs that stay: 100 - 3 x 20 = 40; at n tokens a step is 40 + 3 (4 recomputed) x 0.02 x n
    assert m["step_s"] == pytest.approx(2.0 * (40 + 3 * 0.02 * 4000) / (40 + 3 * 0.02 * 500))
    assert m["step_ckpt_s"] == pytest.approx(3.0 * (40 + 4 * 0.02 * 4000) / (40 + 4 * 0.02 * 2000))
    assert m["train_peak_gb"] == pytest.approx((3e9 + 2e9 * 4.0) / 1e9)
    assert m["flops_step"] == pytest.approx(40 + 3 * 0.02 * 4000)


def test_estimate_writes_its_arithmetic_and_gpu_hours_from_flops():
    m = {"step_s": 2.0, "gen_s_doc": 5.0, "device": "cpu", "flops_step": 1e12}
    plan = {"steps": 100, "accumulate": 2, "micro_batches": 200, "val_rounds": 2, "val_docs": 20, "eval_docs": 30}
    est = costs.estimate(m, plan)
    assert est["total_s"] == 200 * 2.0 + 50 * 5.0
    assert ("100 steps x 2 micro-batches x 2.0 s + 2 x 10 validation docs x 5.0 s + 30 evaluation docs x 5.0 s"
            in est["arithmetic"])
    assert est["val_s"] == 20 * 5.0 and est["val_share"] == pytest.approx(100 / 650)
    assert "micro-batches x 0.047 s" in costs.estimate({**m, "step_s": 0.047}, plan)["arithmetic"]  # a GPU's step
    low, high = est["gpu_train_h"]
    assert low == pytest.approx(200e12 / (costs.H100_BF16_TFLOPS * 1e12 * max(costs.MFU)) / 3600)
    assert high == pytest.approx(low * max(costs.MFU) / min(costs.MFU))
    assert costs.estimate(m, None)["total_s"] is None


def test_cells_that_are_one_run_are_counted_once_in_the_totals(tmp_path):
    """A sweep's default point is one training in the paper profile as in the dry run (figure2's alpha=0.5,
    m=300 and O=150): its row appears under each axis, its hours once in the table's, the README's and the
    gate's totals."""
    import json

    def row(run_id: str, column: str, hours: float) -> dict:
        return {"method": "scaleformer_middle", "column": column, "run_id": run_id, "device": "cpu",
                "memory": "peak RSS", "precision": "32-true", "tokens": 100, "paper_tokens": 100, "scale": 1,
                "step_s": 1.0, "step_ckpt_s": None, "train_peak_gb": 1.0, "train_peak_ckpt_gb": None,
                "gen_s_doc": 1.0, "gen_peak_gb": 1.0, "total_s": hours * 3600, "train_s": hours * 3600,
                "gen_s": 0.0, "arithmetic": f"{hours} h", "gpu_train_h": [hours / 100, hours / 50], "flops_step": 1.0}

    rows = [row("a", "method.alpha=0.0", 1000), row("d", "method.alpha=0.5", 2000), row("d", "method.overlap=150", 2000)]
    assert [r["column"] for r in costs.distinct(rows)] == ["method.alpha=0.0", "method.alpha=0.5"]
    text = cost_report.render_markdown({"artifact": "figure2"}, rows, "")
    assert "Whole table on this cpu: 3,000 h." in text and "30-60 GPU-hours" in text
    assert "- scaleformer_middle on method.alpha=0.5, scaleformer_middle on method.overlap=150: one run" in text
    assert "Repeatability" not in text  # two runs are no spread
    rows.append({**row("b", "method.alpha=1.0", 1000), "step_s": 4.0})
    text = cost_report.render_markdown({"artifact": "figure2"}, rows, "")
    assert "3 runs of scaleformer_middle that count the same FLOPs on the same documents (100 tokens on average)" in text
    rows[-1]["flops_step"] = 2.0  # more work: not a repeat
    assert "Repeatability" not in cost_report.render_markdown({"artifact": "figure2"}, rows, "")
    assert "took median 1.0 (1.0-4.0) s/step" in text and "(generation: median 1.0 (1.0-1.0) s/doc" in text
    rows.pop()
    (tmp_path / "figure2.json").write_text(json.dumps({"rows": rows, "total_h": 3000.0, "provenance": ""}))
    hours, line = costs.paper_estimate("figure2", tmp_path)
    assert hours == 3000.0 and "training on one GPU ~30-60 h by FLOPs at 1-5% of an H100's" in line
    block = cost_report.summary_markdown(tmp_path, ["figure2"], "results/dryrun")
    assert "| 3 | ? | 3,000 | 3,000 | in generation | 0 |" in block  # rows from before validation was apart
    # memory at the longest documents: a sweep's points are one method at one length, given as a spread
    rows[0]["train_peak_gb"] = 3.0
    (tmp_path / "figure2.json").write_text(json.dumps({"rows": rows, "total_h": 3000.0, "provenance": ""}))
    block = cost_report.summary_markdown(tmp_path, ["figure2"], "results/dryrun")
    assert "all 2 runs (100 tokens" in block and "scaleformer_middle median 2.0 (1.0-3.0) / –." in block


def test_paper_profile_asks_for_yes_above_an_hour(tmp_path, capsys, monkeypatch):
    from scaleformer.cli import reproduce

    folder = tmp_path / "results" / "dryrun"
    folder.mkdir(parents=True)
    (folder / "table1.json").write_text('{"rows": [{"device": "cpu"}], "total_h": 5000.0}')
    monkeypatch.chdir(tmp_path)
    launched = []
    monkeypatch.setattr(reproduce, "launch", lambda *a, **k: launched.append(1) or ([], []))
    assert reproduce.main(["table1"]) == 2
    err = capsys.readouterr()
    assert "5,000 h" in err.out and "pass --yes" in err.err and not launched
    monkeypatch.setattr(reproduce, "build_table", lambda *a, **k: {})
    assert reproduce.main(["table1", "--yes"]) == 0 and launched
    # the dry run prints the same estimate before it starts, and needs no --yes
    monkeypatch.setattr(reproduce, "run_grid", lambda *a, **k: [])
    monkeypatch.setattr(reproduce, "build_costs", lambda *a, **k: {})
    capsys.readouterr()
    assert reproduce.main(["table1", "--profile", "dryrun"]) == 0
    assert "estimate for table1 (paper profile)" in capsys.readouterr().out


def test_a_dryrun_grid_writes_its_cost_table(tmp_path):
    """The grid -> runs -> cost table path of `make table2 PROFILE=dryrun`, on a random tiny T5 and short
    documents: each cell's row, the paper profile's arithmetic from its own config, the files."""
    import json

    from scaleformer.artifacts.gridrun import run_grid
    from scaleformer.artifacts.tables import build_table

    spec = load_spec(experiments_dir() / "table2.yaml")
    spec["datasets"] = ["govreport"]
    spec["backbone"]["dryrun"] = "tiny_t5"
    prof = spec["profiles"]["dryrun"]
    prof["overrides"] = [*prof["overrides"], "optim=tiny", "data.synthetic_words=300", "data.synthetic_docs.train=2",
                         "data.max_target_tokens=16", "generation.max_new_tokens=4", "data.max_input_tokens=256"]
    assert run_grid(spec, "dryrun", tmp_path, methods=["truncation", "sled"]) == []
    # Its score table too (reproduce writes it first): one document per cell, paired against the baseline.
    scores = build_table(spec, "dryrun", tmp_path, tmp_path / "scores", methods=["truncation", "sled"])
    assert "| SLED |" in scores["md"].read_text()
    written = cost_report.build_costs(spec, "dryrun", tmp_path, tmp_path, methods=["truncation", "sled"])
    record = json.loads(written["json"].read_text())
    rows = {r["method"]: r for r in record["rows"]}
    assert set(rows) == {"truncation", "sled"}
    assert rows["truncation"]["length_scaling"] == "bounded" and rows["sled"]["length_scaling"] == "linear"
    assert rows["sled"]["step_ckpt_s"] is not None and rows["truncation"]["step_ckpt_s"] is None
    plan = rows["sled"]["plan"]
    assert (plan["micro_batches"], plan["eval_docs"], plan["max_input_tokens"]) == (174570, 1945, 16384)
    assert record["total_h"] == pytest.approx(sum(r["total_s"] for r in rows.values()) / 3600)
    text = written["md"].read_text()
    assert "| sled | GovReport shape |" in text and "not measured (no GPU was lent" in text
    assert "GPU-hours" in text and "not a measurement of this table" in text
