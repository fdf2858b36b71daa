"""One run: validate the config, build backbone + method + data, train (or continue, or load), evaluate.

Everything that can be checked (config ranges, method vs backbone limits, data fields, the
checkpoint to start from, loggers and callbacks) is checked before the model weights are built, so
a mistake costs seconds, not a GPU allocation. Where the files go and what names them:
:mod:`scaleformer.identity`.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from omegaconf import OmegaConf

from scaleformer import checkpoints, identity
from scaleformer.backbone import backbone_spec, build_model, load_tokenizer, model_config
from scaleformer.callbacks import StepProgressBar, log_metrics
from scaleformer.config import ConfigError, RunConfig, to_config
from scaleformer.console import count_parameters, log_to_file, quiet, summary_table
from scaleformer.io import atomic_write_json, atomic_write_jsonl, atomic_write_text
from scaleformer.methods import Method, build_method
from scaleformer.module import SummarizationModule

log = logging.getLogger("scaleformer")


def run(cfg: Any) -> dict[str, Any]:
    """Train (when asked) and evaluate one configuration; returns the metrics.json content."""
    from scaleformer.metrics import reset_notices

    started = time.time()
    quiet()
    reset_notices()  # a multirun's runs each say once which BERTScore model they used
    rc = to_config(cfg)  # every key, type and range, before anything heavy
    expected = identity.expected_eval_dir(rc)
    if rc.skip_existing and expected is not None and (existing := read_results(expected)) is not None:
        log.info("run %s already has results in %s: skipped (skip_existing=true)", rc.paths.run_id, expected)
        return existing
    ckpt = checkpoints.resolve(rc.trainer.ckpt_path, checkpoint_dir(rc))
    with log_to_file(identity.run_dir(rc) / "train.log"):
        return _run(rc, ckpt, started)


def _run(rc: RunConfig, ckpt: Path | None, started: float) -> dict[str, Any]:
    pl.seed_everything(rc.seed, workers=True, verbose=False)
    tokenizer = load_tokenizer(rc.backbone)
    conf = model_config(rc.backbone, tokenizer)
    method = build_method(rc.method, backbone_spec(rc.backbone, tokenizer, conf))
    described = describe_method(rc, method)
    start = checkpoints.peek(ckpt) if ckpt is not None else None
    if start is not None:
        checkpoints.check_compatible(start["meta"], rc.backbone.name, described, ckpt)
    loggers, callbacks = instantiate_all(rc.logger, "logger"), instantiate_all(rc.callbacks, "callbacks")
    trainer = build_trainer(rc, loggers, callbacks)

    from scaleformer.data import SummarizationDataModule

    dm = SummarizationDataModule(rc.data, tokenizer, seed=rc.seed)
    dm.prepare_data()
    dm.setup()

    model = build_model(rc.backbone, conf)
    meta = checkpoints.metadata(rc.backbone.name, described, identity.training_hash(rc))
    module = SummarizationModule(model, method, tokenizer, rc.optim, rc.generation, meta=meta)
    log.info("run %s: %s on %s, %s (%s parameters) -> %s", rc.paths.run_id, rc.method_option, rc.data.name,
             type(model).__name__, count_parameters(model), rc.paths.run_dir)
    for lg in loggers:
        lg.log_hyperparams(OmegaConf.to_container(rc.raw, resolve=True))

    train_time = 0.0
    if rc.trainer.do_train and dm.has_split("train"):
        if ckpt is None:
            _clear_stale_checkpoints(checkpoint_dir(rc))
        else:
            log.info("continuing from %s (step %d)", ckpt, start["step"])
        t0 = time.time()
        has_val = dm.has_split("validation") and rc.trainer.limit_val_batches not in (0, 0.0)
        trainer.fit(module, train_dataloaders=dm.train_dataloader(),
                    val_dataloaders=dm.val_dataloader() if has_val else None,
                    ckpt_path=str(ckpt) if ckpt else None, weights_only=True)
        train_time = time.time() - t0
        step = int(trainer.global_step)
    elif ckpt is not None:
        step = checkpoints.load_weights(module, ckpt, rc.backbone.name, described)
        log.info("evaluating the weights of %s (step %d)", ckpt, step)
    else:
        step = 0
        log.warning("no training (trainer.do_train=false or no train split) and no checkpoint "
                    "(trainer.ckpt_path): scoring UNTRAINED weights")

    out_dir = identity.eval_dir(rc, step)
    splits: dict[str, Any] = {}
    for split in rc.trainer.eval_splits:
        if not dm.has_split(split):
            log.warning("no %s split in data %s: skipped", split, rc.data.name)
            continue
        splits[split] = evaluate_split(rc, trainer, module, dm, split, out_dir)
        log_metrics(trainer, split, splits[split])

    result = {
        "run_id": rc.paths.run_id,
        "training_hash": identity.training_hash(rc),
        "evaluation_hash": identity.evaluation_hash(rc),
        "step": step,
        "commit": git_commit(),
        "tag": rc.tag,
        "method": described,
        "backbone": {"name": rc.backbone.name, "pretrained": rc.backbone.pretrained, "arch": rc.backbone.arch},
        "data": {"name": rc.data.name, "summary": dm.summary()},
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "seed": rc.seed,
        "train_steps": step,
        "train_time_s": round(train_time, 2),
        "wall_time_s": round(time.time() - started, 2),
        "versions": {"torch": torch.__version__, "transformers": _version("transformers"),
                     "lightning": pl.__version__},
        "splits": splits,
    }
    config_text = OmegaConf.to_yaml(rc.raw)
    atomic_write_text(identity.run_dir(rc) / "config.yaml", config_text)
    atomic_write_text(out_dir / "config.yaml", config_text)
    atomic_write_json(out_dir / "metrics.json", result)
    print(summary_table(result, out_dir), flush=True)
    return result


def describe_method(rc: RunConfig, method: Method) -> dict[str, Any]:
    """The option the user chose, the class behind it and its parameters (as metrics.json records them)."""
    return {"option": rc.method_option, "class": type(method).__name__, **method.describe()}


def checkpoint_dir(rc: RunConfig) -> Path | None:
    """Where this run's checkpoints go: the checkpoint callback's folder (None when it is switched off)."""
    for node in rc.callbacks.values():
        if node and "Checkpoint" in str(node.get("_target_", "")) and node.get("dirpath"):
            return Path(node["dirpath"])
    return None


def _clear_stale_checkpoints(ckpt_dir: Path | None) -> None:
    """A fresh start replaces this run's checkpoints (else `last` could point at the old training)."""
    if ckpt_dir is None or not ckpt_dir.is_dir():
        return
    stale = [p for p in ckpt_dir.iterdir() if p.suffix == ".ckpt"]
    if stale:
        log.warning("trainer.ckpt_path=null: training from scratch, replacing %d checkpoint(s) in %s "
                    "(trainer.ckpt_path=last continues them instead)", len(stale), ckpt_dir)
        for p in stale:
            p.unlink()


