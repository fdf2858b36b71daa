"""Training micro-batches of documents of similar length (scaleformer.data.sampler.bucketed): each document once
per epoch, a pure function of (seed, epoch), and an exact mid-epoch resume."""

from __future__ import annotations

import random
import statistics

import pytest
import torch
from torch.utils.data import DataLoader

from scaleformer.data.sampler import MEGA_BATCHES, ResumableSampler, bucketed


def lengths_of(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(50, 20_000) for _ in range(n)]


def batches_of(order: list[int], size: int) -> list[list[int]]:
    return [order[i:i + size] for i in range(0, len(order), size)]


@pytest.mark.parametrize(("n", "size"), [(1000, 4), (37, 4), (8, 8), (5, 8), (203, 1)])
def test_every_document_once_full_batches_first_a_short_one_last(n, size):
    lengths = lengths_of(n)
    sampler = ResumableSampler(n, seed=3, lengths=lengths, bucket=size)
    order = list(sampler)
    assert sorted(order) == list(range(n))
    batches = batches_of(order, size)
    assert all(len(b) == size for b in batches[:-1])
    if size > 1 and n >= size:
        longest = max(range(n), key=lambda i: lengths[i])
        assert longest in batches[0], "the longest document's batch comes first: one that does not fit fails at once"


def test_batches_hold_documents_of_similar_length():
    n, size = 2000, 4
    lengths = lengths_of(n)
    plain = batches_of(ResumableSampler(n, seed=1).order(0), size)
    grouped = batches_of(list(ResumableSampler(n, seed=1, lengths=lengths, bucket=size)), size)

    def padding(batches: list[list[int]]) -> float:  # padded tokens over real ones
        return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batches) / sum(lengths)

    assert padding(grouped) < padding(plain) / 10
    # still mixed over the epoch: the first batches are not simply the longest documents
    firsts = [statistics.mean(lengths[i] for i in b) for b in grouped[1:20]]
    assert max(firsts) - min(firsts) > 5_000


def test_a_pure_function_of_seed_and_epoch():
    lengths = lengths_of(300)
    a = ResumableSampler(300, seed=7, lengths=lengths, bucket=4)
    b = ResumableSampler(300, seed=7, lengths=lengths, bucket=4)
    for epoch in (0, 1, 5):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        assert list(a) == list(b)
    a.set_epoch(0)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first, "each epoch its own order"
    assert list(ResumableSampler(300, seed=8, lengths=lengths, bucket=4)) != first
    b.set_epoch(2)
    assert bucketed(a.order(2), lengths, 4, 7, 2) == list(b)


def test_without_bucketing_the_order_is_the_seeded_permutation():
    lengths = lengths_of(50)
    assert list(ResumableSampler(50, seed=2, lengths=lengths, bucket=1)) == ResumableSampler(50, seed=2).order(0)
    assert list(ResumableSampler(50, seed=2, lengths=None, bucket=4)) == ResumableSampler(50, seed=2).order(0)


@pytest.mark.parametrize("done", [0, 3, 7, 12])
def test_a_resumed_epoch_sees_the_batches_the_uninterrupted_one_would(done):
    n, size, epoch = 50, 4, 1
    lengths = lengths_of(n)
    data = list(range(n))
    straight = ResumableSampler(n, seed=5, lengths=lengths, bucket=size)
    straight.set_epoch(epoch)
    expected = [b.tolist() for b in DataLoader(data, batch_size=size, sampler=straight)]
    resumed = ResumableSampler(n, seed=5, lengths=lengths, bucket=size)
    resumed.set_epoch(epoch)
    resumed.resume_at(epoch, done * size)  # ExactResume records micro-batches done x their size
    got = [b.tolist() for b in DataLoader(data, batch_size=size, sampler=resumed)]
    assert got == expected[done:]
    assert torch.tensor([len(b) for b in got[:-1]]).eq(size).all()


def test_mega_batches_bound_how_far_a_document_moves():
    """Documents are sorted within mega-batches of MEGA_BATCHES x size, not across the epoch: a batch's
    documents all come from one mega-batch of the epoch's permutation."""
    n, size = 4 * MEGA_BATCHES * 3, 4
    lengths = lengths_of(n)
    perm = ResumableSampler(n, seed=0).order(0)
    mega_of = {doc: pos // (MEGA_BATCHES * size) for pos, doc in enumerate(perm)}
    for b in batches_of(bucketed(perm, lengths, size, 0, 0), size):
        assert len({mega_of[i] for i in b}) == 1


def test_lengths_must_match_the_documents():
    with pytest.raises(ValueError, match="lengths: 3 for 4 documents"):
        ResumableSampler(4, seed=0, lengths=[1, 2, 3], bucket=2)
