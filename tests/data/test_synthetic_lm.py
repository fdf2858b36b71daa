"""Long-dependency documents for language modeling: the marked values are what the register bound, their
antecedents say so, and the share of tokens beyond a block is counted from the tokenizer's own offsets."""

from __future__ import annotations

import random

import numpy as np
import torch

from scaleformer.config import DataConfig
from scaleformer.data.lm import LanguageModelingData
from scaleformer.data.synthetic_lm import dependency_share, dependency_tokens, lm_rows, make_lm_document
from scaleformer.model.tokenizer import load_offline_tokenizer


def test_every_recalled_value_is_the_one_its_fact_stated_earlier():
    doc = make_lm_document(random.Random(3), 600, 9)
    text = doc["input"]
    assert doc["deps"], "every fact is recalled at least once"
    for v0, v1, ante in doc["deps"]:
        value = text[v0:v1]
        assert ante < v0 and text[ante:ante + len(value)] == value
        cue = text[max(0, v0 - 60):v0]
        assert value not in cue  # the cue does not give the value away: it must come from the antecedent
    assert doc["input"] == make_lm_document(random.Random(3), 600, 9)["input"]  # seeded


def test_short_documents_bind_fewer_facts_and_splits_are_seeded():
    rows = lm_rows("validation", 20, 300, spread=0.5)
    assert [r["input"] for r in rows] == [r["input"] for r in lm_rows("validation", 20, 300, spread=0.5)]
    words = [len(r["input"].split()) for r in rows]
    assert min(words) < 250 < max(words)
    assert lm_rows("test", 2, 300)[0]["input"] != rows[0]["input"]


def test_dependency_tokens_and_the_share_beyond_a_block_by_hand():
    """Offsets of a spelled-out toy: tokens 5-6 hold a value stated at token 1; with blocks of 4 it lies in an
    earlier block, with blocks of 8 in the same one."""
    offsets = [(0, 0), (0, 3), (3, 6), (6, 9), (9, 12), (12, 15), (15, 18), (18, 21)]
    assert dependency_tokens(offsets, [[12, 18, 0]]) == [(5, 1), (6, 1)]
    tok = load_offline_tokenizer("gpt2")
    rows = lm_rows("validation", 6, 400)
    small, large = dependency_share(tok, rows, 16), dependency_share(tok, rows, 100_000)
    assert large["beyond_block"] == 0 and small["beyond_block"] > 0
    assert small["value_tokens"] == large["value_tokens"] > 0
    assert 0 < small["share_beyond_block"] < 0.2


def test_packed_training_rows_are_the_document_stream_and_evaluation_cuts_each_document(tmp_path):
    cfg = DataConfig(name="lm", source="synthetic", synthetic_task="lm", task_metric="perplexity",
                     synthetic_docs={"train": 6, "validation": 3, "test": 0}, synthetic_words=200,
                     cache_dir=str(tmp_path), batch_size=2)
    cfg.splits.test = None
    tok = load_offline_tokenizer("gpt2")
    dm = LanguageModelingData(cfg, tok, 64, seed=1)
    dm.setup()
    stream = np.concatenate([d.ids for d in (dm.docs["train"][i] for i in _order(6, 1))])
    assert torch.equal(dm.packed.flatten(), torch.from_numpy(stream[: dm.packed.numel()]))
    assert dm.dropped_tokens == len(stream) - dm.packed.numel() < 64
    batch = next(iter(dm.dataloader("validation")))
    for i, doc in enumerate(dm.docs["validation"][:2]):
        n = int(batch["attention_mask"][i].sum())
        assert n == min(len(doc.ids), 64) and torch.equal(batch["input_ids"][i, :n], torch.from_numpy(doc.ids[:n]))
        assert all(t < 64 for t, _ in batch["deps"][i])
        text = tok.decode(doc.ids)
        assert tok.decode(doc.ids[:1]) == "<s>" and text.endswith("</s>")
    share = dm.summary(16)["validation"]
    far = sum(a < t // 16 * 16 for d in dm.docs["validation"] for t, a in d.deps if t < 64)
    assert share["tokens_beyond_block"] == far and 0 <= share["share_beyond_block"] < 1
    assert "share_beyond_block" not in dm.summary()["validation"]
    dep_doc = next(d for d in dm.docs["validation"] if d.deps)
    t, a = dep_doc.deps[0]
    assert tok.decode(dep_doc.ids[t:t + 1]).strip() and a < t


def _order(n: int, seed: int) -> list[int]:
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order
