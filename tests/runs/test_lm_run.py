"""Language modeling end to end (MASFormer's continual training at tiny scale): a run of a decoder-only backbone
through a span method, its perplexity against an independent computation, and an exact resume."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch
from conftest import compose

from scaleformer.errors import ConfigError
from scaleformer.runs.run import run


def _lm(tmp_path: Path, *extra: str, root: str = "results") -> list[str]:
    return ["experiment=masformer_lm", "backbone=tiny_gpt2", "backbone.model_kwargs.n_layer=2",
            "backbone.model_kwargs.n_embd=32", "backbone.model_kwargs.n_inner=64", f"paths.root={tmp_path}/{root}",
            f"paths.cache={tmp_path.parent}/lm_cache", "seed=5", "method.max_length=256", "method.block_size=32",
            "data.synthetic_docs.train=24", "data.synthetic_docs.validation=6", "data.synthetic_docs.test=0",
            "data.splits.test=null", "data.synthetic_words=150", "data.batch_size=2", "trainer.max_steps=4",
            "trainer.checkpoint_every_n_steps=2", "trainer.log_every_n_steps=1", "trainer.enable_progress_bar=false",
            "trainer.eval_splits=[validation]", "metrics.perplexity_bucket=64", "metrics.dependency_block=32", *extra]


def _scores(result: dict, root: Path) -> list[dict]:
    folder = next((root / "runs" / result["run_id"] / "eval").glob(f"step_{result['step']}-*"))
    return [json.loads(line) for line in (folder / "scores_validation.jsonl").read_text().splitlines()]


def test_a_language_modeling_run_reports_perplexity_an_independent_computation_gives(tmp_path):
    """The run's perplexity equals exp(mean token loss) that the trained weights give through transformers' own
    loss, document by document (the checkpoint loaded into a fresh, routed model)."""
    from scaleformer.runs.lm_module import LanguageModelModule

    result = run(compose(_lm(tmp_path)))
    scores = result["splits"]["validation"]
    rows = _scores(result, tmp_path / "results")
    assert scores["n_examples"] == len(rows) == 6 and result["step"] == 4
    assert scores["ppl_low"] <= scores["ppl"] <= scores["ppl_high"]
    assert sum(v["n_docs"] for v in scores["by_length"].values()) == 6
    assert scores["dependency"]["tokens"] > 0 and result["method"]["decoder_only"]
    assert 0 < result["method"]["attention_cost_mean"] <= result["method"]["attention_cost_at_max_length"]
    assert 0 < result["data"]["summary"]["validation"]["share_beyond_block"] < 1
    ckpt = tmp_path / "results" / "runs" / result["run_id"] / "checkpoints" / "step_4.ckpt"
    module = LanguageModelModule.load_from_checkpoint(str(ckpt), weights_only=True).eval()
    from scaleformer.data.lm import LanguageModelingData

    rc_cfg = compose(_lm(tmp_path))
    from scaleformer.runs.context import to_config

    rc = to_config(rc_cfg)
    dm = LanguageModelingData(rc.data, module.tokenizer, rc.method.max_length, seed=rc.seed)
    dm.setup()
    nll = tokens = 0.0
    for doc, row in zip(dm.docs["validation"], rows):
        ids = torch.as_tensor(doc.ids[:256])[None]
        with torch.no_grad():
            out = module.model(input_ids=ids, labels=ids)  # transformers' shifted mean
        loss, n = out.loss, ids.shape[1] - 1
        assert row["tokens"] == n and row["nll"] == pytest.approx(float(loss) * n, rel=1e-4)
        each = torch.nn.functional.cross_entropy(out.logits[0, :-1], ids[0, 1:], reduction="none")  # [n]
        marked = [(t, a) for t, a in doc.deps if 1 <= t < 256]
        far = [(t, a) for t, a in marked if a < t // 32 * 32]  # before the token's block of 32, spelled out
        assert row.get("dep_tokens", 0) == len(marked) and row.get("far_tokens", 0) == len(far)
        if marked:
            assert row["dep_nll"] == pytest.approx(float(sum(each[t - 1] for t, _ in marked)), rel=1e-4)
            assert row["far_nll"] == pytest.approx(float(sum(each[t - 1] for t, _ in far)), rel=1e-4, abs=1e-6)
        nll, tokens = nll + float(loss) * n, tokens + n
    assert scores["ppl"] == pytest.approx(math.exp(nll / tokens), rel=1e-4)


def test_a_continued_run_resumes_exactly(tmp_path):
    """Stopped after 2 of 4 steps (mid-epoch) and continued, the run ends with the weights of an uninterrupted one:
    the same rows in the same order, the optimiser and the constant rate after warm-up (warm-up is capped at the
    run's steps, so it is shorter than both here)."""
    straight = run(compose(_lm(tmp_path, "optim.warmup_steps=1", root="straight")))
    run(compose(_lm(tmp_path, "optim.warmup_steps=1", "trainer.max_steps=2", root="resumed")))
    resumed = run(compose(_lm(tmp_path, "optim.warmup_steps=1", root="resumed")))
    assert resumed["run_id"] == straight["run_id"] and resumed["step"] == 4
    assert _scores(resumed, tmp_path / "resumed") == _scores(straight, tmp_path / "straight")


def test_language_modeling_refuses_an_encoder_decoder_and_best_selection(tmp_path):
    bart = [o for o in _lm(tmp_path) if not o.startswith("backbone.")]
    with pytest.raises(ConfigError, match="perplexity: the backbone 'tiny_bart' is an encoder-decoder"):
        run(compose([*bart, "backbone=tiny_bart"]))
    with pytest.raises(ConfigError, match="trainer.select=best.*last weights"):
        run(compose(_lm(tmp_path, "++trainer.select=best", "trainer.limit_val_batches=1.0",
                        "trainer.val_check_interval=2")))


def test_continual_training_reads_its_corpus_from_the_piles_layout(tmp_path, caplog):
    """data.corpus replaces the train split (MASFormer continues on the Pile, evaluates on ArXiv and PubMed): the
    run tokenizes ahead the rows its steps read and trains on them in stream order; a document cap is not read
    (the corpus is read by tokens), and the log says so."""
    from scaleformer.data.mirrors import PILE, write_pile

    folder = write_pile(tmp_path / "mirror" / PILE, {"train": 12, "validation": 1, "test": 1}, scale=0.3)
    with caplog.at_level(logging.WARNING):
        result = run(compose(_lm(tmp_path, f"data.corpus={folder}", "data.corpus_files=train/*.jsonl.zst",
                                 "data.max_train_examples=1")))
    assert "data.max_train_examples=1 is not read with data.corpus" in caplog.text
    train = result["data"]["summary"]["train"]
    assert train["corpus"] == str(folder) and train["rows_read"] == 4 * 2 <= train["packed_rows"]
    assert train["tokens"] >= 8 * 256
    assert result["step"] == 4 and result["splits"]["validation"]["n_examples"] == 6
