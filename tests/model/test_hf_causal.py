"""The decoder-only model class: the method travels with a causal LM through save_pretrained and the Auto class,
and each Auto class refuses the other kind of backbone in one line."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, GPT2Config, GPT2LMHeadModel

from scaleformer.errors import ConfigError
from scaleformer.model.hf_causal import ScaleformerForCausalLM
from scaleformer.model.wrapping import wrap
from scaleformer.ops.causal_spans import routed_spans


def _gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=3, n_embd=16, n_head=2, n_positions=32, vocab_size=64, bos_token_id=0,
                                      eos_token_id=2, pad_token_id=1)).eval()


def test_a_saved_masformer_loads_through_auto_causal_lm_with_its_spans_and_duplicated_positions(tmp_path):
    model = wrap(_gpt2(), "masformer", full_layers=1, block_size=8, max_length=64)
    assert isinstance(model, ScaleformerForCausalLM) and model.backbone.config.n_positions == 64
    ids = torch.randint(3, 64, (2, 48))  # past the 32 pretrained positions: the duplicated table is read
    with torch.no_grad():
        want = model(input_ids=ids).logits
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, ScaleformerForCausalLM)
    assert routed_spans(loaded.backbone) == routed_spans(model.backbone)
    assert [s.kind for s in routed_spans(loaded.backbone)] == ["full", "block", "block"]
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, want)
    out = loaded.generate(input_ids=ids[:1, :10], max_new_tokens=5, do_sample=False, min_new_tokens=5)
    assert out.shape == (1, 15)


def test_each_auto_class_refuses_the_other_kind_of_backbone(tmp_path):
    wrap(_gpt2(), "masformer", block_size=8, max_length=64).save_pretrained(tmp_path / "causal")
    with pytest.raises(ConfigError, match=r"backbone \(gpt2\) is decoder-only: load it with AutoModelForCausalLM"):
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "causal")
    from transformers import BartConfig, BartForConditionalGeneration

    bart = BartForConditionalGeneration(BartConfig(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1,
                                                   encoder_attention_heads=2, decoder_attention_heads=2,
                                                   encoder_ffn_dim=32, decoder_ffn_dim=32,
                                                   max_position_embeddings=32))
    wrap(bart, "sled", chunk_size=32, overlap=8).save_pretrained(tmp_path / "seq2seq")
    with pytest.raises(ConfigError, match=r"backbone \(bart\) is an encoder-decoder: load it with AutoModelForSeq2SeqLM"):
        AutoModelForCausalLM.from_pretrained(tmp_path / "seq2seq")
    with pytest.raises(ConfigError, match="method.name='sled'.*decoder-only"):
        wrap(_gpt2(), "sled", chunk_size=32, overlap=8)
