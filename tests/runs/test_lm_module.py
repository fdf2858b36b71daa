"""The language-model module's per-document scores against a spelled-out reference: a padded batch, marked
tokens near and far from their antecedents."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from scaleformer.model.wrapping import wrap
from scaleformer.runs.lm_module import LanguageModelModule


def test_scores_sum_each_documents_own_tokens_and_split_marked_ones_by_block():
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(bos_token_id=0, eos_token_id=0, pad_token_id=1, n_layer=1, n_embd=16,
                                       n_head=2, n_positions=32, vocab_size=50)).eval()
    routed = wrap(model, "full_attention", max_length=32)  # routed in place: `model` runs the same spans
    module = LanguageModelModule(routed, method=routed.method, tokenizer=None, dependency_block=4)
    ids = torch.randint(0, 50, (2, 12))  # [B, N]
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # the second document has 7 tokens, padded on the right
    deps = [[(5, 1), (9, 8), (11, 2), (0, 0)], [(6, 5), (3, 0), (5, 3)]]  # (token, antecedent); token 0 is not predicted
    rows = module.score({"input_ids": ids, "attention_mask": mask, "ids": ["a", "b"], "deps": deps})
    for i, row in enumerate(rows):
        n = int(mask[i].sum())
        with torch.no_grad():
            logits = model(input_ids=ids[i : i + 1, :n]).logits[0]  # the document alone, no padding
        each = torch.nn.functional.cross_entropy(logits[:-1], ids[i, 1:n], reduction="none")  # [n - 1]
        marked = [(t, a) for t, a in deps[i] if 1 <= t < n]
        far = [t for t, a in marked if a < (t // 4) * 4]
        assert row["tokens"] == n - 1 and row["length"] == n
        assert row["nll"] == pytest.approx(float(each.sum()), rel=1e-5)
        assert row["dep_tokens"] == len(marked) and row["far_tokens"] == len(far)
        assert row["dep_nll"] == pytest.approx(float(sum(each[t - 1] for t, _ in marked)), rel=1e-5)
        assert row["far_nll"] == pytest.approx(float(sum(each[t - 1] for t in far)), rel=1e-5, abs=1e-7)
    assert rows[0]["far_tokens"] == 2 and rows[1]["far_tokens"] == 1  # (5, 1), (11, 2); (5, 3)
