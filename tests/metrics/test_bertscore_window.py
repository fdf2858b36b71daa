"""bert-score truncates to its tokenizer's ``model_max_length``: a tokenizer that records none (transformers'
1e30 placeholder) makes it raise OverflowError (Tiiiger/bert_score#205), so the scorer's window is capped at the
model's positions when it is built; a document longer than that window is scored on its first 512 tokens."""

from __future__ import annotations

import pytest

from scaleformer.config import BertScoreConfig
from scaleformer.metrics.bertscore import cap_window, get_bertscorer, offline_model


def test_a_tokenizer_without_a_window_is_capped_at_the_models_positions():
    scorer = get_bertscorer(offline_model(), BertScoreConfig(model_type="offline"), "cpu")
    assert scorer._tokenizer.model_max_length <= 512  # capped when built
    scorer._tokenizer.model_max_length = int(1e30)  # what a tokenizer that records no window says
    with pytest.raises(OverflowError):
        scorer.score(["the ledger records six events"], ["the ledger records six events"])
    assert cap_window(scorer) == 512  # all-MiniLM-L6-v2: 512 positions
    long = "the mill sold lanterns at the orchard " * 300  # ~2,100 tokens
    _, _, f = scorer.score([long], [long])
    assert f.item() > 0.99
