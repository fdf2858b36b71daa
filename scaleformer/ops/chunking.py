"""Overlapping segmentation and micro-batched chunk encoding, shared by SLED, ScaleFormer and the retrieval methods.

Segmentation (paper section 3.1): chunks of ``chunk_size`` content tokens with stride
``chunk_size - overlap``. The last chunk of a document longer than one chunk is shifted back to end
exactly at the document end, so every chunk of a long document is full and the last overlap is
>= ``overlap``; a document of at most ``chunk_size`` tokens is one (short) chunk. Count:
``max(1, ceil((N - O) / (L - O)))``. These are SLED's windows (``SledPretrainedModel._window_indices``
in Mivg/SLED ``sled/modeling_sled.py``: stride ``L - 2 * margin``, last window ``[N - L, N)``).

Kept spans (:func:`keep_spans`, for methods that pass every token on once), two rules:

* ``sled`` (SLED's ``_window_indices``): the first chunk keeps ``[0, end - O/2)``, a middle chunk its
  centre ``[start + O/2, end - O/2)``, the last chunk everything from the previous chunk's kept end
  to the document end. For an odd overlap the left margin is ``floor(O/2)`` (ours: SLED's overlap
  is always even, ``2 * int(L * (1 - window_fraction) / 2)``).
* ``centre``: consecutive chunks split their overlap at its midpoint (same as ``sled`` except for the
  last, larger overlap).

Query prefix (SLED's ``_handle_prefix``, ``_concat_input_prefix_if_needed``): every chunk row is
``[prefix][chunk_size tokens]``, so the prefix sits on top of the window, not inside it, and
``prefix + chunk_size`` must fit the backbone's max positions.

Everything is planned on the CPU from the per-document lengths (one small host copy per batch: the
shapes depend on it), then token ids for all chunks of all documents are gathered on the device into
one padded ``[chunks, width]`` batch with tensor indexing (no loop over tokens or chunks). The
encoder runs over micro-batches of chunks, and only the positions a method asks for are kept from
each micro-batch, so memory is bounded by the micro-batch plus what the decoder will attend to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.utils.checkpoint

from scaleformer.errors import ConfigError
from scaleformer.ops.host_memory import release_freed_memory
from scaleformer.ops.kept_layer import full_then_gather
from scaleformer.ops.packing import PackedSink


def num_chunks(n_tokens: torch.Tensor, chunk_size: int, overlap: int) -> torch.Tensor:
    """Chunks per document ``[batch]``, ``max(1, ceil((N - O) / (L - O)))``."""
    stride = chunk_size - overlap
    over = (n_tokens - overlap).clamp(min=1)  # [batch]
    return torch.div(over + stride - 1, stride, rounding_mode="floor").clamp(min=1)


@dataclass(frozen=True)
class ChunkTable:
    """Flat table of all chunks of a batch: documents in order, each document's chunks in order."""

    doc: torch.Tensor  # [R] document of each chunk
    index: torch.Tensor  # [R] chunk index within its document
    start: torch.Tensor  # [R] first content token of the chunk (document content coordinates)
    length: torch.Tensor  # [R] content tokens in the chunk
    counts: torch.Tensor  # [batch] chunks per document
    first: torch.Tensor  # [batch] row of each document's first chunk

    @property
    def rows(self) -> int:
        return self.doc.shape[0]

    @property
    def is_first(self) -> torch.Tensor:  # [R]
        return self.index == 0

    @property
    def is_last(self) -> torch.Tensor:  # [R]
        return self.index == self.counts[self.doc] - 1


def plan_chunks(n_tokens: torch.Tensor, chunk_size: int, overlap: int) -> ChunkTable:
    """Vectorised chunk plan for a batch of content lengths (CPU int64 tensors in, CPU tables out)."""
    n_tokens = torch.as_tensor(n_tokens, dtype=torch.long)  # [batch]
    counts = num_chunks(n_tokens, chunk_size, overlap)  # [batch]
    first = counts.cumsum(0) - counts  # [batch]
    doc = torch.repeat_interleave(torch.arange(n_tokens.shape[0]), counts)  # [R]
    index = torch.arange(doc.shape[0]) - first[doc]  # [R]
    n = n_tokens[doc]  # [R]
    start = index * (chunk_size - overlap)  # [R]
    last_of_many = (index == counts[doc] - 1) & (counts[doc] > 1)
    start = torch.where(last_of_many, n - chunk_size, start)  # SLED: the last window is [N - L, N)
    length = (n - start).clamp(max=chunk_size)  # [R]
    return ChunkTable(doc=doc, index=index, start=start, length=length, counts=counts, first=first)


KEEP_RULES = ("sled", "centre")


