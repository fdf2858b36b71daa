"""The LightningModule: teacher-forced training and generation through a long-context method.

The method owns the encoder side (chunking, fusion, ...); this module owns optimisation and
decoding, so every method is trained and decoded the same way.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import lightning.pytorch as pl
import torch
from transformers import PreTrainedModel, get_linear_schedule_with_warmup

from scaleformer.config import GenerationConfig, OptimConfig
from scaleformer.errors import ConfigError
from scaleformer.methods.base import Encoded, Method
from scaleformer.model.backbone import build_model, prepare
from scaleformer.model.hf import ScaleformerForConditionalGeneration
from scaleformer.ops.decoding import summaries
from scaleformer.runs.checkpoints import META_KEY, upgrade_state
from scaleformer.runs.context import to_config

log = logging.getLogger("scaleformer")


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
        checkpoint[META_KEY] = self.meta

    # ----------------------------------------------------------------------------------- encoder
    def encode(self, batch: dict[str, Any], training: bool) -> Encoded:
        return self.model.encode(batch["input_ids"], batch["attention_mask"], training=training,
                                 prefix_ids=batch.get("prefix_ids"), prefix_mask=batch.get("prefix_mask"))

    # ---------------------------------------------------------------------------------- training
    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"],
                          prefix_ids=batch.get("prefix_ids"), prefix_mask=batch.get("prefix_mask")).loss

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        value = float(loss.detach())
        if not math.isfinite(value):
            self._nonfinite(value, batch_idx)
        return loss

    def _nonfinite(self, value: float, batch_idx: int) -> None:
        """Stop at the first NaN/inf loss (before its backward pass), unless optim.allow_nonfinite_loss."""
        step = self.global_step + 1  # the optimiser step this batch belongs to (checkpoints count alike)
        o = self.optim_cfg
        if o.allow_nonfinite_loss:
            if not getattr(self, "_warned_nonfinite", False):
                self._warned_nonfinite = True
                log.warning("training loss is %s at step %d (optim.allow_nonfinite_loss=true: training on)",
                            value, step)
            return
        raise TrainingDiverged(
            f"training diverged: the loss is {value} at step {step} (batch {batch_idx} of epoch "
            f"{self.current_epoch}) with optim.lr={o.lr:g}, optim.warmup_steps={o.warmup_steps}; lower "
            "optim.lr or raise optim.warmup_steps (fp16: use trainer.precision=bf16-mixed or 32-true); "
            "optim.allow_nonfinite_loss=true trains on anyway")

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
        self.val_outputs.extend(self._predict(batch))

    def on_validation_epoch_start(self) -> None:
        self.val_outputs = []

    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> list[dict[str, Any]]:
        return self._predict(batch)

    # ------------------------------------------------------------------------------- optimiser
    def configure_optimizers(self) -> Any:
        o = self.optim_cfg
        decay, no_decay = [], []
        for n, p in self.model.named_parameters():
            if p.requires_grad:
                (no_decay if p.ndim < 2 or "norm" in n.lower() else decay).append(p)
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": o.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=o.lr, betas=tuple(o.betas), eps=o.eps,
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        sched = get_linear_schedule_with_warmup(opt, min(o.warmup_steps, total), total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def _parts_from_config(run_config: dict[str, Any]) -> tuple[Any, Method, Any, OptimConfig, GenerationConfig]:
    """Backbone architecture (random weights: a checkpoint's replace them), method and tokenizer of a run."""
    from omegaconf import OmegaConf

    rc = to_config(OmegaConf.create(run_config))
    ready = prepare(rc.backbone, rc.method)
    return build_model(rc.backbone, ready.conf, weights=False), ready.method, ready.tokenizer, rc.optim, rc.generation
