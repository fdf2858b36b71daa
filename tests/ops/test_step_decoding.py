"""The static decoding step gives ``generate``'s tokens (scaleformer.ops.step_decoding).

Every registered method on BART and T5, greedy and 4 beams, ``no_repeat_ngram_size`` 0 and 3, a length penalty,
``min_new_tokens``, ragged batches: the same sequences as :func:`scaleformer.ops.decoding.generate` (transformers'
``generate`` over the same encoder states). The step compiles whole (``fullgraph``, dynamo's ``eager`` backend here;
inductor in the slow tier).
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import METHODS, batch, tiny

from scaleformer.methods import build_method, method_config
from scaleformer.model.hf import ScaleformerForConditionalGeneration
from scaleformer.ops import decoding, step_decoding

pytestmark = pytest.mark.compat

LENGTHS = [260, 150, 9, 200, 64, 128, 33, 170]  # ragged; most past the 128-position window


def encoded(arch: str, name: str, kw: dict, lengths: list[int] = LENGTHS):
    backbone, spec = tiny(arch)
    method = build_method(method_config({"name": name, **kw}), spec)
    model = ScaleformerForConditionalGeneration.from_parts(method.wrap(backbone), method).eval()
    ids, mask = batch(lengths, spec, seed=1)
    with torch.no_grad():
        enc = model.encode(ids, mask, training=False)
    return model.backbone, enc.hidden, enc.mask


def settings(beams: int, ngram: int, **extra) -> dict:
    kw = dict(num_beams=beams, max_new_tokens=12, min_new_tokens=3, no_repeat_ngram_size=ngram, do_sample=False)
    return kw | (dict(length_penalty=1.5, early_stopping=True) if beams > 1 else {}) | extra


def both(backbone, hidden, mask, **kw):
    with torch.no_grad():
        want = decoding.generate(backbone, hidden, mask, **kw)
        got = step_decoding.generate(backbone, hidden, mask, **kw)
    assert got is not None, step_decoding.supported(*step_decoding.resolve(backbone, dict(kw)))
    return want, got


@pytest.mark.parametrize("ngram", [0, 3])
@pytest.mark.parametrize("beams", [1, 4])
@pytest.mark.parametrize(("name", "kw"), METHODS, ids=[m for m, _ in METHODS])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_the_step_gives_generates_tokens(arch, name, kw, beams, ngram):
    backbone, hidden, mask = encoded(arch, name, kw)
    want, got = both(backbone, hidden, mask, **settings(beams, ngram))
    if ngram or beams > 1:  # random tiny T5s repeat one token greedily whatever the document; elsewhere they differ
        assert len({tuple(r.tolist()) for r in want}) > 1, "documents that decode alike test nothing"
    assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("extra", [dict(early_stopping=False), dict(early_stopping="never", length_penalty=2.0),
                                   dict(length_penalty=-0.5), dict(min_new_tokens=0, max_new_tokens=30),
                                   dict(forced_bos_token_id=0, forced_eos_token_id=2), dict(min_length=6)],
                         ids=["early-false", "never", "negative-penalty", "long", "forced", "min-length"])
@pytest.mark.parametrize("beams", [1, 4])
def test_the_step_follows_generates_other_settings(beams, extra):
    backbone, hidden, mask = encoded("bart", "sled", dict(METHODS)["sled"])
    if beams == 1:
        extra = {k: v for k, v in extra.items() if k not in ("early_stopping", "length_penalty")}
    want, got = both(backbone, hidden, mask, **settings(beams, 3, **extra))
    assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("check_every", [1, 3, 50])
def test_reading_the_stop_flag_seldom_changes_nothing(check_every):
    backbone, hidden, mask = encoded("bart", "truncation", dict(METHODS)["truncation"])
    with torch.no_grad():
        want = decoding.generate(backbone, hidden, mask, **settings(4, 3, max_new_tokens=40))
        got = step_decoding.generate(backbone, hidden, mask, check_every=check_every,
                                     **settings(4, 3, max_new_tokens=40))
    assert torch.equal(got, want)


@pytest.mark.parametrize(("setting", "value"), [("do_sample", True), ("num_return_sequences", 2),
                                                 ("repetition_penalty", 1.2), ("output_scores", True)])
def test_what_it_lacks_falls_back(setting, value):
    backbone, hidden, mask = encoded("bart", "sled", dict(METHODS)["sled"])
    kw = settings(4, 0) | {setting: value}
    gen, rest = step_decoding.resolve(backbone, dict(kw))
    assert setting in step_decoding.supported(gen, rest)
    assert step_decoding.generate(backbone, hidden, mask, **kw) is None


@pytest.mark.parametrize("beams", [1, 4])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_the_step_compiles_whole(arch, beams):
    """fullgraph: a graph break is an error, so the step is one graph (dynamo's eager backend: the capture)."""
    import torch._dynamo

    torch._dynamo.reset()
    backbone, hidden, mask = encoded(arch, "sled", dict(METHODS)["sled"])
    kw = settings(beams, 3)
    with torch.no_grad():
        want = decoding.generate(backbone, hidden, mask, **kw)
        got = step_decoding.generate(backbone, hidden, mask, compile="eager", **kw)
    assert torch.equal(got, want)


@pytest.mark.parametrize("beams", [1, 4])
def test_the_compiled_program_gives_generates_tokens(beams):
    """aot_eager: the whole step traced, functionalised and run by the stock kernels: the compiled program's
    semantics (the in-place cache reorder, the masked updates after the stop) give generate's tokens exactly."""
    import torch._dynamo

    torch._dynamo.reset()
    backbone, hidden, mask = encoded("bart", "sled", dict(METHODS)["sled"])
    kw = settings(beams, 3)
    with torch.no_grad():
        want = decoding.generate(backbone, hidden, mask, **kw)
        got = step_decoding.generate(backbone, hidden, mask, compile="aot_eager", **kw)
    assert torch.equal(got, want)


def test_later_calls_skip_guards_only_inside_one_decoding(monkeypatch):
    """The loop's later calls skip dynamo's guards; a new batch, beam count or length between decodings is still
    told apart (a recompile, generate's tokens), and the stance ends with the loop."""
    import contextlib

    import torch._dynamo

    from scaleformer.ops import compat

    torch._dynamo.reset()
    entered, real = [], compat.stance

    def spy(*args, **kwargs):
        ctx = real(*args, **kwargs)
        entered.append((args, kwargs, isinstance(ctx, contextlib.nullcontext)))
        return ctx

    monkeypatch.setattr(compat, "stance", spy)
    backbone, hidden, mask = encoded("bart", "sled", dict(METHODS)["sled"])
    with torch.no_grad():
        for rows, beams, new in ((8, 4, 12), (3, 4, 12), (3, 1, 12), (8, 4, 7)):
            kw = settings(beams, 3, max_new_tokens=new)
            want = decoding.generate(backbone, hidden[:rows], mask[:rows], **kw)
            got = step_decoding.generate(backbone, hidden[:rows], mask[:rows], compile="aot_eager", **kw)
            assert torch.equal(got, want), (rows, beams, new)
    assert entered == [(("default",), {"skip_guard_eval_unsafe": True}, False)] * 4
    stance = getattr(getattr(torch._dynamo, "eval_frame", None), "_stance", None)
    assert stance is None or not stance.skip_guard_eval_unsafe


@pytest.mark.slow
@pytest.mark.parametrize("beams", [1, 4])
def test_the_step_compiled_by_inductor_gives_generates_tokens(beams):
    """inductor's kernels, fused: the same tokens (4 beams went astray while the cache's rows moved inside the
    compiled step; here they keep generate's tokens)."""
    import torch._dynamo

    torch._dynamo.reset()
    backbone, hidden, mask = encoded("bart", "sled", dict(METHODS)["sled"])
    with torch.no_grad():
        want = decoding.generate(backbone, hidden, mask, **settings(beams, 3))
        got = step_decoding.generate(backbone, hidden, mask, compile="inductor", **settings(beams, 3))
    assert torch.equal(got, want)


def test_the_step_writes_one_cache_position_and_the_rows_move_after_it():
    """The compiled function only appends to the self-attention cache; the beams' rows move in ``reorder``, eagerly
    (inside the step, inductor's fusion read rows it was overwriting)."""
    backbone, hidden, mask = encoded("bart", "truncation", dict(METHODS)["truncation"])
    gen, mods, _ = step_decoding.plan(backbone, settings(4, 0))
    with torch.no_grad():
        dec = step_decoding.Decoder(backbone, gen, hidden, mask, mods)
        for _ in range(3):
            dec.state = dec.step(dec.state)
            dec.reorder()
        layers = dec.cache.self_attention_cache.layers
        before = [(layer.keys.clone(), layer.values.clone()) for layer in layers]
        t = int(dec.state[-2])
        dec.state = dec.step(dec.state)
        order = dec.state[-3]
        assert not torch.equal(order, dec.rows), "this step reorders beams (else the test shows nothing)"
        for (k, v), layer in zip(before, layers, strict=True):
            for old, new in ((k, layer.keys), (v, layer.values)):
                assert torch.equal(torch.cat([old[:, :, :t - 1], old[:, :, t:]], 2),
                                   torch.cat([new[:, :, :t - 1], new[:, :, t:]], 2))
        dec.reorder()
        for (k, _), layer in zip(before, layers, strict=True):
            assert torch.equal(layer.keys[:, :, :t - 1], k.index_select(0, order)[:, :, :t - 1])


def test_the_model_class_uses_the_step_by_a_flag_and_says_once_when_it_cannot(caplog):
    import logging

    from scaleformer.ops import static_decoding

    backbone, spec = tiny("bart")
    method = build_method(method_config({"name": "sled", **dict(METHODS)["sled"]}), spec)
    model = ScaleformerForConditionalGeneration.from_parts(method.wrap(backbone), method).eval()
    ids, mask = batch(LENGTHS[:3], spec, seed=2)
    kw = settings(4, 3)
    with torch.no_grad():
        want = model.generate(ids, mask, **kw)
        assert torch.equal(model.generate(ids, mask, step_decoding=True, **kw), want)
        static_decoding._SAID.clear()
        with caplog.at_level(logging.WARNING, logger="scaleformer"):
            for _ in range(2):
                plain = model.generate(ids, mask, repetition_penalty=1.3, **kw)
                assert torch.equal(model.generate(ids, mask, step_decoding=True, repetition_penalty=1.3, **kw), plain)
    said = [r.getMessage() for r in caplog.records if "step_decoding" in r.getMessage()]
    assert len(said) == 1 and "repetition_penalty=1.3" in said[0] and "transformers' generate runs instead" in said[0]


@pytest.mark.parametrize("beams", [1, 4])
def test_an_ngram_longer_than_the_output_bans_nothing_as_in_generate(beams):
    """``no_repeat_ngram_size`` above the output's length: no n-gram can repeat, so generate's tokens (the step
    sized its n-gram windows by it and failed)."""
    backbone, hidden, mask = encoded("bart", "sled", dict(METHODS)["sled"])
    want, got = both(backbone, hidden, mask, **settings(beams, 50))
    assert torch.equal(got, want)


@pytest.mark.parametrize("name", ["sled", "truncation"])
def test_a_greedy_step_compiles_whole_for_sled_and_truncation(name):
    """The run's greedy decoding of 8 tokens, captured whole (fullgraph; dynamo's eager backend: a data-dependent
    branch would be refused here as under inductor)."""
    import torch._dynamo

    torch._dynamo.reset()
    backbone, hidden, mask = encoded("bart", name, dict(METHODS)[name])
    kw = dict(num_beams=1, max_new_tokens=8, min_new_tokens=0, no_repeat_ngram_size=0, length_penalty=1.0)
    with torch.no_grad():
        want = decoding.generate(backbone, hidden, mask, **kw)
        got = step_decoding.generate(backbone, hidden, mask, compile="eager", **kw)
    assert torch.equal(got, want)


def test_a_step_the_compiler_refuses_falls_back_to_generate_and_says_so(monkeypatch, caplog):
    """torch.compile refusing the step (dynamo's Unsupported) is one stated line, and generate's tokens."""
    import logging

    from torch._dynamo.exc import Unsupported

    from scaleformer.ops import static_decoding

    def refusing(fn, **kw):
        def compiled(*a, **k):
            raise Unsupported("Data-dependent branching")
        return compiled

    monkeypatch.setattr(torch, "compile", refusing)
    static_decoding._SAID.clear()
    backbone, hidden, mask = encoded("bart", "truncation", dict(METHODS)["truncation"])
    kw = dict(num_beams=1, max_new_tokens=8)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="scaleformer"):
        want = decoding.generate(backbone, hidden, mask, **kw)
        assert step_decoding.generate(backbone, hidden, mask, compile="inductor", **kw) is None
        got = step_decoding.decode(backbone, hidden, mask, step=True, compile="inductor", **kw)
    assert torch.equal(got, want)
    said = [r.getMessage() for r in caplog.records if "refused the decoding step" in r.getMessage()]
    assert len(said) == 1 and "Data-dependent branching" in said[0] and "generate runs instead" in said[0]
