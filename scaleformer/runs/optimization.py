"""What every training module of this project shares: AdamW and its schedule, clipping, and the stop at a
non-finite loss. The summarization module (:mod:`scaleformer.runs.module`) and the language-model one
(:mod:`scaleformer.runs.lm_module`) subclass it, so both objectives train alike; a subclass sets ``self.model``
and ``self.optim_cfg``.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning.pytorch as pl
import torch
from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

from scaleformer.config import OptimConfig
from scaleformer.errors import ConfigError
from scaleformer.ops import compat

log = logging.getLogger("scaleformer")
# Devices with AdamW's fused kernel (torch >= 2.4): one pass over every parameter instead of a dozen
# operators per tensor (133 tensors of the tiny reader: 8.8 ms -> 3.1 ms per step on 2 CPU cores).
FUSED_ADAMW_DEVICES = ("cuda", "cpu")


class TrainingDiverged(ConfigError, RuntimeError):
    """The training loss became NaN or infinite; the message names the step and the settings to change.

    A ConfigError (train.py prints it as one line, and the run writes no results) because the cure is
    a setting: a lower ``optim.lr``, more warm-up, fp32 instead of fp16.
    """


class OptimizedModule(pl.LightningModule):
    """AdamW (decay on matrices only), the warm-up schedule, clipping and the non-finite loss check."""

    optim_cfg: OptimConfig

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        """The subclass's loss (``self(batch)``), logged when due and watched for a non-finite value."""
        loss = self(batch)
        if self._log_due():
            self.log("train/loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        self._watch(loss.detach(), batch_idx)
        return loss

    def _log_due(self) -> bool:
        """Whether Lightning writes this step's training loss (every log_every_n_steps, and when stopping): the
        loss is logged then only, as each ``self.log`` costs ~2 ms of Python (a tenth of the tiny reader's
        framework time per micro-batch on a CPU) for a value no one reads."""
        try:
            trainer = self.trainer
        except RuntimeError:  # not attached to a trainer (a direct call): log as before
            return True
        every = trainer.log_every_n_steps
        return bool(every) and ((self.global_step + 1) % every == 0 or trainer.should_stop)

    # A non-finite loss is noted on the device and read every `check_every` micro-batches: on a GPU, reading
    # it each step would make the host wait for the step to finish before it could queue the next one. A
    # CPU has no queue to drain, so it reads at once (and stops before the bad step's backward pass). Every
    # check point also reads it: a checkpoint is never saved, nor validation run, on diverged weights.
    check_every: int = 1

    def on_train_start(self) -> None:
        self.check_every = self.trainer.log_every_n_steps if self.device.type == "cuda" else 1

    def _watch(self, loss: torch.Tensor, batch_idx: int) -> None:
        if getattr(self, "_bad", None) is None:  # made once per check: a host-to-device copy waits like a read
            # [3]: micro-batches seen since the last check, the first non-finite one's index (-1: none), its loss
            self._bad, self._seen = torch.tensor([0.0, -1.0, 0.0], device=loss.device), []
        self._seen.append((self.global_step + 1, batch_idx, self.current_epoch))
        bad = self._bad
        first = (~torch.isfinite(loss)) & (bad[1] < 0)  # device ops only: no sync
        self._bad = torch.stack([bad[0] + 1, torch.where(first, bad[0], bad[1]), torch.where(first, loss.float(), bad[2])])
        if len(self._seen) >= self.check_every:
            self.check_finite()

    def check_finite(self) -> None:
        """Stop at a non-finite loss since the last check (one host read), unless optim.allow_nonfinite_loss."""
        bad = getattr(self, "_bad", None)
        if bad is None:
            return
        _, index, value = bad.tolist()
        seen, self._seen, self._bad = self._seen, [], None
        if index >= 0:
            self._nonfinite(value, *seen[int(index)])

    def _nonfinite(self, value: float, step: int, batch_idx: int, epoch: int) -> None:
        """Raise TrainingDiverged naming the step (the optimiser step its micro-batch belongs to, as checkpoints
        count), unless optim.allow_nonfinite_loss (then warn once)."""
        o = self.optim_cfg
        if o.allow_nonfinite_loss:
            if not getattr(self, "_warned_nonfinite", False):
                self._warned_nonfinite = True
                log.warning("training loss is %s at step %d (optim.allow_nonfinite_loss=true: training on)",
                            value, step)
            return
        raise TrainingDiverged(
            f"training diverged: the loss is {value} at step {step} (batch {batch_idx} of epoch "
            f"{epoch}) with optim.lr={o.lr:g}, optim.warmup_steps={o.warmup_steps}; lower "
            "optim.lr or raise optim.warmup_steps (fp16: use trainer.precision=bf16-mixed or 32-true); "
            "optim.allow_nonfinite_loss=true trains on anyway")

    def on_train_end(self) -> None:
        self.check_finite()

    # ------------------------------------------------------------------------------- optimiser
    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Lightning's clipping, also for a fused optimizer under bf16: Lightning refuses any optimizer that
        unscales inside its step under mixed precision, though bf16 has no scale; the same norm as its own."""
        if not gradient_clip_val or compat.grad_scaler(self.trainer) is not None:
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if str(getattr(gradient_clip_algorithm, "value", gradient_clip_algorithm)) == "value":
            torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
        else:  # norm, Lightning's default
            torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)

    def configure_optimizers(self) -> Any:
        o = self.optim_cfg
        decay, no_decay = [], []
        for n, p in self.model.named_parameters():
            if p.requires_grad:
                (no_decay if p.ndim < 2 or "norm" in n.lower() else decay).append(p)
        # fp16's loss scaler: a fused step unscales inside itself, after clipping would have read scaled grads
        fused = o.fused if o.fused is not None else (self.device.type in FUSED_ADAMW_DEVICES
                                                     and compat.grad_scaler(self.trainer) is None)
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": o.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=o.lr, betas=tuple(o.betas), eps=o.eps, fused=fused or None,  # None: torch's own default (foreach)
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": schedule(opt, o, total), "interval": "step"}}


def schedule(opt: torch.optim.Optimizer, o: OptimConfig, total: int) -> Any:
    """Linear warm-up, then linear decay to 0 at step ``total`` or (``optim.schedule=constant``) the peak rate."""
    warm = warmup_steps(o, total)
    if o.schedule == "constant":
        return get_constant_schedule_with_warmup(opt, warm)
    return get_linear_schedule_with_warmup(opt, warm, total)


def warmup_steps(o: OptimConfig, total: int) -> int:
    """Optimiser steps of linear warm-up out of ``total``: ``warmup_ratio`` of them where set, else
    ``warmup_steps`` (at most all of them)."""
    return min(round(o.warmup_ratio * total) if o.warmup_ratio is not None else o.warmup_steps, total)


