"""The model class answers the calls transformers' own models answer: what ModelTesterMixin and
GenerationTesterMixin check on a transformers model, asked here of ScaleformerForConditionalGeneration.

The model and its config hold a backbone rather than being one, so each call transformers routes
through ``self.config`` or ``self.lm_head`` must reach the backbone: ``compute_transition_scores``
(``config.get_text_config().vocab_size``), ``resize_token_embeddings`` (the output layer, then the
config's ``vocab_size``), save/load, dtypes, training mode, checkpointing, Accelerate. Each check is a
function of a built model, so the mutation tests at the end run the same functions on a config or a
model class that drops one piece and see them fail.

The matrix is every registered method (truncation, the chunked ones, the retrieval and span methods)
on the tiny random BART and T5 of tiny_models, in the test tier and the compat tier (all of it runs in
seconds). Generated tokens are compared with the backbone read through the same method without the
model class (tests/ops/test_decoding.py's reference: the method's encoding into transformers' own
generate). LoRA through peft (the ``hf`` extra) on the attention projections: trained, merged, generating.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from ops.test_decoding import encoded, stock
from tiny_models import METHODS, batch, tiny
from transformers import AutoModelForSeq2SeqLM, PretrainedConfig, PreTrainedModel

from scaleformer.errors import ConfigError
from scaleformer.methods import build_method, method_config
from scaleformer.model.hf import ScaleformerForConditionalGeneration
from scaleformer.model.hf_config import ScaleformerConfig
from scaleformer.ops import compat

pytestmark = pytest.mark.compat  # the checks lean on transformers' own API: make test-compat runs them too
SETTINGS = dict(METHODS)
LENGTHS = (300, 170, 9)  # ragged: padding on the encoder side, one document inside one window
CASES = [pytest.param(a, m, id=f"{a}-{m}") for a in ("bart", "t5") for m, _ in METHODS]


def build(arch: str, name: str, cls: type = ScaleformerForConditionalGeneration):
    """The tiny backbone (seeded: the reference's own weights) read through ``name`` by the model class."""
    backbone, spec = tiny(arch)
    method = build_method(method_config({"name": name, **SETTINGS[name]}), spec)
    return cls.from_parts(backbone, method).eval()


def inputs(model) -> dict[str, torch.Tensor]:
    ids, mask = batch(list(LENGTHS), model.method.spec)
    return {"input_ids": ids, "attention_mask": mask}


def labels(n: int = 3) -> torch.Tensor:
    return torch.randint(3, 100, (n, 6), generator=torch.Generator().manual_seed(1))


def assert_one_clear_line(call: Callable[[], object], error: type[Exception], pattern: str) -> None:
    with pytest.raises(error) as e:
        call()
    assert "\n" not in str(e.value).strip() and re.search(pattern, str(e.value)), str(e.value)


def same_state(a, b) -> bool:
    mine, theirs = a.state_dict(), b.state_dict()
    return mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k].to(mine[k].dtype)) for k in mine)


# ---- the checks --------------------------------------------------------------------------------------


def check_config_answers(model) -> None:
    """The text-config questions transformers asks are the backbone's answers, held once."""
    config, backbone = model.config, model.backbone.config
    assert config.backbone is backbone  # one object: what the backbone's modules read is what is saved
    assert config.get_text_config() is backbone.get_text_config()
    decoder = config.get_text_config(decoder=True)
    assert decoder.vocab_size == config.vocab_size == backbone.vocab_size
    assert config.hidden_size == decoder.hidden_size and config.num_hidden_layers == decoder.num_hidden_layers
    for key in ("pad_token_id", "eos_token_id", "bos_token_id", "decoder_start_token_id"):
        assert getattr(config, key) == getattr(backbone, key, None), key
    saved = config.to_dict()
    assert not {"vocab_size", "pad_token_id", "eos_token_id", "hidden_size"} & saved.keys()  # no copy to drift
    config.vocab_size = backbone.vocab_size + 1  # transformers' resize_token_embeddings sets it so
    try:
        assert backbone.vocab_size == config.vocab_size
    finally:
        config.vocab_size -= 1


def check_save_load(model, tmp: Path) -> None:
    """save_pretrained -> from_pretrained (safetensors): every weight, the same tokens; the dtype asked for."""
    model.save_pretrained(tmp)
    assert (tmp / "model.safetensors").is_file()
    conf = json.loads((tmp / "config.json").read_text())
    assert "vocab_size" not in conf and conf["backbone"]["vocab_size"] == model.config.vocab_size
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp).eval()
    assert isinstance(loaded, ScaleformerForConditionalGeneration) and same_state(model, loaded)
    batch_ = inputs(model)
    assert torch.equal(loaded.generate(**batch_, max_new_tokens=5), model.generate(**batch_, max_new_tokens=5))
    half = AutoModelForSeq2SeqLM.from_pretrained(tmp, dtype=torch.bfloat16)
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16} and half.config.vocab_size == model.config.vocab_size


