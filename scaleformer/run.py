"""One run: validate, build, train (or continue, or load a checkpoint), evaluate, export.

Everything that can be checked is checked before the model weights are built: config ranges,
method vs backbone limits, the checkpoint to start from (exists, local, same backbone and method),
loggers and callbacks, the output folders, the BERTScore model and the backbone's weights. A
mistake costs seconds, not a GPU allocation. Where files go and what names them:
:mod:`scaleformer.identity`; which process writes them: :mod:`scaleformer.runtime`.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
import traceback
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from omegaconf import OmegaConf

from scaleformer import checkpoints, compat, hub, identity, runtime
from scaleformer.backbone import backbone_spec, build_model, load_tokenizer, model_config
from scaleformer.callbacks import ExactResume, log_metrics
from scaleformer.config import ConfigError, RunConfig, to_config
from scaleformer.console import count_parameters, log_to_file, quiet, summary_table
from scaleformer.io import atomic_write_json, atomic_write_jsonl, atomic_write_text
from scaleformer.methods import Method, build_method
from scaleformer.module import SummarizationModule
from scaleformer.trainer import build_trainer, checkpoint_dir, instantiate_all

log = logging.getLogger("scaleformer")


def run(cfg: Any) -> dict[str, Any]:
    """Train (when asked) and evaluate one configuration; returns the metrics.json content.

    On global rank 0 only; other ranks of a distributed run return an empty dict.
    """
    from scaleformer.metrics import reset_notices

    started = time.time()
    quiet()
    reset_notices()  # a multirun's runs each say once which BERTScore model they used
    rc = to_config(cfg)  # every key, type and range, before anything heavy
    expected = identity.expected_eval_dir(rc)
    if rc.skip_existing and expected is not None and (existing := read_results(expected)) is not None:
        log.info("run %s already has results in %s: skipped (skip_existing=true)", rc.paths.run_id, expected)
        return existing
    ckpt = checkpoints.resolve(rc.trainer.ckpt_path, checkpoint_dir(rc), identity.run_dir(rc))
    run_dir = identity.run_dir(rc)
    for key, folder in (("paths.run_dir", run_dir), ("paths.cache", Path(rc.data.cache_dir))):
        check_writable(key, folder)
    with runtime.run_lock(run_dir), log_to_file(run_dir / "train.log", enabled=runtime.is_rank_zero()):
        try:
            result = _run(rc, ckpt, started)
        except BaseException as e:
            record_failure(run_dir, e)
            raise
        (run_dir / "failed.json").unlink(missing_ok=True)
        return result


def _run(rc: RunConfig, ckpt: Path | None, started: float) -> dict[str, Any]:
    rank0 = runtime.is_rank_zero()
    pl.seed_everything(rc.seed, workers=True, verbose=False)
    tokenizer = load_tokenizer(rc.backbone)
    conf = model_config(rc.backbone, tokenizer)
    method = build_method(rc.method, backbone_spec(rc.backbone, tokenizer, conf))
    described = describe_method(rc, method)
    start = checkpoints.peek(ckpt) if ckpt is not None else None
    if start is not None:
        checkpoints.check_compatible(start["meta"], rc.backbone.name, described, ckpt)
    hub.check_available(rc.backbone.pretrained, "model weights",
                        "Download it on a connected machine and set backbone.pretrained=DIR.")
    if rc.trainer.eval_splits and rc.metrics.bertscore.enabled:
        from scaleformer.metrics import resolve_bertscore_model

        resolve_bertscore_model(rc.metrics.bertscore)  # offline, a missing model fails now, not after training
    loggers, callbacks = instantiate_all(rc.logger, "logger"), instantiate_all(rc.callbacks, "callbacks")
    resume = ExactResume(batch_size=rc.data.batch_size)
    trainer = build_trainer(rc, loggers, [*callbacks, resume])

    from scaleformer.data import SummarizationDataModule

    dm = SummarizationDataModule(rc.data, tokenizer, seed=rc.seed)
    dm.prepare_data()
    dm.setup()
    method.check_prefix(dm.longest_prefix())  # a query too long for the method fails before the model

    model = build_model(rc.backbone, conf)
    meta = checkpoints.metadata(rc.backbone.name, described, identity.training_hash(rc))
    module = SummarizationModule(model, method, tokenizer, rc.optim, rc.generation, meta=meta)
    log.info("run %s: %s on %s, %s (%s parameters) -> %s", rc.paths.run_id, rc.method_option, rc.data.name,
             type(model).__name__, count_parameters(model), rc.paths.run_dir)
    for lg in loggers:
        lg.log_hyperparams(OmegaConf.to_container(rc.raw, resolve=True))

    train_time = 0.0
    trained = rc.trainer.do_train and dm.has_split("train")
    if trained:
        if ckpt is None and rank0:
            _clear_stale_checkpoints(checkpoint_dir(rc))
        elif ckpt is not None:
            log.info("continuing from %s (step %d)", ckpt, start["step"])
        t0 = time.time()
        has_val = dm.has_split("validation") and rc.trainer.limit_val_batches not in (0, 0.0)
        train_loader = dm.train_dataloader()
        resume.sampler = train_loader.sampler
        trainer.fit(module, train_dataloaders=train_loader,
                    val_dataloaders=dm.val_dataloader() if has_val else None,
                    ckpt_path=str(ckpt) if ckpt else None, **compat.fit_kwargs(trainer.fit, weights_only=True))
        train_time = time.time() - t0
        step = int(trainer.global_step)
    elif ckpt is not None:
        step = checkpoints.load_weights(module, ckpt, rc.backbone.name, described)
        log.info("evaluating the weights of %s (step %d)", ckpt, step)
    else:
        step = 0
        log.warning("no training (trainer.do_train=false or no train split) and no checkpoint "
                    "(trainer.ckpt_path): scoring UNTRAINED weights")
    if trained and rank0:
        from scaleformer.export import export_model

        export_model(module, rc, described, step)

    out_dir = identity.eval_dir(rc, step)
    splits: dict[str, Any] = {}
    for split in rc.trainer.eval_splits:
        if not dm.has_split(split):
            log.warning("no %s split in data %s: skipped", split, rc.data.name)
            continue
        scored = evaluate_split(rc, trainer, module, dm, split, out_dir)
        if scored is not None:
            splits[split] = scored
            log_metrics(trainer, split, scored)
    if not rank0:
        return {}

    result = {
        "run_id": rc.paths.run_id,
        "training_hash": identity.training_hash(rc),
        "evaluation_hash": identity.evaluation_hash(rc),
        "step": step,
        "commit": git_commit(),
        "tag": rc.tag,
        "method": describe_method(rc, method),  # after evaluation: some methods report what they measured
        "backbone": {"name": rc.backbone.name, "pretrained": rc.backbone.pretrained, "arch": rc.backbone.arch},
        "data": {"name": rc.data.name, "summary": dm.summary()},
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "world_size": int(trainer.world_size),
        "seed": rc.seed,
        "train_steps": step,
        "train_time_s": round(train_time, 2),
        "wall_time_s": round(time.time() - started, 2),
        "versions": {"torch": torch.__version__, "transformers": _version("transformers"),
                     "lightning": pl.__version__},
        "patches": compat.report(),  # which transformers patches ran ("on") or gave way ("off: why")
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
    atomic_write_json(run_dir / "failed.json", {
        "error": f"{type(error).__name__}: {first}", "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "traceback": traceback.format_exception(error)[-6:]})


def read_results(out_dir: Path) -> dict[str, Any] | None:
    """A finished evaluation's metrics.json, or None when missing or unreadable (then it is redone)."""
    try:
        result = json.loads((out_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    return result if isinstance(result, dict) and "splits" in result else None


def evaluate_split(rc: RunConfig, trainer: pl.Trainer, module: SummarizationModule, dm: Any, split: str,
                   out_dir: Path) -> dict[str, Any] | None:
    """Generate for every example of `split` (sharded over ranks), save the predictions, score them.

    Returns the scores on rank 0, None on the other ranks.
    """
    from scaleformer.metrics import compute_metrics

    t0 = time.time()
    batches = trainer.predict(module, dataloaders=dm.dataloader(split))
    rows = runtime.gather_rows([r for b in batches for r in b], dm.datasets[split].ids, trainer.world_size)
    gen_time = time.time() - t0
    if not runtime.is_rank_zero():
        return None
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
