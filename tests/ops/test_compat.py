"""The seam into transformers/Lightning internals (scaleformer.ops.compat) on a release it does not know.

A future transformers release is simulated by replacing a stock forward with one whose parameters
have other names (as 5.24 renamed ``past_key_values`` to ``cache``). Speed-only patches must give
way to the stock path with the same tokens and one notice; methods that need their patch must stop
at start-up with one line naming the installed version and the tested range.
"""

from __future__ import annotations

import logging
import re
import tomllib

import pytest
import torch
from conftest import ROOT, compose
from packaging.requirements import Requirement
from packaging.version import Version
from test_decoding import encoded, stock
from tiny_models import batch, tiny

from scaleformer.errors import ConfigError
from scaleformer.methods import build_method, method_config
from scaleformer.ops import compat, decoding, kept_layer, patches

pytestmark = pytest.mark.compat  # run on other transformers releases by `make test-compat`


@pytest.fixture
def fresh_seam():
    patches.reset()
    yield
    patches.reset()


def _renamed_attention(monkeypatch) -> None:
    """BART's and T5's attention forward as a release with other argument names would have it."""
    for cls in (compat.BartAttention, compat.T5Attention):
        orig = cls.forward
        cache = compat.call_names(orig, ("cache",))["cache"]

        def future(self, hidden_states, encoder_states=None, kv_store=None, _orig=orig, _cache=cache, **kwargs):
            # this release's callers would pass encoder_states / kv_store; today's decoder passes the old names
            encoder_states = kwargs.pop("key_value_states", encoder_states)
            kv_store = kwargs.pop(_cache, kv_store)
            return _orig(self, hidden_states, key_value_states=encoder_states, **{_cache: kv_store}, **kwargs)

        monkeypatch.setattr(cls, "forward", future)
    patches.reset()


def test_reading_a_methods_signature_keeps_no_instance_alive():
    """The signature caches key on functions: a bound method (``trainer.fit``) once kept its Trainer, and
    with it a whole run's model and optimiser, alive for the life of the process."""
    import gc
    import weakref

    class Owner:
        def fit(self, model, ckpt_path=None, weights_only=None, **kwargs):
            return None

    owner = Owner()
    assert compat.fit_kwargs(owner.fit, weights_only=True, nosuch=1) == {"weights_only": True}
    assert compat.call_names(owner.fit, ("model",)) == {"model": "model"} and compat.takes_var_kwargs(owner.fit)
    gone = weakref.ref(owner)
    del owner
    gc.collect()
    assert gone() is None


