"""One language-modeling run: MASFormer's continual training of a decoder-only model, then perplexity.

Chosen by the data (``data.task_metric=perplexity``: documents without references); the rest of a run is the
summarization run's: the same folder, identity, lock, checkpoints (``trainer.ckpt_path=last`` continues exactly:
the resumable sampler and the RNG states), loggers and ``metrics.json``
(:class:`~scaleformer.runs.results.Results`). What differs: the backbone is a causal LM routed by a span method,
training reads packed sequences (:mod:`scaleformer.data.lm`), and each evaluated split is scored by perplexity,
overall and by document length, with intervals over documents (:mod:`scaleformer.metrics.perplexity`), from
``scores_<split>.jsonl`` (one row per document: what paired tests between runs read).

Evaluated: the last weights (continual training has no validation-selected checkpoint in the paper).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from omegaconf import OmegaConf

from scaleformer.data.lm import LanguageModelingData
from scaleformer.errors import ConfigError, redact_all
from scaleformer.export.folder import add_results, export_model, export_target
from scaleformer.io import atomic_write_jsonl, atomic_write_text
from scaleformer.metrics.perplexity import perplexity
from scaleformer.model.backbone import build_model
from scaleformer.model.backbone import prepare as prepare_backbone
from scaleformer.ops import compat, patches
from scaleformer.resources import package_changes, package_commit
from scaleformer.runs import checkpoints, runtime, sharding, wandb_logger
from scaleformer.runs.callbacks import ExactResume, log_metrics
from scaleformer.runs.console import count_parameters, summary_table
from scaleformer.runs.context import RunContext, describe_method, export_record, validation_record
from scaleformer.runs.lm_module import LanguageModelModule
from scaleformer.runs.results import Results
from scaleformer.runs.trainer import build_trainer, instantiate_all

log = logging.getLogger("scaleformer")


def check_lm_run(ctx: RunContext) -> None:
    """What a language-modeling run cannot do, refused before anything loads."""
    t = ctx.cfg.trainer
    if t.select != "last" or t.early_stopping_patience:
        raise ConfigError(f"trainer.select={t.select} (early_stopping_patience={t.early_stopping_patience}): a "
                          "language-modeling run evaluates its last weights, as MASFormer's continual training "
                          "does; set trainer.select=last and trainer.early_stopping_patience=null")


def train_rows(rc: Any) -> int | None:
    """Sequences training reads: ``max_steps x`` the effective batch (every process's micro-batches of a step);
    None without a step budget."""
    t = rc.trainer
    if t.max_steps == -1:
        return None
    world = sharding.world_size(t.accelerator, t.devices, int(t.extra.get("num_nodes", 1) or 1))
    return int(t.max_steps) * int(rc.data.batch_size) * int(t.accumulate_grad_batches) * world


def execute_lm(ctx: RunContext, ckpt: Path | None, attempt: Any) -> dict[str, Any]:
    """Train (or continue, or load) and score perplexity; returns metrics.json's content (rank 0)."""
    rc = ctx.cfg
    check_lm_run(ctx)
    pl.seed_everything(rc.seed, workers=True, verbose=False)
    ready = prepare_backbone(rc.backbone, rc.method)
    method = ready.method
    if not ready.spec.decoder_only:
        raise ConfigError(f"data.task_metric=perplexity: the backbone {rc.backbone.name!r} is an encoder-decoder; "
                          "language modeling runs on a decoder-only causal LM (e.g. backbone=tiny_gpt2_reader)")
    described = describe_method(rc, method)
    start = checkpoints.peek(ckpt) if ckpt is not None else None
    if start is not None:
        checkpoints.check_compatible(start["meta"], rc.backbone.name, described, ckpt)
    dm = LanguageModelingData(rc.data, ready.tokenizer, method.cfg.max_length, seed=rc.seed,
                              train_rows=train_rows(rc) if rc.trainer.do_train else 0)
    dm.setup()
    loggers = instantiate_all(rc.logger, "logger", rc.allowed_targets)
    resume = ExactResume(batch_size=rc.data.batch_size)
    trainer = build_trainer(ctx, loggers, [*instantiate_all(rc.callbacks, "callbacks", rc.allowed_targets), resume])
    model = build_model(rc.backbone, ready.conf)
    safe_config = redact_all(OmegaConf.to_container(rc.raw, resolve=True))
    module = LanguageModelModule(model, method, ready.tokenizer, rc.optim, generation=rc.generation,
                                 meta=checkpoints.metadata(rc.backbone.name, described, ctx.training_hash),
                                 run_config=safe_config, dependency_block=rc.metrics.dependency_block)
    log.info("run %s: %s on %s, %s (%s parameters), sequences of %d -> %s", ctx.run_id, rc.method_option,
             rc.data.name, type(model).__name__, count_parameters(module.model), method.cfg.max_length, ctx.run_dir)
    attempt.started = True
    t0, trained = time.time(), rc.trainer.do_train and dm.has_split("train")
    if trained:
        if ckpt is not None:
            checkpoints.check_state(module, ckpt)
            log.info("continuing from %s (step %d)", ckpt, start["step"] if start else 0)
        loader = dm.train_dataloader()
        resume.sampler = loader.sampler
        val = dm.dataloader("validation") if dm.has_split("validation") and rc.trainer.limit_val_batches else None
        trainer.fit(module, train_dataloaders=loader, val_dataloaders=val, ckpt_path=str(ckpt) if ckpt else None,
                    **compat.fit_kwargs(trainer.fit, weights_only=True))
        last = int(trainer.global_step)
    elif ckpt is not None:
        last = checkpoints.load_weights(module, ckpt, rc.backbone.name, described)
    else:
        log.warning("no training and no trainer.ckpt_path: perplexity of the UNTRAINED (pretrained) weights")
        last = 0
    train_time = time.time() - t0
    # "loaded": a checkpoint's weights; "pretrained": the backbone's own, nothing trained or loaded
    selection = {"rule": "last" if trained else "loaded" if ckpt is not None else "pretrained", "step": last}
    model_dir = export_target(ctx.model_dir, selection) if rc.trainer.export_model and trained else None
    whole = sharding.full_state(module.lm) if model_dir is not None else None  # sharded: gathered by every rank
    if model_dir is not None and runtime.is_rank_zero():
        # the continually trained model as a folder: AutoModelForCausalLM loads it with its spans, and a
        # fine-tuning run starts from it with backbone.pretrained=<this folder> (the paper's chain)
        export_model(module, model_dir, export_record(ctx, described, selection), state_dict=whole)
    out_dir = ctx.result_dir(last)
    splits = {}
    for split in rc.trainer.eval_splits:
        if not dm.has_split(split):
            log.warning("no %s split in data %s: skipped", split, rc.data.name)
            continue
        scored = score_split(rc, trainer, module, dm, split, out_dir)
        if scored is not None:
            splits[split] = scored
            log_metrics(trainer, split, scored)
    if not runtime.is_rank_zero():
        return {}
    results = Results(
        run_id=ctx.run_id, training_hash=ctx.training_hash, evaluation_hash=ctx.evaluation_hash, step=last,
        commit=package_commit(), changes=package_changes(), tag=rc.tag,
        method=describe_method(rc, method), backbone={"name": rc.backbone.name, "pretrained":
                                                             rc.backbone.pretrained, "arch": rc.backbone.arch},
        data={"name": rc.data.name, "summary": dm.summary(rc.metrics.dependency_block)},
        device=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", machine=runtime.machine(),
        world_size=int(trainer.world_size), seed=rc.seed, train_steps=last,
        selection=selection, train_time_s=round(train_time, 2),
        wall_time_s=round(time.time() - ctx.started, 2),
        versions={d: compat.installed(d) for d in ("torch", "transformers", "lightning")},
        patches=patches.report(), splits=splits, validation=validation_record(rc.trainer),
        eval_batch_size=rc.data.eval_batch_size or rc.data.batch_size)
    config_text = OmegaConf.to_yaml(OmegaConf.create(safe_config))
    atomic_write_text(ctx.run_dir / "config.yaml", config_text)
    atomic_write_text(out_dir / "config.yaml", config_text)
    results.write(out_dir)
    result = results.to_dict()
    if model_dir is not None:
        add_results(model_dir, result)  # the perplexity joins the model card
    wandb_logger.close(trainer.loggers, model_dir, ctx.run_id)
    print(summary_table(result, out_dir), flush=True)
    return result


def score_split(rc: Any, trainer: pl.Trainer, module: LanguageModelModule, dm: LanguageModelingData, split: str,
                out_dir: Path) -> dict[str, Any] | None:
    """Every document of ``split`` scored (sharded over ranks): ``scores_<split>.jsonl`` and its perplexities."""
    t0 = time.time()
    batches = trainer.predict(module, dataloaders=dm.dataloader(split))
    rows = runtime.gather_rows([r for b in batches for r in b], [d.id for d in dm.docs[split]], trainer.world_size)
    if not runtime.is_rank_zero():
        return None
    atomic_write_jsonl(out_dir / f"scores_{split}.jsonl", rows)
    scores = perplexity(rows, rc.metrics.perplexity_bucket)
    elapsed = time.time() - t0
    tokens = sum(r["length"] for r in rows)
    return {**scores, "task_score": scores["ppl"], "split": split, "n_examples": len(rows),
            "eval_time_s": round(elapsed, 2), "input_tokens_per_s": round(tokens / max(elapsed, 1e-9), 1)}
