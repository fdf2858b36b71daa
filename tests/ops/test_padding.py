"""right_aligned against the plain reference: each row's kept tokens, in order, then padding."""

from __future__ import annotations

import pytest
import torch

from scaleformer.ops.padding import right_aligned

PAD = 1


def reference(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row by row: the tokens whose mask is not 0, in order, then PAD with mask 0."""
    out, kept = torch.full_like(ids, PAD), torch.zeros_like(mask)
    for b in range(ids.shape[0]):
        row = ids[b][mask[b] != 0]
        out[b, : len(row)] = row
        kept[b, : len(row)] = 1
    return out, kept


@pytest.mark.parametrize("seed", range(5))
def test_any_mask_reads_as_the_reference(seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 50, (4, 17), generator=g)
    mask = (torch.rand(4, 17, generator=g) > 0.4).long()
    mask[0] = 0  # an empty row stays empty
    mask[1] = 1  # a full row stays as it is
    got_ids, got_mask = right_aligned(ids, mask, PAD)
    want_ids, want_mask = reference(ids, mask)
    assert torch.equal(got_ids, want_ids) and torch.equal(got_mask, want_mask)
    assert got_mask.dtype == mask.dtype


def test_left_padding_becomes_right_padding_and_right_padding_is_unchanged():
    ids = torch.tensor([[PAD, PAD, 5, 6, 7], [8, 9, 10, PAD, PAD]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0]])
    got_ids, got_mask = right_aligned(ids, mask, PAD)
    assert got_ids.tolist() == [[5, 6, 7, PAD, PAD], [8, 9, 10, PAD, PAD]]
    assert got_mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 0, 0]]
    bool_ids, bool_mask = right_aligned(ids, mask.bool(), PAD)
    assert torch.equal(bool_ids, got_ids) and bool_mask.dtype == torch.bool


def test_masked_positions_inside_a_document_are_dropped():
    ids = torch.tensor([[5, 6, 7, 8]])
    got_ids, got_mask = right_aligned(ids, torch.tensor([[1, 0, 1, 1]]), PAD)
    assert got_ids.tolist() == [[5, 7, 8, PAD]] and got_mask.tolist() == [[1, 1, 1, 0]]
