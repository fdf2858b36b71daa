"""One run: validate, build, train (or continue, or load a checkpoint), evaluate, export.

Everything that can be checked is checked before the model weights are built: config ranges,
method vs backbone limits, the checkpoint to start from (exists, local, same backbone and method),
loggers and callbacks, the output folders, the BERTScore model and the backbone's weights. A
mistake costs seconds, not a GPU allocation. Where files go and what names them:
:mod:`scaleformer.runs.identity`; which process writes them: :mod:`scaleformer.runs.runtime`.

The steps share one :class:`~scaleformer.runs.context.RunContext` (config, hashes, folders computed
once): :func:`prepare` (checks, trainer, data), :func:`build_module`, :func:`train_or_load`,
:func:`evaluate`, then the export and ``metrics.json`` (:class:`~scaleformer.runs.results.Results`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from omegaconf import OmegaConf

from scaleformer.data.datamodule import SummarizationDataModule
from scaleformer.errors import ConfigError, redact_all
from scaleformer.export.folder import add_results, export_model, export_target
from scaleformer.io import atomic_write_json, atomic_write_jsonl, atomic_write_text
from scaleformer.methods import Method
from scaleformer.metrics import compute_metrics, reset_notices, resolve_bertscore_model
from scaleformer.metrics.buckets import by_length
from scaleformer.model import hub
from scaleformer.model.backbone import build_model, decoder_only
from scaleformer.model.backbone import prepare as prepare_backbone
from scaleformer.ops import compat, patches
from scaleformer.resources import package_changes, package_commit
from scaleformer.runs import checkpoints, context, identity, runtime, wandb_logger
from scaleformer.runs.callbacks import ExactResume, log_metrics
from scaleformer.runs.causal_summary import CausalSummarizationModule, check_causal_summary
from scaleformer.runs.console import count_parameters, log_to_file, quiet, summary_table
from scaleformer.runs.context import RunConfig, RunContext, describe_method, to_config, validation_record
from scaleformer.runs.cost import CostProbe
from scaleformer.runs.cost_schedule import settings
from scaleformer.runs.lm_run import execute_lm
from scaleformer.runs.memory import resolve_checkpointing, resolve_eval_batch, resolve_micro_batch
from scaleformer.runs.module import SummarizationModule
from scaleformer.runs.results import Results, leaderboard_file
from scaleformer.runs.selection import BestCheckpoint, check_best_file, select_weights, selection_monitor
from scaleformer.runs.trainer import align_validation, build_trainer, instantiate_all, validation_docs

log = logging.getLogger("scaleformer")


def run(cfg: Any, checked: Any = None) -> dict[str, Any]:
    """Train (when asked) and evaluate one configuration; returns the metrics.json content.

    On global rank 0 only; other ranks of a distributed run return an empty dict. ``checked``: the
    command's own :func:`~scaleformer.runs.context.check_groups` of ``cfg``, not repeated.
    """
    started, _ = time.time(), package_commit()  # the checkout's commit as this process starts its first run
    quiet()
    reset_notices()  # a multirun's runs each say once which BERTScore model they used
    ctx = RunContext.create(to_config(cfg, checked), started)  # every key, type and range, before anything heavy
    rc = ctx.cfg
    expected = ctx.expected_eval_dir
    if rc.skip_existing and expected is not None and (existing := Results.read(expected)) is not None:
        log.info("run %s already has results in %s: skipped (skip_existing=true)", ctx.run_id, expected)
        return existing.to_dict()
    ckpt = checkpoints.resolve(rc.trainer.ckpt_path, ctx.checkpoint_dir, ctx.run_dir)
    on_cpu = rc.trainer.accelerator == "cpu" or (rc.trainer.accelerator == "auto" and not torch.cuda.is_available())
    if on_cpu and runtime.is_rank_zero() and (note := runtime.busy_note(
            runtime.running_elsewhere(), os.cpu_count(), torch.get_num_threads())):
        log.warning(note)  # before torch's threads first spin (they would count themselves as other work)
    attempt = Attempt(fresh=not ctx.run_dir.exists())
    try:
        for key, folder in (("paths.run_dir", ctx.run_dir), ("paths.cache", Path(rc.data.cache_dir))):
            check_writable(key, folder)
        with runtime.run_lock(ctx.run_dir), log_to_file(ctx.run_dir / "train.log", enabled=runtime.is_rank_zero()):
            try:
                ckpt = claim_run_folder(ctx, ckpt)
                result = (execute_lm if rc.data.task_metric == "perplexity" else _execute)(ctx, ckpt, attempt)
            except BaseException as e:
                if not attempt.leaves_nothing(e):
                    record_failure(ctx.run_dir, e)
                if runtime.is_sigterm(e):
                    status = runtime.sigterm_status()
                    log.error("stopped by SIGTERM%s; the same command resumes from the last checkpoint",
                              " (SLURM requeues the job)" if status == 0 else "")
                    raise SystemExit(status) from None
                raise
            (ctx.run_dir / "failed.json").unlink(missing_ok=True)
            return result
    except BaseException as e:
        if attempt.leaves_nothing(e):
            shutil.rmtree(ctx.run_dir, ignore_errors=True)
        raise


@dataclass
class Attempt:
    """One invocation of a run folder: whether it made the folder, and whether it got as far as the weights.

    A run that stops before that (hub unreachable, data missing, a refused setting) leaves no folder
    behind: there is nothing to resume, and a folder would read as a run that failed. A folder that
    existed before, or a failure once training (or loading weights to evaluate) began, keeps the
    folder and its ``failed.json``.
    """

    fresh: bool
    started: bool = False

    def leaves_nothing(self, error: BaseException) -> bool:
        return (self.fresh and not self.started and runtime.is_rank_zero()
                and not isinstance(error, runtime.RunInUseError))  # another process owns that folder


@dataclass
class Parts:
    """What the steps of one run build and hand on."""

    tokenizer: Any
    method: Method
    described: dict[str, Any]
    trainer: pl.Trainer
    loggers: list[Any]
    resume: ExactResume
    dm: Any
    conf: Any = None
    start: dict[str, Any] | None = None  # step and metadata of the checkpoint to start from
    crowded: dict[str, int] = field(default_factory=dict)  # per split: queries that crowd the document out
    cost: CostProbe | None = None  # trainer.measure_cost: the step and generation costs
    best: BestCheckpoint | None = None  # validation during fit's scores, the best weights, early stopping
    micro_batch: dict[str, Any] = field(default_factory=dict)  # data.bucket: the training micro-batch chosen


def _execute(ctx: RunContext, ckpt: Path | None, attempt: Attempt) -> dict[str, Any]:
    parts = prepare(ctx, ckpt)
    module = build_module(ctx, parts)
    resolve_eval_batch(parts.dm, module, str(parts.trainer.precision), parts.trainer.strategy.root_device)
    attempt.started = True
    last, train_time, trained = train_or_load(ctx, parts, module, ckpt)
    # the weights to evaluate and export, chosen before any evaluation split is read (validation's scores only)
    selection = select_weights(parts.best if ctx.cfg.trainer.select == "best" else None, module, last,
                               ctx.cfg.backbone.name, parts.described, ctx.training_hash) if trained else \
        {"rule": "loaded", "step": last}
    step, out_dir, export = selection["step"], ctx.result_dir(last), trained and ctx.cfg.trainer.export_model
    model_dir = export_target(ctx.model_dir, selection) if export else ctx.model_dir
    if export and runtime.is_rank_zero():
        export_model(module, model_dir, context.export_record(ctx, parts.described, selection))
    splits = evaluate(ctx, parts, module, out_dir)
    if not runtime.is_rank_zero():
        return {}
    results = Results(
        run_id=ctx.run_id, training_hash=ctx.training_hash, evaluation_hash=ctx.evaluation_hash, step=step,
        commit=package_commit(), changes=package_changes(), tag=ctx.cfg.tag,
        method=describe_method(ctx.cfg, parts.method),  # after evaluation: what the method measured
        backbone={"name": ctx.cfg.backbone.name, "pretrained": ctx.cfg.backbone.pretrained,
                  "arch": ctx.cfg.backbone.arch},
        data={"name": ctx.cfg.data.name, "summary": {
            s: {**v, "n_query_crowded": parts.crowded.get(s, 0)} for s, v in parts.dm.summary().items()}},
        device=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        machine=runtime.machine(),
        world_size=int(parts.trainer.world_size), seed=ctx.cfg.seed, train_steps=last, selection=selection,
        train_time_s=round(train_time, 2), wall_time_s=round(time.time() - ctx.started, 2),
        versions={d: compat.installed(d) for d in ("torch", "transformers", "lightning")},
        patches=patches.report(), splits=splits,
        cost=parts.cost.record(str(parts.trainer.precision)) if parts.cost else {},
        validation=validation_record(ctx.cfg.trainer), eval_batch_size=parts.dm.eval_batch_size,
        micro_batch=parts.micro_batch)
    config_text = OmegaConf.to_yaml(OmegaConf.create(redact_all(OmegaConf.to_container(ctx.cfg.raw))))
    atomic_write_text(ctx.run_dir / "config.yaml", config_text)
    atomic_write_text(out_dir / "config.yaml", config_text)
    results.write(out_dir)
    result = results.to_dict()
    if export:
        add_results(model_dir, result)  # the scores join the model card
    wandb_logger.close(parts.trainer.loggers, model_dir if export else None, ctx.run_id)
    print(summary_table(result, out_dir), flush=True)
    return result


def prepare(ctx: RunContext, ckpt: Path | None) -> Parts:
    """Everything checkable before the weights exist: method vs backbone, the checkpoint to start from,
    the backbone's and BERTScore's availability, loggers, callbacks, the trainer and the data."""
    rc = ctx.cfg
    pl.seed_everything(rc.seed, workers=True, verbose=False)
    ready = prepare_backbone(rc.backbone, rc.method)
    tokenizer, conf, method = ready.tokenizer, ready.conf, ready.method
    if ready.spec.decoder_only:
        check_causal_summary(rc)
    if rc.data.has_query and rc.data.max_prefix_tokens and (fitted := method.fit_query(rc.data.max_prefix_tokens)):
        log.info("%s", fitted)  # the record below (metrics.json, checkpoints, the export) holds the new value
    described = describe_method(rc, method)
    start = checkpoints.peek(ckpt) if ckpt is not None else None
    if start is not None:
        checkpoints.check_compatible(start["meta"], rc.backbone.name, described, ckpt)
    hub.check_available(rc.backbone.pretrained, "model weights",
                        "Download it on a connected machine and set backbone.pretrained=DIR.")
    if rc.trainer.eval_splits and rc.metrics.bertscore.enabled:
        resolve_bertscore_model(rc.metrics.bertscore)  # offline, a missing model fails now, not after training
    loggers = instantiate_all(rc.logger, "logger", rc.allowed_targets)
    callbacks = instantiate_all(rc.callbacks, "callbacks", rc.allowed_targets)
    resume = ExactResume(batch_size=rc.data.batch_size)
    t = rc.trainer
    cost = CostProbe(t.cost_warmup, t.cost_repeats, t.cost_lengths, t.cost_bare, settings(rc.method)) \
        if t.measure_cost else None
    best = BestCheckpoint(ctx.checkpoint_dir or ctx.run_dir / "checkpoints", *selection_monitor(t.validation),
                          patience=t.early_stopping_patience) if t.select == "best" or t.early_stopping_patience else None
    if best is not None:  # a best.ckpt this run did not write (copied in): refused before training
        check_best_file(best.dirpath, ctx.training_hash)
    trainer = build_trainer(ctx, loggers, [*callbacks, resume, *([cost] if cost else []), *([best] if best else [])])
    dm = SummarizationDataModule(rc.data, tokenizer, seed=rc.seed)
    dm.prepare_data()
    dm.setup()
    # A query too long for the method, or one that crowds the document out of its window, fails before the
    # model loads; the summary records per split how many queries crowd the document out (0 in a run).
    summary = dm.summary()
    crowded = {s: method.crowded(dm.prefix_lengths(s)) for s in summary}
    method.check_prefix(dm.longest_prefix(), ", ".join(
        f"{n} of {summary[s]['n_examples']} {s} examples" for s, n in crowded.items() if n))
    return Parts(tokenizer, method, described, trainer, loggers, resume, dm, conf, start, crowded, cost, best)


def build_module(ctx: RunContext, parts: Parts) -> SummarizationModule:
    rc = ctx.cfg
    model = build_model(rc.backbone, parts.conf)
    meta = checkpoints.metadata(rc.backbone.name, parts.described, ctx.training_hash)
    safe_config = redact_all(OmegaConf.to_container(rc.raw, resolve=True))  # saved in every checkpoint
    module = (CausalSummarizationModule if decoder_only(parts.conf) else SummarizationModule)(
        model, parts.method, parts.tokenizer, rc.optim, rc.generation, meta=meta, run_config=safe_config)
    log.info("run %s: %s on %s, %s (%s parameters) -> %s", ctx.run_id, rc.method_option, rc.data.name,
             type(model).__name__, count_parameters(model), ctx.run_dir)
    for lg in parts.loggers:
        lg.log_hyperparams(safe_config)
    return module


def train_or_load(ctx: RunContext, parts: Parts, module: SummarizationModule, ckpt: Path | None
                  ) -> tuple[int, float, bool]:
    """Train (from scratch or the checkpoint), or load the checkpoint's weights; (step, seconds, trained)."""
    rc, dm, trainer = ctx.cfg, parts.dm, parts.trainer
    trained = rc.trainer.do_train and dm.has_split("train")
    if not trained:
        if ckpt is not None:
            step = checkpoints.load_weights(module, ckpt, rc.backbone.name, parts.described)
            log.info("evaluating the weights of %s (step %d)", ckpt, step)
            return step, 0.0, False
        log.warning("no training (trainer.do_train=false or no train split) and no trainer.ckpt_path: UNTRAINED weights")
        return 0, 0.0, False
    if ckpt is not None:
        checkpoints.check_state(module, ckpt)  # mismatched weights: one line, before Lightning loads them
        log.info("continuing from %s (step %d)", ckpt, parts.start["step"])
    t0 = time.time()
    has_val = dm.has_split("validation") and rc.trainer.limit_val_batches not in (0, 0.0)
    device, precision = trainer.strategy.root_device, str(trainer.precision)
    resolve_checkpointing(parts.method, module.backbone, precision, device, dm.longest("train"),
                          dm.longest("train", "label"))
    parts.micro_batch = resolve_micro_batch(dm, parts.method, module.backbone, precision, device,
                                            rc.trainer.accumulate_grad_batches, trainer, parts.resume,
                                            (parts.start or {}).get("micro_batch") if ckpt is not None else None)
    train_loader = dm.train_dataloader()
    align_validation(trainer, len(train_loader))  # after whole optimizer steps only
    parts.resume.sampler = train_loader.sampler
    if parts.cost is not None:
        parts.cost.watch_loader(train_loader)
    val = dm.dataloader("validation", first=validation_docs(rc.trainer.limit_val_batches, len(dm.datasets["validation"]))
                        ) if has_val else None
    trainer.fit(module, train_dataloaders=train_loader, val_dataloaders=val,
                ckpt_path=str(ckpt) if ckpt else None, **compat.fit_kwargs(trainer.fit, weights_only=True))
    return int(trainer.global_step), time.time() - t0, True