def _notices(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_bind_reads_arguments_by_their_installed_names(fresh_seam):
    def new(self, hidden_states, key_value_states=None, cache=None, attention_mask=None, **kwargs):
        return None

    def old(self, hidden_states, key_value_states=None, past_key_values=None, attention_mask=None, **kwargs):
        return None

    for fn in (new, old):
        a, rest = compat.bind(fn, ("self", "h"), {"cache": 1, "attention_mask": 2, "foo": 3}
                              if fn is new else {"past_key_values": 1, "attention_mask": 2, "foo": 3},
                              compat.BART_ROLES)
        assert a == {"hidden_states": "h", "key_value_states": None, "cache": 1, "attention_mask": 2}
        assert rest == {"foo": 3}
    # an old alias passed into **kwargs of a new signature is still found
    a, rest = compat.bind(new, ("self", "h"), {"past_key_values": 7}, compat.BART_ROLES)
    assert a["cache"] == 7 and rest == {}


def test_installed_release_fits_every_patch(fresh_seam):
    """On the compat tier's releases too: a patch turned off there is drift CI must report."""
    assert {n: patches.mismatch(n) for n in patches.PATCHES} == dict.fromkeys(patches.PATCHES)


@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_unknown_attention_signature_falls_back_with_the_same_tokens_and_one_notice(
        monkeypatch, caplog, fresh_seam, arch):
    model, enc = encoded(arch, "sled", {"chunk_size": 48, "overlap": 12})
    expected = stock(model, enc, num_beams=4, max_new_tokens=8, early_stopping=True).sequences
    _renamed_attention(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="scaleformer"):
        for _ in range(2):
            out = decoding.generate(model, enc.hidden, enc.mask, num_beams=4, max_new_tokens=8, early_stopping=True,
                                    return_dict_in_generate=True, output_scores=True)
            assert torch.equal(out.sequences, expected)
    said = _notices(caplog, "beam-shared cross-attention")
    assert len(said) == 1, said
    assert compat.installed("transformers") in said[0] and "turned off" in said[0] and "same tokens" in said[0]
    assert not any(type(m).__name__.startswith("Shared") for m in model.modules()), "no class was swapped"


@pytest.mark.parametrize("name", ["unlimiformer", "memorizing"])
def test_retrieval_method_stops_at_start_up_with_one_line(monkeypatch, fresh_seam, name):
    _renamed_attention(monkeypatch)
    _, spec = tiny("bart")
    with pytest.raises(ConfigError) as e:
        build_method(method_config({"name": name}), spec)
    msg = str(e.value)
    assert "\n" not in msg and f"method={name}" in msg
    assert compat.installed("transformers") in msg and patches.tested_range() in msg


def test_unknown_layer_signature_turns_the_kept_layer_off_and_stops_span_methods(monkeypatch, caplog, fresh_seam):
    model, spec = tiny("t5")
    ids, mask = batch([60, 33], spec)
    pos = torch.tensor([[0, 5, 9], [1, 2, 3]])
    with torch.no_grad():
        want = kept_layer.full_then_gather(model.get_encoder(), ids, mask, [(None, pos)])[0]
        orig = compat.T5Block.forward

        def future(self, hidden_states, mask=None, rel_bias=None, *rest, **kwargs):
            return orig(self, hidden_states, mask, rel_bias, *rest, **kwargs)

        monkeypatch.setattr(compat.T5Block, "forward", future)
        patches.reset()
        with caplog.at_level(logging.WARNING, logger="scaleformer"):
            got = kept_layer.encode_at(model.get_encoder(), ids, mask, [(None, pos)])[0]
    assert torch.equal(got, want)
    assert len(_notices(caplog, "last encoder layer at kept positions")) == 1
    with pytest.raises(ConfigError, match=r"method=masformer needs per-layer attention spans.*tested: transformers"):
        build_method(method_config({"name": "masformer", "max_length": 256, "block_size": 32}), spec)


def test_a_whole_run_completes_on_the_stock_path(monkeypatch, caplog, tmp_path, fresh_seam):
    from scaleformer.runs.run import run

    _renamed_attention(monkeypatch)
    overrides = [f"paths.root={tmp_path}/results", f"paths.cache={tmp_path}/cache", "method=scaleformer_middle",
                 "data.synthetic_docs.train=2", "data.synthetic_docs.validation=2", "trainer.max_steps=1",
                 "trainer.eval_splits=[validation]", "trainer.enable_progress_bar=false", "generation.num_beams=2",
                 "generation.max_new_tokens=6", "metrics.bertscore.enabled=false"]
    with caplog.at_level(logging.WARNING, logger="scaleformer"):
        result = run(compose(overrides))
    assert result["splits"]["validation"]["n_examples"] == 2
    assert len(_notices(caplog, "beam-shared cross-attention")) == 1
    with pytest.raises(ConfigError, match="method=unlimiformer needs retrieval"):
        run(compose([*overrides, "method=unlimiformer", "run_name=retrieval"]))
    assert not (tmp_path / "results" / "runs" / "retrieval").exists() or not list(
        (tmp_path / "results" / "runs" / "retrieval").rglob("*.ckpt")), "stopped before any training"


def test_lightning_private_progress_helper_is_optional(monkeypatch):
    class Bar:
        n, refreshed = 0, 0

        def refresh(self):
            self.refreshed += 1

    monkeypatch.setattr(compat, "stock", lambda module, name: None)
    bar = Bar()
    compat.set_progress(bar, 7)
    assert bar.n == 7 and bar.refreshed == 1


def test_fit_gets_only_keywords_it_takes():
    def fit(model, train_dataloaders=None, ckpt_path=None):
        return None

    def fit_new(model, ckpt_path=None, weights_only=None):
        return None

    assert compat.fit_kwargs(fit, weights_only=True) == {}
    assert compat.fit_kwargs(fit_new, weights_only=True) == {"weights_only": True}


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, ver = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = ver
    return pins


def test_pyproject_lower_bounds_and_the_lock_agree_with_the_tested_range():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    tf = next(d for d in deps if d.startswith("transformers"))
    lo, hi = patches.TESTED["transformers"]
    assert Requirement(tf).specifier.contains(lo) and not Requirement(tf).specifier.contains(
        str(Version(lo).release[0]) + "." + str(Version(lo).release[1] - 1)), (tf, lo)
    pins = _lock()
    assert Version(lo) <= Version(pins["transformers"]) <= Version(hi)
    for dep in deps:  # every direct dependency is pinned, and its pin satisfies the pyproject's range
        req = Requirement(dep)
        key = re.sub(r"[-_.]+", "-", req.name).lower()
        assert key in pins, f"{req.name} is not in requirements.lock"
        assert req.specifier.contains(pins[key], prereleases=True), (dep, pins[key])


def test_a_patch_registered_from_elsewhere_is_required_and_reported_like_the_built_ins():
    """A method of another package registers its own patch; a misfit stops the method at start-up."""
    from scaleformer.errors import ConfigError

    patches.PATCHES["plugin_test_patch"] = patches.Patch("plugin_test_patch", "a plugin's layer swap", False,
                                                       lambda: "it has no PluginLayer")
    try:
        patches.reset()
        assert patches.report()["plugin_test_patch"] == "off: it has no PluginLayer"
        with pytest.raises(ConfigError, match=r"method\.name=plugin needs a plugin's layer swap.*no PluginLayer"):
            patches.require(["plugin_test_patch"], "method.name=plugin")
    finally:
        patches.PATCHES.pop("plugin_test_patch")
        patches.reset()
