"""The artifact pipeline: grid expansion, skip/force, rendering from hand-made results, paper values."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from conftest import ROOT

from scaleformer.artifacts import figures, grid, gridrun, tables

SPECS = {name: grid.load_spec(ROOT / "experiments" / f"{name}.yaml") for name in ("table1", "table2", "figure2")}


def test_grid_expansion_covers_every_cell():
    cells = grid.expand_grid(SPECS["table1"], "tiny")
    assert len(cells) == 3 * 6 * 3  # columns x methods x the tiny profile's seeds
    assert {c.seed for c in cells} == {42, 43, 44}
    missing = {m for m in ("memorizing", "unlimiformer") if not (ROOT / "conf" / "method" / f"{m}.yaml").exists()}
    assert {c.method for c in cells if not c.available} == missing
    sled_gov = next(c for c in cells if c.method == "sled" and c.key == "govreport" and c.seed == 42)
    assert sled_gov.overrides[-1] == "method=sled" and "backbone=tiny_bart_reader" in sled_gov.overrides
    assert "data=ledgers_medium" in sled_gov.overrides
    smoke = next(c for c in grid.expand_grid(SPECS["table1"], "smoke") if c.method == "sled" and c.key == "govreport")
    assert "backbone=tiny_bart" in smoke.overrides and "++data.synthetic_split_words={validation:400,test:400}" in smoke.overrides
    fig = grid.expand_grid(SPECS["figure2"], "tiny")
    assert len(fig) == 11 + 7 + 5
    assert any("method.alpha=0.3" in c.overrides for c in fig)


def test_cells_get_distinct_run_ids():
    cells = [c for c in grid.expand_grid(SPECS["table2"], "smoke") if c.available]
    grid.resolve_run_ids(cells)
    assert len({c.run_id for c in cells}) == len(cells)
    assert all(f"-{c.method}-" in c.run_id for c in cells), "runs are named by the method option"


def test_methods_all_adds_every_other_method_option():
    spec = SPECS["table2"]
    rows = grid.select_methods(spec, "all")
    assert rows[:4] == spec["methods"] and set(rows) == set(spec["methods"]) | set(grid.method_options())
    with pytest.raises(ValueError, match="no_such"):
        grid.select_methods(spec, "sled,no_such")


def test_unknown_profile_is_a_clear_error():
    with pytest.raises(ValueError, match="PROFILE='gpu'"):
        grid.expand_grid(SPECS["table2"], "gpu")


def _fake_result(run_id: str, value: float) -> dict:
    split = {"rouge1": value, "rouge2": value / 2, "rougeL": value / 3, "n_examples": 2}
    return {"run_id": run_id, "config_hash": "abc", "commit": "deadbeef", "splits": {"validation": split,
                                                                                     "test": {"scored": False}}}


def test_render_table_from_hand_made_results(tmp_path):
    spec = SPECS["table2"]
    cells = [c for c in grid.expand_grid(spec, "smoke") if c.available]
    grid.resolve_run_ids(cells, tmp_path)
    for i, c in enumerate(cells):
        d = c.result_dir
        d.mkdir(parents=True)
        if i == 0:
            continue  # missing metrics.json
        if i == 1:
            (d / "metrics.json").write_text('{"splits": {"validation": ')  # corrupt
            continue
        (d / "metrics.json").write_text(json.dumps(_fake_result(c.run_id, 30.0 + i)))
    paths = tables.build_table(spec, "smoke", tmp_path, tmp_path)
    md = paths["md"].read_text()
    assert f"missing: {cells[0].result_dir / 'metrics.json'}" in md
    assert f"corrupt: {cells[1].result_dir / 'metrics.json'}" in md
    rows = list(__import__("csv").DictReader(paths["csv"].open()))
    third = next(r for r in rows if r["run_id"] == cells[2].run_id and r["split"] == "dev" and r["metric"] == "rouge1")
    assert float(third["ours"]) == 32.0
    assert float(third["diff"]) == pytest.approx(32.0 - float(third["paper"]))
    first = [r for r in rows if r["run_id"] == cells[0].run_id]
    assert all(r["ours"] == "" and r["status"] == "missing" for r in first), "a missing file is never zero"
    test_rows = [r for r in rows if r["split"] == "test" and r["run_id"] == cells[2].run_id]
    assert all(r["ours"] == "" and r["status"].startswith("no references") for r in test_rows)
    assert "\\begin{tabular}" in paths["tex"].read_text()


def test_figure_written_and_not_empty(tmp_path):
    spec = SPECS["figure2"]
    cells = grid.expand_grid(spec, "tiny")
    grid.resolve_run_ids(cells, tmp_path)
    for c in cells[:5]:
        c.result_dir.mkdir(parents=True)
        (c.result_dir / "metrics.json").write_text(json.dumps(_fake_result(c.run_id, 10.0 + float(c.value))))
    paths = figures.build_figure(spec, "tiny", tmp_path, tmp_path)
    png = paths["png"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    rows = paths["csv"].read_text().splitlines()
    assert len(rows) == 1 + len(cells)


def test_figure_points_get_intervals_from_their_scores_and_are_rechecked(tmp_path):
    import csv

    from scaleformer.artifacts import scores_archive
    from scaleformer.metrics.stats import mean_ci

    spec = SPECS["figure2"]
    cells = grid.expand_grid(spec, "tiny")
    grid.resolve_run_ids(cells, tmp_path / "runs")
    for c in cells[:3]:
        per_doc = [20.0 + 3 * i + float(c.value) for i in range(24)]
        rows = [{"id": f"d{i:02d}", "rougeL": v, "fact_field_recall": v / 2} for i, v in enumerate(per_doc)]
        mean = sum(per_doc) / len(per_doc)
        c.result_dir.mkdir(parents=True)
        (c.result_dir / "metrics.json").write_text(json.dumps({
            "run_id": c.run_id, "config_hash": "abc", "commit": "deadbeef",
            "splits": {"validation": {"rougeL": mean, "fact_field_recall": mean / 2, "n_examples": 24}}}))
        (c.result_dir / "scores_validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    paths = figures.build_figure(spec, "tiny", tmp_path / "runs", out)
    got = list(csv.DictReader(paths["csv"].open()))
    first = got[0]
    ci = mean_ci([20.0 + 3 * i + float(cells[0].value) for i in range(24)])
    assert float(first["ci_low"]) == pytest.approx(ci.low) and float(first["ci_high"]) == pytest.approx(ci.high)
    assert first["n_docs"] == "24" and first["n_seeds"] == "1" and first["fact_field_recall_ci_low"] != ""
    assert all(r["ci_low"] == "" for r in got[3:])  # no scores, no interval
    archived = out / "scores" / "figure2"
    assert len(list(archived.rglob("scores_validation.jsonl"))) == 3
    assert scores_archive.recheck_all(out) == []
    victim = sorted(archived.rglob("scores_validation.jsonl"))[1]
    first_row, *rest = victim.read_text().splitlines()
    row = json.loads(first_row)
    row["rougeL"] += 5.0  # still a ROUGE in points: the statistics, not the range check, must catch it
    victim.write_text("\n".join([json.dumps(row), *rest]) + "\n")
    assert any("ci_low is" in p for p in scores_archive.recheck_all(out))


def test_launch_skips_finished_cells_and_force_reruns(tmp_path, monkeypatch):
    spec = SPECS["table2"]
    calls = []
    monkeypatch.setattr(gridrun.subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    cells = [c for c in grid.expand_grid(spec, "paper") if c.available]
    grid.resolve_run_ids(cells, tmp_path)
    for c in cells[:-1]:  # all but one cell finished
        c.result_dir.mkdir(parents=True)
        (c.result_dir / "metrics.json").write_text("{}")
    gridrun.launch(spec, "paper", tmp_path)
    assert len(calls) == 1
    assert f"method={cells[-1].method}" in calls[0] and "skip_existing=true" in calls[0]
    calls.clear()
    gridrun.launch(spec, "paper", tmp_path, force=True)
    assert len(calls) == 2  # one multirun per dataset column, every method in it
    assert all("skip_existing=false" in c and "trainer.ckpt_path=null" in c for c in calls)
    assert any(a == "method=truncation,sled,scaleformer,scaleformer_middle" for a in calls[0])


def _paper_rows(text: str, n: int) -> dict[str, list[float]]:
    rows = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("\t") if p.strip()]
        nums = [p for p in parts if re.fullmatch(r"-|\d+\.\d", p)]
        label = parts[-n - 1] if len(parts) > n else None  # the cell just before the numbers
        if label and len(nums) == n and parts[-n:] == nums:
            rows.setdefault(label, []).append([None if x == "-" else float(x) for x in nums])
    return rows


def test_a_sweeps_default_point_is_one_run_read_once_and_counted_once(tmp_path):
    """alpha=0.5, m=300 and O=150 are one configuration: one run folder that three cells read; the table's
    provenance sums each run's wall time once (it read 3 x the default's time where 2 cells reused it)."""
    spec = SPECS["figure2"]
    cells = grid.expand_grid(spec, "tiny")
    grid.resolve_run_ids(cells, tmp_path)
    default = [c for c in cells if (c.key, c.value) in {("alpha", 0.5), ("middle_tokens", 300), ("overlap", 150)}]
    assert len(default) == 3 and len({c.result_dir for c in default}) == 1
    folders = {c.result_dir for c in cells}
    for d in folders:
        d.mkdir(parents=True)
        (d / "metrics.json").write_text(json.dumps({**_fake_result(d.name, 20.0), "wall_time_s": 60.0}))
    got = tables.collect(cells)
    first, *others = (got.results[(c.key, c.method, c.value, c.seed)] for c in default)
    assert len(got.results) == len(cells) and all(r is first for r in others)
    prov = tables.provenance(got)
    assert f"{len(folders)} runs;" in prov and f"wall time {len(folders):.1f} min summed" in prov
    assert len(folders) == len(cells) - 2


def test_paper_values_match_the_paper(optional_paper):
    """experiments/*.yaml hold the paper's figures; its text, where present, must agree with them."""
    text = optional_paper("scaleformer.md").read_text()
    t1 = _paper_rows(text, 12)
    spec = SPECS["table1"]
    label = {"truncation": "Standard (Trunc.)", "sled": "SLED", "memorizing": "Mem. Trans.",
             "unlimiformer": "Unlimiformer", "scaleformer": "ScaleFormer (Ours)",
             "scaleformer_middle": "ScaleFormer + Middle"}
    checked = 0
    for method, lab in label.items():
        for i, split in enumerate(("dev", "test")):
            if lab in t1 and len(t1[lab]) > i:
                ours = [v for d in spec["datasets"] for v in spec["paper"][split][method][d]]
                assert ours == t1[lab][i], (method, split)
                checked += 1
    assert checked >= 10  # the two ScaleFormer test rows are garbled in the text extraction
    t2 = _paper_rows(text, 6)
    spec = SPECS["table2"]
    label2 = {"truncation": "Standard (Trunc.)", "sled": "SLED", "scaleformer_middle": "ScaleF. + Middle"}
    for method, lab in label2.items():
        for i, split in enumerate(("dev", "test")):
            assert [v for d in spec["datasets"] for v in spec["paper"][split][method][d]] == t2[lab][i]
    for value, stated in ((0.5, "peaking at $\\alpha=0.5$ with a ROUGE-L of 20.1"), ):
        assert stated in text and SPECS["figure2"]["paper"]["alpha"][value] == 20.1
    assert "(m = 0) starts at a ROUGE-L of 19.3" in text and SPECS["figure2"]["paper"]["middle_tokens"][0] == 19.3
    assert "from 19.6 to 20.1" in text and SPECS["figure2"]["paper"]["overlap"][50] == 19.6


def test_launch_sends_one_sweep_per_ablation(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(gridrun.subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    gridrun.launch(SPECS["figure2"], "tiny", tmp_path)
    sweeps = sorted(next(a for a in c if a.startswith("method.")) for c in calls)
    assert sweeps == ["method.alpha=0.0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0",
                      "method.middle_tokens=0,50,100,200,300,400,500",
                      "method.overlap=50,100,150,200,250"]


# ---- profiles: smoke (CI) and tiny (the CPU demonstration) ----------------------------------------------


def test_every_artifact_has_paper_smoke_and_tiny_profiles():
    for name, spec in SPECS.items():
        assert {"paper", "smoke", "tiny"} <= set(spec["profiles"]), name
        for profile in ("smoke", "tiny"):
            assert spec["profiles"][profile].get("runner") == "local", (name, profile)
            cells = grid.expand_grid(spec, profile)
            grid.resolve_run_ids(cells)  # every cell composes and validates
            assert all(c.run_id for c in cells if c.available)


def test_tiny_columns_are_named_for_what_they_are():
    spec = SPECS["table1"]
    labels = [grid.column_label(spec, "tiny", d) for d in spec["datasets"]]
    assert all(label.startswith("synthetic ") for label in labels) and len(set(labels)) == 3
    assert grid.profile_metrics(spec, "tiny")[-2:] == ["fact_recall", "fact_field_recall"]
    assert "fact_recall" not in grid.profile_metrics(spec, "paper")


def test_shared_training_reuses_one_checkpoint_per_method(tmp_path):
    spec = SPECS["table1"]
    cells = [c for c in grid.expand_grid(spec, "tiny") if c.available]
    grid.resolve_run_ids(cells, tmp_path)
    shared = spec["profiles"]["tiny"]["share_training"]
    for c in cells:
        if c.key == shared:
            assert c.train_from is None and c.run_overrides() == c.overrides
        else:
            assert c.train_from.key == shared and c.train_from.method == c.method
            ov = c.run_overrides()
            assert ov[-1] == f"method={c.method}", "the method stays last: multiruns sweep it"
            assert f"trainer.ckpt_path={c.train_from.run_dir / 'checkpoints' / 'last.ckpt'}" in ov
            assert c.run_id != c.train_from.run_id, "each column keeps its own run folder and evaluation"
    with pytest.raises(ValueError, match="share_training='nope'"):
        grid.expand_grid({**spec, "profiles": {"x": {**spec["profiles"]["tiny"], "share_training": "nope"}},
                            "backbone": {"x": "tiny_bart"}}, "x")


def test_smoke_profile_runs_the_grid_and_renders_it(tmp_path):
    """Grid -> runs -> rendered files, in seconds: one method on the three smoke columns (one training,
    two evaluations of its weights), then the table with fact recall and the truncation ceiling."""
    from scaleformer.artifacts.gridrun import run_grid

    spec = SPECS["table1"]
    log = tmp_path / "progress.txt"
    with log.open("w") as f:
        assert run_grid(spec, "smoke", tmp_path, methods="truncation", log=f) == []
    lines = log.read_text().splitlines()
    assert lines[0].startswith("table1 (smoke): 3 of 3 runs to do (1 train, 2 reuse weights); estimate")
    assert sum(line.startswith("[") and ": done in " in line for line in lines) == 3
    paths = tables.build_table(spec, "smoke", tmp_path, tmp_path, methods="truncation")
    md = paths["md"].read_text()
    assert "Problems" not in md and "synthetic 1.4k Facts" in md and tables.CEILING_LABEL in md
    rows = list(__import__("csv").DictReader(paths["csv"].open()))
    ours = [r for r in rows if r["method"] == "truncation" and r["status"] == "ok"]
    assert len(ours) == 2 * 3 * len(grid.profile_metrics(spec, "smoke"))
    assert all(r["ci_low"] != "" and r["n_docs"] == "1" for r in ours if r["ours"] != ""), "scores files give intervals"
    assert "One seed per cell: each interval is over documents only" in md
    # one document: a point, except a bounded score at 0, which that one document bounds to [0, 97.5]
    for r in ours:
        if r["ours"] not in ("", "0.0") or r["metric"] == "bertscore_f1":
            assert r["ci_low"] == r["ci_high"] == r["ours"], r
        elif r["ours"] == "0.0":
            assert r["ci_method"] == "exact bound" and float(r["ci_high"]) == pytest.approx(97.5), r
    assert any(r["ci_method"] == "exact bound" for r in ours), "the smoke model scores 0 somewhere: a bound is shown"
    assert "Provenance: 3 runs; commit " in md and "torch threads; CPU heap: " in md and "; wall time " in md
    facts = [r for r in ours if r["metric"] == "fact_recall"]
    assert facts and all(r["ours"] != "" for r in facts), "fact recall is scored on the synthetic columns"
    ceil = {(r["split"], r["dataset"]): float(r["ours"]) for r in rows if r["method"] == tables.CEILING}
    assert set(ceil) == {(s, d) for s in ("dev", "test") for d in spec["datasets"]}
    assert ceil[("dev", "summscreen")] == 100.0, "a 0.2k ledger lies wholly inside the first window"
    shared = [r for r in ours if r["dataset"] != "summscreen"]
    assert all(r["trained_in"] != r["run_id"] for r in shared)
    with log.open("w") as f:  # a second call finds every result and runs nothing
        assert run_grid(spec, "smoke", tmp_path, methods="truncation", log=f) == []
    assert "nothing to run" in log.read_text()


def test_a_profile_gives_one_method_its_own_settings_before_its_group_choice():
    spec = SPECS["table1"]
    cells = [c for c in grid.expand_grid(spec, "tiny") if c.method == "unlimiformer"]
    assert all(c.overrides[-2:] == ["method.training_mode=alternating", "method=unlimiformer"] for c in cells)
    grid.resolve_run_ids(cells)
    from scaleformer.compose import compose_config

    assert compose_config(cells[0].overrides).method.training_mode == "alternating"
    others = [c for c in grid.expand_grid(spec, "tiny") if c.method == "sled"]
    assert not any("training_mode" in o for c in others for o in c.overrides)


def test_launch_forwards_launcher_args_and_names_failed_cells(tmp_path, monkeypatch):
    """A failing multirun does not stop the next; its failed.json lines come back; the launcher's
    settings reach every command."""
    import json as _json

    spec = SPECS["table2"]
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        if len(calls) == 1:  # the first multirun: one cell fails, as sweeps.FailedCells records it
            job = tmp_path / "sweeps" / "2026-01-01_00-00-00" / "0"
            job.mkdir(parents=True)
            (job / "failed.json").write_text(_json.dumps({"job": 0, "overrides": ["method=sled"], "error": "boom"}))
            return subprocess.CompletedProcess(cmd, 1)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(gridrun.subprocess, "run", fake_run)
    commands, failures = gridrun.launch(spec, "paper", tmp_path, launcher="slurm",
                                       launcher_args=["hydra.launcher.partition=gpu"])
    assert len(calls) == len(commands) > 1, "the other multiruns still ran"
    assert all(c[-2:] == ["hydra/launcher=slurm", "hydra.launcher.partition=gpu"] for c in calls)
    assert len(failures) == 1 and "method=sled: boom" in failures[0]


def test_progress_lines_name_each_task_s_own_scores():
    summary = {"splits": {"validation": {"rouge1": 41.25, "fact_recall": 30.0}}}
    qa = {"splits": {"validation": {"rouge1": 58.5, "exact_match": 12.5, "f1": 70.04}, "test": {"rouge1": 1.0}}}
    assert gridrun._headline(summary) == "validation R-1 41.2, facts 30.0"
    assert gridrun._headline(qa) == "validation EM 12.5, F1 70.0; test R-1 1.0"


# ---- intervals and significance -------------------------------------------------------------------------


def _write_scored(cell, per_doc: list[float], commit: str = "deadbeef", splits=("validation",)) -> None:
    """A cell's metrics.json and scores_<split>.jsonl: rouge1 per document, the other metrics beside it."""
    d = cell.result_dir
    d.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"doc-{i:03d}", "rouge1": v, "rouge2": v / 2, "rougeL": v / 3} for i, v in enumerate(per_doc)]
    mean = sum(per_doc) / len(per_doc)
    split = {"rouge1": mean, "rouge2": mean / 2, "rougeL": mean / 3, "n_examples": len(per_doc)}
    scored = {s: split if s in splits else {"scored": False} for s in ("validation", "test")}
    (d / "metrics.json").write_text(json.dumps({"run_id": cell.run_id, "config_hash": "abc", "commit": commit,
                                                "splits": scored}))
    for s in splits:
        (d / f"scores_{s}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_cells_show_intervals_and_marks_against_the_baseline(tmp_path):
    """SLED +6 points on every one of 40 documents is marked against truncation; ScaleFormer, equal to it up to
    noise, is not; each interval is the documents' bootstrap interval; p_holm >= p."""
    import csv
    import random

    from scaleformer.metrics.stats import mean_ci

    spec = SPECS["table2"]
    assert spec["baseline"] == "truncation" and spec["seeds"] == [42] and spec["tuning_split"] == "validation"
    cells = [c for c in grid.expand_grid(spec, "smoke") if c.available and c.key == "summscreen"]
    grid.resolve_run_ids(cells, tmp_path)
    rng = random.Random(0)
    base = [rng.uniform(20, 60) for _ in range(40)]
    shift = {"truncation": 0.0, "sled": 6.0, "scaleformer": 0.0, "scaleformer_middle": None}
    both = ("validation", "test")
    for c in cells:
        if shift[c.method] is None:
            _write_scored(c, [rng.uniform(20, 60) for _ in base], splits=both)  # unrelated: no mark expected either way
        else:
            _write_scored(c, [v + shift[c.method] + (rng.gauss(0, 1) if c.method == "scaleformer" else 0) for v in base],
                          splits=both)
    paths = tables.build_table(spec, "smoke", tmp_path, tmp_path, methods="truncation,sled,scaleformer,scaleformer_middle")
    rows = {(r["split"], r["method"], r["dataset"], r["metric"]): r for r in csv.DictReader(paths["csv"].open())}
    sled = rows[("test", "sled", "summscreen", "rouge1")]
    assert sled["significant"] == "True" and float(sled["diff_vs_baseline"]) == pytest.approx(6.0)
    assert float(sled["diff_ci_low"]) == pytest.approx(6.0) and float(sled["p_holm"]) >= float(sled["p_value"])
    assert sled["family"].startswith("test (") and sled["test_method"] == "normal"  # 40 documents: the normal limit
    same = rows[("test", "scaleformer", "summscreen", "rouge1")]
    assert same["significant"] == "False" and float(same["p_holm"]) > 0.05
    dev = rows[("dev", "sled", "summscreen", "rouge1")]  # dev is for choosing: a p-value, no mark, not in the family
    assert dev["p_value"] == sled["p_value"] and dev["p_holm"] == "" and dev["significant"] == "" and dev["family"] == ""
    trunc = rows[("dev", "truncation", "summscreen", "rouge1")]
    assert trunc["p_value"] == "" and trunc["baseline"] == "truncation", "the baseline is not tested against itself"
    ci = mean_ci(base)
    assert float(trunc["ci_low"]) == pytest.approx(ci.low) and float(trunc["ci_high"]) == pytest.approx(ci.high)
    assert trunc["n_docs"] == "40" and trunc["n_seeds"] == "1" and trunc["seeds"] == "42"
    md = paths["md"].read_text()
    assert f"{float(sled['ours']):.1f} ±{(float(sled['ci_high']) - float(sled['ci_low'])) / 2:.1f}*" in md
    assert f"{float(trunc['ours']):.1f} ±{ci.half_width:.1f} (" in md and "Holm-corrected over the test split's" in md
    assert "these trained checkpoints differ" in md
    assert "choices were made on validation only" in md
    assert "Provenance: 4 runs; commit deadbeef; torch unknown" in md
    assert r"$\pm$" in paths["tex"].read_text() and "$^*$" in paths["tex"].read_text()


def test_several_seeds_average_per_cell_and_resample_documents(tmp_path):
    import csv

    from scaleformer.metrics.stats import seeds_ci

    spec = {**SPECS["table2"], "seeds": [1, 2]}
    cells = [c for c in grid.expand_grid(spec, "smoke", methods="truncation") if c.key == "summscreen"]
    assert [c.seed for c in cells] == [1, 2] and all(f"seed={c.seed}" in c.overrides for c in cells)
    assert all(c.overrides[-1] == "method=truncation" for c in cells)
    grid.resolve_run_ids(cells, tmp_path)
    assert cells[0].run_id != cells[1].run_id
    scores = [[10.0, 20.0, 30.0, 45.0], [14.0, 22.0, 35.0, 41.0]]
    for c, s in zip(cells, scores):
        _write_scored(c, s)
    paths = tables.build_table(spec, "smoke", tmp_path, tmp_path, methods="truncation")
    row = next(r for r in csv.DictReader(paths["csv"].open())
               if (r["split"], r["dataset"], r["metric"]) == ("dev", "summscreen", "rouge1"))
    ci = seeds_ci(scores)
    assert float(row["ours"]) == pytest.approx(27.125) and row["n_seeds"] == "2" and row["seeds"] == "1;2"
    assert float(row["ci_low"]) == pytest.approx(ci.low) and float(row["ci_high"]) == pytest.approx(ci.high)
    assert "2 seeds per cell: each interval is over seeds and documents" in paths["md"].read_text()
    assert row["ci_method"] == "two-level t" and float(row["seed_sd"]) >= 0


def test_a_profile_can_train_a_few_rows_with_several_seeds(tmp_path):
    """``method_seeds``: truncation with seeds 1 and 2, SLED with the spec's one; the caption says which rows rest on what."""
    import csv

    prof = {**SPECS["table2"]["profiles"]["smoke"], "method_seeds": {"truncation": [1, 2]}}
    spec = {**SPECS["table2"], "profiles": {**SPECS["table2"]["profiles"], "smoke": prof}}
    cells = [c for c in grid.expand_grid(spec, "smoke", methods="truncation,sled") if c.key == "summscreen"]
    assert [(c.method, c.seed) for c in cells] == [("truncation", 1), ("truncation", 2), ("sled", 42)]
    assert grid.seeds(spec, "smoke", "sled") == [42] and grid.seeds(spec, "smoke", "truncation") == [1, 2]
    grid.resolve_run_ids(cells, tmp_path)
    for c, s in zip(cells, ([10.0, 20.0, 30.0], [12.0, 21.0, 33.0], [40.0, 50.0, 60.0])):
        _write_scored(c, s)
    paths = tables.build_table(spec, "smoke", tmp_path, tmp_path, methods="truncation,sled")
    got = {r["method"]: r for r in csv.DictReader(paths["csv"].open())
           if (r["split"], r["dataset"], r["metric"]) == ("dev", "summscreen", "rouge1")}
    assert got["truncation"]["n_seeds"] == "2" and got["sled"]["n_seeds"] == "1"
    md = paths["md"].read_text()
    assert "Seeds differ by row (Standard (Trunc.) 2; the other rows 1)" in md
    assert "these trained checkpoints differ elsewhere" in md and "seeds per cell" not in md


def test_runs_without_scores_files_show_the_mean_and_no_interval(tmp_path):
    import csv

    spec = SPECS["table2"]
    cells = [c for c in grid.expand_grid(spec, "smoke", methods="truncation,sled") if c.key == "summscreen"]
    grid.resolve_run_ids(cells, tmp_path)
    for c in cells:
        c.result_dir.mkdir(parents=True)
        (c.result_dir / "metrics.json").write_text(json.dumps(_fake_result(c.run_id, 30.0)))
    paths = tables.build_table(spec, "smoke", tmp_path, tmp_path, methods="truncation,sled")
    row = next(r for r in csv.DictReader(paths["csv"].open()) if r["method"] == "sled" and r["split"] == "dev"
               and r["dataset"] == "summscreen" and r["metric"] == "rouge1")
    assert row["ours"] == "30.0" and row["ci_low"] == "" and row["p_value"] == "" and row["significant"] == ""
