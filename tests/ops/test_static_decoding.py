"""The static self-attention cache (scaleformer.ops.static_decoding, ``generation.static_cache``) against the
dynamic cache of the same beam-shared path, which test_decoding checks against transformers' stock path.

The token sequences must be identical for every method, BART and T5, greedy and 4-beam search, ragged
batches; the cross-attention part stays the per-document SharedCrossCache; a CPU never compiles.
"""

from __future__ import annotations

import logging

import pytest
import torch
from test_decoding import encoded, settings, shared
from tiny_models import METHODS, SMALL, batch, tiny

from scaleformer.config import GenerationConfig, runtime_fields
from scaleformer.errors import ConfigError
from scaleformer.methods import build_method, method_config
from scaleformer.ops import compat, decoding, static_decoding

pytestmark = pytest.mark.compat


@pytest.mark.parametrize("beams", [1, 4])
@pytest.mark.parametrize(("name", "kw"), METHODS, ids=[m for m, _ in METHODS])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_static_cache_generates_the_dynamic_tokens(arch, name, kw, beams):
    model, enc = encoded(arch, name, kw)
    assert bool((enc.mask == 0).any()), "a ragged batch: padding on the encoder side"
    with torch.no_grad():
        want = shared(model, enc, **settings(beams))
        got = shared(model, enc, **settings(beams), cache_implementation="static")
    assert torch.equal(got.sequences, want.sequences)
    cache = got.past_key_values
    assert isinstance(cache.self_attention_cache, compat.StaticCache)
    assert isinstance(cache.cross_attention_cache, decoding.SharedCrossCache)
    assert decoding.cross_attention_bytes(cache) == decoding.cross_attention_bytes(want.past_key_values)
    layer = cache.self_attention_cache.layers[0]
    assert layer.keys.shape[0] == beams * enc.hidden.shape[0]  # allocated once, for every beam
    assert layer.keys.shape[2] == 1 + settings(beams)["max_new_tokens"]  # start token + new tokens


def test_greedy_scores_match_the_dynamic_cache():
    """One beam: only the masked (empty) static positions differ, so the scores agree to rounding."""
    model, enc = encoded("bart", "sled", SMALL)
    with torch.no_grad():
        want = shared(model, enc, **settings(1))
        got = shared(model, enc, **settings(1), cache_implementation="static")
    for a, b in zip(got.scores, want.scores):
        finite = b.isfinite()
        assert torch.equal(a.isfinite(), finite)
        torch.testing.assert_close(a[finite], b[finite], atol=1e-5, rtol=1e-5)


def test_request_through_the_generation_config_leaves_it_unchanged():
    model, enc = encoded("t5", "scaleformer", {**SMALL, "middle_tokens": 8})
    gen = model.generation_config.__class__(**settings(4), cache_implementation="static")
    with torch.no_grad():
        got = decoding.generate(model, enc.hidden, enc.mask, generation_config=gen, return_dict_in_generate=True)
        want = decoding.generate(model, enc.hidden, enc.mask, **settings(4), return_dict_in_generate=True)
    assert gen.cache_implementation == "static"  # the caller's config: copied, not changed
    assert torch.equal(got.sequences, want.sequences)
    assert isinstance(got.past_key_values.self_attention_cache, compat.StaticCache)


@pytest.mark.parametrize(("given", "length"), [
    ({"max_new_tokens": 7}, 8),
    ({"max_new_tokens": 7, "decoder_input_ids": torch.zeros(2, 3, dtype=torch.long)}, 10),
    ({"max_length": 9}, 9),
])
def test_cache_length(given, length):
    model, _ = tiny("bart")
    model.generation_config.max_new_tokens = None
    assert static_decoding.cache_length(model, given) == length


