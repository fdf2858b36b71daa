"""method.checkpoint_chunks=null (scaleformer.runs.memory): decided when training starts from the memory
model, on only when a step on the longest training document would not fit; the model against what a real
CPU step measured; the run logs its choice, and the cost probe times both settings unless the choice is on."""

from __future__ import annotations

import torch
from conftest import compose

from scaleformer.methods import method_config
from scaleformer.model.backbone import build_model, prepare
from scaleformer.ops.memory import training_bytes
from scaleformer.runs.context import to_config
from scaleformer.runs.memory import choose_checkpointing, step_shape
from scaleformer.runs.run import run


def _parts(method: str = "sled"):
    rc = to_config(compose([f"method={method}", "backbone=tiny_bart_reader"]))
    ready = prepare(rc.backbone, rc.method)
    return ready.method, build_model(rc.backbone, ready.conf)


def test_recompute_only_when_the_longest_document_would_not_fit():
    method, model = _parts()
    on, why = choose_checkpointing(method, model, "32-true", torch.device("cpu"), 100_000, 128, capacity=10**8)
    assert on and why.startswith("method.checkpoint_chunks=null: on: a training step on the longest training "
                                 "document (100,000 tokens, 115 chunks) needs ~") and "the cpu has 0.1 GB" in why
    off, why = choose_checkpointing(method, model, "32-true", torch.device("cpu"), 100_000, 128, capacity=10**12)
    assert not off and ": off:" in why


def test_the_model_is_above_what_a_cpu_step_measured_and_within_three_times_of_it(tmp_path):
    """The embedded default's reader and documents (4.6k tokens), one setting and length: the growth of the
    process's peak memory over a step against the model's activations (its state is resident before)."""
    out = run(compose(["backbone=tiny_bart_reader", "method=sled", "method.checkpoint_chunks=false",
                       "trainer.max_steps=40", "trainer.eval_splits=[]", "trainer.enable_progress_bar=false",
                       "callbacks.checkpoint=null", "++trainer.export_model=false", "++trainer.measure_cost=true",
                       "++trainer.cost_lengths=[1.0]", "++trainer.cost_repeats=1", f"paths.root={tmp_path}"]))
    plain = next(g for g in out["cost"]["train_groups"] if g["setting"] == "plain")
    method, model = _parts()
    n = plain["input_tokens"]
    lay = method.layout(torch.tensor([n]))
    shape = step_shape(model, "32-true")
    whole = training_bytes(shape, lay.table.rows, lay.width, method.decoder_length(n), plain["target_tokens"],
                           checkpoint=False, micro_rows=16)
    activations = whole - training_bytes(shape, 0, 0, 0, 0, checkpoint=False, micro_rows=16)
    assert plain["mem_growth_bytes"] < activations < 3 * plain["mem_growth_bytes"]


def test_a_run_decides_before_training_and_the_probe_still_times_both_settings(tmp_path, caplog):
    assert method_config({"name": "sled"}).checkpoint_chunks is None  # the default is the model's choice
    out = run(compose(["method=sled", "method.chunk_size=128", "method.overlap=16", "data.synthetic_words=400",
                       "data.synthetic_docs.train=2", "trainer.max_steps=8", "trainer.eval_splits=[]",
                       "trainer.enable_progress_bar=false", "callbacks.checkpoint=null", "++trainer.export_model=false",
                       "++trainer.measure_cost=true", "++trainer.cost_lengths=[1.0]", "++trainer.cost_warmup=1",
                       "++trainer.cost_repeats=1", f"paths.root={tmp_path}"]))
    log = next(tmp_path.rglob("train.log")).read_text()
    assert "method.checkpoint_chunks=null: off: a training step on the longest training document" in log
    assert [g["setting"] for g in out["cost"]["train_groups"]] == ["plain", "checkpoint"]
    assert out["method"]["checkpoint_chunks"] is False  # what training ran with


def test_when_the_model_turns_recomputation_on_the_probe_times_only_that_setting(tmp_path, monkeypatch):
    """The plain step the memory model says would not fit is not timed: on a GPU it would stop the run."""
    monkeypatch.setattr("scaleformer.runs.memory.device_bytes", lambda device: 10**6)
    out = run(compose(["method=sled", "method.chunk_size=128", "method.overlap=16", "data.synthetic_words=400",
                       "data.synthetic_docs.train=2", "trainer.max_steps=4", "trainer.eval_splits=[]",
                       "trainer.enable_progress_bar=false", "callbacks.checkpoint=null", "++trainer.export_model=false",
                       "++trainer.measure_cost=true", "++trainer.cost_lengths=[1.0]", "++trainer.cost_warmup=1",
                       "++trainer.cost_repeats=1", f"paths.root={tmp_path}"]))
    assert "method.checkpoint_chunks=null: on:" in next(tmp_path.rglob("train.log")).read_text()
    assert [g["setting"] for g in out["cost"]["train_groups"]] == ["checkpoint"]
    assert {s["checkpoint_chunks"] for s in out["cost"]["train_steps"]} == {True}
