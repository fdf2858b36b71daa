"""The decoder-only class behaves as a transformers causal LM of its family, where transformers' own GPT-2, Llama,
Qwen2 and GPT-NeoX suites look: packed documents (restarting ``position_ids``, a block-diagonal 4-D mask), the
static cache, the model's own config flags and generation config, attention weights, a decoder-only config, the
named inputs Trainer keeps, and the context length clients read. Every routed family, float64, tiny random models:
with every span full the class gives the plain model's numbers; with MASFormer's spans a packed or cached call
gives what the same documents give alone and uncached."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from tiny_models import CAUSAL_VOCAB, tiny_causal

from scaleformer.model.hf_causal import ScaleformerForCausalLM
from scaleformer.model.wrapping import wrap
from scaleformer.ops.causal_spans import FAMILIES

N = 64  # the method's sequence: the families' 128-512 positions hold it


def wrapped(family: str, method: str = "masformer", **settings) -> ScaleformerForCausalLM:
    """A tiny model of ``family`` wrapped with ``method`` (MASFormer: full attention in layer 0, blocks of 8)."""
    plain = tiny_causal(family, pad_token_id=0)
    if method == "masformer":
        settings = {"full_layers": 1, "block_size": 8, **settings}
    model = wrap(plain, method, max_length=N, **settings).eval()
    model.generation_config.pad_token_id = 0
    return model


def ids(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, CAUSAL_VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _logits(model, **kw) -> torch.Tensor:
    with torch.no_grad():
        return model(**kw, use_cache=False).logits


# ---- packed documents and 4-D masks -----------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("form", ["position_ids", "4d_mask"])
def test_packed_documents_read_as_each_alone(family, form):
    """Two documents packed in one row (padding-free training: restarting position_ids, as DataCollatorWithFlattening
    gives, or a block-diagonal 4-D mask) read as each alone: the second's blocks start at its own first token."""
    model = wrapped(family)
    a, b = ids(1, 13, seed=2), ids(1, 19, seed=3)
    row, pos = torch.cat([a, b], 1), torch.cat([torch.arange(13), torch.arange(19)])[None]
    alone = torch.cat([_logits(model, input_ids=a), _logits(model, input_ids=b)], 1)
    kw = {"input_ids": row, "position_ids": pos}
    if form == "4d_mask":
        mask = torch.zeros(1, 1, 32, 32, dtype=torch.bool)
        mask[..., :13, :13] = torch.ones(13, 13).tril().bool()
        mask[..., 13:, 13:] = torch.ones(19, 19).tril().bool()
        kw["attention_mask"] = mask
    torch.testing.assert_close(_logits(model, **kw), alone)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_packed_batchs_loss_is_its_documents(family):
    model = wrapped(family)
    a, b = ids(1, 11, seed=4), ids(1, 17, seed=5)
    row, pos = torch.cat([a, b], 1), torch.cat([torch.arange(11), torch.arange(17)])[None]
    labels = row.clone()
    labels[0, 11] = -100  # the second document's first token is not predicted from the first's end
    with torch.no_grad():
        packed = model(input_ids=row, position_ids=pos, labels=labels, use_cache=False).loss
        sums = [model(input_ids=x, labels=x, use_cache=False).loss * (x.shape[1] - 1) for x in (a, b)]
    torch.testing.assert_close(packed, sum(sums) / (10 + 16))


# ---- the static cache -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("padded", [False, True])
def test_the_static_cache_gives_the_default_caches_scores(family, padded):
    """A static cache's prompt arrives with its keys padded to the cache's length (and no mask when nothing is
    padded): the new tokens are the cache's first slots, not its last columns."""
    model = wrapped(family)
    prompt = ids(2, 21, seed=6)
    mask = torch.ones_like(prompt)
    if padded:
        mask[1, :5] = 0
    kw = dict(input_ids=prompt, attention_mask=mask, max_new_tokens=6, do_sample=False, output_scores=True,
              return_dict_in_generate=True)
    default = model.generate(**kw)
    static = model.generate(**kw, cache_implementation="static")
    assert torch.equal(default.sequences, static.sequences)
    torch.testing.assert_close(torch.stack(static.scores), torch.stack(default.scores))