def evaluate(ctx: RunContext, parts: Parts, module: SummarizationModule, out_dir: Path) -> dict[str, Any]:
    """Every evaluated split's scores (rank 0; empty elsewhere), logged to the run's loggers."""
    splits: dict[str, Any] = {}
    for split in ctx.cfg.trainer.eval_splits:
        if not parts.dm.has_split(split):
            log.warning("no %s split in data %s: skipped", split, ctx.cfg.data.name)
            continue
        scored = evaluate_split(ctx.cfg, parts.trainer, module, parts.dm, split, out_dir)
        if scored is not None:
            splits[split] = scored
            log_metrics(parts.trainer, split, scored)
            for lg in wandb_logger.ours(parts.trainer.loggers):  # the summary and every document's prediction
                lg.log_final(split, scored, out_dir)
    return splits


def claim_run_folder(ctx: RunContext, ckpt: Path | None) -> Path | None:
    """A run folder belongs to one training identity (``identity.json``): continuing or evaluating it under
    another is refused, naming both hashes and the settings that differ. A fresh start
    (``trainer.ckpt_path=null``) or a fine-tune from an explicit checkpoint takes the folder over, moving
    the earlier checkpoints aside (never deleting them). Returns the checkpoint to start from."""
    rc = ctx.cfg
    ours = ctx.training_identity
    owner = identity.read_owner(ctx.run_dir)
    theirs_hash = owner["training_hash"] if owner else None
    if theirs_hash is None and ckpt is not None and rc.trainer.ckpt_path == "last":  # a folder from before the record
        meta = checkpoints.peek(ckpt)["meta"]
        theirs_hash = meta.get("training_hash") if isinstance(meta, dict) else None
    if theirs_hash is not None and theirs_hash != ctx.training_hash and rc.trainer.ckpt_path == "last":
        raise ConfigError(identity.owner_conflict(ctx.run_dir, ctx.training_hash, ours, theirs_hash,
                                                  owner.get("training_identity") if owner else None))
    if runtime.is_rank_zero():
        if rc.trainer.ckpt_path is None and rc.trainer.do_train:
            checkpoints.set_aside(ctx.checkpoint_dir, "trainer.ckpt_path=null: training from scratch")
        elif theirs_hash is not None and theirs_hash != ctx.training_hash:
            inside = ckpt is not None and ctx.checkpoint_dir is not None and ckpt.resolve().parent == \
                ctx.checkpoint_dir.resolve()
            moved = checkpoints.set_aside(ctx.checkpoint_dir,
                                          f"run folder taken over from training identity {theirs_hash}")
            if inside and moved is not None:  # fine-tuning from this folder's own (moved) weights
                ckpt = moved / ckpt.resolve().name
        atomic_write_json(ctx.run_dir / identity.OWNER_FILE,
                          redact_all({"training_hash": ctx.training_hash, "training_identity": ours}))
    return ckpt


