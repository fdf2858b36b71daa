"""MASFormer's attention cost C, by the paper's formulas and by counted pairs, and the span sizes a budget gives.

The paper (Zhang et al. 2023, "MASFormer", sections 2 and 3.1) prices one n-token sequence per layer as full
attention ``n^2``, block attention ``b n`` and a sliding window ``2 w n`` (w each side), whatever the causal
mask leaves out: MASFormer with ``l`` full layers of ``L`` and blocks of ``m`` costs ``C = (L - l) m n + l n^2``.
Its experiments (section 4, "Experiment Overview") compare methods at equal C: block ``b = C / (L n)``, window
``w = C / (2 L n)``, MASFormer ``l = (C - L m n) / (n^2 - m n)``. :func:`paper_cost` and :func:`sizes_for` are
those rules; :func:`counted_cost` counts the (query, key) pairs a span list really attends
(:meth:`scaleformer.ops.spans.Span.pairs`: causal ones about half the formula's), so a table can show both.
"""

from __future__ import annotations

from scaleformer.ops.spans import Span

# The paper's price of one layer of each kind, per n-token sequence (size: b or w).
FORMULAS = {"full": "n^2", "block": "b n", "window": "2 w n"}


def layer_cost(span: Span, n: int) -> int:
    """The paper's formula for one layer (a span covering the sequence is full attention)."""
    if span.kind == "full" or span.covers(n):
        return n * n
    if span.kind == "block":
        return span.size * n
    if span.kind == "window":
        return 2 * span.size * n
    raise ValueError(f"span kind {span.kind!r} has no formula in the paper; count its pairs (counted_cost)")


def paper_cost(spans: list[Span], n: int) -> int:
    """C of one n-token sequence: the paper's formula summed over the layers."""
    return sum(layer_cost(s, n) for s in spans)


def counted_cost(spans: list[Span], n: int) -> int:
    """The (query, key) pairs the layers attend among n tokens (causal spans: none after its query)."""
    return sum(s.pairs(n) for s in spans)


def masformer_cost(layers: int, full_layers: int, block: int, n: int) -> int:
    """``(L - l) m n + l n^2``."""
    return (layers - full_layers) * block * n + full_layers * n * n


def sizes_for(cost: float, layers: int, n: int, block: int = 1024) -> dict[str, float]:
    """The paper's sizes at attention cost ``cost``: block ``b``, window ``w`` and MASFormer's full layers ``l``
    (with blocks of ``block``, the paper's m = 1,024), unrounded: the caller rounds and records both."""
    if cost <= 0 or layers <= 0 or n <= 0:
        raise ValueError(f"cost={cost}, layers={layers}, n={n}: all must be > 0")
    if block >= n:
        raise ValueError(f"block={block}: MASFormer's blocks must be shorter than the sequence (n={n})")
    return {"block": cost / (layers * n), "window": cost / (2 * layers * n),
            "full_layers": (cost - layers * block * n) / (n * n - block * n)}
