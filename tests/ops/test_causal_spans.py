"""Causal spans routed into decoder-only models (scaleformer.ops.causal_spans) against plain references: the stock
model where every span is full, an attention that spells each layer's pattern out pair by pair, the unpadded rows of
a padded batch, decoding without a cache, and the native sliding-window settings of transformers' own models."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_models import CAUSAL_LAYERS, CAUSAL_VOCAB, tiny_causal
from transformers import AutoModelForCausalLM, GPTNeoConfig

from scaleformer.ops import compat
from scaleformer.ops.causal_spans import (
    FAMILIES,
    SPAN_ATTR,
    causal_family,
    extend_positions,
    native_window,
    route_causal_spans,
    routed_spans,
)
from scaleformer.ops.spans import Span

VOCAB, LAYERS = CAUSAL_VOCAB, CAUSAL_LAYERS


def same_weights(a: torch.nn.Module, family: str, **overrides) -> torch.nn.Module:
    b = tiny_causal(family, **overrides)
    b.load_state_dict(a.state_dict())
    return b


def ids(b: int, n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, VOCAB, (b, n), generator=torch.Generator().manual_seed(seed))


def reference_mask(span: Span, n: int) -> torch.Tensor:
    """May query i read key j, spelled out pair by pair."""
    out = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(i + 1):
            out[i, j] = {"full": True, "block": i // max(span.size, 1) == j // max(span.size, 1),
                         "window": i - j <= span.size}[span.kind]
    return out


def reference_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """softmax(q k^T scale + mask) v under the pattern of the module's span, the kv heads repeated."""
    span = getattr(module, SPAN_ATTR)
    rep = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1)
    n = key.shape[2]
    mask = reference_mask(span, n)[n - query.shape[2]:]
    scores = query @ key.transpose(-1, -2) * (scaling or 1 / math.sqrt(query.shape[-1]))
    return (scores.masked_fill(~mask, float("-inf")).softmax(-1) @ value).transpose(1, 2), None


compat.register_attention("test_reference_span", reference_forward)


def as_reference(model: torch.nn.Module) -> torch.nn.Module:
    """The routed model with every layer's kernel swapped for the spelled-out one (same spans)."""
    for attn in (m for m in model.modules() if hasattr(m, SPAN_ATTR)):
        compat.set_attn_impl(attn.config, "test_reference_span")
    return model


