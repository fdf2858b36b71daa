"""What transformers' own BART and T5 suites (ModelTesterMixin, GenerationTesterMixin) expect of a plain
model, asked of ScaleformerForConditionalGeneration for every registered method on BART and T5.

Read for what they check, written here in the project's words: padding on either side (the suites skip
it for encoder-decoder models), the backbone's settings reaching it through the model's config (attention
implementation, output flags, dtype), generation settings read as given (an explicit None included),
continuing from a returned cache, ``base_model``, a resize's ``vocab_size``, tied weights on save and
load, and the dict outputs of every decoding mode. Where the class differs by design, the check asserts
the refusal that docs/using.md's table of differences documents. test_hf_conformance.py holds the earlier
checks (config answers, save/load, resize, generation against the stock path, training, Accelerate,
LoRA). The mutation tests at the end run these checks on a class or config that lacks one fix and see
them fail.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path

import pytest
import torch
from model.test_hf_conformance import SETTINGS, assert_one_clear_line, build, inputs, labels, same_state
from ops.test_decoding import encoded, stock
from safetensors.torch import load_file
from tiny_models import METHODS, batch
from transformers import AutoConfig, AutoModelForSeq2SeqLM, GenerationConfig, PretrainedConfig
from transformers.generation import GenerateBeamEncoderDecoderOutput, GenerateEncoderDecoderOutput

from scaleformer.errors import ConfigError
from scaleformer.model import hf
from scaleformer.model.hf import ScaleformerForConditionalGeneration
from scaleformer.model.hf_config import ScaleformerConfig
from scaleformer.ops import compat, decoding
from scaleformer.ops.banded import WINDOW_ATTN

pytestmark = pytest.mark.compat  # transformers' own API: make test-compat runs these on other releases
LENGTHS = (300, 170, 9)
CASES = [pytest.param(a, m, id=f"{a}-{m}") for a in ("bart", "t5") for m, _ in METHODS]


def retrieval(model) -> bool:
    return "retrieval_layers" in model.method.requires


def left_padded(ids: torch.Tensor, mask: torch.Tensor, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same documents with their padding moved to the left."""
    n = mask.sum(1)
    out, kept = torch.full_like(ids, pad), torch.zeros_like(mask)
    for b, k in enumerate(n.tolist()):
        out[b, ids.shape[1] - k:], kept[b, ids.shape[1] - k:] = ids[b, :k], 1
    return out, kept


def unpadded_rows(tokens: torch.Tensor, pad: int) -> list[list[int]]:
    """Generated rows without the padding a batch adds after a row's end."""
    rows = []
    for row in tokens.tolist():
        while len(row) > 1 and row[-1] == pad:
            row.pop()
        rows.append(row)
    return rows


# ---- the checks --------------------------------------------------------------------------------------


