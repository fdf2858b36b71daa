"""A run with ``data.bucket=true``: several documents of similar length per micro-batch, resumed exactly.

The weights after continuing a bucketed run from a mid-epoch checkpoint equal the uninterrupted run's (the
sampler's order is a function of the seed and epoch, and ExactResume skips the micro-batches done), and the
micro-batches the run trained on are of the sampler's grouping.
"""

from __future__ import annotations

from pathlib import Path

import torch
from conftest import compose
from helpers import ALLOW_HELPERS

from scaleformer.data.sampler import ResumableSampler
from scaleformer.runs.run import run


def _bucketed(tmp_path: Path, root: str, steps: int, *extra: str) -> list[str]:
    return [f"paths.root={tmp_path}/{root}", f"paths.cache={tmp_path}/cache", "seed=4", "method=sled",
            "data.synthetic_docs.train=10", "data.synthetic_words_spread=1.5", "data.synthetic_docs.validation=1",
            "data.synthetic_docs.test=0", "data.splits.test=null", "trainer.eval_splits=[]",
            "trainer.enable_progress_bar=false", "metrics.bertscore.enabled=false",
            "data.bucket=true", "data.batch_size=3", f"trainer.max_steps={steps}", "trainer.checkpoint_every_n_steps=2",
            "++trainer.export_model=false", *extra]


def _weights(result: dict, root: Path) -> dict[str, torch.Tensor]:
    ckpt = root / "runs" / result["run_id"] / "checkpoints" / "last.ckpt"
    return torch.load(ckpt, weights_only=True)["state_dict"]


def test_a_bucketed_run_continued_mid_epoch_equals_the_uninterrupted_one(tmp_path):
    straight = run(compose(_bucketed(tmp_path, "straight", 6)))
    # stopped after step 2 (10 documents in micro-batches of 3: mid-epoch) with the same schedule, then continued
    first = run(compose(_bucketed(tmp_path, "resumed", 6, "+callbacks.stop._target_=tests.helpers.StopAt",
                                  "+callbacks.stop.step=2", ALLOW_HELPERS)))
    assert first["train_steps"] == 2
    resumed = run(compose(_bucketed(tmp_path, "resumed", 6)))
    assert first["run_id"] == resumed["run_id"] == straight["run_id"] and resumed["train_steps"] == 6
    log = (tmp_path / "resumed" / "runs" / first["run_id"] / "train.log").read_text()
    assert "checkpoints/last.ckpt (step 2)" in log, "the second run continued the first, from step 2"
    a, b = _weights(straight, tmp_path / "straight"), _weights(resumed, tmp_path / "resumed")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_bucketing_is_part_of_the_runs_name_and_groups_by_length(tmp_path, monkeypatch):
    seen: list[tuple[list[int] | None, int, list[int]]] = []
    original = ResumableSampler.__iter__

    def spy(self):
        order = list(original(self))
        seen.append((self.lengths, self.bucket, order))
        return iter(order)

    monkeypatch.setattr(ResumableSampler, "__iter__", spy)
    bucketed = run(compose(_bucketed(tmp_path, "b", 3)))
    lengths, size, order = seen[0]
    assert lengths is not None and size == 3 and len(set(lengths)) > 5, "the documents' lengths differ"
    # one mega-batch, sorted longest first and cut in threes; each full batch is a run of neighbours in that
    # sorted order (then the batches are shuffled), a short one last
    batches = [order[i:i + size] for i in range(0, len(order), size)]
    for b in batches[:-1]:
        lo, hi = min(lengths[i] for i in b), max(lengths[i] for i in b)
        assert not [o for o in order if o not in b and lo < lengths[o] < hi], (b, lengths)
    assert len(order) == len(lengths) and [len(b) for b in batches] == [3] * (len(order) // 3) + (
        [len(order) % 3] if len(order) % 3 else [])
    plain = run(compose(_bucketed(tmp_path, "p", 3, "data.bucket=false")))
    assert seen[-1][0] is None, "data.bucket=false: no lengths, the plain seeded order"
    assert bucketed["run_id"] != plain["run_id"], "a different training order is a different run"
