"""Standard truncation (the paper's "Standard (Trunc.)" row): encode the first window only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from scaleformer.errors import check
from scaleformer.methods.base import Encoded, Method, MethodConfig

if TYPE_CHECKING:
    from scaleformer.model.spec import BackboneSpec


@dataclass
class TruncationConfig(MethodConfig):
    name: str = "truncation"
    # Tokens kept, document-level special tokens included; None = the backbone's max positions.
    max_tokens: int | None = None


class Truncation(Method):
    name = "truncation"
    Config = TruncationConfig

    def check_backbone(self, spec: BackboneSpec) -> None:
        n = self.cfg.max_tokens
        if n is not None:
            check(n > len(spec.prefix_ids) + len(spec.suffix_ids), "method.max_tokens", n,
                  f"must exceed the {len(spec.prefix_ids) + len(spec.suffix_ids)} special tokens")
            check(n <= spec.max_positions, "method.max_tokens", n,
                  f"must be <= the backbone's max positions ({spec.max_positions})")

    def query_window(self) -> tuple[int, str]:
        return self.window, "method.max_tokens" if self.cfg.max_tokens else "backbone.max_positions"

    @property
    def window(self) -> int:
        return self.cfg.max_tokens or self.spec.max_positions

    def truncate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keep the first `window` tokens, re-closing cut documents with the suffix specials (</s>)."""
        w = self.window
        if input_ids.shape[1] <= w:
            return input_ids, attention_mask
        ids = input_ids[:, :w].clone()  # [batch, w]
        mask = attention_mask[:, :w]
        suffix = self.spec.suffix_ids
        if suffix:
            cut = attention_mask.sum(1) > w  # [batch] documents that lost their end
            tail = torch.tensor(suffix, dtype=ids.dtype, device=ids.device)  # [s]
            ids[:, w - len(suffix):] = torch.where(cut[:, None], tail[None, :], ids[:, w - len(suffix):])
        return ids, mask

    def encode(self, encoder, input_ids, attention_mask, *, training: bool, prefix_ids=None, prefix_mask=None) -> Encoded:
        if prefix_ids is not None:
            input_ids, attention_mask = prepend_prefix(
                prefix_ids, prefix_mask, input_ids, attention_mask, self.spec.pad_id)
        ids, mask = self.truncate(input_ids, attention_mask)
        hidden = encoder(input_ids=ids, attention_mask=mask).last_hidden_state  # [batch, w, d]
        return Encoded(hidden, mask)

    def decoder_length(self, n_tokens: int) -> int:
        return min(n_tokens, self.window)


def prepend_prefix(
    prefix_ids: torch.Tensor, prefix_mask: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate each row's real prefix tokens before its input, packed left (no gap of pads)."""
    batch, p = prefix_ids.shape
    n = ids.shape[1]
    plen = prefix_mask.sum(1)  # [batch]
    total = plen + mask.sum(1)  # [batch]
    width = int(total.max())
    pos = torch.arange(width, device=ids.device)[None, :]  # [1, width]
    from_prefix = pos < plen[:, None]  # [batch, width]
    src_in = (pos - plen[:, None]).clamp(0, n - 1)
    out = torch.where(from_prefix, prefix_ids.gather(1, pos.clamp(max=p - 1).expand(batch, -1)),
                      ids.gather(1, src_in))
    valid = pos < total[:, None]  # [batch, width]
    return out.masked_fill(~valid, pad_id), valid.to(mask.dtype)