def instantiate_all(nodes: dict[str, Any], group: str) -> list[Any]:
    """Build every non-null ``{_target_: ...}`` entry of a group; errors name the entry."""
    from hydra.utils import instantiate

    out = []
    for name, node in nodes.items():
        if node is None:
            continue
        try:
            out.append(instantiate(node))
        except Exception as e:
            cause = e.__cause__ or e
            msg = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
            raise ConfigError(f"{group}.{name} ({node.get('_target_')}): {msg}") from None
    return out


def _precision(p: str) -> str:
    if p != "auto":
        return p
    return "bf16-mixed" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "32-true"


def build_trainer(rc: RunConfig, loggers: list[Any], callbacks: list[Any]) -> pl.Trainer:
    """A Lightning Trainer from the trainer group; Lightning's own errors come back as one line."""
    t = rc.trainer
    extra = dict(t.extra)
    plugins = extra.pop("plugins", None) or []
    plugins = [*(plugins if isinstance(plugins, list) else [plugins]), checkpoints.AtomicCheckpointIO()]
    if t.enable_progress_bar:
        callbacks = [*callbacks, StepProgressBar()]
    try:
        return pl.Trainer(
            max_steps=t.max_steps, max_epochs=t.max_epochs, accelerator=t.accelerator, devices=t.devices,
            precision=_precision(t.precision), gradient_clip_val=t.gradient_clip_val,
            accumulate_grad_batches=t.accumulate_grad_batches, val_check_interval=t.val_check_interval,
            check_val_every_n_epoch=t.check_val_every_n_epoch, limit_val_batches=t.limit_val_batches,
            num_sanity_val_steps=0, log_every_n_steps=t.log_every_n_steps,
            enable_progress_bar=t.enable_progress_bar, enable_model_summary=False, logger=loggers or False,
            callbacks=callbacks, enable_checkpointing=checkpoint_dir(rc) is not None,
            default_root_dir=str(identity.run_dir(rc)), plugins=plugins, **extra,
        )
    except (ValueError, TypeError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"trainer: {first}") from None


def read_results(out_dir: Path) -> dict[str, Any] | None:
    """A finished evaluation's metrics.json, or None when missing or unreadable (then it is redone)."""
    try:
        result = json.loads((out_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) and "splits" in result else None


def evaluate_split(rc: RunConfig, trainer: pl.Trainer, module: SummarizationModule, dm: Any, split: str,
                   out_dir: Path) -> dict[str, Any]:
    """Generate for every example of `split`, save predictions, score them from the saved rows."""
    from scaleformer.metrics import compute_metrics

    t0 = time.time()
    batches = trainer.predict(module, dataloaders=dm.dataloader(split))
    gen_time = time.time() - t0
    rows = [r for b in batches for r in b]
    n_tokens = sum(r.pop("input_tokens") for r in rows)
    atomic_write_jsonl(out_dir / f"predictions_{split}.jsonl", rows)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    metrics = compute_metrics([r["prediction"] for r in rows], [r["reference"] for r in rows], rc.metrics,
                              device=device)
    return metrics | {
        "split": split,
        "n_examples": len(rows),
        "generation_time_s": round(gen_time, 2),
        "input_tokens_per_s": round(n_tokens / max(gen_time, 1e-9), 1),
    }


def git_commit() -> str:
    """HEAD's hash, with '-dirty' when the tree has uncommitted changes ('unknown' outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=5).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _version(pkg: str) -> str:
    from importlib.metadata import version

    return version(pkg)
