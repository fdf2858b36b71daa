"""Span representation cumulation (paper eqs. 2-5) with cumulative sums: O(C) in the chunk count.

With S_j = L_j + R_j and 1-based chunk index i of a document with C chunks:
    ctx_back_i = (L_i + sum_{j<i} S_j) / (2i - 1)
    ctx_fwd_i  = (R_i + sum_{j>i} S_j) / (2(C - i) + 1)
    L'_i = alpha L_i + (1 - alpha) ctx_back_i,   R'_i = alpha R_i + (1 - alpha) ctx_fwd_i
(position-wise over the k boundary slots). For i = 1 / i = C the context is the boundary itself,
as the paper states. Prefix sums are exclusive cumsums; suffix sums are reversed cumsums (not
total - prefix, which would cancel catastrophically over thousands of chunks).
"""

from __future__ import annotations

import torch


def span_cumulation(
    left: torch.Tensor,  # [batch, chunks, k, d]
    right: torch.Tensor,  # [batch, chunks, k, d]
    alpha: float,
    chunk_mask: torch.Tensor,  # [batch, chunks] bool, real chunks first
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fuse each chunk's boundaries with its backward/forward context (eqs. 2-5).

    Each document uses its own chunk count (ragged batches); padded chunks come out finite (zeros
    blended with zeros) whatever they held. Computed in at least fp32 (cumsums in bf16 drift), then
    cast back. No host-device synchronisation.
    """
    dtype = left.dtype
    work = torch.promote_types(dtype, torch.float32)
    real = chunk_mask.bool()[:, :, None, None]  # [batch, chunks, 1, 1]
    lft = torch.where(real, left.to(work), 0.0)  # [batch, chunks, k, d]
    rgt = torch.where(real, right.to(work), 0.0)
    s = lft + rgt  # [batch, chunks, k, d] S_j
    zero = torch.zeros_like(s[:, :1])  # [batch, 1, k, d]
    before = torch.cat([zero, s.cumsum(1)[:, :-1]], 1)  # sum_{j<i} S_j
    after = torch.cat([s.flip(1).cumsum(1).flip(1)[:, 1:], zero], 1)  # sum_{j>i} S_j
    n_chunks = s.shape[1]
    i = torch.arange(1, n_chunks + 1, device=s.device, dtype=work)  # [chunks] 1-based
    count = chunk_mask.sum(1, keepdim=True).to(work)  # [batch, 1] C per document
    back_den = (2 * i - 1)[None, :, None, None]  # [1, chunks, 1, 1]
    fwd_den = (2 * (count - i) + 1).clamp(min=1)[:, :, None, None]  # [batch, chunks, 1, 1]
    ctx_back = (lft + before) / back_den
    ctx_fwd = (rgt + after) / fwd_den
    left_fused = alpha * lft + (1 - alpha) * ctx_back
    right_fused = alpha * rgt + (1 - alpha) * ctx_fwd
    return left_fused.to(dtype), right_fused.to(dtype)
