"""Beam-shared cross-attention (scaleformer.ops.decoding) against the stock transformers generation path.

The reference is ``model.generate`` with the encoder states expanded per beam, on the same model and
inputs: the token sequences must be identical for every method, BART and T5, greedy and beam
search, ragged batches, with n-gram blocking and a length penalty. Scores may differ in the last
float bits (other matmul shapes), so they are compared with a tolerance.
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import METHODS, SMALL, batch, tiny
from transformers.modeling_outputs import BaseModelOutput

from scaleformer.methods import build_method, method_config
from scaleformer.ops import decoding

pytestmark = pytest.mark.compat  # run on other transformers releases by `make test-compat`

def encoded(arch: str, name: str, kw: dict, lengths=(300, 170, 9)):
    model, spec = tiny(arch)
    method = build_method(method_config({"name": name, **kw}), spec)
    model = method.wrap(model)
    ids, mask = batch(list(lengths), spec)
    with torch.no_grad():
        enc = method.encode(model.get_encoder(), ids, mask, training=False)
    return model, enc


def stock(model, enc, **kw):
    """The reference: transformers' own path, encoder states expanded per beam."""
    return model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=enc.hidden), attention_mask=enc.mask,
                          output_scores=True, return_dict_in_generate=True, **kw)


def shared(model, enc, **kw):
    return decoding.generate(model, enc.hidden, enc.mask, output_scores=True, return_dict_in_generate=True, **kw)


def settings(beams: int) -> dict:
    kw = dict(num_beams=beams, max_new_tokens=12, min_new_tokens=3, no_repeat_ngram_size=2, do_sample=False)
    if beams > 1:
        kw |= dict(length_penalty=1.7, early_stopping=True)
    return kw


@pytest.mark.parametrize("beams", [1, 3, 4])
@pytest.mark.parametrize(("name", "kw"), METHODS, ids=[m for m, _ in METHODS])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_shared_generation_equals_stock(arch, name, kw, beams):
    model, enc = encoded(arch, name, kw)
    assert bool((enc.mask == 0).any()), "a ragged batch: padding on the encoder side"
    with torch.no_grad():
        want = stock(model, enc, **settings(beams))
        got = shared(model, enc, **settings(beams))
    assert torch.equal(got.sequences, want.sequences)
    assert isinstance(got.past_key_values.cross_attention_cache, decoding.SharedCrossCache)
    for a, b in zip(got.scores, want.scores):
        finite = b.isfinite()
        assert torch.equal(a.isfinite(), finite)
        torch.testing.assert_close(a[finite], b[finite], atol=1e-4, rtol=1e-5)
    # One copy of the cross-attention keys/values per document, whatever the beams.
    per_doc = decoding.cross_attention_bytes(got.past_key_values)
    assert decoding.cross_attention_bytes(want.past_key_values) == beams * per_doc
    layers = got.past_key_values.cross_attention_cache.layers
    assert all(layer.keys.shape[0] == enc.hidden.shape[0] for layer in layers)


@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_greedy_logits_are_bitwise_equal(arch):
    """One beam: the same shapes as the stock path, so the same floats."""
    model, enc = encoded(arch, "sled", SMALL)
    with torch.no_grad():
        want, got = stock(model, enc, **settings(1)), shared(model, enc, **settings(1))
    assert torch.equal(torch.stack(got.scores), torch.stack(want.scores))


