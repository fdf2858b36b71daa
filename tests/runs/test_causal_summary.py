"""Summarization as language modeling (MASFormer's fine-tuning) end to end: the loss reads the summary tokens only,
batched greedy decoding equals one document at a time, a run reports ROUGE and its checkpoint decodes alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import compose

from scaleformer.errors import ConfigError
from scaleformer.ops.causal_join import IGNORE
from scaleformer.runs.run import run


def _summ(tmp_path: Path, *extra: str) -> list[str]:
    return ["experiment=masformer_summarization", "backbone=tiny_gpt2", "backbone.model_kwargs.n_layer=2",
            "backbone.model_kwargs.n_embd=32", "backbone.model_kwargs.n_inner=64", f"paths.root={tmp_path}/results",
            f"paths.cache={tmp_path.parent}/summ_cache", "seed=3", "method.max_length=256", "method.block_size=32",
            "data.synthetic_words=120", "data.synthetic_words_spread=0.4", "data.max_target_tokens=100", "generation.max_new_tokens=24",
            "data.synthetic_docs.train=8", "data.synthetic_docs.validation=3", "data.synthetic_docs.test=0",
            "data.splits.test=null", "data.batch_size=2", "data.eval_batch_size=3", "trainer.max_steps=2",
            "trainer.checkpoint_every_n_steps=2", "trainer.enable_progress_bar=false",
            "trainer.eval_splits=[validation]", "trainer.limit_val_batches=0", *extra]


def _module_and_batch(tmp_path: Path):
    from scaleformer.data.datamodule import SummarizationDataModule
    from scaleformer.model.backbone import build_model, prepare
    from scaleformer.runs.causal_summary import CausalSummarizationModule
    from scaleformer.runs.context import to_config

    rc = to_config(compose(_summ(tmp_path)))
    ready = prepare(rc.backbone, rc.method)
    torch.manual_seed(0)
    module = CausalSummarizationModule(build_model(rc.backbone, ready.conf), ready.method, ready.tokenizer,
                                       generation=rc.generation, room=rc.data.max_target_tokens).eval()
    dm = SummarizationDataModule(rc.data, ready.tokenizer, seed=rc.seed)
    dm.prepare_data()
    dm.setup()
    return module, next(iter(dm.dataloader("validation")))


def test_the_loss_reads_only_the_summary_tokens_each_document_weighted_alike(tmp_path):
    """The module's loss equals the mean over documents of transformers' own loss on each joined sequence alone,
    with every prompt token's label -100; and changing a summary token changes it, a padded one does not."""
    module, batch = _module_and_batch(tmp_path)
    seq = module.joined(batch, with_summary=True)
    with torch.no_grad():
        loss = module(batch)
        each = []
        for i in range(len(batch["ids"])):
            real = int(seq["attention_mask"][i].sum())
            ids = seq["input_ids"][i : i + 1, :real]
            labels = seq["targets"][i : i + 1, :real]
            assert (labels[0, : int(seq["prompt_lengths"][i])] == IGNORE).all()  # the prompt is never a target
            each.append(float(module.model(input_ids=ids, labels=labels).loss))
    assert float(loss) == pytest.approx(sum(each) / len(each), rel=1e-5)
    assert len(set(seq["attention_mask"].sum(1).tolist())) > 1  # the batch is ragged: padding was exercised
    assert len(set((seq["targets"] != IGNORE).sum(1).tolist())) > 1  # summaries differ: the weighting shows


def test_the_output_head_runs_only_where_the_loss_is(tmp_path):
    """The head reads the positions from the one before the earliest summary token on, not all T; the loss and
    its gradient equal those of the head on every position."""
    module, batch = _module_and_batch(tmp_path)
    seq = module.joined(batch, with_summary=True)
    width, first = seq["targets"].shape[1], int(seq["prompt_lengths"].min())
    head, seen = module.model.backbone.get_output_embeddings(), []
    hook = head.register_forward_hook(lambda _m, args, _out: seen.append(args[0].shape[1]))

    def loss_and_grad(keeps: bool) -> tuple[float, torch.Tensor]:
        module.head_keeps = keeps
        module.zero_grad()
        loss = module(batch)
        loss.backward()
        return float(loss), head.weight.grad.clone()

    assert module.head_keeps, "tiny_gpt2 takes logits_to_keep"
    sliced, full = loss_and_grad(True), loss_and_grad(False)
    hook.remove()
    assert seen == [width - first + 1, width] and first > width // 2  # the documents are most of each sequence
    assert sliced[0] == pytest.approx(full[0], rel=1e-6)
    torch.testing.assert_close(sliced[1], full[1], rtol=1e-5, atol=1e-7)


