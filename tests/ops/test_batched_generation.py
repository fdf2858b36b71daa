"""Batched evaluation decodes every document to the tokens it gets alone.

The Summarizer, the Hugging Face class, a run's evaluation and the benchmark decode several documents at
once (scaleformer.data.sampler.length_sorted_batches, sized by scaleformer.model.batching): a document
padded beside longer ones must read exactly what it reads alone. Checked for every registered method, BART
and T5, greedy and beam search, batches of 1, 3 and 8 ragged documents.
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import METHODS, batch, tiny

from scaleformer.data.sampler import LengthSortedSampler, length_sorted_batches
from scaleformer.methods import build_method, method_config
from scaleformer.model.hf import ScaleformerForConditionalGeneration

pytestmark = pytest.mark.compat

LENGTHS = [260, 150, 9, 200, 64, 128, 33, 170]  # ragged; most past the 128-position window


def model_for(arch: str, name: str, kw: dict) -> tuple[ScaleformerForConditionalGeneration, object]:
    backbone, spec = tiny(arch)
    method = build_method(method_config({"name": name, **kw}), spec)
    return ScaleformerForConditionalGeneration.from_parts(method.wrap(backbone), method).eval(), spec


def settings(beams: int) -> dict:
    kw = dict(num_beams=beams, max_new_tokens=8, min_new_tokens=2, no_repeat_ngram_size=2, do_sample=False)
    return kw | (dict(length_penalty=1.5, early_stopping=True) if beams > 1 else {})


def tokens(row: torch.Tensor, ends: tuple[int, ...]) -> list[int]:
    """A generated row without what a batch adds after a finished document (pad or end tokens)."""
    out = row.tolist()
    while len(out) > 1 and out[-1] in ends and out[-2] in ends:
        out.pop()
    return out


def decode(model, ids, mask, order: list[list[int]], beams: int, ends: tuple[int, ...]) -> dict[int, list[int]]:
    got: dict[int, list[int]] = {}
    for idx in order:
        n = int(mask[idx].sum(1).max())
        with torch.no_grad():
            out = model.generate(ids[idx, :n], mask[idx, :n], **settings(beams))
        got.update({i: tokens(r, ends) for i, r in zip(idx, out)})
    return got


@pytest.mark.parametrize("beams", [1, 4])
@pytest.mark.parametrize(("name", "kw"), METHODS, ids=[m for m, _ in METHODS])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_batch_size_does_not_change_a_documents_tokens(arch, name, kw, beams):
    model, spec = model_for(arch, name, kw)
    conf = model.backbone.config
    ends = (conf.pad_token_id, conf.eos_token_id)
    ids, mask = batch(LENGTHS, spec, seed=1)
    alone = decode(model, ids, mask, [[i] for i in range(len(LENGTHS))], beams, ends)
    assert len({tuple(t) for t in alone.values()}) > 1, "documents that decode alike test nothing"
    for size in (3, 8):
        assert decode(model, ids, mask, length_sorted_batches(LENGTHS, size), beams, ends) == alone, size
    if name == "sled":  # file order too: ragged batches a loader without the sampler would make
        assert decode(model, ids, mask, [[0, 1, 2], [3, 4, 5], [6, 7]], beams, ends) == alone


def test_length_sorted_batches_longest_first_and_stable():
    assert length_sorted_batches([5, 9, 5, 1, 9], 2) == [[1, 4], [0, 2], [3]]
    assert length_sorted_batches([], 3) == []
    assert list(LengthSortedSampler([5, 9, 5, 1, 9])) == [1, 4, 0, 2, 3]
