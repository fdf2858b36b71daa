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

Several processes (DDP, FSDP) deal that one order out in whole micro-batches (:func:`deal`): optimizer step k
of the world reads the samples a single process accumulating ``world`` micro-batches reads in its step k, and
a resumed process skips its own share. The samplers are ``DistributedSampler`` subclasses so that Lightning
keeps them rather than wrapping them in its own, which reshuffles and restarts an interrupted epoch.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import DistributedSampler, Sampler

# Documents sorted by length together, in batches: HF Trainer's group_by_length (trainer_pt_utils.
# get_length_grouped_indices) sorts mega-batches of 50 batches; wide enough that a batch's lengths are close,
# narrow enough that an epoch's batches still mix lengths from all over the split.
MEGA_BATCHES = 50


def process_group() -> tuple[int, int]:
    """(this process's rank, the number of processes) of torch.distributed's default group; (0, 1) without one.
    Read when an epoch is drawn, not when the loader is built: a strategy starts the group inside ``fit``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def deal(order: list[int], rank: int, world: int, batch: int) -> list[int]:
    """``rank``'s share of an epoch's ``order``: its micro-batches (``batch`` consecutive indices) ``rank``,
    ``rank + world``, ... Optimizer step k of the world then reads ``order[k*world*batch:(k+1)*world*batch]``,
    the samples one process accumulating ``world`` micro-batches reads in its step k. The order is first
    padded with its own first indices to a whole number of ``world x batch`` (at most ``world x batch - 1``
    repeats an epoch): every rank runs as many full micro-batches, as a sharded model needs (its layers are
    gathered across the ranks at each forward; a rank with one more would wait forever)."""
    if world == 1:
        return order
    span = world * batch
    padded = list(order)
    while len(padded) % span:
        padded += order[: span - len(padded) % span]
    return [i for lo in range(rank * batch, len(padded), span) for i in padded[lo:lo + batch]]


def dealt_length(n: int, world: int, batch: int) -> int:
    """How many of ``n`` samples :func:`deal` gives each rank."""
    return n if world == 1 else -(-n // (world * batch)) * batch


class _Dealt(DistributedSampler):
    """What Lightning reads of a ``DistributedSampler``, from the live process group. ``DistributedSampler``'s
    ``__init__`` is not called: it needs the group, which does not exist yet when the loader is built."""

    epoch = 0
    drop_last = False  # DistributedSampler's attributes a reader may look at: nothing dropped, no reshuffle here
    shuffle = False

    @property
    def num_replicas(self) -> int:  # type: ignore[override]
        return process_group()[1]

    @property
    def rank(self) -> int:  # type: ignore[override]
        return process_group()[0]

    def set_epoch(self, epoch: int) -> None:
        """Called by Lightning at the start of every epoch."""
        self.epoch = epoch


class EvaluationShards(_Dealt):
    """An evaluation split in file order, dealt to the ranks in whole batches (:func:`deal`), as many on each
    (the repeats are dropped by id when the rows are gathered: :func:`scaleformer.runs.runtime.gather_rows`).
    Alone: the split in file order."""

    def __init__(self, n: int, batch: int) -> None:
        self.n, self.batch = n, batch

    def __iter__(self) -> Iterator[int]:
        rank, world = process_group()
        return iter(deal(list(range(self.n)), rank, world, self.batch))

    def __len__(self) -> int:
        return dealt_length(self.n, process_group()[1], self.batch)


class ResumableSampler(_Dealt):
    """Seeded per-epoch permutations of ``range(n)``; ``resume_at`` skips an epoch's first samples.

    With ``lengths`` and ``bucket`` (documents per micro-batch), each run of ``bucket`` consecutive indices is
    a batch of documents of similar length (:func:`bucketed`): still a pure function of (seed, epoch), so a
    mid-epoch resume skips whole batches and sees the same ones next. Under several processes each takes its
    share in micro-batches of ``batch_size`` (:func:`deal`), and ``resume_at`` counts its own samples.
    """

    def __init__(self, n: int, seed: int, lengths: list[int] | None = None, bucket: int = 1,
                 batch_size: int = 1, shuffle: bool = True) -> None:
        if lengths is not None and len(lengths) != n:
            raise ValueError(f"lengths: {len(lengths)} for {n} documents")
        self.n = n
        self.seed = seed
        self.lengths = lengths
        self.bucket = bucket
        self.batch_size = batch_size
        self.shuffle = shuffle  # false: 0 .. n-1 every epoch (a corpus read in stream order)
        self.epoch = 0
        self._skip: tuple[int, int] | None = None  # (epoch, samples to skip in it)

    def resume_at(self, epoch: int, samples_done: int) -> None:
        """The next iteration over `epoch` starts after its first `samples_done` samples (this process's)."""
        self._skip = (epoch, samples_done)

    def order(self, epoch: int) -> list[int]:
        """The permutation of `epoch` (replays the generator from the seed: O(epoch * n), tiny)."""
        if not self.shuffle:
            return list(range(self.n))
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
        yield from deal(order, *process_group(), self.batch_size)[start:]

    def __len__(self) -> int:
        return dealt_length(self.n, process_group()[1], self.batch_size)


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
