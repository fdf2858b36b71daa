"""The Lightning Trainer of a run, with its loggers and callbacks built from their configs.

Loggers and callbacks are Hydra ``_target_`` nodes (``conf/logger/``, ``conf/callbacks/``); the
trainer group's named keys are typed by :class:`scaleformer.config.TrainerConfig` and every other key
goes to ``lightning.Trainer`` unchanged. Lightning's own complaints (more devices than exist, an
unknown strategy) come back as one line naming the trainer group.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import lightning.pytorch as pl
import torch

from scaleformer.errors import ConfigError
from scaleformer.ops import compat
from scaleformer.runs import checkpoints, sharding
from scaleformer.runs.callbacks import progress_callback
from scaleformer.runs.context import RunContext
from scaleformer.runs.targets import check_targets, locate_class

log = logging.getLogger("scaleformer")


def instantiate_all(nodes: dict[str, Any], group: str, allowed: list[str] | tuple[str, ...] = ()) -> list[Any]:
    """Build every non-null ``{_target_: ...}`` entry of a group; errors name the entry. Each target is checked
    against the group's classes first (:mod:`scaleformer.runs.targets`), whoever calls this."""
    from hydra.utils import instantiate

    out = []
    for name, node in nodes.items():
        if node is None:
            continue
        check_targets(group, {name: node}, list(allowed))
        locate_class(group, node["_target_"])
        try:
            out.append(instantiate(node))
        except Exception as e:
            cause = e.__cause__ or e
            msg = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
            raise ConfigError(f"{group}.{name} ({node.get('_target_')}): {msg}") from None
    return out


def precision(p: str) -> str:
    """``auto``: bf16-mixed on GPUs that support it, else full fp32."""
    if p != "auto":
        return p
    return "bf16-mixed" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "32-true"


def validation_docs(limit: Any, n: int) -> int:
    """Documents validated during training: the first ``trainer.limit_val_batches`` of the split (an int),
    or that share of it (a float), in file order. It counted batches of one document before evaluation
    batched several; counting documents keeps the paper profile's 100 and the same documents whatever the
    batch size (documents are batched longest first, so a count of batches would pick the longest)."""
    if isinstance(limit, bool) or not isinstance(limit, int | float):
        raise ConfigError(f"trainer.limit_val_batches={limit!r}: must be a number of documents or a share in [0, 1]")
    if isinstance(limit, float) and limit <= 1.0:
        return 0 if limit <= 0 else max(1, int(n * limit))
    return max(0, min(int(limit), n))


def align_validation(trainer: pl.Trainer, train_batches: int) -> None:
    """Validation during fit after whole optimizer steps only: Lightning counts ``trainer.val_check_interval`` in
    training micro-batches (a share of an epoch: of its ``train_batches``), so under gradient accumulation it
    could validate between the micro-batches of one step, the same weights twice. The interval is set to the
    nearest whole number of steps (said once); one that no epoch reaches is one line, not Lightning's error."""
    every, acc = trainer.val_check_interval, max(1, int(trainer.accumulate_grad_batches))
    if not isinstance(every, int | float) or isinstance(every, float) and every == 1.0:  # each epoch's end
        return
    batches = max(1, int(train_batches * every)) if isinstance(every, float) else int(every)
    if trainer.check_val_every_n_epoch is not None and batches > train_batches:
        raise ConfigError(f"trainer.val_check_interval={every}: above the {train_batches} training micro-batches of an "
                          "epoch; validate at most once an epoch, or set trainer.check_val_every_n_epoch=null to "
                          "count micro-batches across epochs")
    aligned = max(acc, math.floor(batches / acc + 0.5) * acc)  # the nearest whole number of steps (ties: later)
    if aligned != batches:
        log.info("validation every %d training micro-batches (%d optimizer steps of %d), not %d: after whole steps "
                 "only", aligned, aligned // acc, acc, batches)
    if acc > 1 and aligned != every:  # one micro-batch a step: every micro-batch ends one
        trainer.val_check_interval = aligned  # a plain Trainer attribute, read when fit sets up its loop


def build_trainer(ctx: RunContext, loggers: list[Any], callbacks: list[Any]) -> pl.Trainer:
    """A Lightning Trainer from the trainer group; checkpoints written atomically, loaded weights-only."""
    t = ctx.cfg.trainer
    extra = dict(t.extra)
    plugins = extra.pop("plugins", None) or []
    plugins = [*(plugins if isinstance(plugins, list) else [plugins]), checkpoints.AtomicCheckpointIO()]
    if extra.get("strategy") == sharding.FSDP:  # ours: FSDP2 through ModelParallelStrategy (runs.sharding)
        extra["strategy"] = sharding.fsdp_strategy(ctx.cfg, extra)
    if t.enable_progress_bar:
        callbacks = [*callbacks, progress_callback()]
    try:
        return pl.Trainer(
            max_steps=t.max_steps, max_epochs=t.max_epochs, accelerator=t.accelerator, devices=t.devices,
            precision=precision(t.precision), gradient_clip_val=t.gradient_clip_val,
            accumulate_grad_batches=t.accumulate_grad_batches, val_check_interval=t.val_check_interval,
            check_val_every_n_epoch=t.check_val_every_n_epoch,
            # the documents are chosen by the data module (validation_docs): Lightning validates them all
            limit_val_batches=0 if t.limit_val_batches in (0, 0.0) else 1.0,
            num_sanity_val_steps=0, log_every_n_steps=t.log_every_n_steps,
            enable_progress_bar=t.enable_progress_bar, enable_model_summary=False, logger=loggers or False,
            callbacks=callbacks, enable_checkpointing=ctx.checkpoint_dir is not None,
            default_root_dir=str(ctx.run_dir), plugins=plugins, **extra,
        )
    except (ValueError, TypeError, RuntimeError, compat.MisconfigurationException) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"trainer: {first}") from None
