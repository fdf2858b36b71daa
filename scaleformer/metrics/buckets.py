"""Scores by input length: where long-context methods differ (MASFormer reports by length too)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any


def bucket_labels(edges: Sequence[int]) -> list[str]:
    """``[1024, 4096]`` -> ``["<1024", "1024-4095", ">=4096"]`` (document tokens)."""
    if not edges:
        return ["all"]
    inner = [f"{lo}-{hi - 1}" for lo, hi in zip(edges, edges[1:])]
    return [f"<{edges[0]}", *inner, f">={edges[-1]}"]


def by_length(lengths: Sequence[int], edges: Sequence[int],
              score: Callable[[list[int]], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``score(indices)`` for the documents of each length bucket, with the bucket's ``n`` and token
    range; empty buckets are listed with ``n: 0`` so every evaluation has the same buckets."""
    labels = bucket_labels(edges)
    members: list[list[int]] = [[] for _ in labels]
    for i, n in enumerate(lengths):
        members[bisect.bisect_right(list(edges), n)].append(i)
    out = {}
    for label, idx in zip(labels, members):
        out[label] = {"n": len(idx), **(score(idx) if idx else {})}
    return out
