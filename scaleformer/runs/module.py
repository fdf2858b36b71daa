"""The LightningModule: teacher-forced training and generation through a long-context method.

The method owns the encoder side (chunking, fusion, ...); this module owns optimisation and
decoding, so every method is trained and decoded the same way.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning.pytorch as pl
import torch
from transformers import PreTrainedModel, get_linear_schedule_with_warmup

from scaleformer.config import GenerationConfig, OptimConfig, TrainerConfig
from scaleformer.errors import ConfigError
from scaleformer.methods.base import Encoded, Method
from scaleformer.model.backbone import build_model, prepare
from scaleformer.model.hf import ScaleformerForConditionalGeneration
from scaleformer.ops import compat
from scaleformer.ops.decoding import summaries
from scaleformer.ops.loss import document_loss
from scaleformer.runs.checkpoints import META_KEY, upgrade_state
from scaleformer.runs.context import to_config, validation_generation

log = logging.getLogger("scaleformer")
# Devices with AdamW's fused kernel (torch >= 2.4): one pass over every parameter instead of a dozen
# operators per tensor (133 tensors of the tiny reader: 8.8 ms -> 3.1 ms per step on 2 CPU cores).
FUSED_ADAMW_DEVICES = ("cuda", "cpu")


class TrainingDiverged(ConfigError, RuntimeError):
    """The training loss became NaN or infinite; the message names the step and the settings to change.

    A ConfigError (train.py prints it as one line, and the run writes no results) because the cure is
    a setting: a lower ``optim.lr``, more warm-up, fp32 instead of fp16.
    """


class SummarizationModule(pl.LightningModule):
    """Training and generation of one backbone through one method.

    Built by a run from its parts, or from the run's resolved config alone (``run_config``, saved as
    the checkpoint's hyperparameters): ``SummarizationModule.load_from_checkpoint("last.ckpt",
    weights_only=True)`` rebuilds the backbone's architecture, the tokenizer and the method, then loads
    the trained weights.
    """

    def __init__(
        self,
        model: PreTrainedModel | None = None,
        method: Method | None = None,
        tokenizer: Any = None,
        optim: OptimConfig | None = None,
        generation: GenerationConfig | None = None,
        meta: dict[str, Any] | None = None,
        run_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if model is None:
            if run_config is None:
                raise ValueError("SummarizationModule needs its parts (model, method, tokenizer) or run_config")
            model, method, tokenizer, optim, generation = _parts_from_config(run_config)
        if run_config is not None:
            self.save_hyperparameters({"run_config": run_config})
        # The Hugging Face model class that carries the method: what export saves and Summarizer loads.
        self.model = model if isinstance(model, ScaleformerForConditionalGeneration) else \
            ScaleformerForConditionalGeneration.from_parts(model, method)
        self.method = self.model.method
        self.tokenizer = tokenizer
        self.optim_cfg = optim or OptimConfig()
        self.gen_cfg = generation or GenerationConfig()
        # Validation predictions of the current epoch, read by the metrics callback.
        self.val_outputs: list[dict[str, Any]] = []
        # What checkpoints record about the run (backbone, method, training identity).
        self.meta = meta or {}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["state_dict"] = upgrade_state(checkpoint["state_dict"])

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.check_finite()  # never a checkpoint of diverged weights
        checkpoint[META_KEY] = self.meta

    # ----------------------------------------------------------------------------------- encoder
    def encode(self, batch: dict[str, Any], training: bool) -> Encoded:
        return self.model.encode(batch["input_ids"], batch["attention_mask"], training=training,
                                 prefix_ids=batch.get("prefix_ids"), prefix_mask=batch.get("prefix_mask"))

    # ---------------------------------------------------------------------------------- training
    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        # several documents: each one's token mean, then their mean (scaleformer.ops.loss: as if accumulated one by one)
        return document_loss(self.model, batch["labels"], input_ids=batch["input_ids"],
                             attention_mask=batch["attention_mask"], prefix_ids=batch.get("prefix_ids"),
                             prefix_mask=batch.get("prefix_mask"))

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
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

    def on_validation_start(self) -> None:
        """What this validation computes (``trainer.validation`` of the run's config; a module built without one
        validates as the paper does): ``greedy`` decodes with 1 beam and its token cap until it ends."""
        self.check_finite()
        t = (self.hparams.get("run_config") or {}).get("trainer") or {}
        mode = self.validation_mode = t.get("validation", TrainerConfig.validation)
        if mode != TrainerConfig.validation and not getattr(self, "_said_validation", False):
            self._said_validation = True
            log.warning("trainer.validation=%s: validation during fit is not the paper's protocol (%s); "
                        "the evaluation of trainer.eval_splits is unchanged", mode,
                        "the teacher-forced loss only, val/loss" if mode == "loss" else "1 beam, capped new tokens")
        if mode == "greedy":
            self._test_gen_cfg, self.gen_cfg = self.gen_cfg, validation_generation(
                self.gen_cfg, mode, t.get("validation_max_new_tokens", TrainerConfig.validation_max_new_tokens))

    # -------------------------------------------------------------------------------- generation
    @torch.no_grad()
    def generate(self, batch: dict[str, Any]) -> list[str]:
        # Cross-attention keys/values once per document, shared by its beams (scaleformer.ops.decoding).
        return summaries(self.model, self.tokenizer, self.gen_cfg, batch["input_ids"], batch["attention_mask"],
                         batch.get("prefix_ids"), batch.get("prefix_mask"))

    def _predict(self, batch: dict[str, Any]) -> list[dict[str, Any]]:
        preds = self.generate(batch)
        n_tokens = batch["attention_mask"].sum(1).tolist()
        return [
            {"id": i, "prediction": p.strip(), "reference": refs, "input_tokens": n}
            for i, p, refs, n in zip(batch["ids"], preds, batch["references"], n_tokens)
        ]

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        if getattr(self, "validation_mode", None) == "loss":  # teacher-forced, nothing generated
            self.log("val/loss", self(batch), prog_bar=True, on_step=False, on_epoch=True, sync_dist=True,
                     batch_size=batch["input_ids"].shape[0])  # every rank's mean: what a monitor compares
            return
        self.val_outputs.extend(self._predict(batch))

    def on_validation_epoch_start(self) -> None:
        self.val_outputs = []

    def on_validation_end(self) -> None:
        test = getattr(self, "_test_gen_cfg", None)
        if test is not None:  # greedy validation: the test-time decoding again
            self.gen_cfg, self._test_gen_cfg = test, None

    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> list[dict[str, Any]]:
        return self._predict(batch)

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
        sched = get_linear_schedule_with_warmup(opt, warmup_steps(o, total), total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def warmup_steps(o: OptimConfig, total: int) -> int:
    """Optimiser steps of linear warm-up out of ``total``: ``warmup_ratio`` of them where set, else
    ``warmup_steps`` (at most all of them)."""
    return min(round(o.warmup_ratio * total) if o.warmup_ratio is not None else o.warmup_steps, total)


def _parts_from_config(run_config: dict[str, Any]) -> tuple[Any, Method, Any, OptimConfig, GenerationConfig]:
    """Backbone architecture (random weights: a checkpoint's replace them), method and tokenizer of a run."""
    from omegaconf import OmegaConf

    rc = to_config(OmegaConf.create(run_config))
    ready = prepare(rc.backbone, rc.method)
    return build_model(rc.backbone, ready.conf, weights=False), ready.method, ready.tokenizer, rc.optim, rc.generation
