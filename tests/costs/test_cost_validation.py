"""Validation during training in the cost table (scaleformer.costs.validation): its count and documents
read from the paper profile's config, its cost per document by trainer.validation, its hours and share of the
run's total, on hand-made records."""

from __future__ import annotations

import copy

import pytest
from cost_records import record
from omegaconf import OmegaConf

from scaleformer.artifacts.grid import expand_grid, load_spec
from scaleformer.costs import report as cost_report
from scaleformer.costs import table as costs
from scaleformer.costs.validation import validation_plan
from scaleformer.resources import experiments_dir
from scaleformer.runs.results import Results

PAPER = {"max_steps": 20000, "accumulate_grad_batches": 8, "val_check_interval": 16000, "limit_val_batches": 100,
         "check_val_every_n_epoch": None, "validation": "paper"}
DATA = {"batch_size": 1, "eval_batch_size": 1, "max_eval_examples": None}


def _plan(split_docs=None, data=None, **trainer):
    t = OmegaConf.create({**PAPER, **trainer})
    micro = t.max_steps * t.accumulate_grad_batches
    plan = validation_plan(t, OmegaConf.create({**DATA, **(data or {})}), micro, split_docs)
    return {"steps": t.max_steps, "accumulate": t.accumulate_grad_batches, "micro_batches": micro, **plan,
            "eval_docs": 675}


def _measured():
    """A steady-state record whose one test document took 40 s: 8 s encoding, 32 s decoding 256 tokens,
    at the paper's length (the documents' 4,000 tokens, as read)."""
    rec = record()
    rec["generate"] = [{"time_s": 40.0, "encode_s": 8.0, "new_tokens": [256]}]
    result = Results(data={"summary": {"train": {"n_examples": 4, "input_tokens_mean": 4000.0}}},
                     splits={"test": {"n_examples": 1, "generation_time_s": 10.0, "input_tokens_per_s": 400.0}},
                     cost=rec)
    return costs.measured(result)


def test_validations_and_documents_come_from_the_trainer_config():
    plan = _plan()
    assert (plan["val_rounds"], plan["val_docs_round"], plan["val_docs"]) == (10, 100, 1000)
    assert "trainer.val_check_interval=16,000 micro-batches in 160,000: 10 validations" in plan["val_source"]
    # Lightning counts the interval in micro-batches: 2,000 with 8 accumulated is every 250 optimiser steps
    assert _plan(val_check_interval=2000)["val_rounds"] == 80
    # documents, whatever the evaluation batch (the split's first 100)
    assert _plan(data={"eval_batch_size": 4})["val_docs_round"] == 100
    assert _plan(data={"eval_batch_size": None})["val_docs_round"] == 100
    assert _plan(data={"max_eval_examples": 30})["val_docs_round"] == 30
    assert _plan(split_docs=45)["val_docs_round"] == 45 and "at most 45 (the validation split's size)" in \
        _plan(split_docs=45)["val_source"]
    assert _plan(limit_val_batches=0.5, split_docs=338)["val_docs_round"] == 169
    assert _plan(limit_val_batches=0)["val_docs"] == 0
    assert _plan(val_check_interval=None, check_val_every_n_epoch=None)["val_docs"] == 0
    assert _plan(val_check_interval=0.5)["val_docs"] is None  # a fraction of an epoch of unknown size: not derived
    t = OmegaConf.create({**PAPER, "val_check_interval": 0.5, "check_val_every_n_epoch": 1, "early_stopping_patience": 10})
    plan = validation_plan(t, OmegaConf.create(DATA), 3 * 315, 19, epoch_batches=315)  # 3 epochs of 315
    assert (plan["val_rounds"], plan["val_docs_round"], plan["val_docs"]) == (6, 19, 114)  # every 157: twice an epoch
    assert "every 157, 2 an epoch, 6 validations at most (early stopping" in plan["val_source"]