def keep_spans(t: ChunkTable, overlap: int, rule: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Content span ``[lo, hi)`` (document content coordinates, ``[R]`` each) each chunk passes on.

    Every content token is kept by exactly one chunk. Each chunk's kept span starts where the
    previous one's ended; the rules differ in where a chunk's span ends (see the module docstring).
    """
    end = t.start + t.length  # [R]
    if rule == "sled":  # _window_indices: update_end = context_end - margin, the last window to N
        cut = end - (overlap - overlap // 2)  # [R]
    elif rule == "centre":
        cut = torch.div(t.start.roll(-1) + end, 2, rounding_mode="floor")  # midpoint of the next overlap
    else:
        raise ValueError(f"keep rule {rule!r}: must be one of {', '.join(KEEP_RULES)}")
    hi = torch.where(t.is_last, end, cut)  # [R]
    lo = torch.where(t.is_first, t.start, hi.roll(1))  # [R] the previous chunk's kept end
    return lo, hi


@dataclass(frozen=True)
class ChunkLayout:
    """Where everything sits in each encoder row: ``[query prefix][head][content][tail][pad]``.

    ``head``/``tail`` are the backbone's special tokens when chunks are wrapped in them
    (``chunk_special_tokens``), else 0. ``special_lo``/``special_hi`` count the special tokens at the
    start/end of each row's segment (its head/tail, or the document's own specials when raw slices of
    the document include them): methods never pick those as content.
    """

    table: ChunkTable
    doc_len: torch.Tensor  # [batch] tokens of each document (with its document-level specials)
    doc_prefix: torch.Tensor  # [batch] query-prefix tokens of each document
    prefix_len: torch.Tensor  # [R] query-prefix tokens at the start of the row
    head: torch.Tensor  # [R] special tokens added before the content
    tail: torch.Tensor  # [R] special tokens added after the content
    special_lo: torch.Tensor  # [R]
    special_hi: torch.Tensor  # [R]
    content_offset: int  # document position of content token 0 (specials stripped: len(prefix specials))
    width: int  # longest row

    @property
    def seg_len(self) -> torch.Tensor:  # [R] row tokens after the query prefix
        return self.head + self.table.length + self.tail

    @property
    def row_len(self) -> torch.Tensor:  # [R]
        return self.prefix_len + self.seg_len

    def doc_position(self, seg_pos: torch.Tensor) -> torch.Tensor:
        """Document position of segment positions ``[R, G]`` (for content positions)."""
        t = self.table
        return self.content_offset + t.start[:, None] + seg_pos - self.head[:, None]


def layout_chunks(
    doc_len: torch.Tensor,
    prefix_len: torch.Tensor | None,
    *,
    chunk_size: int,
    overlap: int,
    n_head: int,
    n_tail: int,
    chunk_special_tokens: bool,
    max_positions: int | None = None,
) -> ChunkLayout:
    """Plan the chunk rows of a batch (CPU tensors); ``n_head``/``n_tail``: the backbone's specials.

    A query prefix sits before the ``chunk_size`` tokens of every row (SLED); a prefix longer than
    ``max_positions - chunk_size`` is a ConfigError naming its length and that limit.
    """
    doc_len = doc_len.long().cpu()  # [batch]
    batch = doc_len.shape[0]
    plen = torch.zeros(batch, dtype=torch.long) if prefix_len is None else prefix_len.long().cpu()
    n_spec = n_head + n_tail if chunk_special_tokens else 0
    room = chunk_size - n_spec  # content tokens per chunk
    if room <= overlap:
        raise ConfigError(f"method.overlap={overlap}: must be < the {room} content tokens of a chunk "
                          f"(method.chunk_size={chunk_size} less {n_spec} special tokens)")
    p_max = int(plen.max()) if batch else 0
    if max_positions is not None and p_max + chunk_size > max_positions:
        raise ConfigError(
            f"a query prefix of {p_max} tokens does not fit beside method.chunk_size={chunk_size}: "
            f"prefix + chunk_size must be <= the backbone's max positions ({max_positions}), i.e. "
            f"prefixes of at most {max(max_positions - chunk_size, 0)} tokens; shorten the prefix or "
            "lower method.chunk_size")
    if chunk_special_tokens:
        content = (doc_len - n_head - n_tail).clamp(min=0)
        offset = n_head
    else:
        content, offset = doc_len, 0
    t = plan_chunks(content, room, overlap)
    rows = t.rows
    if chunk_special_tokens:
        head = torch.full((rows,), n_head, dtype=torch.long)
        tail = torch.full((rows,), n_tail, dtype=torch.long)
        lo, hi = head, tail
    else:
        head = tail = torch.zeros(rows, dtype=torch.long)
        # The document's own specials sit at its first n_head and last n_tail positions.
        lo = (n_head - t.start).clamp(min=0).minimum(t.length)
        hi = (t.start + t.length - (doc_len[t.doc] - n_tail)).clamp(min=0).minimum(t.length)
    layout = ChunkLayout(table=t, doc_len=doc_len, doc_prefix=plen, prefix_len=plen[t.doc], head=head,
                         tail=tail, special_lo=lo, special_hi=hi, content_offset=offset, width=0)
    return replace(layout, width=int(layout.row_len.max()) if rows else 0)


def prefix_rows(
    prefix_ids: torch.Tensor,  # [batch, P] real tokens first
    doc_prefix: torch.Tensor,  # [batch] CPU prefix lengths
    *,
    pad_id: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One row per document with a prefix, holding the prefix alone (SLED ``encode_prefix``).

    Returns the documents ``[B']`` (CPU), ids ``[B', P']`` and mask ``[B', P']`` on prefix_ids' device.
    """
    docs = (doc_prefix > 0).nonzero().squeeze(1)  # [B'] CPU
    width = int(doc_prefix.max()) if docs.numel() else 0
    j = torch.arange(width)[None, :]  # [1, P']
    mask = (j < doc_prefix[docs][:, None]).to(prefix_ids.device)  # [B', P']
    ids = prefix_ids[docs.to(prefix_ids.device), :width].masked_fill(~mask, pad_id)
    return docs, ids, mask.long()