# ---- the model's own config and generation config ---------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_models_own_config_flags_are_read(family):
    model = wrapped(family)
    x = ids(1, 12)
    with torch.no_grad():
        assert model(input_ids=x).hidden_states is None
        model.config.output_hidden_states = True
        assert len(model(input_ids=x).hidden_states) == 4  # embeddings + 3 layers, as the plain model gives
        model.config.output_hidden_states = False
        assert model(input_ids=x).past_key_values is not None
        model.config.use_cache = False
        assert model(input_ids=x).past_key_values is None
        assert model(input_ids=x, use_cache=True).past_key_values is not None  # a keyword still wins


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_generation_config_is_the_models_own_and_survives_a_save(family, tmp_path):
    from transformers import AutoModelForCausalLM

    model = wrapped(family)
    x = ids(1, 10)
    model.generation_config.max_new_tokens = 3
    assert model.generate(x, do_sample=False).shape == (1, 13)
    assert model.generate(x, do_sample=False, max_new_tokens=5).shape == (1, 15)  # a keyword overrides it
    model.generation_config.max_new_tokens = 4
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert loaded.generation_config.max_new_tokens == 4 and loaded.generate(x, do_sample=False).shape == (1, 14)
    out = loaded.generate(x, do_sample=False, return_dict_in_generate=True, output_scores=True)
    assert type(out).__name__ == "GenerateDecoderOnlyOutput" and len(out.scores) == 4


# ---- attention weights ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_attention_weights_are_each_layers_under_its_span(family):
    """``output_attentions=True``: one ``[B, H, q, k]`` tensor per layer, the span's softmax. Every span full: the
    plain eager model's weights; MASFormer's: nothing outside a token's block, each row summing to 1."""
    x = ids(2, 20)
    plain = tiny_causal(family, pad_token_id=0)
    eager = copy.deepcopy(plain)
    eager.set_attn_implementation("eager")
    full = wrap(plain, "full_attention", max_length=N).eval()
    with torch.no_grad():
        want = eager(x, output_attentions=True).attentions
        got = full(input_ids=x, output_attentions=True).attentions
        assert len(got) == len(want) == 3
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
        spans = wrapped(family)(input_ids=x, output_attentions=True).attentions
    i, j = torch.arange(20)[:, None], torch.arange(20)[None, :]
    inside = (j <= i) & (j >= i // 8 * 8)  # block of 8, causal
    for layer in spans[1:]:
        assert layer.shape == (2, 4, 20, 20) and (layer[..., ~inside] == 0).all()
        torch.testing.assert_close(layer.sum(-1), torch.ones(2, 4, 20, dtype=layer.dtype))
    assert (spans[0][..., (j <= i) & ~inside] > 0).all()  # layer 0 is full: it reads before its block


def test_generate_returns_attentions_when_asked():
    model = wrapped("gpt2")
    out = model.generate(ids(1, 9), max_new_tokens=2, do_sample=False, output_attentions=True,
                         return_dict_in_generate=True)
    assert len(out.attentions) == 2 and out.attentions[0][1].shape[-1] == 9


# ---- the class's face -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_decoder_only_config_reads_as_one(family, tmp_path):
    from transformers import AutoConfig

    model = wrapped(family)
    assert model.config.is_encoder_decoder is False
    model.save_pretrained(tmp_path)
    conf = AutoConfig.from_pretrained(tmp_path)
    assert conf.is_encoder_decoder is False
    assert conf.max_position_embeddings == conf.n_positions == N  # the method's sequence: what clients may give
    assert conf.use_cache is conf.backbone.use_cache


def test_forward_names_the_backbone_familys_inputs():
    names = set(inspect.signature(ScaleformerForCausalLM.forward).parameters)
    assert {"input_ids", "attention_mask", "position_ids", "past_key_values", "inputs_embeds", "labels", "use_cache",
            "output_attentions", "output_hidden_states", "return_dict", "logits_to_keep", "cache_position"} <= names


def test_trainer_keeps_the_columns_forward_names(tmp_path):
    """Trainer's default remove_unused_columns=True reads forward's signature: it trains (it stopped with "No
    columns in the dataset match the model's forward method signature")."""
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    model = wrapped("gpt2").train()
    rows = Dataset.from_dict({"input_ids": ids(4, 16).tolist(), "labels": ids(4, 16).tolist(), "text": ["x"] * 4})
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, report_to=[],
                             use_cpu=True, save_strategy="no", logging_steps=1)
    before = next(model.parameters()).detach().clone()
    out = Trainer(model=model, args=args, train_dataset=rows).train()
    assert out.global_step == 2 and not torch.equal(next(model.parameters()).detach(), before)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_to_keep_and_a_given_cache_are_passed_on(family):
    model = wrapped(family)
    x = ids(1, 14)
    with torch.no_grad():
        whole = model(input_ids=x).logits
        last = model(input_ids=x, logits_to_keep=1).logits
        torch.testing.assert_close(last, whole[:, -1:])
        first = model(input_ids=x[:, :10], use_cache=True)
        rest = model(input_ids=x[:, 10:], past_key_values=first.past_key_values, use_cache=True).logits
    torch.testing.assert_close(rest, whole[:, 10:])
