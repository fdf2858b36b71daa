"""Summarization as language modeling: the joined sequences against a plain per-document reference."""

from __future__ import annotations

import pytest
import torch

from scaleformer.ops.causal_join import IGNORE, Specials, join, left_pad

SP = Specials(sep=2, eos=3, pad=1, bos=0)


def _pad(rows: list[list[int]], value: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [value] * (width - len(r)) for r in rows])
    return ids, torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])


def reference(doc: list[int], query: list[int], ref: list[int], n: int, room: int) -> tuple[list[int], list[int]]:
    """The sequence and the tokens the loss reads, spelled out for one document."""
    text = ref[1:] if ref and ref[0] == SP.bos else ref
    text = text[:-1] if text and text[-1] == SP.eos else text
    summary = text[: room - 1] + [SP.eos]
    prompt = doc[: n - room - 1 - len(query)] + query + [SP.sep]
    return prompt + summary, [IGNORE] * len(prompt) + summary


DOCS = [[0, 10, 11, 12, 13, 14, 15, 3], [0, 20, 21, 3], [0, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 3]]
REFS = [[0, 50, 51, 52, 3], [0, 60, 3], [0, 70, 71, 72, 73, 74, 75, 3]]  # (bos ... eos, as BART's template)
QUERIES = [[90, 91], [], [92]]


@pytest.mark.parametrize("with_query", [False, True])
@pytest.mark.parametrize("refs", [REFS, [r[1:-1] for r in REFS]], ids=["specials", "bare"])  # GPT-2: no specials
def test_joined_sequences_equal_the_spelled_out_reference(with_query, refs):
    n, room = 12, 4
    doc_ids, doc_mask = _pad(DOCS, SP.pad)
    labels, _ = _pad(refs, IGNORE)
    prefix = _pad(QUERIES, SP.pad) if with_query else (None, None)
    out = join(doc_ids, doc_mask, labels, SP, n=n, room=room, prefix_ids=prefix[0], prefix_mask=prefix[1])
    for i in range(len(DOCS)):
        seq, tgt = reference(DOCS[i], QUERIES[i] if with_query else [], refs[i], n, room)
        real = int(out["attention_mask"][i].sum())
        assert out["input_ids"][i, :real].tolist() == seq and real <= n
        assert out["targets"][i, :real].tolist() == tgt
        assert (out["targets"][i, real:] == IGNORE).all() and (out["input_ids"][i, real:] == SP.pad).all()
        assert int(out["prompt_lengths"][i]) == tgt.count(IGNORE)
    prompts = join(doc_ids, doc_mask, None, SP, n=n, room=room, prefix_ids=prefix[0], prefix_mask=prefix[1])
    ids, mask = left_pad(prompts["input_ids"], prompts["prompt_lengths"], SP.pad)
    for i in range(len(DOCS)):
        seq, tgt = reference(DOCS[i], QUERIES[i] if with_query else [], refs[i], n, room)
        prompt = seq[: tgt.count(IGNORE)]
        assert ids[i, ids.shape[1] - len(prompt):].tolist() == prompt and int(mask[i].sum()) == len(prompt)
        assert (mask[i, : ids.shape[1] - len(prompt)] == 0).all()


def test_a_query_that_leaves_the_document_no_room_is_refused():
    doc_ids, doc_mask = _pad(DOCS, SP.pad)
    q, qm = _pad([[9] * 8] * 3, SP.pad)
    with pytest.raises(ValueError, match="n = 12 tokens with 4 for the summary leave no room.*query of 8"):
        join(doc_ids, doc_mask, None, SP, n=12, room=4, prefix_ids=q, prefix_mask=qm)


def test_specials_fall_back_to_eos_for_a_gpt2_tokenizer():
    class Tok:  # GPT-2's: only an end-of-text token
        eos_token_id, sep_token_id, pad_token_id, bos_token_id = 50256, None, None, 50256

    assert Specials.of(Tok()) == Specials(sep=50256, eos=50256, pad=50256, bos=50256)
