"""The paper profile's bill: committed cost tables restated under the current recipe (the plan from the config, the
step read at the recipe's training length), and the hours on one GPU with what each rests on. The committed files
are what the code computes from the committed measurements, so a change of recipe that is not restated fails."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from scaleformer.artifacts.grid import load_spec
from scaleformer.costs import bill
from scaleformer.costs import restate as cost_restate
from scaleformer.costs.table import cost_table_paths, gpu_basis
from scaleformer.resources import experiments_dir

ROOT = Path(__file__).resolve().parents[2]


def _row(**kw):
    return {"method": "sled", "column": "BookSum shape", "tokens": 4096, "paper_tokens": 151515, "encoder_share": 0.6,
            "train_length_scaling": "linear", "step_s": 3.5, "step_ckpt_s": 4.0, "flops_step": 6e13, **kw}


def test_a_step_is_read_at_the_training_length_by_the_share_that_grows_with_the_input():
    row = cost_restate.at_training_length(_row(), 16384)
    f = lambda x: 0.4 + 0.6 * x / 4096  # noqa: E731
    assert row["train_tokens"] == 16384 and row["step_s"] == pytest.approx(3.5 * f(16384) / f(151515))
    assert row["flops_step"] == pytest.approx(6e13 * f(16384) / f(151515)) and row["paper_step_s"] == 3.5
    assert cost_restate.at_training_length(row, 16384) == row  # restating again reads the same measurement
    assert cost_restate.at_training_length(_row(train_length_scaling="bounded"), 16384)["step_s"] == 3.5
    assert cost_restate.at_training_length(_row(), None)["step_s"] == 3.5  # no training cap: the paper's length
    steady = cost_restate.at_training_length(_row(probe="steady-state", fixed_s=0.1, per_1k_tokens_s=0.02), 16384)
    assert steady["step_s"] == pytest.approx(3.5 * (0.1 + 0.02 * 16.384) / (0.1 + 0.02 * 151.515))


def test_a_cell_rests_on_a_gpu_measurement_where_there_is_one_else_on_a_stated_range():
    plan = {"micro_batches": 3140, "val_docs": 380, "eval_docs": 36, "epochs": 10}
    cpu = _row(plan=plan, gen_s_doc=1000.0, gpu_train_h=[1.0, 5.0], train_tokens=16384)
    measured = bill.cell_bill(cpu, {"step_s": 0.5, "gen_s_doc": 90.0, "device": "NVIDIA H200"}, None, 0.1, "x")
    assert measured["train_h"] == [pytest.approx(3140 * 0.5 / 3600)] * 2 and "H200" in measured["train_basis"]
    assert measured["val_h"] == [pytest.approx(380 * 90 / 3600)] * 2 and measured["gen_basis"].startswith("measured")
    ranged = bill.cell_bill(cpu, None, None, 0.1, "table1 measured for sled")
    assert ranged["train_h"] == [1.0, 5.0] and ranged["total_h"][1] > ranged["total_h"][0]
    assert ranged["eval_h"] == [pytest.approx(36 * 100 / 3600)] * 2 and "x 0.1" in ranged["gen_basis"]
    unknown = bill.cell_bill({**cpu, "gen_s_doc": None}, None, None, None, "")
    assert unknown["total_h"] is None and unknown["gen_basis"] == "unknown"  # never a zero that looks measured


def test_the_committed_tables_and_bill_are_the_restatement_of_the_committed_measurements(tmp_path):
    """Restating the committed files changes nothing: they follow the current recipe, and the README's block is
    rendered from the bill (tests/test_readme.py checks the rendering)."""
    results = tmp_path / "results"
    shutil.copytree(ROOT / "results" / "dryrun", results / "dryrun")
    shutil.copytree(ROOT / "results" / "gpu-perf", results / "gpu-perf")
    committed = json.loads((results / "dryrun" / "bill.json").read_text())
    for artifact in bill.ARTIFACTS:
        spec = load_spec(experiments_dir() / f"{artifact}.yaml")
        for path in cost_table_paths(artifact, results / "dryrun"):
            if path.exists():
                before = json.loads(path.read_text())
                assert cost_restate.restate_rows(spec, before["rows"], None if path.stem.endswith("-gpu") else
                                                 gpu_basis(artifact, results / "dryrun")) == before["rows"]
    rebuilt = bill.build(results, committed.get("previous"))
    assert json.loads(json.dumps(rebuilt)) == committed
    booksum = committed["artifacts"][0]["by_column"]["BookSum shape"]
    assert booksum["train_h"][1] < 0.01 * committed["previous"]["booksum_train_h"]  # 16k-token training, 10 epochs