def test_beams_never_cross_documents(monkeypatch):
    """The no-op reorder is only right because beam search reorders within documents: check every step."""
    model, enc = encoded("bart", "sled", SMALL)
    seen = []

    def check(self, beam_idx):
        seen.append(beam_idx.clone())

    monkeypatch.setattr(decoding.SharedCrossCache, "reorder_cache", check)
    with torch.no_grad():
        shared(model, enc, **settings(4))
    rows = torch.arange(seen[0].shape[0])
    assert all(torch.equal(idx // 4, rows // 4) for idx in seen)
    assert any(not torch.equal(idx, rows) for idx in seen), "beams were reordered at some step"


@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_eager_attention_and_returned_weights(arch):
    model, enc = encoded(arch, "scaleformer", {**SMALL, "middle_tokens": 8})
    model.config._attn_implementation = "eager"
    for m in model.modules():
        if hasattr(m, "config") and m.config is not model.config:
            m.config._attn_implementation = "eager"
    with torch.no_grad():
        want = stock(model, enc, **settings(3))
        got = shared(model, enc, **settings(3), output_attentions=True)
    assert torch.equal(got.sequences, want.sequences)
    cross = got.cross_attentions[1][0]  # step 2, layer 0: [batch x beams, H, 1, T]
    assert cross.shape[0] == 3 * enc.hidden.shape[0] and cross.shape[-1] == enc.hidden.shape[1]
    torch.testing.assert_close(cross.sum(-1), torch.ones_like(cross.sum(-1)))


def test_stock_path_when_sharing_is_impossible():
    model, enc = encoded("bart", "sled", SMALL)
    assert decoding.share_cross_attention(model) is not None
    with torch.no_grad():
        no_cache = decoding.generate(model, enc.hidden, enc.mask, use_cache=False, **settings(2),
                                     return_dict_in_generate=True)
        off = decoding.generate(model, enc.hidden, enc.mask, shared=False, **settings(2), return_dict_in_generate=True)
        on = decoding.generate(model, enc.hidden, enc.mask, **settings(2), return_dict_in_generate=True)
    assert torch.equal(no_cache.sequences, on.sequences) and torch.equal(off.sequences, on.sequences)
    assert not isinstance(off.past_key_values.cross_attention_cache, decoding.SharedCrossCache)
    model.config._attn_implementation = "flex_attention"
    assert decoding.share_cross_attention(model) is None  # block masks cannot be regrouped


def test_classes_swapped_in_place_parameters_unchanged():
    model, _ = tiny("t5")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    mods = decoding.share_cross_attention(model)
    assert [type(m) for m in mods] == [decoding.SharedT5Attention] * 2
    assert decoding.share_cross_attention(model) == mods  # idempotent
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_summarization_module_generates_through_the_shared_path(monkeypatch):
    from scaleformer.config import GenerationConfig, OptimConfig
    from scaleformer.runs.module import SummarizationModule

    model, spec = tiny("bart")
    method = build_method(method_config({"name": "sled", **SMALL}), spec)

    class Tok:
        def batch_decode(self, seqs, **kw):
            return [" ".join(map(str, s.tolist())) for s in seqs]

    module = SummarizationModule(model, method, Tok(), OptimConfig(), GenerationConfig(num_beams=3, max_new_tokens=6))
    ids, mask = batch([200, 90], spec)
    calls = []
    real = decoding.generate
    monkeypatch.setattr(decoding, "generate", lambda *a, **k: calls.append(k) or real(*a, **k))
    got = module.eval().generate({"input_ids": ids, "attention_mask": mask})
    with torch.no_grad():
        enc = method.encode(model.get_encoder(), ids, mask, training=False)
        want = model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=enc.hidden), attention_mask=enc.mask,
                              num_beams=3, max_new_tokens=6, min_new_tokens=GenerationConfig().min_new_tokens,
                              length_penalty=GenerationConfig().length_penalty,
                              no_repeat_ngram_size=GenerationConfig().no_repeat_ngram_size, early_stopping=True)
    assert calls and got == Tok().batch_decode(want)


@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_a_decoder_compiled_for_training_decodes_eagerly(arch):
    """backbone.compile_decoder compiles for teacher-forced steps; decoding calls the layers eagerly (no
    graph captured: each step's cache would be a new length to compile for), with the eager tokens, and
    leaves them compiled for training."""
    from scaleformer.model.backbone import compile_decoder
    from scaleformer.ops import compat

    model, enc = encoded(arch, "sled", SMALL)
    with torch.no_grad():
        want = shared(model, enc, **settings(4))
    compile_decoder(model, "aot_eager")
    torch.compiler.reset()
    graphs = compat.compiled_graphs()
    with torch.no_grad():
        got = shared(model, enc, **settings(4))
    assert compat.compiled_graphs() == graphs and torch.equal(got.sequences, want.sequences)
    decoder = model.get_decoder()
    layers = decoder.layers if arch == "bart" else decoder.block
    assert all(getattr(x, "_compiled_call_impl", None) is not None for x in layers)  # restored
