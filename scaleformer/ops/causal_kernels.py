"""The causal block and window kernels: each computes little more than the pairs its pattern attends.

Both run torch's sdpa (its fused CPU/CUDA kernels, so autograd, dropout, bf16 and a GPU carry over); what they
choose is the shape of the calls, so that the kernel skips what the pattern masks.

- **window** (``0 <= i - j <= w``): the first w queries are a causal block of w (:func:`block_causal`); every
  later query runs in chunks of c, each reading the c + w keys from ``chunk start - w`` to its own end under one
  ``[c, c + w]`` band mask, the same for every chunk. The chunks' keys are *overlapping views* of the key tensor
  (``unfold``), never copied: ``[B*H, chunks, c + w, dh]`` with a chunk stride of c rows, which the fused kernel
  reads as heads. Pairs computed per query: c + w against the w + 1 attended (c = 64, w = 512: 1.12x; the
  previous banded chunks of c = w computed 2x, over a 2x copy of the keys). A per-chunk mask (``[chunks, c,
  c + w]``) instead of the one shared band cost 2.1x on this CPU, so the pads of the sequence's start are not
  masked: those queries are the first block's.
- **block** (each block of b causal on its own): ``[B, H x nb, b, dh]`` in one causal call. torch's CPU kernel
  skips the masked key tiles only for queries of 768 or more (measured: a block of 512 costs the same causal as
  not), so on a CPU a block of 256-512 runs as query runs of s, each run reading its block's keys up to its own
  end: b/s calls computing (1 + s/b)/2 of the block's square instead of all of it. CUDA's flash and
  memory-efficient kernels skip tiles at their own granularity: one call there.

The chunk and run sizes, measured on this project's CPU (``results/bench/causal-peers-cpu.md``; 16 heads x 128):
forward and no-grad, c = 64 and s = b/4. With gradients, s = b/2 and c = max(64, w/2): the backward pass
materialises the overlapping keys' gradient per chunk, (c + w)/c times the keys. Measured in one run at
n = 8,192, w = 512, fp32, 2 threads (one layer's forward and backward, median of 5; peak growth): c = w/4 1.80 s and
821 MB, c = w/2 1.70 s and 585 MB, c = w 1.97 s and 463 MB; the previous banded kernel (chunks of w over copied
keys) 2.11-2.24 s and 700-706 MB. c = w/2 is the fastest and lighter than the previous kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

MIN_WINDOW_CHUNK = 64  # queries per window chunk with no gradient: smallest size whose matmuls still run at speed
SPLIT_BLOCKS = (256, 512)  # CPU blocks run as query runs (the fused kernel skips nothing inside a shorter block)


def _grad(*xs: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(x.requires_grad for x in xs)


def window_chunk(window: int, grad: bool) -> int:
    """Queries per chunk of the causal window kernel (see the module's docstring for the measurements)."""
    return max(MIN_WINDOW_CHUNK, window // 2) if grad else MIN_WINDOW_CHUNK


def block_run(block: int, grad: bool, device: torch.device) -> int:
    """Queries per run of a causal block (the block itself: one causal call)."""
    if device.type != "cpu" or not SPLIT_BLOCKS[0] <= block <= SPLIT_BLOCKS[1]:
        return block
    return block // 2 if grad else block // 4


def block_causal(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, size: int, *,
                 scaling: float | None = None, dropout: float = 0.0) -> torch.Tensor:
    """Each block of ``size`` tokens causal on its own: ``[B, H, N, dh]`` inputs, ``[B, H, N, dv]`` out. The last
    block is padded at its end, where no real query looks. 4-D ``[B, H x nb, b, dh]`` so sdpa's fused kernels
    take it (with 5-D inputs the CPU's fell back to the score matrix)."""
    b, h, n, _ = query.shape
    nb = -(-n // size)

    def blocks(x: torch.Tensor) -> torch.Tensor:  # [B, H, N, e] -> [B, H * nb, b, e]; a view where b divides N
        return (F.pad(x, (0, 0, 0, nb * size - n)) if nb * size > n else x).reshape(b, h * nb, size, x.shape[-1])

    qb, kb, vb = blocks(query), blocks(key), blocks(value)
    run = block_run(size, _grad(query, key, value), query.device)
    if run >= size:
        out = F.scaled_dot_product_attention(qb, kb, vb, dropout_p=dropout, is_causal=True, scale=scaling)
    else:  # query run [s0, s1) of every block reads its block's keys [0, s1): one call per run
        outs = []
        for s0 in range(0, size, run):
            s1 = min(s0 + run, size)
            rows = torch.arange(s0, s1, device=query.device)[:, None]
            mask = torch.arange(s1, device=query.device)[None, :] <= rows  # [run, s1]
            outs.append(F.scaled_dot_product_attention(qb[:, :, s0:s1], kb[:, :, :s1], vb[:, :, :s1], attn_mask=mask,
                                                       dropout_p=dropout, scale=scaling))  # [B, H * nb, run, dv]
        out = torch.cat(outs, dim=2)  # [B, H * nb, b, dv]
    return out.reshape(b, h, nb * size, -1)[:, :, :n]


def window_causal(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, window: int, *,
                  scaling: float | None = None, dropout: float = 0.0) -> torch.Tensor:
    """Causal sliding-window attention, keys ``i - window <= j <= i``: ``[B, H, N, dh]`` in, ``[B, H, N, dv]`` out."""
    b, h, n, dh = query.shape
    w = window
    first = min(n, w)  # the first w queries' keys start at 0: a causal block (all of a sequence this short)
    head = block_causal(query[:, :, :first], key[:, :, :first], value[:, :, :first], first, scaling=scaling,
                        dropout=dropout)
    if n <= w:
        return head
    c = window_chunk(w, _grad(query, key, value))
    pad = -(n - w) % c  # keys after the end are read only by the pad queries
    if pad:
        query, key, value = (F.pad(x, (0, 0, 0, pad)) for x in (query, key, value))
    total, chunks, kw = n + pad, (n + pad - w) // c, c + w
    q = query[:, :, w:].reshape(b * h, chunks, c, dh)  # chunk t holds queries w + t*c ...

    def windows(x: torch.Tensor) -> torch.Tensor:  # [B, H, N', e] -> [B*H, chunks, c + w, e]: overlapping views
        return x.reshape(b * h, total, x.shape[-1]).unfold(1, kw, c).transpose(-1, -2)

    i = torch.arange(c, device=query.device)[:, None]  # query i of a chunk sits at key column i + w
    j = torch.arange(kw, device=query.device)[None, :]
    band = (j >= i) & (j <= i + w)  # [c, c + w]
    body = F.scaled_dot_product_attention(q, windows(key), windows(value), attn_mask=band, dropout_p=dropout,
                                          scale=scaling)  # [B*H, chunks, c, dv]
    body = body.reshape(b, h, total - w, -1)[:, :, : n - w]
    return torch.cat([head, body], dim=2)
