"""Hugging Face's own Seq2SeqTrainer trains a wrapped model (scripts/hf_trainer.py), query prefix included."""

from __future__ import annotations

import sys

import pytest
import torch
from conftest import ROOT

import scaleformer
from scaleformer.model.hf import ScaleformerForConditionalGeneration

# The model class sits on transformers internals (post_init, Auto registration, generate): make
# test-compat runs these on other releases too.
pytestmark = pytest.mark.compat
sys.path.insert(0, str(ROOT / "scripts"))
pytest.importorskip("accelerate", reason="Trainer needs accelerate (pip install 'scaleformer[hf]')")


def test_seq2seq_trainer_trains_saves_reloads_and_generates_with_the_method(tmp_path, monkeypatch):
    import hf_trainer
    from transformers import AutoModelForSeq2SeqLM

    from scaleformer.data.synthetic import split_rows
    from scaleformer.model.tokenizer import load_offline_tokenizer
    from scaleformer.resources import resolve_asset

    tok = load_offline_tokenizer("bart")
    model = scaleformer.wrap(AutoModelForSeq2SeqLM.from_pretrained(resolve_asset(hf_trainer.TINY)), "sled",
                             tokenizer=tok, chunk_size=512, overlap=64)  # room for the query in each window
    rows = [{**r, "query": "What happened on day 5?"} for r in split_rows("train", 4, 900, seed=3)[:4]]
    train = hf_trainer.encode_rows(rows, tok, query_field="query")
    assert all(len(r["input_ids"]) > model.method.spec.max_positions for r in train)  # several chunks each
    batch = hf_trainer.Collator(tok.pad_token_id)(train)

    def loss() -> float:
        model.eval()
        with torch.no_grad():
            return float(model(**batch).loss)

    before = loss()
    trainer = hf_trainer.build_trainer(model, tok, train, train[:2], tmp_path / "run", steps=4, lr=1e-3,
                                       max_new_tokens=6)
    trainer.train()
    after = loss()
    assert after < before, (before, after)

    seen = []  # the query reaches the method inside Trainer's predict loop
    encode = ScaleformerForConditionalGeneration.encode

    def spy(self, *a, **kw):
        seen.append(kw.get("prefix_ids") is not None)
        return encode(self, *a, **kw)

    monkeypatch.setattr(ScaleformerForConditionalGeneration, "encode", spy)
    predictions = trainer.predict(train[:2]).predictions
    assert seen and all(seen) and predictions.shape[0] == 2
    monkeypatch.undo()

    trainer.save_model(tmp_path / "saved")
    loaded, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "saved", output_loading_info=True)
    assert isinstance(loaded, ScaleformerForConditionalGeneration) and loaded.method.cfg.name == "sled"
    assert not info["missing_keys"] and not info["unexpected_keys"]
    loaded.eval()
    model.eval()
    ids, mask = batch["input_ids"][:1], batch["attention_mask"][:1]
    kw = dict(prefix_ids=batch["prefix_ids"][:1], prefix_mask=batch["prefix_mask"][:1])
    assert torch.equal(loaded.generate(ids, mask, **kw), model.generate(ids, mask, **kw))
    assert loaded.generation_config.max_new_tokens == 6  # the decoding settings travel with it


def test_the_example_script_trains_offline_and_saves_an_auto_loadable_model(tmp_path, capsys):
    import hf_trainer
    from transformers import AutoModelForSeq2SeqLM

    assert hf_trainer.main(["--output", str(tmp_path / "hf-run"), "--steps", "2", "--method", "scaleformer_middle",
                            "--set", "middle_tokens=50"]) == 0
    assert "eval_loss" in capsys.readouterr().out
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf-run")
    assert isinstance(model, ScaleformerForConditionalGeneration) and model.method.cfg.middle_tokens == 50


def test_set_values_parse_as_json_or_stay_text():
    import hf_trainer

    assert [hf_trainer._value(v) for v in ("100", "0.5", "true", "[1, 2]", "first", "random")] == \
        [100, 0.5, True, [1, 2], "first", "random"]
