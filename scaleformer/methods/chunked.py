"""The shared machinery of every overlapping-chunk method (SLED, ScaleFormer, Unlimiformer, Memorizing).

Config fields and their validation, the chunk layout of a batch, micro-batched encoding that keeps
only the positions a method asks for, and packing the kept states for the decoder. A subclass
chooses which positions each chunk contributes (:meth:`ChunkedMethod.select`), may transform some
of them (:meth:`ChunkedMethod.combine` on :meth:`ChunkedMethod.combined_columns`, e.g. ScaleFormer's
fusion of its boundaries) and may compute them more cheaply than a full encoder pass
(:meth:`ChunkedMethod.pick_fn`, e.g. ScaleFormer's last layer at kept positions only).

Copies: the packed decoder input's layout is planned from the lengths before encoding
(:mod:`scaleformer.ops.packing`) and each micro-batch's kept states are written straight into it (one
copy, differentiable). The transformed columns are kept aside (small: ScaleFormer's 2k per chunk)
and written into their slots after :meth:`ChunkedMethod.combine`. ``method.checkpoint_chunks`` recomputes each encoder micro-batch in
backward, so a training step holds the kept states plus one micro-batch's activations.

A query prefix (``prefix_ids``) is handled as SLED does with ``prepend_prefix`` and ``encode_prefix``
(Mivg/SLED ``sled/modeling_sled.py``, ``SledPretrainedModel._run_sliding_window_forward_loop`` /
``_stacked`` and ``_handle_prefix``): it is prepended to every chunk, on top of the ``chunk_size``
window (``prefix + chunk_size`` must fit the backbone's max positions), the copies encoded with the
chunks are dropped, and the copy the decoder sees is the prefix encoded on its own, placed before the
document. Ours: prefixes are packed per document (no padding to a common prefix length, which SLED's
data pipeline needs); the prefix rows are encoded in the same micro-batches as the chunks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from omegaconf import MISSING

from scaleformer.errors import check
from scaleformer.methods.base import Encoded, Method, MethodConfig
from scaleformer.ops.chunking import (
    ChunkLayout,
    PickFn,
    auto_encoder_batch_size,
    encode_chunks,
    gather_chunk_ids,
    layout_chunks,
    prefix_rows,
)
from scaleformer.ops.packing import PackedSink, pack_plan, write_rows

if TYPE_CHECKING:
    from scaleformer.model.spec import BackboneSpec


@dataclass
class ChunkedConfig(MethodConfig):
    name: str = MISSING
    # Encoder window L: tokens per chunk (per-chunk special tokens included); a query prefix comes on top.
    chunk_size: int = 1024
    # Tokens shared by consecutive chunks (O); the last chunk ends at the document end, overlapping more.
    overlap: int = 150
    # Chunks per encoder pass: bounds activation memory in inference and checkpointed training; all chunks
    # of a batch are encoded either way. 0 = auto: on CUDA, from the free device memory at each call (see
    # auto_encoder_batch_size); 16 on CPU.
    encoder_batch_size: int = 16
    # Training without checkpoint_chunks: every chunk of the batch in one encoder pass. Their activations are
    # kept for backward however they are batched, so passes of encoder_batch_size bound nothing and only
    # add launches and smaller matmuls. False: encoder_batch_size at a time, as inference (same numbers).
    one_pass_training: bool = True
    # Training: recompute each encoder micro-batch in backward (activation checkpointing per micro-batch)
    # instead of keeping every chunk's activations; the same numbers (random state restored), more time.
    # null: on only when the memory model says a step on the longest training document would not fit the
    # device (scaleformer.ops.memory; decided when training starts, and logged).
    checkpoint_chunks: bool | None = None
    # False: chunks are raw slices of the tokenized document, as SLED: no token budget spent on per-chunk
    # specials, and the decoder sees the document's own <s>..</s> once (ScaleFormer's boundaries are then
    # content tokens except at the document's edges). True: each chunk is wrapped in the backbone's
    # specials (BART <s>..</s>, T5 ..</s>), content shrinks by their count, and ScaleFormer's boundaries
    # are those specials.
    chunk_special_tokens: bool = False

    RUNTIME_KEYS: ClassVar[tuple[str, ...]] = ("encoder_batch_size", "one_pass_training", "checkpoint_chunks")

    def __post_init__(self) -> None:
        check(self.chunk_size > 0, "method.chunk_size", self.chunk_size, "must be > 0")
        check(self.overlap >= 0, "method.overlap", self.overlap, "must be >= 0")
        check(self.overlap < self.chunk_size, "method.overlap", self.overlap,
              f"must be < method.chunk_size ({self.chunk_size})")
        check(self.encoder_batch_size >= 0, "method.encoder_batch_size", self.encoder_batch_size,
              "must be > 0 (or 0 = auto)")


class ChunkedMethod(Method):
    """Base of the overlapping-chunk methods; subclasses choose the positions kept per chunk.

    Subclasses implement :meth:`select` (which row positions to keep, on the CPU, before encoding)
    and may override :meth:`combine` (what to do with the kept hidden states, e.g. fusion).
    """

    cfg: ChunkedConfig

    def check_backbone(self, spec: BackboneSpec) -> None:
        c = self.cfg
        check(c.chunk_size <= spec.max_positions, "method.chunk_size", c.chunk_size,
              f"must be <= the backbone's max positions ({spec.max_positions})")
        if c.chunk_special_tokens:
            n_spec = len(spec.prefix_ids) + len(spec.suffix_ids)
            check(c.overlap < c.chunk_size - n_spec, "method.overlap", c.overlap,
                  f"must be < method.chunk_size minus the {n_spec} special tokens per chunk "
                  f"({c.chunk_size - n_spec}) with method.chunk_special_tokens=true")

    def fit_query(self, max_query_tokens: int) -> str | None:
        """SLED puts the query on top of every chunk, so query + chunk must fit the backbone's positions: a
        window that would not is shrunk to what is left (BART-base, L=1,024, 64-token queries: 960)."""
        c, limit = self.cfg, self.spec.max_positions
        room = limit - max_query_tokens
        if c.chunk_size <= room:
            return None
        check(room > c.overlap, "data.max_prefix_tokens", max_query_tokens,
              f"leaves a chunk of {room} tokens beside the query within the backbone's {limit} positions, not more "
              f"than method.overlap={c.overlap}: lower the query cap or the overlap")
        self.cfg = dataclasses.replace(c, chunk_size=room)
        return (f"method.chunk_size {c.chunk_size} -> {room}: queries of up to {max_query_tokens} tokens "
                f"(data.max_prefix_tokens) go on top of every chunk, and query + chunk must fit the backbone's "
                f"{limit} positions")

    # ------------------------------------------------------------------------------ planning (CPU)
    def check_prefix(self, n_tokens: int, where: str = "") -> None:
        if n_tokens:  # the layout of a one-token document with that prefix raises what the first batch would
            self.layout(torch.tensor([1]), torch.tensor([n_tokens]))

    def layout(self, doc_len: torch.Tensor, prefix_len: torch.Tensor | None = None) -> ChunkLayout:
        """Chunk rows for documents of ``doc_len`` tokens (specials included), with optional prefixes."""
        doc_len = doc_len.long().cpu()  # one small host copy per batch: every shape depends on it
        if bool((doc_len <= 0).any()):
            empty = (doc_len <= 0).nonzero().squeeze(1).tolist()
            raise ValueError(f"documents {empty} of the batch have no tokens: drop empty inputs upstream")
        c = self.cfg
        return layout_chunks(doc_len, prefix_len, chunk_size=c.chunk_size, overlap=c.overlap,
                             n_head=len(self.spec.prefix_ids), n_tail=len(self.spec.suffix_ids),
                             chunk_special_tokens=c.chunk_special_tokens, max_positions=self.spec.max_positions)

    def select(self, layout: ChunkLayout, training: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Row positions to keep ``[R, G]`` and which are real ``[R, G]`` (CPU; invalid ones = 0)."""
        raise NotImplementedError

    def combined_columns(self, width: int) -> torch.Tensor | None:
        """Columns of the ``[R, width]`` kept positions that :meth:`combine` transforms (None: none)."""
        return None

    def combine(self, kept: torch.Tensor, layout: ChunkLayout) -> torch.Tensor:
        """The kept states of :meth:`combined_columns` ``[R, c, d]`` as the decoder sees them, same shape."""
        return kept

    def pick_fn(self, training: bool) -> PickFn | None:
        """How an encoder micro-batch's kept states are computed (None: the full encoder, then a gather)."""
        return None

    # ------------------------------------------------------------------------------------ encoding
    def encode(self, encoder, input_ids, attention_mask, *, training: bool, prefix_ids=None,
               prefix_mask=None) -> Encoded:
        return self.encode_with_layout(encoder, input_ids, attention_mask, training=training,
                                       prefix_ids=prefix_ids, prefix_mask=prefix_mask)[0]

    def encode_with_layout(
        self,
        encoder: torch.nn.Module,
        input_ids: torch.Tensor,  # [batch, N]
        attention_mask: torch.Tensor,  # [batch, N]
        *,
        training: bool,
        prefix_ids: torch.Tensor | None = None,  # [batch, P]
        prefix_mask: torch.Tensor | None = None,  # [batch, P]
    ) -> tuple[Encoded, ChunkLayout]:
        """:meth:`encode`, also returning the batch's chunk layout (its CPU lengths, for subclasses)."""
        dev = input_ids.device
        batch = input_ids.shape[0]
        if prefix_ids is not None and prefix_mask is None:
            prefix_mask = torch.ones_like(prefix_ids)
        lengths = attention_mask.sum(1)  # [batch]
        if prefix_ids is not None:  # one host copy for both (every shape below depends on them)
            doc_len, prefix_len = torch.stack([lengths, prefix_mask.sum(1).to(lengths.dtype)]).cpu()
        else:
            doc_len, prefix_len = lengths.cpu(), None
        lay = self.layout(doc_len, prefix_len)
        spec = self.spec
        wrap = self.cfg.chunk_special_tokens
        ids, mask = gather_chunk_ids(lay, input_ids, pad_id=spec.pad_id,
                                     head_ids=spec.prefix_ids if wrap else (),
                                     tail_ids=spec.suffix_ids if wrap else (), prefix_ids=prefix_ids)  # [R, W]
        pos, valid = self.select(lay, training)  # [R, G] CPU
        picks: list = [(None, pos.to(dev))]
        row_len = lay.row_len  # [R] CPU
        p_max = int(lay.doc_prefix.max()) if prefix_ids is not None else 0
        head_valid = torch.arange(p_max)[None, :] < lay.doc_prefix[:, None] if p_max else None  # [batch, P]
        plan = pack_plan(valid, lay.table.doc, batch, head_valid)
        dests = [plan.dst]
        if p_max:  # the kept prefix copy: each prefix encoded on its own, in extra rows after the chunks
            docs, p_ids, p_mask = prefix_rows(prefix_ids, lay.doc_prefix, pad_id=spec.pad_id)  # [B'], [B', P]
            width = max(ids.shape[1], p_max)
            ids = torch.cat([_pad_to(ids, width, spec.pad_id), _pad_to(p_ids, width, spec.pad_id)])
            mask = torch.cat([_pad_to(mask, width, 0), _pad_to(p_mask, width, 0)])
            row_len = torch.cat([row_len, lay.doc_prefix[docs]])
            n_rows = lay.table.rows
            j = torch.arange(p_max)[None, :]  # [1, P]
            picks = [(torch.arange(n_rows), picks[0][1]),
                     (n_rows + torch.arange(docs.shape[0]), torch.minimum(j, lay.doc_prefix[docs][:, None] - 1).to(dev))]
            dests.append(plan.head_dst[docs])
        cols = self.combined_columns(pos.shape[1])  # CPU [c] or None
        if cols is not None:  # written after combine(): their first write goes to the dump
            dests[0] = dests[0].index_fill(1, cols, plan.slots - 1)
        grads = training and torch.is_grad_enabled()
        if grads and self.cfg.one_pass_training and not self.cfg.checkpoint_chunks:
            micro = ids.shape[0]  # every chunk's activations stay for backward: one pass, the largest matmuls
        else:
            micro = self.cfg.encoder_batch_size or auto_encoder_batch_size(ids.device, ids.shape[1], self.spec,
                                                                           training=grads)
        # Each micro-batch's kept states go straight into the packed decoder input (gradients flow).
        sink = PackedSink(plan.slots, [x.to(dev) for x in dests], None if cols is None else (0, cols.to(dev)))
        encode_chunks(encoder, ids, mask.to(attention_mask.dtype), row_len, micro, picks, sink=sink,
                      pick_fn=self.pick_fn(training), checkpoint=self.cfg.checkpoint_chunks)
        flat = sink.flat  # [slots, d] (every batch has rows: empty documents are refused above)
        if cols is not None and sink.side is not None:  # the transformed columns into their slots
            fused = self.combine(sink.side, lay)  # [R, c, d]
            flat = write_rows(flat, plan.dst[:, cols].reshape(-1).to(dev), fused.reshape(-1, fused.shape[-1]))
        hidden, out_mask = plan.unpack(flat, attention_mask.dtype)
        return Encoded(hidden, out_mask), lay

    def decoder_length(self, n_tokens: int) -> int:
        """Decoder-side length for one document of ``n_tokens`` (specials included), no prefix."""
        _, valid = self.select(self.layout(torch.tensor([n_tokens])), training=False)
        return int(valid.sum())


def _pad_to(x: torch.Tensor, width: int, value: int) -> torch.Tensor:
    """Right-pad the last dimension of ``x`` [rows, w] to ``width``."""
    return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)
