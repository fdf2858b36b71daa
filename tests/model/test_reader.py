"""The offline pretrained tiny backbones: the recipe runs, resumes, and the shipped weights are its own."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from scaleformer.model import readers as reader
from scaleformer.runs import pretrain_reader as pretrain

MICRO = reader.Recipe(
    "micro_reader", "bart", "tiny_bart",
    (reader.Stage("copy", steps=2, batch=2, lr=1e-3, warmup=1, length=(4, 8)),
     reader.Stage("ledger", steps=2, batch=2, lr=1e-3, warmup=1, length=(30, 40), events=(1, 2))),
    model_kwargs={"d_model": 32, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64})


def test_a_recipe_writes_a_model_folder_and_resumes_its_later_stages(tmp_path):
    from transformers import AutoModelForSeq2SeqLM

    first = replace(MICRO, stages=MICRO.stages[:1])
    info = pretrain.pretrain(first, tmp_path / "a", log=lambda *_: None)
    assert [s["kind"] for s in info["stages"]] == ["copy"]
    assert json.loads((tmp_path / "a" / "recipe.json").read_text())["fingerprint"] == first.fingerprint()
    info = pretrain.pretrain(MICRO, tmp_path / "b", log=lambda *_: None, resume=tmp_path / "a")
    assert [s["kind"] for s in info["stages"]] == ["copy", "ledger"], "the finished stage is not run again"
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "b")
    assert model.config.d_model == 32 and not list(tmp_path.glob(".*.tmp"))
    assert (tmp_path / "b" / "tokenizer.json").is_file(), "the folder carries the tokenizer it was trained with"
    other = replace(MICRO, seed=MICRO.seed + 1)
    with pytest.raises(SystemExit, match="not written by the first stages"):
        pretrain.pretrain(other, tmp_path / "c", log=lambda *_: None, resume=tmp_path / "a")
    # A recipe extending another's stages (as tiny_bart_qa_reader extends tiny_bart_reader) resumes
    # from that reader's folder under its own name and runs only its own stage.
    qa = replace(MICRO, name="micro_qa_reader", stages=(*MICRO.stages, reader.Stage(
        "qa", steps=2, batch=2, lr=1e-3, warmup=1, length=(30, 40), events=(2, 3))))
    info = pretrain.pretrain(qa, tmp_path / "d", log=lambda *_: None, resume=tmp_path / "b")
    assert [s["kind"] for s in info["stages"]] == ["copy", "ledger", "qa"]
    assert info["fingerprint"] == qa.fingerprint() and info["recipe"]["name"] == "micro_qa_reader"


def test_question_batches_are_the_rows_every_method_builds_from_a_query_prefix():
    """The QA stage's input is [question][<s> document </s>] (prepend_prefix's layout, truncation's
    input) and its label the asked event's sentence, which the document states after the day."""
    import random

    from scaleformer.model.tokenizer import load_offline_tokenizer

    tok = load_offline_tokenizer("bart")
    stage = reader.Stage("qa", steps=1, batch=3, lr=1e-3, warmup=1, length=(60, 80), events=(2, 4))
    batch = pretrain._qa_batch(stage, tok, random.Random(5))
    for i in range(stage.batch):
        ids = batch["input_ids"][i][batch["attention_mask"][i].bool()].tolist()
        answer = tok.decode([t for t in batch["labels"][i].tolist() if t != -100], skip_special_tokens=True)
        question, _, document = tok.decode(ids).partition("<s>")
        day = question.removeprefix("What happened on day ").removesuffix("?")
        assert question.startswith("What happened on day ") and document.endswith("</s>")
        assert answer.startswith(f"On day {day}, ") and answer in document


def test_the_decoder_only_recipe_pretrains_a_causal_lm_on_packed_long_dependency_documents(tmp_path):
    import random

    from transformers import AutoModelForCausalLM

    from scaleformer.model.tokenizer import load_offline_tokenizer

    stage = reader.Stage("lm", steps=2, batch=2, lr=1e-3, warmup=1, length=(40, 60), events=(2, 3))
    micro = reader.Recipe("micro_lm_reader", "gpt2", "tiny_gpt2", (stage,),
                          model_kwargs={"n_embd": 32, "n_layer": 2, "n_inner": 64, "n_positions": 32})
    tok = load_offline_tokenizer("gpt2")
    batch = pretrain._lm_batch(stage, tok, random.Random(1), 32)
    assert batch["input_ids"].shape == (2, 32) and torch.equal(batch["labels"], batch["input_ids"])
    assert tok.decode(batch["input_ids"][0]).startswith("<s>")  # a row starts where a document does
    info = pretrain.pretrain(micro, tmp_path / "lm", log=lambda *_: None)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "lm")
    assert info["stages"][0]["kind"] == "lm" and model.config.n_positions == 32
    assert info["recipe"]["model_kwargs"]["n_layer"] == model.config.n_layer == 2


@pytest.mark.parametrize("arch", sorted(reader.RECIPES))
def test_shipped_weights_come_from_the_recipe_in_the_code(arch):
    recipe = reader.RECIPES[arch]
    folder = reader.asset_dir(recipe.name)
    if not folder.exists():
        pytest.skip(f"{recipe.name} is not shipped (rebuild: python -m scaleformer.runs.pretrain_reader {arch})")
    info = json.loads((folder / "recipe.json").read_text())
    assert info["fingerprint"] == recipe.fingerprint(), "rebuild the weights after changing the recipe"
    assert len(info["stages"]) == len(recipe.stages)


@pytest.mark.parametrize("name", [r.name for r in reader.RECIPES.values()])
def test_the_shipped_reader_loads_as_a_backbone_and_trains_with_dropout_semantics(name):
    from conftest import compose

    from scaleformer.model.backbone import build_model, load_tokenizer, model_config
    from scaleformer.runs.context import to_config

    rc = to_config(compose([f"backbone={name}"]))
    if not reader.asset_dir(name).exists():
        pytest.skip(f"{name} is not shipped")
    tok = load_tokenizer(rc.backbone)
    model = build_model(rc.backbone, model_config(rc.backbone, tok))
    assert model.training, "from_pretrained returns eval mode; fine-tuning must not run without dropout"
    ids = torch.tensor([tok("On day 3, Mara Quill sold 5 lanterns at Harbor Gate.")["input_ids"]])
    assert torch.isfinite(model(input_ids=ids, labels=ids).loss)


def test_a_rebuilt_reader_names_new_runs(tmp_path):
    """Runs fine-tuned from a shipped reader carry its recipe fingerprint in their identity, so a
    rebuilt reader never reuses runs trained from the old weights."""
    from scaleformer.compose import compose_config
    from scaleformer.runs import identity
    from scaleformer.runs.context import to_config

    folder = tmp_path / "reader"
    folder.mkdir()

    def run_id(fingerprint: str | None) -> str:
        if fingerprint is not None:
            (folder / "recipe.json").write_text(json.dumps({"fingerprint": fingerprint}))
        rc = to_config(compose_config(["backbone=tiny_bart_reader", f"backbone.pretrained={folder}"]))
        return identity.run_id(rc)

    plain = run_id(None)
    old, new = run_id("aaaa"), run_id("bbbb")
    assert len({plain, old, new}) == 3 and old == run_id("aaaa")
    shipped = to_config(compose_config(["backbone=tiny_bart_qa_reader"]))
    info = json.loads((reader.asset_dir("tiny_bart_qa_reader") / "recipe.json").read_text())
    assert identity.training_identity(shipped)["backbone"]["weights"] == info["fingerprint"]
    assert reader.recipe_fingerprint("facebook/bart-base") is None