def check_resize(model, tmp: Path) -> None:
    """resize_token_embeddings up then down: embeddings, output layer (tied where the backbone ties),
    config.vocab_size and the saved model follow; the method still reads and generates."""
    start = model.config.vocab_size
    batch_ = inputs(model)
    batch_["input_ids"] = batch_["input_ids"].clamp(max=start - 9)  # token ids of the smaller vocabulary too
    for rows, folder in ((start + 8, "up"), (start - 8, "down")):
        model.resize_token_embeddings(rows)
        out = model.get_output_embeddings()
        assert model.get_input_embeddings().weight.shape[0] == out.weight.shape[0] == rows
        assert model.config.vocab_size == model.backbone.config.vocab_size == rows
        if model.backbone.config.tie_word_embeddings:
            assert out.weight is model.get_input_embeddings().weight
        with torch.no_grad():
            logits = model(**batch_, labels=labels()).logits
        assert logits.shape[-1] == rows
        model.save_pretrained(tmp / folder)
        loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp / folder).eval()
        assert loaded.config.vocab_size == rows and same_state(model, loaded)
        assert torch.equal(loaded.generate(**batch_, max_new_tokens=4), model.generate(**batch_, max_new_tokens=4))


def check_embedding_setters(model) -> None:
    """set_output_embeddings / set_input_embeddings place the module in the backbone, where it runs."""
    head = model.get_output_embeddings()
    new = torch.nn.Linear(head.in_features, head.out_features, bias=head.bias is not None)
    model.set_output_embeddings(new)
    assert model.get_output_embeddings() is new and model.backbone.get_output_embeddings() is new
    emb = model.get_input_embeddings()
    model.set_input_embeddings(emb)
    assert model.backbone.get_input_embeddings() is emb


def check_generation(model, arch: str, name: str) -> None:
    """Greedy and beam search equal the backbone read through the same method without the model class;
    scores, transition scores and sequences_scores agree as transformers documents them."""
    batch_ = inputs(model)
    for beams in (1, 3):
        got = model.generate(**batch_, num_beams=beams, max_new_tokens=8, return_dict_in_generate=True,
                             output_scores=True)
        want = stock(*encoded(arch, name, SETTINGS[name], LENGTHS), num_beams=beams, max_new_tokens=8)
        assert torch.equal(got.sequences, want.sequences), beams
        if beams == 1:
            moves = model.compute_transition_scores(got.sequences, got.scores, normalize_logits=True)
            chosen = torch.stack(got.scores, 1).log_softmax(-1).gather(-1, got.sequences[:, 1:, None])[..., 0]
            torch.testing.assert_close(moves, chosen, atol=1e-4, rtol=1e-4)
        else:
            moves = model.compute_transition_scores(got.sequences, got.scores, got.beam_indices)
            steps = (got.beam_indices >= 0).sum(1)
            penalty = model.generation_config.length_penalty
            torch.testing.assert_close(moves.sum(1) / steps ** (1.0 if penalty is None else penalty),
                                       got.sequences_scores, atol=1e-4, rtol=1e-4)


def check_sampling(model) -> None:
    """num_return_sequences with beams and sampling; sampling under a seed repeats."""
    batch_ = inputs(model)
    rows = batch_["input_ids"].shape[0]
    assert model.generate(**batch_, num_beams=3, num_return_sequences=2, max_new_tokens=4).shape[0] == 2 * rows
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        runs.append(model.generate(**batch_, do_sample=True, top_k=20, num_return_sequences=3, max_new_tokens=6))
    assert runs[0].shape[0] == 3 * rows and torch.equal(runs[0], runs[1])


def check_training(model) -> None:
    """train()/eval() reach the backbone; a seeded training step repeats; with checkpointing every
    parameter gets a gradient and the loss is the same."""
    batch_ = {**inputs(model), "labels": labels()}
    model.train()
    assert all(m.training for m in model.backbone.modules())
    losses = []
    for _ in range(2):
        torch.manual_seed(3)
        losses.append(model(**batch_).loss)
    assert torch.equal(losses[0], losses[1])  # dropout is on: the seed decides it
    assert compat.enable_checkpointing(model)
    assert any(getattr(m, "gradient_checkpointing", False) for m in model.backbone.modules())
    torch.manual_seed(3)
    loss = model(**batch_).loss
    loss.backward()
    torch.testing.assert_close(loss, losses[0])
    no_grad = [n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.isfinite().all())]
    assert not no_grad, no_grad[:5]
    compat.disable_checkpointing(model)
    model.zero_grad()
    model.eval()
    assert not any(m.training for m in model.backbone.modules())


