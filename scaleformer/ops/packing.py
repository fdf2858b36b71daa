"""Where each kept state lands in the decoder's packed input, and writing it there once.

A chunked method keeps ``[R, G]`` positions of its ``R`` chunk rows (some slots invalid) and, with a
query prefix, ``[batch, P]`` prefix states; the decoder gets per document its prefix states, then
its rows' valid states in order, padded right: ``hidden [batch, T, d]``. :func:`pack_plan` computes
every slot's place in that buffer on the CPU (from the lengths alone, before encoding), so
:class:`PackedSink` copies each encoder micro-batch's picked states into it as they come: one copy
of the kept states, no per-micro-batch lists, concatenation or repacking, with or without gradients
(:func:`write_rows`: every slot is written once, so its gradient is the buffer's, passed through).
Besides the copies, it keeps a training step's memory flat: no small per-micro-batch tensors stay
alive between the micro-batches' large transient ones, which otherwise pins freed heap memory.

The buffer has one extra row at its end, the *dump*: invalid slots are written there (one index for
all), so no masked selection copies the valid ones first; the dump is never read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class PackPlan:
    """Flat destinations in ``[batch * width + 1, d]`` (the last row is the dump)."""

    dst: torch.Tensor  # [R, G] CPU long: slot of each row item (invalid items: the dump)
    head_dst: torch.Tensor | None  # [batch, P] CPU long: slot of each prefix state, or None
    totals: torch.Tensor  # [batch] CPU: states per document
    width: int  # T: the longest document's states

    @property
    def n_docs(self) -> int:
        return self.totals.shape[0]

    @property
    def slots(self) -> int:
        return self.n_docs * self.width + 1

    def unpack(self, flat: torch.Tensor, mask_dtype: torch.dtype = torch.long) -> tuple[torch.Tensor, torch.Tensor]:
        """``hidden [batch, T, d]`` (a view of ``flat`` without its dump row) and ``mask [batch, T]``."""
        mask = torch.arange(self.width)[None, :] < self.totals[:, None]  # [batch, T]
        hidden = flat[: self.slots - 1].view(self.n_docs, self.width, flat.shape[-1])
        return hidden, mask.to(device=flat.device, dtype=mask_dtype)


def pack_plan(valid: torch.Tensor, doc: torch.Tensor, n_docs: int,
              head_valid: torch.Tensor | None = None) -> PackPlan:
    """Destinations of each document's valid items: its head (prefix) first, then its rows in order.

    valid: [R, G] CPU bool; doc: [R] CPU (rows of a document consecutive, documents in order);
    head_valid: [batch, P] CPU bool or None. Vectorised index arithmetic, no loop over rows.
    """
    row_counts = valid.sum(1)  # [R]
    head_counts = head_valid.sum(1) if head_valid is not None else torch.zeros(n_docs, dtype=torch.long)
    totals = head_counts + torch.zeros(n_docs, dtype=torch.long).index_add(0, doc, row_counts)  # [batch]
    width = int(totals.max()) if n_docs else 0
    dump = n_docs * width
    excl = row_counts.cumsum(0) - row_counts  # [R] items before this row, over the whole batch
    doc_base = torch.full((n_docs,), -1, dtype=torch.long).scatter_reduce(
        0, doc, excl, "amin", include_self=False)  # [batch] items before the document's first row
    row_off = head_counts[doc] + excl - doc_base[doc]  # [R]
    dst = torch.where(valid, doc[:, None] * width + row_off[:, None] + valid.long().cumsum(1) - 1, dump)
    head_dst = None
    if head_valid is not None:
        pos = torch.arange(n_docs)[:, None] * width + head_valid.long().cumsum(1) - 1  # [batch, P]
        head_dst = torch.where(head_valid, pos, dump)
    return PackPlan(dst=dst, head_dst=head_dst, totals=totals, width=width)


def pack_values(plan: PackPlan, values: torch.Tensor, head: torch.Tensor | None = None) -> torch.Tensor:
    """The flat buffer ``[slots, d]`` holding ``values [R, G, d]`` and ``head [batch, P, d]`` at their slots.

    Differentiable (``index_copy``: gradients flow to both); one copy of the values.
    """
    d = values.shape[-1]
    flat = values.new_zeros(plan.slots, d).index_copy(0, plan.dst.reshape(-1).to(values.device),
                                                       values.reshape(-1, d))
    if head is not None:
        flat.index_copy_(0, plan.head_dst.reshape(-1).to(values.device), head.reshape(-1, d).to(flat.dtype))
    return flat


def pack_rows(values: torch.Tensor, valid: torch.Tensor, doc: torch.Tensor, n_docs: int,
              head: tuple[torch.Tensor, torch.Tensor] | None = None,
              mask_dtype: torch.dtype = torch.long) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate each document's valid items (its head first, then its rows in order), padded right.

    values: [R, G, d]; valid: [R, G] CPU bool; doc: [R] CPU; head: ([batch, P, d], [batch, P] CPU bool).
    Returns ``hidden [batch, T, d]`` and ``mask [batch, T]`` (differentiable).
    """
    plan = pack_plan(valid, doc, n_docs, head[1] if head is not None else None)
    return plan.unpack(pack_values(plan, values, head[0] if head is not None else None), mask_dtype)