def test_the_paper_profiles_validation_is_derived_from_its_composed_config():
    spec = load_spec(experiments_dir() / "table1.yaml")
    cell = next(c for c in expand_grid(spec, "dryrun") if c.key == "booksum" and c.method == "sled")
    plan = costs.paper_plan(spec, cell)
    # the lineage's recipe: 10 epochs of BookSum's 314 rows, validated twice an epoch on its 19 books, 19 + 17 after
    assert (plan["validation"], plan["epochs"], plan["micro_batches"], plan["steps"]) == ("paper", 10, 3140, 1570)
    assert (plan["val_rounds"], plan["val_docs_round"], plan["eval_docs"], plan["max_train_input_tokens"]) == \
        (20, 19, 36, 16384)
    split = copy.deepcopy(spec)  # one number of documents for a column: each validation reads up to 1,000 of them
    split["profiles"]["dryrun"]["paper_eval_docs"]["booksum"] = 91
    plan = costs.paper_plan(split, cell)
    assert (plan["val_docs_round"], plan["val_docs"], plan["eval_docs"]) == (1000, 20_000, 91)
    unknown = copy.deepcopy(spec)  # a budget in epochs of a training set of unknown size: no total, not a guess
    del unknown["profiles"]["dryrun"]["paper_train_docs"]
    assert costs.paper_plan(unknown, cell)["micro_batches"] is None
    cheap = copy.deepcopy(spec)  # a paper profile that validates greedily: the table costs that
    cheap["profiles"]["paper"]["overrides"] = [*cheap["profiles"]["paper"]["overrides"], "trainer.validation=greedy",
                                               "++trainer.validation_max_new_tokens=64"]
    plan = costs.paper_plan(cheap, cell)
    assert (plan["validation"], plan["val_max_new_tokens"], plan["val_rounds"]) == ("greedy", 64, 20)


def test_validation_hours_and_share_under_each_mode():
    m = _measured()
    assert (m["gen_s_doc"], m["gen_encode_s_doc"], m["gen_new_tokens"]) == (pytest.approx(40.0), pytest.approx(8.0), 256)
    train = 160_000 * m["step_s"]
    paper = costs.estimate(m, _plan())
    assert paper["val_s"] == pytest.approx(1000 * 40.0) and paper["gen_s"] == pytest.approx(675 * 40.0)
    assert paper["total_s"] == pytest.approx(train + 1000 * 40.0 + 675 * 40.0)
    assert paper["val_share"] == pytest.approx(40_000 / paper["total_s"])
    assert "+ 10 x 100 validation docs x 40.0 s + 675 evaluation docs x 40.0 s" in paper["arithmetic"]
    assert "the paper's protocol: the test's generation per document" in paper["val_source"]

    greedy = costs.estimate(m, _plan(validation="greedy", validation_max_new_tokens=64))
    assert greedy["val_s_doc"] == pytest.approx(8.0 + 32.0 * 64 / 256)  # encoding + a quarter of the decoding
    assert greedy["gen_s"] == paper["gen_s"]  # the test's evaluation is unchanged
    assert "(greedy)" in greedy["arithmetic"] and "not the paper's protocol" in greedy["val_source"]

    loss = costs.estimate(m, _plan(validation="loss"))
    ph = m["phases"]
    assert loss["val_s_doc"] == pytest.approx(m["step_s"] * ph["forward"] / sum(ph.values()))
    assert loss["val_s"] == pytest.approx(1000 * loss["val_s_doc"]) and loss["val_s"] < greedy["val_s"] < paper["val_s"]
    assert loss["total_s"] == pytest.approx(train + loss["val_s"] + paper["gen_s"])

    unknown = costs.estimate(m, _plan(val_check_interval=0.5))  # unknown, never a short total
    assert unknown["total_s"] is None and "validation unknown" in unknown["arithmetic"]


def test_the_cost_table_shows_validations_hours_share_and_source():
    m = _measured()
    rows = [{"method": "sled", "column": "BookSum shape", "run_id": "a", **m, "plan": _plan(),
             **costs.estimate(m, _plan())},
            {"method": "sled", "column": "GovReport shape", "run_id": "b", **m, "plan": _plan(validation="loss"),
             **costs.estimate(m, _plan(validation="loss"))}]
    text = cost_report.render_markdown({"artifact": "table1"}, rows, "")
    assert "| Paper profile h | of which validation h |" in text
    a = rows[0]
    assert f"| {a['val_s'] / 3600:,.1f} ({100 * a['val_share']:.1f}%) |" in text
    val, total = sum(r["val_s"] for r in rows), sum(r["total_s"] for r in rows)
    assert (f"Validation during training (trainer.validation: loss in 1 run(s), NOT the paper's protocol; "
            f"paper in 1 run(s)): "
            f"{val / 3600:,.0f} h of the {total / 3600:,.0f} h ({100 * val / total:.1f}%).") in text
    assert "\n- counted from: trainer.val_check_interval=16,000 micro-batches in 160,000: 10 validations; " \
           "trainer.limit_val_batches=100 documents\n" in text
    assert "- per document: trainer.validation=loss (not the paper's protocol): the forward share" in text
    assert "- per document: the paper's protocol: the test's generation per document" in text