def check_writable(key: str, folder: Path) -> None:
    """A folder the run will write into exists (or can be made) and takes a file: checked at start-up."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise ConfigError(f"{key}={str(folder)!r}: not writable ({e.strerror or e})") from None


def record_failure(run_dir: Path, error: BaseException) -> None:
    """``<run>/failed.json``: why the run stopped (tables and reproduce.py report it per cell)."""
    if not runtime.is_rank_zero() or isinstance(error, runtime.RunInUseError):
        return  # a refused second launch is not the run's failure
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    atomic_write_json(run_dir / "failed.json", redact_all({
        "error": f"{type(error).__name__}: {first}", "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "traceback": traceback.format_exception(error)[-6:]}))


def evaluate_split(rc: RunConfig, trainer: pl.Trainer, module: SummarizationModule, dm: Any, split: str,
                   out_dir: Path) -> dict[str, Any] | None:
    """Generate for every example of `split` (sharded over ranks), save the predictions, score them.

    Returns the scores on rank 0, None on the other ranks.
    """
    t0 = time.time()
    batches = trainer.predict(module, dataloaders=dm.dataloader(split))
    rows = runtime.gather_rows([r for b in batches for r in b], dm.datasets[split].ids, trainer.world_size)
    gen_time = time.time() - t0
    if not runtime.is_rank_zero():
        return None
    lengths = [r.pop("input_tokens") for r in rows]
    atomic_write_jsonl(out_dir / f"predictions_{split}.jsonl", rows)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    preds, refs = [r["prediction"] for r in rows], [r["reference"] for r in rows]
    task = rc.data.task_metric
    per_doc: list[dict[str, Any]] = []
    metrics = compute_metrics(preds, refs, rc.metrics, device=device, task_metric=task, rows=per_doc)
    # One row per scored document (every metric, the input's length): what intervals and paired tests
    # between runs are computed from; metrics.json's means are these rows' means.
    atomic_write_jsonl(out_dir / f"scores_{split}.jsonl", [
        {"id": rows[d["index"]]["id"], "input_tokens": lengths[d["index"]],
         **{k: v for k, v in d.items() if k != "index"}} for d in per_doc])
    no_bs = dataclasses.replace(rc.metrics, bertscore=dataclasses.replace(rc.metrics.bertscore, enabled=False))
    metrics["by_length"] = by_length(lengths, rc.metrics.length_buckets, lambda idx: _headline(compute_metrics(
        [preds[i] for i in idx], [refs[i] for i in idx], no_bs, task_metric=task)))
    if not metrics.get("scored") and rc.data.leaderboard:  # hidden references: the leaderboard scores them
        metrics["leaderboard"] = leaderboard_file(rc.data.leaderboard, split, rows, out_dir)
    n_tokens = sum(lengths)
    return metrics | {
        "split": split,
        "n_examples": len(rows),
        "generation_time_s": round(gen_time, 2),
        "input_tokens_per_s": round(n_tokens / max(gen_time, 1e-9), 1),
    }


def _headline(m: dict[str, Any]) -> dict[str, Any]:
    """The scores of one length bucket (numbers only; the settings are the split's)."""
    keys = ("n_scored", "rouge1", "rouge2", "rougeL", "rougeLsum", "rouge_geomean", "f1", "exact_match",
            "task_score", "fact_recall", "fact_field_recall")
    return {k: m[k] for k in keys if k in m}
