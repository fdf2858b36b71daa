"""Each row's tokens where its mask is 1, moved to the front of the row: the layout every method reads.

Why: a method reads each document's length off its mask (``mask.sum(1)``) and its tokens as the first that
many of the row, i.e. it assumes padding on the right. Left padding (``tokenizer.padding_side = "left"``,
the habit of decoder-only models), or masked positions inside a document, then put padding inside the
chunks and cut the document's end: a batched ``generate`` gave other summaries than the unpadded document,
with no word. A plain T5 reads either side's padding alike (its positions are relative), so the model
class reads any mask as the unpadded document: the kept tokens, in order, then padding.

How: one stable sort of the "is padding" flags per row gives the gather order (kept positions first, each
group in its original order); no host sync, and a right-padded batch comes back unchanged (the order is the
identity). Positions dropped from inside a document are removed, as though the tokenizer never wrote them.
"""

from __future__ import annotations

import torch


def right_aligned(ids: torch.Tensor, mask: torch.Tensor, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``ids`` and ``mask`` ``[batch, N]`` with each row's kept tokens (``mask != 0``) first, in their order,
    then ``pad_id`` tokens at mask 0. The mask keeps its dtype."""
    pad = mask == 0  # [batch, N]
    order = torch.sort(pad.to(torch.uint8), dim=1, stable=True).indices  # [batch, N] kept positions first
    kept = ~pad.gather(1, order)  # [batch, N] True for the first (row's length) positions
    out = ids.gather(1, order).masked_fill(~kept, pad_id)
    return out, kept.to(mask.dtype)
