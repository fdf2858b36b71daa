"""MASFormer's chain, continual training then fine-tuning: a language-modeling run exports its routed causal LM
(AutoModelForCausalLM loads it with its spans), and a summarization run starts from that folder with
``backbone.pretrained=<export>``: the backbone's weights as continual training left them (its position table
duplicated to that run's length included), without the method that ran on them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import compose

from scaleformer.runs.run import run

SHAPE = ["backbone=tiny_gpt2", "backbone.model_kwargs.n_layer=2", "backbone.model_kwargs.n_embd=32",
         "backbone.model_kwargs.n_inner=64", "method.max_length=256", "method.full_layers=1", "method.block_size=32",
         "trainer.enable_progress_bar=false", "trainer.max_steps=2"]


def _continual(tmp_path: Path) -> Path:
    out = run(compose(["experiment=masformer_lm", *SHAPE, f"paths.root={tmp_path}/lm", f"paths.cache={tmp_path}/c",
                       "data.synthetic_docs.train=8", "data.synthetic_docs.validation=0", "data.splits.validation=null",
                       "data.synthetic_docs.test=2", "data.synthetic_words=150", "trainer.eval_splits=[test]",
                       "metrics.perplexity_bucket=64", "metrics.dependency_block=32"]))
    return tmp_path / "lm" / "runs" / out["run_id"] / "model"


def test_a_continually_trained_export_starts_a_fine_tuning_run_with_its_weights(tmp_path):
    from transformers import AutoModelForCausalLM

    from scaleformer.config import BackboneConfig
    from scaleformer.model.backbone import build_model, model_config
    from scaleformer.model.hf_causal import ScaleformerForCausalLM
    from scaleformer.model.tokenizer import load_offline_tokenizer

    export = _continual(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(export)
    assert isinstance(loaded, ScaleformerForCausalLM) and loaded.method.cfg.full_layers == 1
    card = (export / "README.md").read_text()  # says what it is and how to use it, with the run's perplexity
    assert "causal language model, continually trained" in card and "- text-generation" in card
    assert "AutoModelForCausalLM.from_pretrained" in card and "backbone.pretrained=<this folder>" in card
    assert "| test | 2 |" in card and "type: ppl" in card
    trained = loaded.backbone.state_dict()
    cfg = BackboneConfig(name="tiny_gpt2", arch="gpt2", tokenizer="offline", pretrained=str(export),
                         model_kwargs={"n_positions": 128, "n_layer": 2, "n_embd": 32, "n_inner": 64})
    conf = model_config(cfg, load_offline_tokenizer("gpt2"))
    assert conf.n_positions == 256  # the export's duplicated table, not the backbone option's 128
    model = build_model(cfg, conf)
    assert model.training and set(model.state_dict()) == set(trained)
    assert all(torch.equal(v, trained[k]) for k, v in model.state_dict().items())
    fine = run(compose(["experiment=masformer_summarization", *SHAPE, f"backbone.pretrained={export}",
                        f"paths.root={tmp_path}/ft", f"paths.cache={tmp_path}/c", "trainer.limit_val_batches=0",
                        "data.synthetic_docs.train=4", "data.synthetic_docs.validation=2", "data.synthetic_docs.test=0",
                        "data.splits.test=null", "data.synthetic_words=120", "data.max_target_tokens=64",
                        "generation.max_new_tokens=4", "trainer.eval_splits=[validation]"]))
    assert fine["backbone"]["pretrained"] == str(export) and fine["splits"]["validation"]["n_examples"] == 2


def test_an_export_whose_shape_the_model_kwargs_change_is_refused_in_one_line(tmp_path):
    from scaleformer.config import BackboneConfig
    from scaleformer.errors import ConfigError
    from scaleformer.model.backbone import build_model, model_config
    from scaleformer.model.tokenizer import load_offline_tokenizer

    export = _continual(tmp_path)
    cfg = BackboneConfig(name="tiny_gpt2", arch="gpt2", tokenizer="offline", pretrained=str(export),
                         model_kwargs={"n_embd": 64})
    with pytest.raises(ConfigError, match=r"the export's weights do not fit .*\(size mismatch for transformer.wte.weight.*drop the model_kwargs"):
        build_model(cfg, model_config(cfg, load_offline_tokenizer("gpt2")))