def check_padding(model) -> None:
    """Left, right and no padding give the same logits and tokens; masked positions inside a document
    read as the document without them (transformers' left-padding check, which skips encoder-decoders)."""
    pad = model.method.spec.pad_id
    ids, mask = batch(list(LENGTHS), model.method.spec)
    left_ids, left_mask = left_padded(ids, mask, pad)
    lab = labels()
    with torch.no_grad():
        right = model(input_ids=ids, attention_mask=mask, labels=lab).logits
        left = model(input_ids=left_ids, attention_mask=left_mask, labels=lab).logits
        alone = torch.cat([model(input_ids=ids[b:b + 1, :n], labels=lab[b:b + 1]).logits
                           for b, n in enumerate(LENGTHS)])
        holes = mask.clone()
        holes[0, 40:60] = 0  # 20 positions inside the first document masked out
        kept = torch.cat([ids[0, :40], ids[0, 60:LENGTHS[0]]])[None]
        torch.testing.assert_close(model(input_ids=ids[:1], attention_mask=holes[:1], labels=lab[:1]).logits,
                                   model(input_ids=kept, labels=lab[:1]).logits, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(left, right, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(alone, right, atol=1e-5, rtol=1e-4)
    for beams in (1, 2):
        kw = dict(num_beams=beams, max_new_tokens=6)
        want = model.generate(ids, attention_mask=mask, **kw)
        assert torch.equal(model.generate(left_ids, attention_mask=left_mask, **kw), want), beams
        eos = model.generation_config.pad_token_id
        singles = [unpadded_rows(model.generate(ids[b:b + 1, :n], **kw), eos)[0] for b, n in enumerate(LENGTHS)]
        assert singles == unpadded_rows(want, eos), beams


def check_backbone_settings(model, tmp: Path) -> None:
    """The attention implementation and dtype asked of the model reach its backbone (the backbone's config
    is its sub-config, the same object the backbone's modules read); eager and sdpa agree (logits, tokens)."""
    config = model.config
    model.save_pretrained(tmp)
    for impl in ("eager", "sdpa"):
        loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp, attn_implementation=impl).eval()
        impls = {compat.attn_impl(m.config) for m in loaded.modules() if isinstance(getattr(m, "config", None),
                                                                                   PretrainedConfig)}
        # the window layers of the span methods run the method's banded kernel, whatever is asked (documented)
        assert impls - {WINDOW_ATTN} == {impl} and loaded.config.backbone._attn_implementation == impl, impls
    default = AutoModelForSeq2SeqLM.from_pretrained(tmp).eval()
    assert default.config.backbone._attn_implementation == "sdpa"
    eager = AutoModelForSeq2SeqLM.from_pretrained(tmp, attn_implementation="eager").eval()
    batch_ = {**inputs(model), "labels": labels()}
    with torch.no_grad():
        torch.testing.assert_close(eager(**batch_).logits, default(**batch_).logits, atol=1e-5, rtol=1e-4)
        if not retrieval(model):  # no set_attn_implementation needed: the load asked for eager
            assert len(eager(**batch_, output_attentions=True).cross_attentions) == model.config.num_hidden_layers
    assert torch.equal(eager.generate(**inputs(model), max_new_tokens=6),
                       default.generate(**inputs(model), max_new_tokens=6))
    setter = copy.deepcopy(config)
    setter._attn_implementation = "eager"  # the config setter, as transformers' own test sets it
    assert setter.backbone._attn_implementation == "eager"
    diff = {k: v for k, v in config.to_diff_dict().items() if not k.startswith("_attn")}
    assert ScaleformerConfig(**diff, attn_implementation="eager").backbone._attn_implementation == "eager"
    half = AutoModelForSeq2SeqLM.from_pretrained(tmp, dtype=torch.bfloat16)
    assert half.config.dtype == half.config.backbone.dtype == torch.bfloat16
    assert config.sub_configs.get("backbone") is AutoConfig and config.backbone is model.backbone.config


def check_output_flags(model, tmp: Path) -> None:
    """Output flags set on the model's config (or given to from_pretrained) are read as a plain model reads
    its own; the method's encoding is encoder_last_hidden_state, with no per-layer encoder states."""
    batch_ = {**inputs(model), "labels": labels()}
    layers = model.config.num_hidden_layers
    model.save_pretrained(tmp)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp, output_hidden_states=True).eval()
    model.config.output_hidden_states = True
    try:
        with torch.no_grad():
            for m in (model, loaded):
                out = m(**batch_)
                assert len(out.decoder_hidden_states) == layers + 1
                assert out.decoder_hidden_states[-1].shape == (*labels().shape, model.config.hidden_size)
                assert out.encoder_hidden_states is None  # documented: the method has no per-layer states
            enc = model.encode(batch_["input_ids"], batch_["attention_mask"])
            torch.testing.assert_close(out.encoder_last_hidden_state, enc.hidden)
    finally:
        model.config.output_hidden_states = False
    with torch.no_grad():
        as_dict = model(**batch_)
        model.config.return_dict = False
        try:
            as_tuple = model(**batch_)
        finally:
            model.config.return_dict = True
    assert isinstance(as_tuple, tuple)
    torch.testing.assert_close(as_tuple[0], as_dict.loss)
    torch.testing.assert_close(as_tuple[1], as_dict.logits)


