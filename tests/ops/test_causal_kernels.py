"""The causal block and window kernels against the spelled-out reference, in every shape of call they choose
(a block split into query runs or not, window chunks with and without gradients, a sequence that leaves a
partial chunk), and the claims of their docstring: the pairs they compute, and no copy of the keys."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from scaleformer.ops import causal_kernels
from scaleformer.ops.spans import Span
from tests.ops.test_spans import reference_attention, reference_mask


def _qkv(n: int, seed: int, heads: int = 2, dh: int = 16, grad: bool = False) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, heads, n, dh, generator=g).requires_grad_(grad) for _ in range(3))


# (kind, size, n): blocks split into runs (256-512) and not (128, 1024); windows narrower than a chunk, with a
# partial last chunk, and wider than the first block's share
CASES = [("block", 256, 700), ("block", 300, 700), ("block", 512, 1100), ("block", 128, 300), ("block", 1024, 1100),
         ("window", 5, 300), ("window", 64, 700), ("window", 100, 701), ("window", 512, 1100)]


@pytest.mark.parametrize(("kind", "size", "n"), CASES)
def test_forward_equals_the_reference(kind, size, n):
    q, k, v = _qkv(n, size + n)
    want = reference_attention(q, k, v, reference_mask(kind, size, n))
    with torch.no_grad():
        torch.testing.assert_close(Span(kind, size, causal=True).attend(q, k, v), want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize(("kind", "size", "n"), [c for c in CASES if c[2] <= 701])
def test_gradients_equal_the_reference(kind, size, n):
    """With gradients the kernels take other chunk and run sizes; the gradients of q, k, v match the reference's."""
    q, k, v = _qkv(n, size, grad=True)
    cot = torch.randn(1, 2, n, 16, generator=torch.Generator().manual_seed(7))
    got = torch.autograd.grad((Span(kind, size, causal=True).attend(q, k, v) * cot).sum(), (q, k, v))
    want = torch.autograd.grad((reference_attention(q, k, v, reference_mask(kind, size, n)) * cot).sum(), (q, k, v))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=5e-5, rtol=1e-4)


def test_grouped_heads_and_a_value_width_of_its_own():
    """dv != dh, and non-contiguous inputs (transformers hands the kernels transposed [B, N, H, d] projections)."""
    n, w = 333, 40
    g = torch.Generator().manual_seed(3)
    q, k = (torch.randn(1, n, 2, 8, generator=g).transpose(1, 2) for _ in range(2))  # [1, 2, n, 8], strided
    v = torch.randn(1, n, 2, 12, generator=g).transpose(1, 2)
    with torch.no_grad():
        for kind, size in (("window", w), ("block", 256)):
            want = reference_attention(q, k, v, reference_mask(kind, size, n))
            torch.testing.assert_close(Span(kind, size, causal=True).attend(q, k, v), want, atol=2e-5, rtol=1e-4)


def _calls(monkeypatch) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Record each sdpa call's query and key tensors."""
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, *a, **kw):
        seen.append((q, k))
        return real(q, k, v, *a, **kw)

    monkeypatch.setattr(causal_kernels.F, "scaled_dot_product_attention", spy)
    return seen


def _computed(seen: list[tuple[torch.Tensor, torch.Tensor]]) -> int:
    """(query, key) score pairs the calls compute: all of each call's rectangle (a causal call inside a block of
    512 or less computes its whole square on the CPU, measured)."""
    return sum(q.shape[:-2].numel() * q.shape[-2] * k.shape[-2] for q, k in seen)


@pytest.mark.parametrize(("kind", "size", "grad", "most"), [("window", 512, False, 1.15), ("window", 512, True, 1.55),
                                                            ("block", 512, False, 1.3), ("block", 512, True, 1.55)])
def test_the_kernels_compute_little_more_than_the_pairs_attended(monkeypatch, kind, size, grad, most):
    """At n = 4,096 (one head) the pairs the calls compute over the pairs attended: a window of 512 at 1.13 (chunks
    of 64, no gradient) or 1.5 (chunks of 256); a block of 512 at 1.25 (runs of 128) or 1.5 (runs of 256). The
    previous kernels computed 2.0 for both (a window's chunks of w read 2w keys; a CPU block its whole square)."""
    n = 4096
    seen = _calls(monkeypatch)
    q, k, v = _qkv(n, 0, heads=1, dh=8, grad=grad)
    with torch.set_grad_enabled(grad):
        Span(kind, size, causal=True).attend(q, k, v)
    ratio = _computed(seen) / Span(kind, size, causal=True).pairs(n)
    assert ratio <= most, f"{kind} {size}: {ratio:.2f}x the pairs attended"


def test_the_window_reads_its_keys_in_place(monkeypatch):
    """The chunks' keys are views of the key tensor (overlapping windows), not a copy of c + w rows per chunk
    (n - w a multiple of the chunk: else the inputs are padded once)."""
    seen = _calls(monkeypatch)
    q, k, v = _qkv(128 + 13 * 64, 1)
    with torch.no_grad():
        Span("window", 128, causal=True).attend(q, k, v)
    body = [kk for qq, kk in seen if kk.dim() == 4 and kk.shape[-2] == 64 + 128]
    assert body and all(kk.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() for kk in body)


def test_the_chunk_and_run_rules():
    """The sizes the docstring states: window chunks of 64 without gradients, max(64, w/2) with; CPU blocks of
    256-512 in runs of b/4 or b/2, any other block (or a CUDA device) in one call."""
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert [causal_kernels.window_chunk(w, False) for w in (8, 512, 1024)] == [64, 64, 64]
    assert [causal_kernels.window_chunk(w, True) for w in (8, 512, 1024)] == [64, 256, 512]
    assert [causal_kernels.block_run(b, False, cpu) for b in (128, 256, 512, 1024)] == [128, 64, 128, 1024]
    assert [causal_kernels.block_run(b, True, cpu) for b in (128, 256, 512, 1024)] == [128, 128, 256, 1024]
    assert causal_kernels.block_run(512, False, cuda) == 512


def test_a_sequence_no_longer_than_the_window_is_one_causal_block(monkeypatch):
    """Called directly on n <= w tokens, the window kernel is full causal attention over those n (one call at their
    own length, not a block padded up to w)."""
    seen = _calls(monkeypatch)
    q, k, v = _qkv(50, 4)
    with torch.no_grad():
        got = causal_kernels.window_causal(q, k, v, 70)
    torch.testing.assert_close(got, reference_attention(q, k, v, reference_mask("full", 0, 50)), atol=2e-5, rtol=1e-4)
    assert [qq.shape[-2] for qq, _ in seen] == [50]
