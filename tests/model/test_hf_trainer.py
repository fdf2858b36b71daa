"""Hugging Face's own Seq2SeqTrainer trains a wrapped model (scripts/hf_trainer.py), query prefix included."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import sys
from pathlib import Path

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


@pytest.fixture(scope="module")
def script_run(tmp_path_factory) -> tuple[Path, str]:
    """scripts/hf_trainer.py offline (2 steps, generated ledgers) under umask 027: its folder and stdout."""
    import hf_trainer

    out = tmp_path_factory.mktemp("hf") / "hf-run"
    stdout = io.StringIO()
    umask = os.umask(0o027)
    try:
        with contextlib.redirect_stdout(stdout):
            assert hf_trainer.main(["--output", str(out), "--steps", "2", "--method", "scaleformer_middle",
                                    "--set", "middle_tokens=50"]) == 0
    finally:
        os.umask(umask)
    return out, stdout.getvalue()


def test_the_example_script_trains_offline_and_saves_an_auto_loadable_model(script_run):
    from transformers import AutoModelForSeq2SeqLM

    out, _ = script_run
    model = AutoModelForSeq2SeqLM.from_pretrained(out)
    assert isinstance(model, ScaleformerForConditionalGeneration) and model.method.cfg.middle_tokens == 50


def test_the_script_evaluates_with_the_projects_rouge(script_run):
    """predict_with_generate alone reports the loss: compute_metrics decodes the summaries and scores them."""
    text = script_run[1]
    scores = json.loads(text[text.rindex("{\n"):])  # the evaluation's dict, after Trainer's log lines
    assert "eval_loss" in scores
    for key in ("eval_rouge1", "eval_rouge2", "eval_rougeL"):
        assert isinstance(scores[key], float) and 0 <= scores[key] <= 100, (key, scores)


def test_rouge_metrics_decode_padded_predictions_without_special_tokens():
    import hf_trainer
    import numpy as np
    from transformers import EvalPrediction

    from scaleformer.model.tokenizer import load_offline_tokenizer

    tok = load_offline_tokenizer("bart")
    ref = tok("Alder paid the toll at the bridge.")["input_ids"]
    pred = np.array([ref + [-100, -100]])  # Trainer pads across batches with -100
    scores = hf_trainer.rouge_metrics(tok)(EvalPrediction(predictions=pred, label_ids=np.array([ref])))
    assert scores["rouge1"] == scores["rouge2"] == scores["rougeL"] == 100.0


def test_every_saved_file_keeps_the_umask(script_run):
    """safetensors writes the weights 0600 itself; the saved folder has the modes of a plain open()."""
    out, _ = script_run
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    modes = {f.name: oct(stat.S_IMODE(f.stat().st_mode)) for f in out.iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {"0o640"}, modes


def test_summarize_reads_the_scripts_folder_without_a_method_record(script_run, tmp_path, capsys):
    """No scaleformer.json: the method from config.json, the decoding from generation_config.json."""
    from scaleformer.cli import summarize
    from scaleformer.export.summarizer import Summarizer

    out, _ = script_run
    assert not (out / "scaleformer.json").exists()
    s = Summarizer.from_pretrained(out, device="cpu")
    assert s.model.method.cfg.middle_tokens == 50 and s.trained_steps is None
    assert (s.generation.num_beams, s.generation.max_new_tokens) == (1, 64)
    assert Summarizer.from_pretrained(out, device="cpu", overrides={"middle_tokens": 20}).method.cfg.middle_tokens == 20
    (tmp_path / "d.txt").write_text("The ledger of Alder records 3 events. Alder paid the toll.")
    assert summarize.main(["--model", str(out), "--input", str(tmp_path / "d.txt"), "--device", "cpu",
                           "--max-new-tokens", "4"]) == 0
    assert "error" not in capsys.readouterr().err


def test_an_output_folder_with_other_files_is_refused_before_the_model_loads(tmp_path):
    import hf_trainer

    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match=r"^error: --output=.*: holds files that are not a model's"):
        hf_trainer.main(["--output", str(tmp_path), "--steps", "1"])
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_set_values_parse_as_json_or_stay_text():
    import hf_trainer

    assert [hf_trainer._value(v) for v in ("100", "0.5", "true", "[1, 2]", "first", "random")] == \
        [100, 0.5, True, [1, 2], "first", "random"]
