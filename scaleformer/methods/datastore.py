"""What the retrieval methods (Unlimiformer, Memorizing Transformers) give the decoder: two encodings.

* The **local window**: the backbone's own encoding of the input's first ``max_positions`` tokens as they
  are (query prefix first), :class:`FirstWindow`. Unlimiformer's reference encodes and generates from
  ``input_ids[:, :window]`` (``Unlimiformer.pre_generate_hook``, and ``pre_forward_hook`` in training, in
  abertsch72/unlimiformer ``src/unlimiformer.py``, commit e38b014), so its non-retrieving layers see that
  encoding. Unlike :class:`~scaleformer.methods.truncation.Truncation`, a cut input is *not* re-closed with
  ``</s>``: that is truncation's own rule, and a re-closed window changed the first step's logits by 0.09
  against the reference. Memorizing Transformers as the Unlimiformer paper runs it (retrieval in one layer)
  is that code with one retrieving layer, so its local context is the same window (Wu et al. 2022, section 3:
  the current segment).
* The **datastore**: every token of the input encoded in overlapping chunks with SLED's windows and
  keep rule (Unlimiformer's ``Unlimiformer.window_indices`` is a copy of SLED's ``_window_indices``;
  ``chunked_encode_input`` / ``reset_memory`` keep ``[update_start, update_end)`` of each window).

The decoder gets ``[local window | datastore]`` along the encoder axis and one mask over both; the
method's :class:`~scaleformer.ops.retrieval.RetrievalState` records where the datastore starts, and the
patched cross-attention layers slice accordingly (beam search expands both parts with the batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from scaleformer.methods.base import Encoded
from scaleformer.methods.sled import Sled, SledConfig
from scaleformer.methods.truncation import Truncation, TruncationConfig
from scaleformer.ops.chunking import ChunkLayout
from scaleformer.ops.retrieval import RetrievalState

if TYPE_CHECKING:
    from scaleformer.model.spec import BackboneSpec


class FirstWindow(Truncation):
    """The input's first ``window`` tokens as they are, the end of a cut input not re-closed: the retrieval
    methods' local window, as Unlimiformer's reference cuts it (``input_ids[:, :window]``)."""

    def truncate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.window
        return input_ids[:, :w], attention_mask[:, :w]  # [batch, <= w]


class DatastoreMethod(Sled):
    """Base of the retrieval methods: the local window, the SLED datastore, and the shared state."""

    requires = ("retrieval_layers",)

    def __init__(self, cfg: SledConfig, spec: BackboneSpec) -> None:
        super().__init__(cfg, spec)
        self.local_window = FirstWindow(TruncationConfig(), spec)  # the backbone's own first window, uncut
        self.state = RetrievalState(k=self.k_resolved(), window=spec.max_positions)

    def k_resolved(self) -> int:
        """Keys retrieved per query and head."""
        raise NotImplementedError

    def encode_parts(
        self,
        encoder: torch.nn.Module,
        input_ids: torch.Tensor,  # [batch, N]
        attention_mask: torch.Tensor,  # [batch, N]
        *,
        training: bool,
        prefix_ids: torch.Tensor | None = None,
        prefix_mask: torch.Tensor | None = None,
        local: bool = True,
    ) -> tuple[Encoded | None, Encoded, ChunkLayout]:
        """The local window ``[batch, W]`` (None if not asked) and the datastore ``[batch, T_s]``."""
        store, lay = self.encode_with_layout(encoder, input_ids, attention_mask, training=training,
                                             prefix_ids=prefix_ids, prefix_mask=prefix_mask)
        window = self.local_window.encode(encoder, input_ids, attention_mask, training=training,
                                          prefix_ids=prefix_ids, prefix_mask=prefix_mask) if local else None
        return window, store, lay

    def local_covers(self, lay: ChunkLayout) -> torch.Tensor:
        """Datastore positions ``[batch]`` (CPU) the local window holds: its prefix + document tokens, at most
        its width (a cut window holds exactly its first ``w`` tokens)."""
        total = lay.doc_len + lay.doc_prefix  # [batch] datastore states per document
        return total.clamp(max=self.local_window.window)

    @staticmethod
    def join(window: Encoded, store_hidden: torch.Tensor, store_mask: torch.Tensor) -> Encoded:
        """``[local window | datastore]`` for the decoder: hidden ``[batch, W + T_s, d]``, one mask."""
        return Encoded(torch.cat([window.hidden, store_hidden], 1),
                       torch.cat([window.mask, store_mask.to(window.mask.dtype)], 1))

    def describe(self) -> dict[str, Any]:
        return super().describe() | {"k_resolved": self.state.k}