MIXED = [Span("full"), Span("block", 8), Span("window", 5)]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_full_spans_equal_the_stock_model_and_mixed_spans_the_reference(family):
    model = tiny_causal(family)
    x = ids(2, 40)
    with torch.no_grad():
        stock = model(x).logits
        route_causal_spans(model, [Span("full")] * LAYERS)
        torch.testing.assert_close(model(x).logits, stock)
        route_causal_spans(model, MIXED)
        assert routed_spans(model) == [Span(s.kind, s.size, causal=True) for s in MIXED]
        mixed = model(x).logits
        assert not torch.allclose(mixed, stock)
        torch.testing.assert_close(mixed, as_reference(model)(x).logits)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_no_token_reads_the_future_or_past_its_block(family):
    """Changing the tokens after t leaves every logit up to t unchanged; with all-block layers, changing the tokens
    of an earlier block leaves a later block's logits unchanged (GPT-2: positions are absolute, so equal)."""
    model = tiny_causal(family)
    route_causal_spans(model, [Span("block", 8)] * LAYERS)
    x = ids(1, 32)
    y = x.clone()
    y[:, 20:] = (y[:, 20:] + 1) % VOCAB
    z = x.clone()
    z[:, :8] = (z[:, :8] + 1) % VOCAB
    with torch.no_grad():
        a, b, c = model(x).logits, model(y).logits, model(z).logits
    torch.testing.assert_close(b[:, :20], a[:, :20])
    torch.testing.assert_close(c[:, 8:], a[:, 8:])
    assert not torch.allclose(c[:, :8], a[:, :8])


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_a_padded_batch_reads_each_row_as_unpadded(family, side):
    """Positions count real tokens: a left-padded row is cut into the blocks of its own tokens."""
    model = tiny_causal(family)
    route_causal_spans(model, MIXED)
    long, short = ids(1, 30, 2), ids(1, 19, 3)
    pad = torch.zeros(1, 11, dtype=torch.long)
    row = torch.cat([pad, short], 1) if side == "left" else torch.cat([short, pad], 1)
    mask = (torch.arange(30) >= 11) if side == "left" else (torch.arange(30) < 19)
    batch = torch.cat([long, row])
    attn = torch.stack([torch.ones(30, dtype=torch.long), mask.long()])
    pos = (attn.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        out = model(batch, attention_mask=attn, position_ids=pos).logits
        torch.testing.assert_close(out[0], model(long).logits[0])
        torch.testing.assert_close(out[1][mask], model(short).logits[0])


@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox"])
def test_cached_decoding_equals_the_whole_sequence(family):
    """Greedy decoding with the cache (one token at a time: the sliced keys) gives the logits of the whole
    sequence scored at once, and a prompt continued by several tokens at once after a cache does too."""
    model = tiny_causal(family)
    route_causal_spans(model, MIXED)
    prompt = ids(1, 13)
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=20, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
        whole = model(out.sequences).logits  # [1, 33, V]
        steps = torch.stack(out.logits, 1)  # [1, 20, V]
        torch.testing.assert_close(steps.double(), whole[:, 12:32])  # generate hands its logits back in fp32
        first = model(out.sequences[:, :21], use_cache=True)
        rest = model(out.sequences[:, 21:], **{compat.cache_kwarg(model): first.past_key_values}).logits
        torch.testing.assert_close(rest, whole[:, 21:])


@pytest.mark.parametrize("family", ["mistral", "qwen2"])
def test_the_window_span_equals_the_native_sliding_window(family):
    """transformers' own local attention (every layer sliding, window sw) equals a window span of sw - 1, routed."""
    sw = 6
    span = Span("window", sw - 1)
    assert native_window(span)["sliding_window"] == sw
    extra = {"use_sliding_window": True, "max_window_layers": 0} if family == "qwen2" else {}
    native = tiny_causal(family, sliding_window=sw, layer_types=["sliding_attention"] * LAYERS, **extra)
    ours = same_weights(native, family)
    route_causal_spans(ours, [span] * LAYERS)
    x = ids(2, 30)
    with torch.no_grad():
        n_out, o_out = native(x).logits, ours(x).logits
    torch.testing.assert_close(o_out, n_out)
    full = same_weights(native, family)
    with torch.no_grad():
        assert not torch.allclose(full(x).logits, n_out)  # the native window does restrict


def test_routing_replaces_the_backbones_own_local_layers():
    """A backbone whose config makes layers local runs the method's spans instead (full here: the stock model
    of all full layers)."""
    native = tiny_causal("qwen2", sliding_window=4, use_sliding_window=True, max_window_layers=0,
                  layer_types=["sliding_attention"] * LAYERS)
    full = same_weights(native, "qwen2")
    route_causal_spans(native, [Span("full")] * LAYERS)
    x = ids(1, 20)
    with torch.no_grad():
        torch.testing.assert_close(native(x).logits, full(x).logits)


def test_gpt_neo_local_layers_are_the_window_pattern_and_gpt_neo_is_refused():
    """GPT-Neo's "local" layers read window_size keys, itself included: the window span of window_size - 1. It runs
    its own attention code, so routing refuses it with the native setting named."""
    conf = GPTNeoConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, window_size=7,
                        attention_types=[[["local"], 2]], max_position_embeddings=40)
    model = AutoModelForCausalLM.from_config(conf)
    bias = model.transformer.h[0].attn.attention.bias[0, 0]  # [40, 40] GPT-Neo's own local pattern
    span = Span("window", conf.window_size - 1, causal=True)
    assert native_window(span)["window_size"] == conf.window_size
    assert torch.equal(bias, span.dense_mask(40))
    with pytest.raises(TypeError, match="model_type 'gpt_neo'.*attention_types"):
        causal_family(model)


def test_gpt2_positions_are_duplicated_as_the_paper_does():
    model = tiny_causal("gpt2")
    table = model.transformer.wpe.weight.detach().clone()  # [128, 32]
    x = ids(1, 100)
    with torch.no_grad():
        before = model(x).logits
    assert extend_positions(model, 300) and not extend_positions(model, 200)
    new = model.transformer.wpe.weight
    assert new.shape == (300, 32) and model.config.n_positions == 300
    torch.testing.assert_close(new[128:256], table)
    torch.testing.assert_close(new[256:], table[:44])
    route_causal_spans(model, [Span("block", 128)] * LAYERS)
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits, before)  # the first 128 positions are the pretrained ones
        assert model(ids(1, 300)).logits.shape == (1, 300, VOCAB)
    assert not extend_positions(tiny_causal("llama"), 4096)  # rotary: nothing to duplicate


def test_the_block_and_window_layers_build_no_dense_mask(monkeypatch):
    """Training-shaped calls (no padding, no cache) go to the kernels: the pattern helpers are never asked."""
    from scaleformer.ops import causal_spans

    def dense(*a, **kw):
        raise AssertionError("a dense mask was built")

    monkeypatch.setattr(causal_spans, "allowed", dense)
    model = tiny_causal("gpt2")
    route_causal_spans(model, MIXED)
    with torch.no_grad():
        assert model(ids(2, 64)).logits.shape == (2, 64, VOCAB)
