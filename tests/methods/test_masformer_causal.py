"""MASFormer as its paper runs it: the span methods on a decoder-only backbone (placement, C, sizes from a budget,
the positions duplicated) and the encoder methods refused there."""

from __future__ import annotations

import pytest
import torch

from scaleformer.config import BackboneConfig
from scaleformer.errors import ConfigError
from scaleformer.methods.masformer import (
    BlockAttentionConfig,
    FullAttentionConfig,
    MasformerConfig,
    SlidingWindowConfig,
    full_layer_ids,
)
from scaleformer.methods.sled import SledConfig
from scaleformer.model.backbone import build_model, prepare
from scaleformer.ops import span_cost
from scaleformer.ops.causal_spans import routed_spans
from scaleformer.ops.spans import Span

GPT2 = BackboneConfig(name="tiny_gpt2_test", arch="gpt2", tokenizer="offline",
                      model_kwargs={"n_embd": 32, "n_layer": 6, "n_head": 4, "n_positions": 64})


def wrapped(method_cfg):
    ready = prepare(GPT2, method_cfg)
    model = build_model(GPT2, ready.conf)
    return ready.method, ready.method.wrap(model)


@pytest.mark.parametrize(("placement", "full"), [("bottom", [0, 1]), ("middle", [2, 3]), ("top", [4, 5])])
def test_the_full_layers_sit_where_placement_says(placement, full):
    method, model = wrapped(MasformerConfig(max_length=256, block_size=64, full_layers=2, placement=placement))
    spans = routed_spans(model)
    assert [i for i, s in enumerate(spans) if s.kind == "full"] == full
    assert all(s.causal for s in spans) and {s.size for s in spans if s.kind == "block"} == {64}
    assert list(full_layer_ids(7, 3, "middle")) == [2, 3, 4]
    assert full_layer_ids(24, 8, "every") == (0, 3, 6, 9, 12, 15, 18, 21)  # the paper's "every 3"
    assert full_layer_ids(24, 12, "every") == tuple(range(0, 24, 2)) and full_layer_ids(7, 3, "every") == (0, 2, 4)


def test_the_positions_are_duplicated_and_the_cost_is_the_papers():
    method, model = wrapped(MasformerConfig(max_length=256, block_size=64, full_layers=2))
    assert model.transformer.wpe.weight.shape[0] == 256
    out = method.describe()
    assert out["decoder_only"] and out["decoder_layers"] == 6
    assert out["attention_cost_paper"] == span_cost.masformer_cost(6, 2, 64, 256) == 4 * 64 * 256 + 2 * 256 ** 2
    assert out["attention_cost_at_max_length"] == 2 * 256 * 257 // 2 + 4 * 4 * 64 * 65 // 2  # causal pairs
    x = torch.randint(4, 100, (1, 256))
    with torch.no_grad():
        assert model(x).logits.shape == (1, 256, model.config.vocab_size)


@pytest.mark.parametrize(("cfg", "key", "want"), [
    (MasformerConfig(max_length=256, block_size=64, cost=span_cost.masformer_cost(6, 3, 64, 256)), "full_layers", 3),
    (BlockAttentionConfig(max_length=256, cost=6 * 96 * 256), "block_size", 96),
    (SlidingWindowConfig(max_length=256, cost=2 * 6 * 40 * 256), "window", 40),
])
def test_a_budget_sets_the_size_by_the_papers_rules(cfg, key, want):
    method, model = wrapped(cfg)
    out = method.describe()
    assert out[key] == want and out[f"{key}_from_cost"] == pytest.approx(want)
    assert out["attention_cost_paper"] == pytest.approx(cfg.cost, rel=1e-6)
    spans = routed_spans(model)
    assert spans[0].size == want or key == "full_layers"


@pytest.mark.parametrize(("cfg", "match"), [
    (MasformerConfig(max_length=256, block_size=64, cost=10 * 256 ** 2), r"method.cost=655360.*full_layers=11\.33"),
    (FullAttentionConfig(max_length=256, cost=1000.0), "cost is fixed"),
    (MasformerConfig(max_length=64, block_size=64, cost=1e5), "block_size=64: must be below"),
    (MasformerConfig(max_length=256, block_size=64, full_layers=7), "full_layers=7.*model.s 6 layers"),
])
def test_budgets_and_sizes_that_do_not_fit_are_one_line(cfg, match):
    with pytest.raises(ConfigError, match=match):
        prepare(GPT2, cfg)


def test_encoder_methods_are_refused_on_a_decoder_only_backbone():
    with pytest.raises(ConfigError, match="method.name='sled' reads the input with an encoder.*masformer"):
        prepare(GPT2, SledConfig())


def test_gpt_neo_is_refused_naming_its_native_setting():
    conf = BackboneConfig(name="neo", arch="gpt2", tokenizer="offline", model_kwargs={"n_layer": 2, "n_embd": 32,
                                                                                      "n_head": 4})
    ready = prepare(conf, MasformerConfig(max_length=128, block_size=32))
    from transformers import AutoModelForCausalLM, GPTNeoConfig

    neo = AutoModelForCausalLM.from_config(GPTNeoConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=4,
                                                        attention_types=[[["global"], 2]]))
    with pytest.raises(ConfigError, match="model_type 'gpt_neo'"):
        ready.method.wrap(neo)


def test_spans_stay_non_causal_on_an_encoder():
    ready = prepare(BackboneConfig(name="tiny_bart", arch="bart", tokenizer="offline",
                                   model_kwargs={"d_model": 32, "encoder_layers": 2, "decoder_layers": 2}),
                    MasformerConfig(max_length=256, block_size=64, full_layers=1))
    assert not ready.method.causal
    assert ready.method.layer_spans(2) == [Span("full"), Span("block", 64)]


def test_l_equal_to_the_layers_is_full_attention_and_l_zero_is_all_block():
    """On the whole model: MASFormer with every layer full gives full attention's logits (to rounding), with none
    block attention's; one full layer differs from both."""
    x = torch.randint(4, 100, (2, 200), generator=torch.Generator().manual_seed(0))

    def logits(cfg):
        torch.manual_seed(0)
        _, model = wrapped(cfg)
        with torch.no_grad():
            return model.eval()(x).logits

    full = logits(FullAttentionConfig(max_length=256))
    block = logits(BlockAttentionConfig(max_length=256, block_size=64))
    torch.testing.assert_close(logits(MasformerConfig(max_length=256, block_size=64, full_layers=6)), full)
    torch.testing.assert_close(logits(MasformerConfig(max_length=256, block_size=64, full_layers=0)), block)
    one = logits(MasformerConfig(max_length=256, block_size=64, full_layers=1))
    assert not torch.allclose(one, full) and not torch.allclose(one, block)