def test_batched_greedy_summaries_equal_one_document_at_a_time(tmp_path):
    """Left-padded prompts of different lengths decode as each alone (positions and spans by real tokens)."""
    import dataclasses

    module, batch = _module_and_batch(tmp_path)
    module.gen_cfg = dataclasses.replace(module.gen_cfg, min_new_tokens=12)  # random weights: no early eos
    together = module.generate(batch)
    alone = []
    for i in range(len(batch["ids"])):
        n = int(batch["attention_mask"][i].sum())
        one = {"input_ids": batch["input_ids"][i : i + 1, :n], "attention_mask": batch["attention_mask"][i : i + 1, :n],
               "labels": batch["labels"][i : i + 1]}
        alone += module.generate(one)
    assert together == alone and any(together)


def test_a_run_reports_rouge_and_its_checkpoint_and_export_decode_the_same_summaries(tmp_path):
    """The run's predictions again from its checkpoint (the Lightning module rebuilt from the run's config), and
    from its exported folder through AutoModelForCausalLM and the Summarizer (what `scaleformer summarize` runs)."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    from scaleformer.export.summarizer import Summarizer
    from scaleformer.model.hf_causal import ScaleformerForCausalLM
    from scaleformer.runs.causal_summary import CausalSummarizationModule

    result = run(compose(_summ(tmp_path)))
    scores = result["splits"]["validation"]
    assert scores["n_examples"] == 3 and "rouge2" in scores and result["step"] == 2
    assert result["method"]["decoder_only"] and result["backbone"]["arch"] == "gpt2"
    run_dir = tmp_path / "results" / "runs" / result["run_id"]
    folder = next((run_dir / "eval").glob("step_2-*"))
    rows = [json.loads(line) for line in (folder / "predictions_validation.jsonl").read_text().splitlines()]
    module = CausalSummarizationModule.load_from_checkpoint(str(run_dir / "checkpoints" / "step_2.ckpt"),
                                                            weights_only=True).eval()
    _, batch = _module_and_batch(tmp_path)
    assert [p.strip() for p in module.generate(batch)] == [r["prediction"] for r in rows]
    model = AutoModelForCausalLM.from_pretrained(str(run_dir / "model"))
    assert isinstance(model, ScaleformerForCausalLM) and model.method.cfg.name == "masformer"
    with pytest.raises(ConfigError, match="is decoder-only: load it with AutoModelForCausalLM"):
        AutoModelForSeq2SeqLM.from_pretrained(str(run_dir / "model"))
    source = Path(result["data"]["summary"]["validation"]["source"])
    texts = {r["id"]: r["input"] for r in map(json.loads, source.read_text().splitlines())}
    summarizer = Summarizer.from_pretrained(run_dir / "model", batch_size=2)
    assert summarizer.decoder_only
    assert summarizer.summarize([texts[r["id"]] for r in rows]) == [r["prediction"] for r in rows]


@pytest.mark.parametrize("override,match", [
    ("data.max_target_tokens=255", "data.max_target_tokens=255: .*one sequence of method.max_length=256"),
    ("++generation.step_decoding=true", "generation.step_decoding=True: not available for a decoder-only backbone"),
])
def test_what_a_decoder_only_summarization_run_cannot_do_is_refused_in_one_line(tmp_path, override, match):
    with pytest.raises(ConfigError, match=match):
        run(compose(_summ(tmp_path, override)))
    assert not (tmp_path / "results" / "runs").exists() or not any((tmp_path / "results" / "runs").iterdir())