class _WriteRows(torch.autograd.Function):
    """``buf[idx] = src`` in place; differentiable when each row of ``buf`` is written at most once
    (the dump row excepted, whose gradient is zero): ``buf``'s gradient then passes through unchanged
    (no full-size masked copy per write) and ``src`` gets its rows of it."""

    @staticmethod
    def forward(ctx: Any, buf: torch.Tensor, idx: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        buf.index_copy_(0, idx, src)
        ctx.mark_dirty(buf)
        ctx.save_for_backward(idx)
        return buf

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, torch.Tensor]:
        (idx,) = ctx.saved_tensors
        return grad, None, grad.index_select(0, idx)


def write_rows(buf: torch.Tensor, idx: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``buf [M, d]`` with rows ``idx [n]`` set to ``src [n, d]`` (in place; see :class:`_WriteRows`)."""
    return _WriteRows.apply(buf, idx, src.to(buf.dtype))


class PackedSink:
    """Writes picked states straight into the packed buffer as micro-batches come.

    ``dests[i]`` ``[Q_i, G_i]`` (on the device) is pick i's slots; ``side`` = (pick, columns ``[c]``)
    keeps those columns of every row of that pick, valid or not, in :attr:`side` ``[Q, c, d]`` instead
    (what a method transforms before writing them, e.g. ScaleFormer's boundaries: their slots in
    ``dests`` should be the dump, so every slot is written once). Buffers are allocated at the first
    write, with the encoder output's dtype (autocast may differ from the weights').
    """

    def __init__(self, slots: int, dests: list[torch.Tensor], side: tuple[int, torch.Tensor] | None = None) -> None:
        self.slots, self.dests, self.side_spec = slots, dests, side
        self.flat: torch.Tensor | None = None  # [slots, d]
        self._side: torch.Tensor | None = None  # [Q * c, d]

    def write(self, pick: int, lo: int, hi: int, values: torch.Tensor) -> None:
        """Rows ``[lo, hi)`` of pick ``pick``: ``values [hi - lo, G, d]``."""
        d = values.shape[-1]
        if self.flat is None:
            self.flat = values.new_zeros(self.slots, d)
        self.flat = write_rows(self.flat, self.dests[pick][lo:hi].reshape(-1), values.reshape(-1, d))
        if self.side_spec is not None and self.side_spec[0] == pick:
            cols = self.side_spec[1]
            c = cols.shape[0]
            if self._side is None:
                self._side = values.new_zeros(self.dests[pick].shape[0] * c, d)
            rows = torch.arange(lo * c, hi * c, device=values.device)
            self._side = write_rows(self._side, rows, values.index_select(1, cols).reshape(-1, d))

    @property
    def side(self) -> torch.Tensor | None:
        """The kept-aside columns ``[Q, c, d]`` (None without ``side`` or before any write)."""
        if self._side is None:
            return None
        return self._side.view(-1, self.side_spec[1].shape[0], self._side.shape[-1])
