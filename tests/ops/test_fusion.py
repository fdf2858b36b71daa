"""Span representation cumulation against a plain loop that spells out eqs. 2-5 term by term
(``fusion_loop`` in tests/chunk_reference.py, which tests/methods/test_chunked_reference.py also uses)."""

from __future__ import annotations

import itertools

import pytest
import torch
from chunk_reference import fusion_loop

from scaleformer.ops.fusion import span_cumulation


def _case(batch: int, chunks: int, k: int, d: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    left = torch.randn(batch, chunks, k, d, generator=g)
    right = torch.randn(batch, chunks, k, d, generator=g)
    counts = torch.randint(1, chunks + 1, (batch,), generator=g).tolist()
    counts[0] = chunks  # at least one full document, the rest ragged
    mask = torch.arange(chunks)[None, :] < torch.tensor(counts)[:, None]
    return left, right, counts, mask


@pytest.mark.parametrize("batch,chunks,k,d", list(itertools.product([1, 3], [1, 2, 5, 17], [1, 2, 4], [1, 8])))
def test_matches_term_by_term_loop(batch, chunks, k, d):
    for seed, alpha in enumerate([0.0, 0.5, 1.0, 0.137]):
        left, right, counts, mask = _case(batch, chunks, k, d, seed)
        lf, rf = span_cumulation(left, right, alpha, mask)
        el, er = fusion_loop(left, right, alpha, counts)
        assert lf.shape == left.shape and rf.shape == right.shape
        for b, n in enumerate(counts):
            torch.testing.assert_close(lf[b, :n].double(), el[b, :n], atol=1e-5, rtol=0)
            torch.testing.assert_close(rf[b, :n].double(), er[b, :n], atol=1e-5, rtol=0)


def test_random_grid_many_chunks():
    g = torch.Generator().manual_seed(0)
    for trial in range(20):
        batch, chunks, k, d = (int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 40, (1,), generator=g)),
                               int(torch.randint(1, 4, (1,), generator=g)), int(torch.randint(1, 6, (1,), generator=g)))
        alpha = float(torch.rand(1, generator=g))
        left, right, counts, mask = _case(batch, chunks, k, d, 100 + trial)
        lf, rf = span_cumulation(left, right, alpha, mask)
        el, er = fusion_loop(left, right, alpha, counts)
        for b, n in enumerate(counts):
            torch.testing.assert_close(lf[b, :n].double(), el[b, :n], atol=1e-5, rtol=0)
            torch.testing.assert_close(rf[b, :n].double(), er[b, :n], atol=1e-5, rtol=0)


def test_padded_chunks_finite_and_ignored():
    left, right, counts, mask = _case(3, 6, 2, 4, 7)
    poisoned_l, poisoned_r = left.clone(), right.clone()
    poisoned_l[~mask] = float("nan")
    poisoned_r[~mask] = float("inf")
    lf, rf = span_cumulation(poisoned_l, poisoned_r, 0.5, mask)
    assert torch.isfinite(lf).all() and torch.isfinite(rf).all()
    cl, cr = span_cumulation(left, right, 0.5, mask)
    assert torch.equal(lf[mask], cl[mask]) and torch.equal(rf[mask], cr[mask])


def test_single_chunk_and_alpha_one_are_identity():
    left, right = torch.randn(2, 1, 3, 5), torch.randn(2, 1, 3, 5)
    lf, rf = span_cumulation(left, right, 0.3, torch.ones(2, 1, dtype=torch.bool))
    torch.testing.assert_close(lf, left)
    torch.testing.assert_close(rf, right)
    left, right, _, mask = _case(2, 5, 2, 3, 1)
    lf, rf = span_cumulation(left, right, 1.0, mask)
    assert torch.equal(lf[mask], left[mask]) and torch.equal(rf[mask], right[mask])


def test_low_precision_keeps_dtype_and_stays_close():
    left, right, _, mask = _case(2, 300, 1, 8, 3)
    lf, rf = span_cumulation(left.bfloat16(), right.bfloat16(), 0.5, mask)
    assert lf.dtype == torch.bfloat16 and rf.dtype == torch.bfloat16
    el, er = span_cumulation(left.bfloat16().float(), right.bfloat16().float(), 0.5, mask)
    torch.testing.assert_close(lf.float(), el, atol=3e-2, rtol=1e-2)
    torch.testing.assert_close(rf.float(), er, atol=3e-2, rtol=1e-2)


def test_long_documents_linear_and_exact_means():
    """Thousands of chunks: ctx_back of the last chunk / ctx_fwd of the first are plain means."""
    c = 5000
    left, right = torch.randn(1, c, 1, 4, dtype=torch.float64), torch.randn(1, c, 1, 4, dtype=torch.float64)
    mask = torch.ones(1, c, dtype=torch.bool)
    lf, rf = span_cumulation(left, right, 0.0, mask)  # alpha 0: pure context
    all_but_last_r = (left.sum(1) + right.sum(1) - right[:, -1]) / (2 * c - 1)
    all_but_first_l = (left.sum(1) + right.sum(1) - left[:, 0]) / (2 * c - 1)
    torch.testing.assert_close(lf[:, -1], all_but_last_r)
    torch.testing.assert_close(rf[:, 0], all_but_first_l)


def test_gradients_reach_every_real_chunk():
    left, right, _, mask = _case(2, 4, 1, 3, 5)
    left.requires_grad_(True)
    right.requires_grad_(True)
    lf, rf = span_cumulation(left, right, 0.5, mask)
    (lf[mask].sum() + rf[mask].sum()).backward()
    assert (left.grad[mask].abs().sum(-1) > 0).all() and (right.grad[mask].abs().sum(-1) > 0).all()
