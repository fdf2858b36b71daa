"""Plain-Python references for the tests, written from the published rules, not from scaleformer.ops: the
chunk plans (not from ``ops.chunking``) and the span fusion of eqs. 2-5 (not from ``ops.fusion``).

Windows (SLED, Ivgi et al. 2023): stride ``size - overlap`` from 0 while a window still ends before
the document end, then one last window ``[n - size, n)``; a document of at most ``size`` tokens is
one window. Kept spans (``keep`` in the tuples, relative to the window start):

* ``sled``: the first window keeps from its start, each window keeps up to ``overlap - overlap // 2``
  before its end, the last window keeps to the document end; each starts where the previous ended.
* ``centre``: consecutive windows split their overlap at its midpoint (floor).
"""

from __future__ import annotations

import torch


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


def fusion_loop(left: torch.Tensor, right: torch.Tensor, alpha: float, counts: list[int]):
    """Eqs. 2-5 literally, in float64, one document, chunk and boundary slot at a time."""
    left, right = left.double(), right.double()
    out_l, out_r = left.clone(), right.clone()
    batch, _, k, _ = left.shape
    for b in range(batch):
        n = counts[b]
        for i in range(1, n + 1):  # 1-based chunk index as in the paper
            for s in range(k):
                li, ri = left[b, i - 1, s], right[b, i - 1, s]
                if i > 1:  # eq. 2
                    acc = li.clone()
                    for j in range(1, i):
                        acc = acc + left[b, j - 1, s] + right[b, j - 1, s]
                    ctx_back = acc / (2 * i - 1)
                else:
                    ctx_back = li
                if i < n:  # eq. 3
                    acc = ri.clone()
                    for j in range(i + 1, n + 1):
                        acc = acc + left[b, j - 1, s] + right[b, j - 1, s]
                    ctx_fwd = acc / (2 * (n - i) + 1)
                else:
                    ctx_fwd = ri
                out_l[b, i - 1, s] = alpha * li + (1 - alpha) * ctx_back  # eq. 4
                out_r[b, i - 1, s] = alpha * ri + (1 - alpha) * ctx_fwd  # eq. 5
    return out_l, out_r