def test_fallback_to_the_dynamic_cache_is_said_once(caplog):
    model, enc = encoded("bart", "sled", SMALL)
    static_decoding._SAID.clear()
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="scaleformer"):
        outs = [decoding.generate(model, enc.hidden, enc.mask, shared=False, cache_implementation="static",
                                  **settings(2), return_dict_in_generate=True) for _ in range(2)]
        want = decoding.generate(model, enc.hidden, enc.mask, **settings(2), return_dict_in_generate=True)
    said = [r for r in caplog.records if "static_cache" in r.getMessage()]
    assert len(said) == 1 and "dynamic cache runs instead" in said[0].getMessage()
    assert all(torch.equal(o.sequences, want.sequences) for o in outs)
    assert not isinstance(outs[0].past_key_values.self_attention_cache, compat.StaticCache)


def test_release_without_a_static_cache_falls_back(monkeypatch, caplog):
    model, enc = encoded("bart", "sled", SMALL)
    static_decoding._SAID.clear()
    monkeypatch.setattr(compat, "static_cache", lambda *a, **k: None)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="scaleformer"):
        got = shared(model, enc, **settings(4), cache_implementation="static")
        want = shared(model, enc, **settings(4))
    assert torch.equal(got.sequences, want.sequences)
    assert any("no StaticCache" in r.getMessage() for r in caplog.records)


def test_the_cpu_never_compiles(monkeypatch):
    """transformers compiles a static cache's decoding step on accelerators; here it must stay eager, even
    when asked to compile (generation.compile=true)."""
    model, enc = encoded("bart", "sled", SMALL)
    monkeypatch.setattr(type(model), "get_compiled_call",
                        lambda *a, **k: pytest.fail("compiled on a CPU"), raising=False)
    kw = static_decoding.generation_kwargs(GenerationConfig(static_cache=True, compile=True))
    assert kw == {"cache_implementation": "static", "disable_compile": False}
    with torch.no_grad():
        for beams in (1, 4):  # greedy search is where transformers compiles on an accelerator
            got = shared(model, enc, **settings(beams), **kw)
            assert isinstance(got.past_key_values.self_attention_cache, compat.StaticCache)
    assert static_decoding.take_request(model, kw)[1]["disable_compile"] is True


def test_generation_config_fields():
    assert {"static_cache", "compile"} <= set(runtime_fields(GenerationConfig))  # not in the run identities
    assert static_decoding.generation_kwargs(GenerationConfig()) == {}
    assert static_decoding.generation_kwargs(GenerationConfig(static_cache=True)) == {
        "cache_implementation": "static", "disable_compile": True}
    with pytest.raises(ConfigError, match="generation.compile"):
        GenerationConfig(compile=True)


def test_summaries_use_the_static_cache(monkeypatch):
    """The run's decoding path (SummarizationModule -> summaries -> the HF model's generate -> decoding)."""
    from scaleformer.config import OptimConfig
    from scaleformer.runs.module import SummarizationModule

    model, spec = tiny("bart")
    method = build_method(method_config({"name": "sled", **SMALL}), spec)

    class Tok:
        def batch_decode(self, seqs, **kw):
            return [" ".join(map(str, s.tolist())) for s in seqs]

    ids, mask = batch([200, 90], spec)
    got, caches, real = {}, [], decoding.cross_cache
    monkeypatch.setattr(decoding, "cross_cache", lambda *a, **k: caches.append(real(*a, **k)) or caches[-1])
    for static in (False, True):
        gen = GenerationConfig(num_beams=4, max_new_tokens=6, static_cache=static)
        module = SummarizationModule(model, method, Tok(), OptimConfig(), gen).eval()
        got[static] = module.generate({"input_ids": ids, "attention_mask": mask})
        assert isinstance(caches[-1].self_attention_cache, compat.StaticCache) == static
    assert got[True] == got[False]


def test_runtime_options_stay_out_of_the_evaluation_identity():
    from scaleformer.compose import compose_config
    from scaleformer.runs import identity
    from scaleformer.runs.context import to_config

    hashes = [identity.evaluation_hash(to_config(compose_config(["debug=default", *extra])))
              for extra in ([], ["generation.static_cache=true", "generation.compile=true"])]
    assert hashes[0] == hashes[1]
    assert "static_cache" not in identity.evaluation_identity(to_config(compose_config(["debug=default"])))["generation"]
