"""SLED (Ivgi et al. 2023): overlapping chunks, each token passed to the decoder exactly once."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from scaleformer.chunking import ChunkLayout
from scaleformer.methods.chunked import ChunkedConfig, ChunkedMethod


@dataclass
class SledConfig(ChunkedConfig):
    name: str = "sled"


class Sled(ChunkedMethod):
    """Every token reaches the decoder once, from the chunk where it is furthest from a chunk edge.

    Consecutive chunks split their overlap at its midpoint (for equal-length chunks that is exactly
    "furthest from an edge"); the first chunk keeps its start, the last keeps its end. With a query
    prefix, only the first chunk's encoded copy of it is kept, placed before the document.
    """

    name = "sled"
    Config = SledConfig

    def select(self, layout: ChunkLayout, training: bool) -> tuple[torch.Tensor, torch.Tensor]:
        t = layout.table
        end = t.start + t.length  # [R] content coordinates
        cut = (t.start.roll(-1) + end) // 2  # [R] split with the next chunk (unused for last chunks)
        lo = torch.where(t.is_first, 0, cut.roll(1) - t.start + layout.head)  # [R] segment coordinates
        hi = torch.where(t.is_last, layout.seg_len, cut - t.start + layout.head)  # [R]
        count = hi - lo  # [R]
        j = torch.arange(int(count.max()))[None, :]  # [1, G]
        valid = j < count[:, None]  # [R, G]
        pos = torch.where(valid, layout.prefix_len[:, None] + lo[:, None] + j, 0)  # [R, G] row positions
        return pos, valid
