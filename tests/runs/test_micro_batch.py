"""Bucketed training's micro-batch: chosen by the memory model (or ``data.micro_batch_size``), the accumulation
keeping an optimizer step's documents (scaleformer.runs.memory)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import compose

from scaleformer.errors import ConfigError
from scaleformer.methods import build_method, method_config
from scaleformer.runs.context import to_config
from scaleformer.runs.memory import choose_micro_batch, step_shape
from scaleformer.runs.run import run
from tests.helpers import ALLOW_HELPERS, StepDocuments


def _args(tmp_path: Path, root: str, *extra: str) -> list[str]:
    return [f"paths.root={tmp_path}/{root}", f"paths.cache={tmp_path}/cache", "seed=4", "method=sled",
            "data.synthetic_docs.train=10", "data.synthetic_words_spread=1.5", "data.synthetic_docs.validation=1",
            "data.synthetic_docs.test=0", "data.splits.test=null", "trainer.eval_splits=[]",
            "trainer.enable_progress_bar=false", "metrics.bertscore.enabled=false", "++trainer.export_model=false",
            "data.bucket=true", "data.batch_size=1", "trainer.accumulate_grad_batches=4", "trainer.max_steps=3",
            "+callbacks.docs._target_=tests.helpers.StepDocuments", ALLOW_HELPERS, *extra]


def _steps() -> list[list[list[str]]]:
    return [s for s in StepDocuments.steps if s]


def test_the_memory_model_fills_the_step_and_any_micro_batch_trains_on_the_same_documents(tmp_path):
    auto = run(compose(_args(tmp_path, "auto")))
    # 10 documents, 4 a step: the tiny reader's 4 fit this machine's memory many times over
    assert auto["micro_batch"] == {"documents": 4, "accumulate_grad_batches": 1, "step_documents": 4,
                                   "chosen_by": "memory model"}
    auto_steps = _steps()
    assert [len(s) for s in auto_steps] == [1, 1, 1] and all(len(m) == 4 for s in auto_steps for m in s)
    log = (tmp_path / "auto" / "runs" / auto["run_id"] / "train.log").read_text()
    assert "data.micro_batch_size=null: 4 per micro-batch of the 4 documents of an optimizer step" in log
    for n in (1, 2):
        out = run(compose(_args(tmp_path, f"m{n}", f"data.micro_batch_size={n}")))
        assert out["micro_batch"] == {"documents": n, "accumulate_grad_batches": 4 // n, "step_documents": 4,
                                      "chosen_by": "data.micro_batch_size"}
        steps = _steps()
        assert all(len(m) == n for s in steps for m in s) and [len(s) for s in steps] == [4 // n] * 3
        # the same documents in each optimizer step, in the same order
        assert [sum(s, []) for s in steps] == [sum(s, []) for s in auto_steps], n
        assert out["run_id"] != auto["run_id"], "a set micro-batch is in the run's name (dropout draws differ)"


def _sled(arch: str = "bart"):
    from tiny_models import METHODS, tiny

    backbone, spec = tiny(arch)
    return backbone, build_method(method_config({"name": "sled", **dict(METHODS)["sled"]}), spec)


def test_the_largest_divisor_of_the_step_that_fits(monkeypatch):
    backbone, method = _sled()
    cpu = torch.device("cpu")
    one, _ = choose_micro_batch(method, backbone, "32-true", cpu, 2_000, 64, 8, capacity=10**12)
    assert one == 8
    from scaleformer.ops.memory import training_bytes

    shape = step_shape(backbone, "32-true")
    lay = method.layout(torch.tensor([2_000]))
    need = [training_bytes(shape, lay.table.rows, lay.width, method.decoder_length(2_000), 64, checkpoint=False,
                           micro_rows=16, documents=d) for d in (1, 2, 3, 4, 5, 6)]
    assert all(b > a for a, b in zip(need, need[1:], strict=False)), "more documents need more memory"
    # room for 5 documents: of 6 a step, 3 is the largest divisor that fits; room for less than one: 1 (and it says so)
    assert choose_micro_batch(method, backbone, "32-true", cpu, 2_000, 64, 6, capacity=int(need[4]))[0] == 3
    assert choose_micro_batch(method, backbone, "32-true", cpu, 2_000, 64, 6, capacity=int(need[0]) - 1)[0] == 1
    monkeypatch.setattr("scaleformer.runs.memory.device_bytes", lambda device: None)
    unknown, why = choose_micro_batch(method, backbone, "32-true", cpu, 2_000, 64, 6)
    assert unknown is None and "unknown" in why


@pytest.mark.parametrize(("extra", "says"), [
    (["data.micro_batch_size=3"], "must divide the documents of an optimizer step"),
    (["data.bucket=false", "data.micro_batch_size=2"], "needs data.bucket=true"),
    (["data.micro_batch_size=0"], "must be > 0"),
    (["++trainer.measure_cost=true", "trainer.max_steps=20"], "micro-batches of up to 4 documents it may take only 20")])
def test_a_micro_batch_that_cannot_be_says_so(tmp_path, extra, says):
    with pytest.raises(ConfigError, match=says):
        to_config(compose(_args(tmp_path, "x", *extra)))


def test_a_run_with_accumulated_micro_batches_continued_mid_epoch_equals_the_uninterrupted_one(tmp_path):
    """Micro-batches of 2 of a step's 4 documents (2 accumulated): stopped after step 1 of an epoch's 3, continued,
    the weights equal the uninterrupted run's (the resume skips micro-batches of the chosen size)."""
    def args(root: str, *extra: str) -> list[str]:
        return [a for a in _args(tmp_path, root, "data.micro_batch_size=2", "trainer.max_steps=4",
                                 "trainer.checkpoint_every_n_steps=1", *extra) if not a.startswith("+callbacks.docs")]

    straight = run(compose(args("straight")))
    first = run(compose(args("resumed", "+callbacks.stop._target_=tests.helpers.StopAt", "+callbacks.stop.step=1")))
    assert first["train_steps"] == 1
    resumed = run(compose(args("resumed")))
    assert resumed["run_id"] == straight["run_id"] and resumed["train_steps"] == 4
    a, b = (torch.load(tmp_path / r / "runs" / x["run_id"] / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
            for r, x in (("straight", straight), ("resumed", resumed)))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_continued_run_keeps_the_micro_batch_it_started_with(tmp_path, monkeypatch):
    """Continued where the memory model would now choose 2 (another device), the run keeps its 4: its dropout
    draws and Lightning's counters are of that size, so the weights equal the uninterrupted run's."""
    def args(root: str, *extra: str) -> list[str]:
        return [a for a in _args(tmp_path, root, "trainer.max_steps=4", "trainer.checkpoint_every_n_steps=1", *extra)
                if not a.startswith("+callbacks.docs")]

    straight = run(compose(args("straight")))
    first = run(compose(args("resumed", "+callbacks.stop._target_=tests.helpers.StopAt", "+callbacks.stop.step=1")))
    assert first["micro_batch"]["documents"] == 4 and first["train_steps"] == 1
    monkeypatch.setattr("scaleformer.runs.memory.choose_micro_batch", lambda *a, **k: (2, "a smaller device"))
    resumed = run(compose(args("resumed")))
    assert resumed["micro_batch"] == {"documents": 4, "accumulate_grad_batches": 1, "step_documents": 4,
                                      "chosen_by": "the continued run"}
    a, b = (torch.load(tmp_path / r / "runs" / x["run_id"] / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
            for r, x in (("straight", straight), ("resumed", resumed)))
    assert all(torch.equal(a[k], b[k]) for k in a)
    fresh = run(compose(args("fresh")))  # a new run on the smaller device: the memory model's 2
    assert fresh["micro_batch"]["documents"] == 2 and fresh["micro_batch"]["chosen_by"] == "memory model"
