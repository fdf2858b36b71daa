"""Slow: a method that reads the whole ledger recalls more of its events than truncation.

A reduced Table 1 (tiny profile) cell pair with a fixed seed: the shipped pretrained tiny reader
fine-tuned with SLED and with truncation on the same ~2.5k-token training ledgers, scored on the
same evaluation ledgers, a third of whose events lie inside truncation's 1024-token window. If
long-context reading breaks (a chunk dropped, states packed out of order, a mask that hides
chunks), SLED falls to truncation's level and this fails.
"""

from __future__ import annotations

import pytest
from conftest import compose

from scaleformer import reader
from scaleformer.run import run

pytestmark = pytest.mark.slow


def _cell(tmp_path, method: str) -> dict:
    overrides = [
        "backbone=tiny_bart_reader", "optim=tiny_finetune", "data=ledgers_short", f"method={method}", "seed=11",
        "data.synthetic_words=2200", "data.synthetic_docs.train=128", "data.synthetic_docs.test=0",
        "data.splits.test=null", "trainer.max_steps=200", "trainer.enable_progress_bar=false",
        "trainer.eval_splits=[validation]", "generation.num_beams=1", "generation.no_repeat_ngram_size=0",
        "metrics.bertscore.enabled=false", f"paths.root={tmp_path}/results", f"paths.cache={tmp_path}/cache",
    ]
    return run(compose(overrides))["splits"]["validation"]


def test_sled_recalls_more_events_than_truncation(tmp_path):
    if not reader.asset_dir("tiny_bart_reader").exists():
        pytest.skip("tiny_bart_reader is not shipped")
    sled, trunc = _cell(tmp_path, "sled"), _cell(tmp_path, "truncation")
    assert sled["fact_field_recall"] > trunc["fact_field_recall"] + 5, (sled, trunc)
    assert sled["fact_recall"] >= trunc["fact_recall"], (sled, trunc)
    assert sled["rouge1"] > trunc["rouge1"] + 2, (sled, trunc)