def check_module_api(model) -> None:
    """num_parameters() counts the backbone and the method's own weights once; to(bfloat16) runs."""
    count = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert model.num_parameters() == count >= model.backbone.num_parameters()
    model.to(torch.bfloat16)
    assert {p.dtype for p in model.backbone.parameters()} == {torch.bfloat16}
    with torch.no_grad():
        loss = model(**inputs(model), labels=labels()).loss
    assert loss.dtype == torch.bfloat16 and loss.isfinite()
    model.to(torch.float32)


def check_accelerate(model) -> None:
    """Accelerator().prepare and one optimiser step: the weights move, the model stays the model."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    assert accelerator.unwrap_model(prepared) is model
    before = model.get_input_embeddings().weight.detach().clone()
    prepared.train()
    accelerator.backward(prepared(**inputs(model), labels=labels()).loss)
    optimizer.step()
    optimizer.zero_grad()
    assert not torch.equal(before, model.get_input_embeddings().weight)
    model.eval()


def check_lora(model) -> None:
    """peft's LoRA on the attention's query/value projections: one step moves only the adapters, the
    merged model is the model class again and gives the adapted model's logits and tokens."""
    from peft import LoraConfig, get_peft_model

    targets = ["q", "v"] if model.backbone.config.model_type == "t5" else ["q_proj", "v_proj"]
    base = {k: v.clone() for k, v in model.state_dict().items()}
    lora = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0))
    adapters = [p for n, p in lora.named_parameters() if p.requires_grad]
    assert adapters and all("lora_" in n for n, p in lora.named_parameters() if p.requires_grad)
    optimizer = torch.optim.SGD(adapters, lr=0.5)
    lora.train()
    lora(**inputs(model), labels=labels()).loss.backward()
    optimizer.step()
    lora.eval()
    batch_ = inputs(model)
    with torch.no_grad():
        adapted = lora(**batch_, labels=labels()).logits
    tokens = lora.generate(**batch_, max_new_tokens=5)
    merged = lora.merge_and_unload()
    assert isinstance(merged, ScaleformerForConditionalGeneration) and merged.method is model.method
    state = merged.state_dict()
    assert state.keys() == base.keys() and not all(torch.equal(state[k], base[k]) for k in base)
    with torch.no_grad():
        torch.testing.assert_close(merged(**batch_, labels=labels()).logits, adapted, rtol=1e-5, atol=1e-5)
    assert torch.equal(merged.generate(**batch_, max_new_tokens=5), tokens)


def check_outputs(model, tmp: Path) -> None:
    """Hidden states: the decoder's, and the method's encoding as encoder_last_hidden_state; attention
    weights under eager attention (loaded with attn_implementation="eager": transformers 5.17's
    set_attn_implementation misses T5's stacks, on a plain T5 too) where they are a map over the encoding,
    else one line."""
    batch_ = {**inputs(model), "labels": labels()}
    layers = model.backbone.config.get_text_config(decoder=True).num_hidden_layers
    with torch.no_grad():
        out = model(**batch_, output_hidden_states=True)
        enc = model.encode(batch_["input_ids"], batch_["attention_mask"])
    assert len(out.decoder_hidden_states) == layers + 1
    torch.testing.assert_close(out.encoder_last_hidden_state, enc.hidden)
    assert_one_clear_line(lambda: model(**batch_, output_attentions=True), ConfigError,
                          r"^forward\(output_attentions=True\): the backbone runs 'sdpa' attention")
    model.save_pretrained(tmp)
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp, attn_implementation="eager").eval()
    if "retrieval_layers" in model.method.requires:
        assert_one_clear_line(lambda: model.generate(batch_["input_ids"], output_attentions=True,
                                                     return_dict_in_generate=True, max_new_tokens=2),
                              ConfigError, r"^generate\(output_attentions=True\): method '\w+' cross-attends")
        return
    with torch.no_grad():
        out = model(**batch_, output_attentions=True)
    assert len(out.cross_attentions) == layers and out.cross_attentions[0].shape[-1] == enc.hidden.shape[1]
    gen = model.generate(batch_["input_ids"], attention_mask=batch_["attention_mask"], output_attentions=True,
                         return_dict_in_generate=True, max_new_tokens=2)
    assert gen.cross_attentions[0][0].shape[-1] == enc.hidden.shape[1]