def gather_chunk_ids(
    layout: ChunkLayout,
    input_ids: torch.Tensor,  # [batch, N]
    *,
    pad_id: int,
    head_ids: Sequence[int] = (),
    tail_ids: Sequence[int] = (),
    prefix_ids: torch.Tensor | None = None,  # [batch, P]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and mask of every chunk row, ``[R, width]``, gathered on input_ids' device."""
    dev = input_ids.device
    batch, n = input_ids.shape
    t = layout.table
    j = torch.arange(layout.width, device=dev)[None, :]  # [1, W]
    doc = t.doc.to(dev)[:, None]  # [R, 1]
    plen = layout.prefix_len.to(dev)[:, None]  # [R, 1]
    head = layout.head.to(dev)[:, None]
    length = t.length.to(dev)[:, None]
    c = j - plen - head  # [R, W] content offset inside the chunk
    src = (layout.content_offset + t.start.to(dev)[:, None] + c).clamp(0, max(n - 1, 0))
    ids = input_ids.reshape(-1)[doc * n + src]  # [R, W]
    if len(head_ids):
        h = torch.tensor(list(head_ids), dtype=ids.dtype, device=dev)
        ids = torch.where((c < 0) & (j >= plen), h[(j - plen).clamp(0, len(h) - 1)], ids)
    if len(tail_ids):
        tl = torch.tensor(list(tail_ids), dtype=ids.dtype, device=dev)
        ids = torch.where(c >= length, tl[(c - length).clamp(0, len(tl) - 1)], ids)
    if prefix_ids is not None and prefix_ids.shape[1] > 0:
        p = prefix_ids.shape[1]
        pre = prefix_ids.to(ids.dtype).reshape(-1)[doc * p + j.clamp(max=p - 1)]  # [R, W]
        ids = torch.where(j < plen, pre, ids)
    mask = j < layout.row_len.to(dev)[:, None]  # [R, W]
    return ids.masked_fill(~mask, pad_id), mask.long()


Pick = tuple[torch.Tensor | None, torch.Tensor]
# (encoder, ids [mb, w], mask [mb, w], picks local to the micro-batch) -> one [Q, G, d] per pick
PickFn = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor, list[Pick]], list[torch.Tensor]]