def check_generation_settings(model, arch: str, name: str) -> None:
    """An explicit None turns a setting off (BART's forced end), as a keyword or in the model's config; a
    given config's unset fields come from the model's, as transformers fills them."""
    kw = dict(max_new_tokens=5, forced_eos_token_id=None)
    want = stock(*encoded(arch, name, SETTINGS[name], LENGTHS), **kw).sequences
    assert torch.equal(model.generate(**inputs(model), **kw), want)
    saved = model.generation_config.forced_eos_token_id
    model.generation_config.forced_eos_token_id = None
    try:
        assert torch.equal(model.generate(**inputs(model), max_new_tokens=5), want)
    finally:
        model.generation_config.forced_eos_token_id = saved
    given = model.generate(**inputs(model), generation_config=GenerationConfig(max_new_tokens=5))
    assert torch.equal(given, model.generate(**inputs(model), max_new_tokens=5))


def check_continue_from_cache(model) -> None:
    """Four new tokens at once equal three, then one more from the returned cache (its sequences as the
    decoder's input, their mask beside them, as transformers continues)."""
    key = compat.cache_kwarg(model.backbone)
    kw = dict(return_dict_in_generate=True, forced_eos_token_id=None, eos_token_id=None)
    full = model.generate(**inputs(model), max_new_tokens=4, **kw)
    part = model.generate(**inputs(model), max_new_tokens=3, **kw)
    cache = getattr(part, key)
    assert cache.self_attention_cache.get_seq_length() == 3
    more = model.generate(**inputs(model), max_new_tokens=1, decoder_input_ids=part.sequences,
                          decoder_attention_mask=torch.ones_like(part.sequences), **{key: cache}, **kw)
    assert torch.equal(more.sequences, full.sequences)


def check_base_model(model, tmp: Path) -> None:
    """``base_model`` is the backbone (base_model_prefix names it); a bare backbone's folder is no export."""
    assert model.base_model is model.backbone and getattr(model, model.base_model_prefix) is model.backbone
    model.backbone.save_pretrained(tmp)
    assert_one_clear_line(lambda: ScaleformerForConditionalGeneration.from_pretrained(tmp), ConfigError,
                          r"^config\.json: model_type='(bart|t5)': .* holds a plain (bart|t5) model, not a scaleformer export")