# ---- the matrix --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("arch", "name"), CASES)
def test_config_and_save_load(tmp_path, arch, name):
    model = build(arch, name)
    check_config_answers(model)
    check_save_load(model, tmp_path)


@pytest.mark.parametrize(("arch", "name"), CASES)
def test_resize_token_embeddings(tmp_path, arch, name):
    model = build(arch, name)
    check_embedding_setters(build(arch, name))
    check_resize(model, tmp_path)


@pytest.mark.parametrize(("arch", "name"), CASES)
def test_generation(arch, name):
    model = build(arch, name)
    check_generation(model, arch, name)
    check_sampling(model)


@pytest.mark.parametrize(("arch", "name"), CASES)
def test_training_and_module_api(arch, name):
    model = build(arch, name)
    check_training(model)
    check_module_api(model)


# accelerate and peft come with the `hf` extra (in the lock); the compat tier's lowest environment holds
# the core dependencies only, so there these two say what they skipped.
@pytest.mark.parametrize(("arch", "name"), CASES)
def test_accelerate_prepare_and_one_step(arch, name):
    pytest.importorskip("accelerate", reason="the hf extra (pip install 'scaleformer[hf]')")
    check_accelerate(build(arch, name))


@pytest.mark.parametrize(("arch", "name"), CASES)
def test_lora_trains_merges_and_generates(arch, name):
    pytest.importorskip("peft", reason="the hf extra (pip install 'scaleformer[hf]')")
    check_lora(build(arch, name))


@pytest.mark.parametrize(("arch", "name"), CASES)
def test_hidden_states_and_attentions(tmp_path, arch, name):
    check_outputs(build(arch, name), tmp_path)


def test_a_resize_that_would_cut_a_special_id_is_refused():
    """The method pads and frames chunks with the spec's ids: a shrink below them is one line, nothing changed."""
    model = build("bart", "sled")
    rows = model.config.vocab_size
    assert_one_clear_line(lambda: model.resize_token_embeddings(2), ConfigError,
                          r"^resize_token_embeddings\(new_num_tokens=2\): would drop token id \d+ \(\S+\)")
    assert model.config.vocab_size == model.get_input_embeddings().weight.shape[0] == rows


def test_config_files_that_mirror_the_token_ids_still_load(tmp_path):
    """config.json written while the top level mirrored the backbone's token ids loads, and the next save
    writes them once, in the backbone."""
    model = build("t5", "sled")
    model.save_pretrained(tmp_path)
    conf = json.loads((tmp_path / "config.json").read_text())
    conf |= {k: conf["backbone"].get(k) for k in ("pad_token_id", "eos_token_id", "decoder_start_token_id")}
    (tmp_path / "config.json").write_text(json.dumps(conf))
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert loaded.config.pad_token_id == model.config.pad_token_id and same_state(model, loaded)
    assert "pad_token_id" not in loaded.config.to_dict()


# ---- the checks catch what they are for --------------------------------------------------------------


def _no_vocab_size(self):
    raise AttributeError(f"'{type(self).__name__}' object has no attribute 'vocab_size'")


class ConfigWithoutDelegation(ScaleformerConfig):
    """The config as it was: no vocab_size of its own, get_text_config() finding no text config."""

    vocab_size = property(_no_vocab_size)
    get_text_config = PretrainedConfig.get_text_config


class WithoutOutputSetter(ScaleformerForConditionalGeneration):
    """transformers' default setter, which looks for ``self.lm_head``."""

    set_output_embeddings = PreTrainedModel.set_output_embeddings


class ResizingOnTheWrapper(ScaleformerForConditionalGeneration):
    """transformers' own resize on the wrapper: the backbone's extra vocabulary rows (BART's
    final_logits_bias) are never resized."""

    resize_token_embeddings = PreTrainedModel.resize_token_embeddings


def _fails(check: Callable[[], None]) -> None:
    with pytest.raises((AssertionError, AttributeError, RuntimeError)):
        check()


def test_the_checks_fail_a_config_without_delegation(tmp_path):
    model = build("bart", "sled")
    model.config.__class__ = ConfigWithoutDelegation
    _fails(lambda: check_config_answers(model))
    _fails(lambda: check_generation(model, "bart", "sled"))
    _fails(lambda: check_resize(model, tmp_path))


def test_the_checks_fail_a_model_without_its_embedding_api(tmp_path):
    _fails(lambda: check_embedding_setters(build("bart", "sled", WithoutOutputSetter)))
    _fails(lambda: check_resize(build("bart", "sled", ResizingOnTheWrapper), tmp_path))
