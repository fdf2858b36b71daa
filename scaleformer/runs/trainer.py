"""The Lightning Trainer of a run, with its loggers and callbacks built from their configs.

Loggers and callbacks are Hydra ``_target_`` nodes (``conf/logger/``, ``conf/callbacks/``); the
trainer group's named keys are typed by :class:`scaleformer.config.TrainerConfig` and every other key
goes to ``lightning.Trainer`` unchanged. Lightning's own complaints (more devices than exist, an
unknown strategy) come back as one line naming the trainer group.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch

from scaleformer.errors import ConfigError
from scaleformer.ops import compat
from scaleformer.runs import checkpoints
from scaleformer.runs.callbacks import progress_callback
from scaleformer.runs.context import RunContext


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


def precision(p: str) -> str:
    """``auto``: bf16-mixed on GPUs that support it, else full fp32."""
    if p != "auto":
        return p
    return "bf16-mixed" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "32-true"


def build_trainer(ctx: RunContext, loggers: list[Any], callbacks: list[Any]) -> pl.Trainer:
    """A Lightning Trainer from the trainer group; checkpoints written atomically, loaded weights-only."""
    t = ctx.cfg.trainer
    extra = dict(t.extra)
    plugins = extra.pop("plugins", None) or []
    plugins = [*(plugins if isinstance(plugins, list) else [plugins]), checkpoints.AtomicCheckpointIO()]
    if t.enable_progress_bar:
        callbacks = [*callbacks, progress_callback()]
    try:
        return pl.Trainer(
            max_steps=t.max_steps, max_epochs=t.max_epochs, accelerator=t.accelerator, devices=t.devices,
            precision=precision(t.precision), gradient_clip_val=t.gradient_clip_val,
            accumulate_grad_batches=t.accumulate_grad_batches, val_check_interval=t.val_check_interval,
            check_val_every_n_epoch=t.check_val_every_n_epoch, limit_val_batches=t.limit_val_batches,
            num_sanity_val_steps=0, log_every_n_steps=t.log_every_n_steps,
            enable_progress_bar=t.enable_progress_bar, enable_model_summary=False, logger=loggers or False,
            callbacks=callbacks, enable_checkpointing=ctx.checkpoint_dir is not None,
            default_root_dir=str(ctx.run_dir), plugins=plugins, **extra,
        )
    except (ValueError, TypeError, RuntimeError, compat.MisconfigurationException) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"trainer: {first}") from None
