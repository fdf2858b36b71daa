"""Plain-Python chunk plans for the tests, written from the published rules, not from scaleformer.ops.chunking.

Windows (SLED, Ivgi et al. 2023): stride ``size - overlap`` from 0 while a window still ends before
the document end, then one last window ``[n - size, n)``; a document of at most ``size`` tokens is
one window. Kept spans (``keep`` in the tuples, relative to the window start):

* ``sled``: the first window keeps from its start, each window keeps up to ``overlap - overlap // 2``
  before its end, the last window keeps to the document end; each starts where the previous ended.
* ``centre``: consecutive windows split their overlap at its midpoint (floor).
"""

from __future__ import annotations


def chunk_spans(n: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """Half-open ``(start, end)`` windows of one document of n tokens ([] for an empty one)."""
    if not 0 <= overlap < size:
        raise ValueError(f"overlap={overlap}: must be in [0, size={size})")
    if n <= 0:
        return []
    if n <= size:
        return [(0, n)]
    spans, start = [], 0
    while start + size < n:
        spans.append((start, start + size))
        start += size - overlap
    return spans + [(n - size, n)]


def windows(n: int, size: int, overlap: int, rule: str = "sled") -> list[tuple[int, int, int, int]]:
    """``(start, end, keep_start, keep_end)`` per window, keep_* relative to the window's start."""
    spans = chunk_spans(n, size, overlap)
    out, kept_end = [], 0
    for i, (s, e) in enumerate(spans):
        if i == len(spans) - 1:
            hi = n
        elif rule == "sled":
            hi = e - (overlap - overlap // 2)
        else:
            hi = (spans[i + 1][0] + e) // 2
        out.append((s, e, kept_end - s, hi - s))
        kept_end = hi
    return out


def num_chunks(n: int, size: int, overlap: int) -> int:
    return len(chunk_spans(n, size, overlap))
