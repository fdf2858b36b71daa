"""The training order: shuffled per epoch from the seed alone, and resumable in the middle of an epoch.

A run restarted from a mid-epoch checkpoint must see exactly the batches the uninterrupted run would
have seen next (else its predictions differ). So an epoch's order is a pure function of (seed, epoch)
- independent of how many iterators were created before - and the sampler can be told to skip the
batches of that epoch already trained on (:class:`scaleformer.runs.callbacks.ExactResume` records and
restores that count with the checkpoint).

The order is the one ``DataLoader(shuffle=True, generator=torch.Generator().manual_seed(seed))``
produces with ``num_workers=0`` (each epoch draws from the one generator the loader's base seed, the
permutation, and RandomSampler's empty remainder permutation), replayed from the seed: runs keep the
order they had before resuming existed.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler

# Documents sorted by length together, in batches: HF Trainer's group_by_length (trainer_pt_utils.
# get_length_grouped_indices) sorts mega-batches of 50 batches; wide enough that a batch's lengths are close,
# narrow enough that an epoch's batches still mix lengths from all over the split.
MEGA_BATCHES = 50


class ResumableSampler(Sampler[int]):
    """Seeded per-epoch permutations of ``range(n)``; ``resume_at`` skips an epoch's first samples.

    With ``lengths`` and ``bucket`` (documents per micro-batch), each run of ``bucket`` consecutive indices is
    a batch of documents of similar length (:func:`bucketed`): still a pure function of (seed, epoch), so a
    mid-epoch resume skips whole batches and sees the same ones next.
    """

    def __init__(self, n: int, seed: int, lengths: list[int] | None = None, bucket: int = 1) -> None:
        if lengths is not None and len(lengths) != n:
            raise ValueError(f"lengths: {len(lengths)} for {n} documents")
        self.n = n
        self.seed = seed
        self.lengths = lengths
        self.bucket = bucket
        self.epoch = 0
        self._skip: tuple[int, int] | None = None  # (epoch, samples to skip in it)

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning at the start of every epoch."""
        self.epoch = epoch

    def resume_at(self, epoch: int, samples_done: int) -> None:
        """The next iteration over `epoch` starts after its first `samples_done` samples."""
        self._skip = (epoch, samples_done)

    def order(self, epoch: int) -> list[int]:
        """The permutation of `epoch` (replays the generator from the seed: O(epoch * n), tiny)."""
        g = torch.Generator().manual_seed(self.seed)
        perm = torch.empty(0, dtype=torch.long)
        for _ in range(epoch + 1):
            torch.empty((), dtype=torch.int64).random_(generator=g)  # the loader's base-seed draw
            perm = torch.randperm(self.n, generator=g)
            torch.randperm(self.n, generator=g)  # RandomSampler's trailing (empty) remainder draw
        return perm.tolist()

    def __iter__(self) -> Iterator[int]:
        start = 0
        if self._skip is not None and self._skip[0] == self.epoch:
            start = self._skip[1]
            self._skip = None
        order = self.order(self.epoch)
        if self.lengths is not None and self.bucket > 1:
            order = bucketed(order, self.lengths, self.bucket, self.seed, self.epoch)
        yield from order[start:]

    def __len__(self) -> int:
        return self.n


def bucketed(order: list[int], lengths: list[int], size: int, seed: int, epoch: int) -> list[int]:
    """``order`` (an epoch's permutation) regrouped into batches of ``size`` documents of similar length, flat.

    Mega-batches of :data:`MEGA_BATCHES` x ``size`` consecutive documents of ``order`` are each sorted longest
    first and cut into batches; the full batches are shuffled (a generator seeded by ``seed`` and ``epoch``) and
    the one holding the longest document goes first, so a micro-batch that does not fit fails at once; a last,
    short batch stays last, where a loader of ``size`` cuts it. Each document appears once.
    """
    span = MEGA_BATCHES * size
    batches = []
    for lo in range(0, len(order), span):
        mega = sorted(order[lo:lo + span], key=lambda i: -lengths[i])  # stable: ties keep the permutation's order
        batches += [mega[i:i + size] for i in range(0, len(mega), size)]
    full = [b for b in batches if len(b) == size]
    short = [b for b in batches if len(b) < size]
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    full = [full[i] for i in torch.randperm(len(full), generator=g).tolist()]
    if full:
        first = max(range(len(full)), key=lambda j: max(lengths[i] for i in full[j]))
        full.insert(0, full.pop(first))
    return [i for b in full + short for i in b]


def length_sorted_batches(lengths: list[int] | tuple[int, ...], size: int) -> list[list[int]]:
    """Indices in batches of ``size`` documents of similar length, longest first.

    Why: a batch decodes as long as its longest document is padded to, so documents of one length batch
    with little padding; the longest batch comes first, so a batch that does not fit fails at once,
    not at the end of a split. Ties keep file order (a stable sort), so the batches are a function of
    the lengths alone.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i:i + size] for i in range(0, len(order), size)]


class LengthSortedSampler(Sampler[int]):
    """An evaluation split's documents longest first (:func:`length_sorted_batches`' order), for a loader
    that batches several: predictions are put back in file order by id afterwards."""

    def __init__(self, lengths: list[int] | tuple[int, ...]) -> None:
        self.order = [i for b in length_sorted_batches(lengths, 1) for i in b]

    def __iter__(self) -> Iterator[int]:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)