def check_resize_vocab_size(model) -> None:
    """After a resize the model's vocab_size is the new row count, as transformers leaves it."""
    rows = model.config.vocab_size
    model.resize_token_embeddings(rows + 8)
    assert model.vocab_size == model.config.vocab_size == rows + 8
    model.resize_token_embeddings(rows + 1, pad_to_multiple_of=16)
    assert model.vocab_size == model.get_input_embeddings().weight.shape[0] == -(-(rows + 1) // 16) * 16


def check_tied_weights(model, tmp: Path) -> None:
    """The backbone's tied weights are declared on the model: each pair is one tensor, save_pretrained
    leaves the copies out, and a strict=False load of the saved weights misses exactly those."""
    tied = model._tied_weights_keys
    assert tied, "BART and T5 tie their embeddings and output layer"
    for target, source in tied.items():
        assert model.get_parameter(target) is model.get_parameter(source), target
    model.save_pretrained(tmp)
    saved = load_file(tmp / "model.safetensors")
    assert not tied.keys() & saved.keys()
    result = model.load_state_dict(saved, strict=False)
    assert set(result.missing_keys) == set(tied) and not result.unexpected_keys


MODES = {"greedy": dict(num_beams=1), "sample": dict(do_sample=True, num_beams=1, num_return_sequences=2),
         "beam": dict(num_beams=2, num_return_sequences=2), "beam_sample": dict(do_sample=True, num_beams=2)}


def check_dict_outputs(model) -> None:
    """Every decoding mode's dict output: its class, the sequences, one score and one logit row per new
    token and hypothesis, the decoder's hidden states per step and layer; the beams' scores and indices;
    no per-layer encoder states (documented). use_cache=False gives the same tokens."""
    n, docs, layers = 4, len(LENGTHS), model.config.num_hidden_layers
    for mode, kw in MODES.items():
        beams, ret = kw["num_beams"], kw.get("num_return_sequences", 1)
        torch.manual_seed(0)
        out = model.generate(**inputs(model), max_new_tokens=n, min_new_tokens=n, output_scores=True,
                             output_logits=True, output_hidden_states=True, return_dict_in_generate=True, **kw)
        assert isinstance(out, GenerateBeamEncoderDecoderOutput if beams > 1 else GenerateEncoderDecoderOutput), mode
        assert out.sequences.shape == (docs * ret, n + 1), mode
        rows = docs * beams if beams > 1 else docs * ret
        assert len(out.scores) == len(out.logits) == len(out.decoder_hidden_states) == n, mode
        assert all(s.shape == (rows, model.config.vocab_size) for s in (*out.scores, *out.logits)), mode
        assert all(len(step) == layers + 1 for step in out.decoder_hidden_states), mode
        assert out.encoder_hidden_states is None and out.encoder_attentions is None, mode
        if beams > 1:
            assert out.sequences_scores.shape == (docs * ret,) and out.beam_indices.shape[0] == docs * ret, mode
        if not kw.get("do_sample"):
            plain = dict(max_new_tokens=n, min_new_tokens=n, **kw)
            assert torch.equal(model.generate(**inputs(model), use_cache=False, **plain),
                               model.generate(**inputs(model), **plain)), mode


def check_prompt_lookup(model, arch: str, name: str) -> None:
    """Prompt-lookup decoding (one document at a time, as transformers allows) gives transformers' own tokens
    for the method's encoding: greedy search's from 5.24 (5.17 stops BART, plain or not, after the start token)."""
    one = {k: v[:1] for k, v in inputs(model).items()}
    want = stock(*encoded(arch, name, SETTINGS[name], LENGTHS[:1]), prompt_lookup_num_tokens=2, max_new_tokens=6)
    assert torch.equal(model.generate(**one, prompt_lookup_num_tokens=2, max_new_tokens=6), want.sequences)


def check_documented_refusals(model) -> None:
    """What docs/using.md lists as refused, each one line: embeddings instead of ids, no ids, an assistant
    model; a row with nothing unmasked, for the methods that chunk or retrieve (the others read it as a plain
    model does: an empty input)."""
    batch_ = inputs(model)
    embeds = model.get_input_embeddings()(batch_["input_ids"])
    assert_one_clear_line(lambda: model(inputs_embeds=embeds, labels=labels()), ConfigError,
                          r"^forward\(inputs_embeds=<tensor>\): a scaleformer model reads token ids")
    assert_one_clear_line(lambda: model.generate(inputs_embeds=embeds), ConfigError,
                          r"^generate\(inputs_embeds=<tensor>\): a scaleformer model reads token ids")
    assert_one_clear_line(lambda: model.generate(), ConfigError, r"^generate\(input_ids=None\): ")
    assert_one_clear_line(lambda: model.generate(**batch_, assistant_model=model), ConfigError,
                          r"^generate\(assistant_model=.*\): assisted decoding")
    empty = {**batch_, "attention_mask": batch_["attention_mask"].clone()}
    empty["attention_mask"][2] = 0
    if model.method.name in ("truncation", "block_attention", "sliding_window", "full_attention", "masformer"):
        with torch.no_grad():
            assert model(**empty, labels=labels()).logits.isfinite().all()
    else:
        assert_one_clear_line(lambda: model(**empty, labels=labels()), ValueError,
                              r"^documents \[2\] of the batch have no tokens")


# ---- the matrix: every registered method on BART and T5 ------------------------------------------------


@pytest.mark.parametrize(("arch", "name"), CASES)
def test_padding_on_either_side_reads_the_same_document(arch, name):
    check_padding(build(arch, name))


@pytest.mark.parametrize(("arch", "name"), CASES)
def test_settings_reach_the_backbone(tmp_path, arch, name):
    model = build(arch, name)
    check_backbone_settings(model, tmp_path / "settings")
    check_output_flags(model, tmp_path / "flags")
    check_base_model(model, tmp_path / "bare")
    check_tied_weights(model, tmp_path / "tied")
    check_resize_vocab_size(model)


@pytest.mark.parametrize(("arch", "name"), CASES)
def test_generation_reads_settings_continues_and_returns_every_output(arch, name):
    model = build(arch, name)
    check_generation_settings(model, arch, name)
    check_continue_from_cache(model)
    check_dict_outputs(model)
    check_prompt_lookup(model, arch, name)
    check_documented_refusals(model)


def test_a_backbone_running_eager_attention_keeps_it():
    """from_parts builds the model's config around the backbone's: the backbone's choice stands."""
    model = build("bart", "sled")
    eager = build("bart", "sled")
    eager.backbone.set_attn_implementation("eager")
    again = ScaleformerForConditionalGeneration.from_parts(eager.backbone, eager.method)
    assert again.backbone.config._attn_implementation == again.config._attn_implementation == "eager"
    assert same_state(again, eager) and model.backbone.config._attn_implementation == "sdpa"


# ---- the checks fail on what they guard against -----------------------------------------------------------


class ReadsPaddingOnTheRight(ScaleformerForConditionalGeneration):
    """The method given the mask as it came: each length read as if the padding were on the right."""

    def encode(self, input_ids, attention_mask=None, **kw):
        return self.method.encode(self.backbone.get_encoder(), input_ids, attention_mask,
                                  training=self.training, prefix_ids=kw.get("prefix_ids"),
                                  prefix_mask=kw.get("prefix_mask"))


class NamesNoBaseModel(ScaleformerForConditionalGeneration):
    base_model_prefix = "scaleformer"


class ResizeLeavesNoSize(ScaleformerForConditionalGeneration):
    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        return self.backbone.resize_token_embeddings(new_num_tokens, pad_to_multiple_of=pad_to_multiple_of)


class DeclaresNoTiedWeights(ScaleformerForConditionalGeneration):
    _tied_weights_keys = None


def _fails(check) -> None:
    with pytest.raises((AssertionError, AttributeError, TypeError)):
        check()


def test_the_checks_fail_on_what_they_guard(tmp_path, monkeypatch):
    _fails(lambda: check_padding(build("t5", "sled", ReadsPaddingOnTheRight)))
    _fails(lambda: check_base_model(build("bart", "sled", NamesNoBaseModel), tmp_path / "base"))
    _fails(lambda: check_resize_vocab_size(build("bart", "sled", ResizeLeavesNoSize)))
    _fails(lambda: check_tied_weights(build("t5", "sled", DeclaresNoTiedWeights), tmp_path / "tied"))
    with monkeypatch.context() as m:
        m.setattr(ScaleformerConfig, "sub_configs", property(lambda self: {}))  # the backbone's config not declared
        _fails(lambda: check_backbone_settings(build("bart", "sled"), tmp_path / "settings"))
    with monkeypatch.context() as m:
        m.setattr(hf, "output_flags", lambda config, kwargs: kwargs)  # the backbone reads its own config
        _fails(lambda: check_output_flags(build("bart", "sled"), tmp_path / "flags"))
    with monkeypatch.context() as m:
        m.setattr(decoding, "read_whole", lambda model, gen: contextlib.nullcontext())  # filled in again
        _fails(lambda: check_generation_settings(build("bart", "sled"), "bart", "sled"))