def encode_chunks(
    encoder: torch.nn.Module,
    ids: torch.Tensor,  # [R, W]
    mask: torch.Tensor,  # [R, W]
    row_len: torch.Tensor,  # [R] CPU
    batch_size: int,
    picks: Sequence[Pick],
    *,
    pick_fn: PickFn | None = None,
    checkpoint: bool = False,
    sink: PackedSink | None = None,
) -> list[torch.Tensor | None]:
    """Encode rows ``batch_size`` at a time, keeping only the picked positions of each micro-batch.

    Each pick is ``(rows, positions)``: ``rows`` an ascending CPU tensor ``[Q]`` of row indices (None =
    every row) and ``positions`` a device tensor ``[Q, G]`` of valid row positions (< row length).
    Returns one ``[Q, G, d]`` tensor per pick. Gradients flow; micro-batches are trimmed to their own
    longest row. The loop is over micro-batches only.

    ``pick_fn`` computes a micro-batch's picked states (default: the full encoder, then a gather;
    :func:`scaleformer.ops.kept_layer.encode_at` evaluates the last layer at the picked positions only).
    ``checkpoint``: with gradients on, each micro-batch is recomputed in backward
    (``torch.utils.checkpoint``, non-reentrant, random state restored), so training holds the picked
    states plus one micro-batch's activations (on the CPU, freed memory is handed back between
    micro-batches, forward and backward: :func:`release_freed_memory`). ``sink``: each micro-batch's states are written
    straight into the packed decoder input (:class:`scaleformer.ops.packing.PackedSink`) and the returned
    list holds None.
    """
    fn = pick_fn or full_then_gather
    n_rows = ids.shape[0]
    starts = torch.arange(0, n_rows, batch_size)  # [M]
    ends = (starts + batch_size).clamp(max=n_rows)
    widths = [int(w) for w in _segment_max(row_len, starts, ends)]
    spans = []
    for rows, _ in picks:
        if rows is None:
            spans.append(None)
        else:
            lo = torch.searchsorted(rows, starts).tolist()
            hi = torch.searchsorted(rows, ends).tolist()
            spans.append((rows.to(ids.device), lo, hi))
    outs: list[list[torch.Tensor]] = [[] for _ in picks]
    d = 0
    recompute = checkpoint and torch.is_grad_enabled()
    for m, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
        local: list[Pick] = []
        where: list[tuple[int, int, int]] = []  # (pick, first, end) of the pick's rows in this micro-batch
        for i, (_, pos) in enumerate(picks):
            if spans[i] is None:
                local.append((None, pos[a:b]))
                where.append((i, a, b))
            else:
                rows_dev, lo, hi = spans[i]
                if lo[m] < hi[m]:
                    local.append((rows_dev[lo[m]:hi[m]] - a, pos[lo[m]:hi[m]]))
                    where.append((i, lo[m], hi[m]))
        if not local:
            continue
        w = widths[m]

        def run(mb_ids: torch.Tensor, mb_mask: torch.Tensor, local: list[Pick] = local) -> tuple[torch.Tensor, ...]:
            return tuple(fn(encoder, mb_ids, mb_mask, local))

        args = (ids[a:b, :w], mask[a:b, :w])
        vals = torch.utils.checkpoint.checkpoint(run, *args, use_reentrant=False) if recompute else run(*args)
        if recompute and ids.device.type == "cpu":  # after this micro-batch, and before its recomputation
            release_freed_memory()
            vals[0].register_hook(release_freed_memory)
        for (i, lo, hi), v in zip(where, vals):  # v: [q, G, d]
            d = v.shape[-1]
            if sink is not None:
                sink.write(i, lo, hi, v)
            else:
                outs[i].append(v)
    if sink is not None:
        return [None] * len(picks)
    return [torch.cat(o, 0) if o else ids.new_zeros((0, pos.shape[1], d), dtype=torch.float)
            for o, (_, pos) in zip(outs, picks)]


def auto_encoder_batch_size(device: torch.device, width: int, spec: Any, *, training: bool,
                            free_bytes: int | None = None, fraction: float = 0.5, cpu_default: int = 16) -> int:
    """Chunks per encoder pass that fit in `fraction` of the free device memory.

    Activation bytes per chunk follow Korthikanti et al. (2022) for 16-bit training,
    ``width * d * (34 + 5 * heads * width / d)`` per layer, times the encoder layers when training
    (all kept for backward) or one layer at inference (freed as the pass goes), heads ~ d / 64.
    Reads free memory with one cudaMemGetInfo call (no stream sync), capped by the process's
    ``set_per_process_memory_fraction`` when one is set; CPUs get `cpu_default`.
    """
    if free_bytes is None:
        if device.type != "cuda":
            return cpu_default
        # An index-less "cuda" means the current device; the fraction's getter refuses it (torch 2.11).
        index = device.index if device.index is not None else torch.cuda.current_device()
        free_bytes, total = torch.cuda.mem_get_info(index)
        cap = getattr(torch.cuda, "get_per_process_memory_fraction", None)  # torch >= 2.5
        if cap is not None and (f := cap(index)) < 1.0:  # the allocator's cap, not the device, limits us
            free_bytes = min(free_bytes, max(int(f * total) - torch.cuda.memory_reserved(index), 0))
    d = max(int(getattr(spec, "d_model", 0) or 768), 1)
    layers = max(int(getattr(spec, "n_encoder_layers", 0) or 12), 1) if training else 1
    heads = max(d // 64, 1)
    per_chunk = width * d * (34 + 5 * heads * width / d) * layers
    return int(max(1, min(1024, fraction * free_bytes // max(per_chunk, 1))))


def _segment_max(x: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Max of ``x[a:b]`` for each (a, b) of consecutive equal-size segments, vectorised."""
    seg = torch.repeat_interleave(torch.arange(starts.shape[0]), ends - starts)  # [R]
    return torch.zeros(starts.shape[0], dtype=x.dtype).scatter_reduce(0, seg, x, "amax")
