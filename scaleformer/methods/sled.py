"""SLED (Ivgi et al. 2023): overlapping chunks, each token passed to the decoder exactly once.

Which chunk passes a token on follows SLED's own code by default (``method.keep_rule=sled``:
``SledPretrainedModel._window_indices`` in Mivg/SLED ``sled/modeling_sled.py``): the first chunk keeps
its start, every middle chunk its centre (``overlap / 2`` dropped at each side), the last chunk
everything from the previous chunk's kept end to the document end. ``method.keep_rule=centre`` splits
every overlap, the last one included, at its midpoint. See :func:`scaleformer.ops.chunking.keep_spans`.

Chunks are raw slices of the one tokenized document by default (SLED slices ``input_ids`` as they
are), so the decoder sees the document's own ``<s>``/``</s>`` once. A query prefix is prepended to
every chunk on top of ``chunk_size`` and the decoder gets the prefix encoded on its own, before the
document (SLED's ``prepend_prefix`` + ``encode_prefix``; see :mod:`scaleformer.methods.chunked`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from scaleformer.errors import check
from scaleformer.methods.chunked import ChunkedConfig, ChunkedMethod
from scaleformer.ops.chunking import KEEP_RULES, ChunkLayout, keep_spans


@dataclass
class SledConfig(ChunkedConfig):
    name: str = "sled"
    # Which chunk passes each token on. "sled" (SLED's _window_indices): the first chunk keeps its start,
    # middle chunks their centre (O/2 dropped each side), the last chunk from the previous chunk's kept end
    # to the document end. "centre": every overlap, the last one too, split at its midpoint.
    keep_rule: str = "sled"

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.keep_rule in KEEP_RULES, "method.keep_rule", self.keep_rule,
              f"must be one of {', '.join(KEEP_RULES)}")


class Sled(ChunkedMethod):
    """Every token reaches the decoder once, from the chunk the keep rule assigns it to."""

    name = "sled"
    small_settings = {"chunk_size": 48, "overlap": 12}
    Config = SledConfig
    cfg: SledConfig

    def select(self, layout: ChunkLayout, training: bool) -> tuple[torch.Tensor, torch.Tensor]:
        t = layout.table
        keep_lo, keep_hi = keep_spans(t, self.cfg.overlap, self.cfg.keep_rule)  # [R] content coordinates
        # Segment coordinates; the first chunk also keeps its head specials, the last its tail specials.
        lo = torch.where(t.is_first, 0, keep_lo - t.start + layout.head)  # [R]
        hi = torch.where(t.is_last, layout.seg_len, keep_hi - t.start + layout.head)  # [R]
        count = hi - lo  # [R]
        j = torch.arange(int(count.max()))[None, :]  # [1, G]
        valid = j < count[:, None]  # [R, G]
        pos = torch.where(valid, layout.prefix_len[:, None] + lo[:, None] + j, 0)  # [R, G] row positions
        return pos, valid
