"""Causal spans (a decoder's self-attention, MASFormer as its paper runs it) against a plain reference: softmax over
an explicit mask that spells out each pattern, and the paper's cost rules (scaleformer.ops.span_cost)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from scaleformer.ops import span_cost
from scaleformer.ops.spans import SPAN_KINDS, Span, SpanKind


def reference_mask(kind: str, size: int, n: int) -> torch.Tensor:
    """Spelled out, pair by pair: may query i read key j?"""
    out = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(i + 1):  # never a key after the query
            out[i, j] = {"full": True, "block": i // max(size, 1) == j // max(size, 1), "window": i - j <= size}[kind]
    return out


def reference_attention(q, k, v, mask):
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v


CASES = [("full", 0), ("block", 4), ("block", 5), ("block", 64), ("window", 1), ("window", 7), ("window", 70)]


@pytest.mark.parametrize("n", [1, 13, 64, 150])
@pytest.mark.parametrize(("kind", "size"), CASES)
def test_causal_spans_equal_the_reference(kind, size, n):
    g = torch.Generator().manual_seed(n + size)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g, dtype=torch.float64) for _ in range(3))
    span = Span(kind, size, causal=True)
    mask = reference_mask(kind, size, n)
    assert torch.equal(span.dense_mask(n), mask)
    assert span.pairs(n) == int(mask.sum())
    torch.testing.assert_close(span.attend(q, k, v), reference_attention(q, k, v, mask))


def test_no_token_reads_the_future_and_block_edges_are_exact():
    """Changing the tokens after position t leaves every output up to t unchanged; a block's first token reads
    itself only."""
    n, size = 40, 8
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 4, generator=g, dtype=torch.float64) for _ in range(3))
    for kind, s in (("full", 0), ("block", size), ("window", 5)):
        span = Span(kind, s, causal=True)
        out = span.attend(q, k, v)
        k2, v2 = k.clone(), v.clone()
        k2[:, :, 21:], v2[:, :, 21:] = 9.0, -9.0
        torch.testing.assert_close(span.attend(q, k2, v2)[:, :, :21], out[:, :, :21])
    block = Span("block", size, causal=True).attend(q, k, v)
    torch.testing.assert_close(block[:, :, ::size], v[:, :, ::size])  # the first of each block: itself alone


def test_mixed_spans_at_the_extremes():
    """MASFormer with l = L full layers is full attention; with l = 0 it is block attention (per layer here)."""
    n = 50
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, n, 4, generator=g, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(Span("full", causal=True).attend(q, k, v), Span("block", n, causal=True).attend(q, k, v))
    torch.testing.assert_close(Span("window", n, causal=True).attend(q, k, v), Span("full", causal=True).attend(q, k, v))


def test_a_kind_without_kernels_runs_causal_by_its_mask():
    """Another package's kind (dense_mask and pairs only) is causal through the base class's mask."""

    class Strided(SpanKind):
        name = "strided_causal_test"

        def pairs(self, size, n):
            return int(self.dense_mask(size, n).sum())

        def dense_mask(self, size, n):
            i = torch.arange(n)
            return (i[:, None] - i[None, :]) % size == 0

    kind = Strided()
    SPAN_KINDS[kind.name] = kind
    try:
        n = 11
        g = torch.Generator().manual_seed(2)
        q, k, v = (torch.randn(1, 1, n, 4, generator=g, dtype=torch.float64) for _ in range(3))
        span = Span(kind.name, 3, causal=True)
        mask = kind.dense_mask(3, n) & torch.ones(n, n, dtype=torch.bool).tril()
        assert span.pairs(n) == int(mask.sum())
        torch.testing.assert_close(span.attend(q, k, v), reference_attention(q, k, v, mask))
    finally:
        del SPAN_KINDS[kind.name]


def test_the_block_and_window_kernels_build_no_dense_mask(monkeypatch):
    """At n = 8,192 the block and window kernels never ask for the n x n mask (64 MB of booleans, and the dense
    attention it implies): the mask helpers refuse here, and the kernels still run."""
    def dense(*a, **kw):
        raise AssertionError("a dense causal mask was built")

    for kind in ("block", "window"):
        monkeypatch.setattr(type(SPAN_KINDS[kind]), "causal_mask", dense)
    n = 8192
    q = k = v = torch.zeros(1, 1, n, 8)
    for kind, size in (("window", 128), ("block", 1024)):
        assert Span(kind, size, causal=True).attend(q, k, v).shape == (1, 1, n, 8)


def test_the_papers_cost_rules():
    """C = (L - l) m n + l n^2; the budget's block, window and l by section 4's rules, each giving C back; counted
    causal pairs about half the formula's."""
    L, n, m = 24, 8192, 1024
    c = span_cost.masformer_cost(L, 4, m, n)
    assert c == 20 * m * n + 4 * n * n
    spans = [Span("full", causal=True)] * 4 + [Span("block", m, causal=True)] * 20
    assert span_cost.paper_cost(spans, n) == c
    sizes = span_cost.sizes_for(c, L, n, m)
    assert sizes["full_layers"] == pytest.approx(4)
    assert span_cost.paper_cost([Span("block", round(sizes["block"]))] * L, n) == pytest.approx(c, rel=1e-3)
    assert span_cost.paper_cost([Span("window", round(sizes["window"]))] * L, n) == pytest.approx(c, rel=1e-3)
    counted = span_cost.counted_cost(spans, n)
    assert counted == 4 * n * (n + 1) // 2 + 20 * (n // m) * m * (m + 1) // 2
    assert 0.5 < counted / c < 0.51
    assert c / (L * n * n) == pytest.approx(0.27, abs=0.01)  # the paper's "27% of full attention's cost" at l = 4
    another = SimpleNamespace(kind="strided", size=3, covers=lambda n: False)  # a kind of another package
    with pytest.raises(ValueError, match="no formula in the paper"):
        span_cost.layer_cost(another, 9)
