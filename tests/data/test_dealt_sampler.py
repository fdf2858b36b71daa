"""The training order under several processes: dealt in whole micro-batches, each rank as many, and a resumed
rank skipping exactly its own share (scaleformer.data.sampler.deal)."""

from __future__ import annotations

import pytest
from torch.utils.data import DistributedSampler

from scaleformer.data import sampler as sampler_module
from scaleformer.data.sampler import EvaluationShards, ResumableSampler, deal, dealt_length


def _as_rank(monkeypatch, rank: int, world: int) -> None:
    monkeypatch.setattr(sampler_module, "process_group", lambda: (rank, world))


@pytest.mark.parametrize(("n", "world", "batch"), [(12, 2, 1), (13, 2, 3), (7, 4, 2), (3, 4, 2), (10, 1, 4)])
def test_each_step_of_the_world_reads_what_one_accumulating_process_reads(n, world, batch):
    order = list(range(100, 100 + n))
    shares = [deal(order, r, world, batch) for r in range(world)]
    assert {len(s) for s in shares} == {dealt_length(n, world, batch)}, "every rank as many samples"
    assert all(len(s) % batch == 0 for s in shares) or world == 1
    steps = len(shares[0]) // batch
    span = world * batch
    padded = (order * (span + 1))[: steps * span] if world > 1 else order
    for k in range(steps):  # step k: rank r's micro-batch k; one process: micro-batches k*world .. k*world+world-1
        world_step = sorted(i for s in shares for i in s[k * batch:(k + 1) * batch])
        assert world_step == sorted(padded[k * span:(k + 1) * span])
    assert set(order) <= {i for s in shares for i in s}, "no sample left out"
    if world > 1:
        assert len(shares[0]) * world - n < span, "fewer repeats than one step of the world"


def test_a_resumed_rank_continues_its_own_share_exactly(monkeypatch):
    uninterrupted = {}
    for rank in (0, 1):
        _as_rank(monkeypatch, rank, 2)
        s = ResumableSampler(11, seed=7, batch_size=2)
        s.set_epoch(3)
        uninterrupted[rank] = list(s)
        assert len(uninterrupted[rank]) == len(s) == 6
        resumed = ResumableSampler(11, seed=7, batch_size=2)
        resumed.set_epoch(3)
        resumed.resume_at(3, 4)  # two micro-batches of this rank's done
        assert list(resumed) == uninterrupted[rank][4:]
    assert set(uninterrupted[0]) | set(uninterrupted[1]) == set(range(11))
    _as_rank(monkeypatch, 0, 1)
    alone = ResumableSampler(11, seed=7, batch_size=2)
    alone.set_epoch(3)
    assert list(alone) == alone.order(3), "one process: the seeded permutation, unpadded, as before"


def test_samplers_are_distributed_samplers_so_lightning_keeps_them(monkeypatch):
    """Lightning wraps any other sampler in its own under DDP or FSDP, which deals per sample from its own
    shuffle and restarts an interrupted epoch (data_connector._requires_distributed_sampler)."""
    _as_rank(monkeypatch, 1, 2)
    for s in (ResumableSampler(5, seed=1), EvaluationShards(5, 2)):
        assert isinstance(s, DistributedSampler) and s.num_replicas == 2 and s.rank == 1
    assert list(EvaluationShards(5, 2)) == [2, 3, 1, 2], "file order dealt in batches, padded from the start"
    _as_rank(monkeypatch, 0, 2)
    assert list(EvaluationShards(5, 2)) == [0, 1, 4, 0]

