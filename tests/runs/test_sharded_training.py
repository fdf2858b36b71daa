"""Continual training sharded over two CPU processes (``trainer.strategy=fsdp``, gloo): the same model as one
process that accumulates the two micro-batches, through an interruption and a resume, and its export whole."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from conftest import compose, train_py_gloo
from safetensors.torch import load_file

from scaleformer.data.sampler import ResumableSampler
from scaleformer.errors import ConfigError
from scaleformer.runs import callbacks
from scaleformer.runs.run import run


def _lm(tmp_path: Path, root: str, *extra: str) -> list[str]:
    # lr 1e-2 from the first step: four steps move every per-document loss far beyond the tolerance below, so a
    # resume that read other samples (an epoch restarted) would fail the comparison
    return ["experiment=masformer_lm", "backbone=tiny_gpt2", "backbone.model_kwargs.n_layer=2",
            "backbone.model_kwargs.n_embd=32", "backbone.model_kwargs.n_inner=64", f"paths.root={tmp_path}/{root}",
            f"paths.cache={tmp_path}/cache", "seed=5", "method.max_length=256", "method.block_size=32",
            "data.synthetic_docs.train=24", "data.synthetic_docs.validation=6", "data.synthetic_docs.test=0",
            "data.splits.test=null", "data.synthetic_words=150", "data.batch_size=1", "optim.lr=1e-2",
            "optim.warmup_steps=0", "trainer.checkpoint_every_n_steps=2", "trainer.log_every_n_steps=1",
            "trainer.enable_progress_bar=false", "trainer.eval_splits=[validation]", "metrics.perplexity_bucket=64",
            "metrics.dependency_block=32", "trainer.accelerator=cpu", *extra]


def _nll(root: Path, step: int) -> dict[str, float]:
    folder = next(root.rglob(f"eval/step_{step}-*"))
    rows = [json.loads(line) for line in (folder / "scores_validation.jsonl").read_text().splitlines()]
    return {r["id"]: r["nll"] for r in rows}


def test_two_sharded_processes_train_as_one_through_an_interruption(tmp_path):
    one = run(compose(_lm(tmp_path, "one", "trainer.max_steps=4", "trainer.accumulate_grad_batches=2")))
    fsdp = ("trainer.devices=2", "trainer.strategy=fsdp", "trainer.val_check_interval=2",
            "trainer.limit_val_batches=1.0")
    first = train_py_gloo(*_lm(tmp_path, "fsdp", "trainer.max_steps=2", *fsdp))
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    assert "sharded over 2 processes (FSDP2): 2 decoder layers" in first.stderr + first.stdout
    resumed = train_py_gloo(*_lm(tmp_path, "fsdp", "trainer.max_steps=4", *fsdp))  # the same run, continued
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    assert "(step 2)" in resumed.stderr + resumed.stdout, "continued from its step-2 checkpoint"

    metrics = json.loads(next((tmp_path / "fsdp").rglob("eval/step_4-*/metrics.json")).read_text())
    assert metrics["world_size"] == 2 and metrics["step"] == 4
    single, sharded = _nll(tmp_path / "one", 4), _nll(tmp_path / "fsdp", 4)
    assert list(sharded) == list(single) and len(single) == 6, "every document once, in file order"
    for doc, value in single.items():  # the same weights to float rounding (gloo sums in another order)
        assert sharded[doc] == pytest.approx(value, rel=1e-5), doc
    logged = [r for f in sorted((tmp_path / "fsdp").rglob("metrics.csv"))
              for r in csv.DictReader(f.open(encoding="utf-8")) if r.get("val/loss")]
    rows = [json.loads(line) for line in next((tmp_path / "fsdp").rglob("eval/step_4-*/scores_validation.jsonl"))
            .read_text().splitlines()]
    pooled = sum(r["nll"] for r in rows) / sum(r["tokens"] for r in rows)  # both processes' documents
    assert [int(r["step"]) for r in logged] == [1, 3], "validated during fit at steps 2 and 4"
    assert float(logged[-1]["val/loss"]) == pytest.approx(pooled, rel=1e-5), "val/loss over both processes"
    early = _nll(tmp_path / "fsdp", 2)  # what training moved in the two resumed steps
    assert max(abs(early[d] - single[d]) / single[d] for d in single) > 1e-3

    run_dir = next((tmp_path / "fsdp" / "runs").iterdir())
    ckpt = torch.load(run_dir / "checkpoints" / "step_4.ckpt", map_location="cpu", weights_only=True)
    exported = load_file(run_dir / "model" / "model.safetensors")
    weights = {k.removeprefix("lm."): v for k, v in ckpt["state_dict"].items()}
    assert exported and all(torch.equal(v, weights[k]) for k, v in exported.items()), "exported whole"
    assert one["world_size"] == 1


def test_sharding_a_summarization_run_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="trainer.strategy=fsdp: sharding is for language-modeling runs"):
        run(compose(["trainer.strategy=fsdp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.max_steps=1"]))


def test_each_process_gets_its_own_random_states_back_on_resume(monkeypatch):
    """Dropout draws as many numbers as its tensor has elements: processes reading documents of different lengths
    end a step with different RNG states, so each gets its own back (rank 0's for all would change rank 1's draws)."""
    states = [callbacks.rng_states() for _ in range(2)]
    torch.rand(7)  # rank 1's draws differ
    states[1] = callbacks.rng_states()
    checkpoint = {callbacks.ExactResume.KEY: {"epoch": 0, "samples_done": 2, "rng": states[0], "rng_by_rank": states}}
    for rank in (0, 1):
        monkeypatch.setattr(callbacks, "process_group", lambda rank=rank: (rank, 2))
        resume = callbacks.ExactResume(ResumableSampler(4, seed=1))
        resume.on_load_checkpoint(None, None, checkpoint)
        resume.on_train_batch_start(None, None, None, 0)
        assert torch.equal(torch.get_rng_state(), states[rank]["torch"])
    monkeypatch.setattr(callbacks, "process_group", lambda: (0, 4))  # another world size: rank 0's, as before
    resume = callbacks.ExactResume()
    resume.on_load_checkpoint(None, None, checkpoint)
    assert resume._pending_rng is states[0]
