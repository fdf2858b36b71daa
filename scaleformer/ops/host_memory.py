"""The CPU heap under torch's tensors: keep freed memory for the next tensor, or hand it back on purpose.

Why: torch's CPU allocator is the C library's ``malloc``. glibc serves a block above its mmap threshold
(128 KiB, raised by freed blocks up to 32 MiB) with a fresh ``mmap`` and unmaps it on ``free``, and
trims the heap's free top above its trim threshold; either way the next tensor of that size touches new
pages and takes a page fault per 4 KiB. A chunked method's encoder allocates the same large activations
micro-batch after micro-batch (the tiny reader at 16 chunks of 1,024 tokens: 8 MiB per projection,
32 MiB per feed-forward), so the ``aten::copy_`` of each linear layer's bias into its fresh output
took ~6 ms for 8 MiB (a 1.3 GB/s "copy") and a [16, 1,024, 128] -> 128 -> 512 pair of linear layers
took 61 ms a call where 33 ms suffice. :func:`keep_freed_memory` raises both thresholds (``mallopt``;
a fixed value also stops glibc's dynamic adjustment), so freed blocks up to ``limit`` stay in the heap
for reuse, as PyTorch's CPU tuning guide gets by preloading jemalloc or tcmalloc. The console commands,
the benchmarks and the test suite call it at start (``SCALEFORMER_KEEP_FREED_MEMORY=0`` keeps glibc's
defaults); a library user calls it once, or preloads another allocator.

The resident set then stays at its peak instead of shrinking between phases, plus a few transient
blocks: the heap grows (``brk``) by a few blocks before every request finds a freed one (the pair
above: +136 MiB over its first 10 calls, flat and fault-free after; the cause is glibc's placement of
torch's 64-byte-aligned requests, by the look of it, not verified). Where memory is the constraint,
:func:`release_freed_memory` hands it back explicitly: checkpointed chunk encoding calls it between
micro-batches, forward and backward, and the memory probe before each measured phase.
Elsewhere than glibc both are no-ops.
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

# mallopt parameters (glibc malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
LIMIT = 1 << 30  # freed blocks up to 1 GiB are kept (BART-base's feed-forward at 16 chunks: 201 MB)
ENV = "SCALEFORMER_KEEP_FREED_MEMORY"
# What results record as the heap their timings ran under (:func:`heap`); records from before the setting
# existed ran under glibc's defaults.
KEPT, DEFAULTS = "freed blocks kept", "glibc defaults"
_kept = False  # set by keep_freed_memory: whether this process's heap keeps freed blocks


@functools.cache
def _libc() -> Any:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 - glibc's, or an AttributeError
        return libc
    except (OSError, AttributeError):  # not glibc
        return None


def release_freed_memory(*_: Any) -> None:
    """Hand freed heap memory back to the OS (glibc ``malloc_trim``; elsewhere a no-op). Returns None,
    so it also serves as a gradient hook that leaves the gradient alone.

    Why: glibc keeps freed mid-size blocks resident (its dynamic mmap threshold moves them onto the
    heap; :func:`keep_freed_memory` keeps all of them), so encoding micro-batch after micro-batch grows
    the resident set by each one's transient activations although one micro-batch is alive at a time.
    A 500k-token checkpointed training step (tiny_bart, scaleformer_middle) peaked at +2.2 GB RSS
    without this and +0.39 GB with it.
    """
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.cache
def keep_freed_memory(limit: int = LIMIT) -> bool:
    """Keep freed heap blocks up to ``limit`` bytes for reuse (once per process; see the module docstring).
    Returns whether glibc took both settings (False elsewhere, or with ``SCALEFORMER_KEEP_FREED_MEMORY=0``)."""
    global _kept
    libc = _libc()
    if libc is None or os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    _kept = bool(libc.mallopt(M_MMAP_THRESHOLD, int(limit))) & bool(libc.mallopt(M_TRIM_THRESHOLD, int(limit)))
    return _kept


def heap() -> str:
    """The CPU heap this process runs under, as results record it next to their timings: a CPU step's time
    depends on it (page faults on every fresh block under glibc's defaults)."""
    if _kept:
        return KEPT
    return DEFAULTS if _libc() is not None else "the C library's defaults (not glibc)"
