"""The LightningModule: teacher-forced training and generation through a long-context method.

The method owns the encoder side (chunking, fusion, ...); this module owns optimisation and
decoding, so every method is trained and decoded the same way.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from transformers import PreTrainedModel

from scaleformer.config import GenerationConfig, OptimConfig, TrainerConfig
from scaleformer.methods.base import Encoded, Method
from scaleformer.model.backbone import build_model, prepare
from scaleformer.model.hf import ScaleformerForConditionalGeneration
from scaleformer.ops.decoding import summaries
from scaleformer.ops.loss import document_loss
from scaleformer.runs.checkpoints import META_KEY, upgrade_state
from scaleformer.runs.context import to_config, validation_generation
from scaleformer.runs.optimization import (  # noqa: F401 (where callers found them)
    FUSED_ADAMW_DEVICES,
    OptimizedModule,
    TrainingDiverged,
    schedule,
    warmup_steps,
)

log = logging.getLogger("scaleformer")
class SummarizationModule(OptimizedModule):
    """Training and generation of one backbone through one method.

    Built by a run from its parts, or from the run's resolved config alone (``run_config``, saved as
    the checkpoint's hyperparameters): ``SummarizationModule.load_from_checkpoint("last.ckpt",
    weights_only=True)`` rebuilds the backbone's architecture, the tokenizer and the method, then loads
    the trained weights.
    """

    decoder_only = False  # the causal subclass reads document and summary as one sequence

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
        self.model = self.carry(model, method)
        self.method = method if method is not None else self.model.method
        self.tokenizer = tokenizer
        self.optim_cfg = optim or OptimConfig()
        self.gen_cfg = generation or GenerationConfig()
        # Validation predictions of the current epoch, read by the metrics callback.
        self.val_outputs: list[dict[str, Any]] = []
        # What checkpoints record about the run (backbone, method, training identity).
        self.meta = meta or {}

    @staticmethod
    def carry(model: Any, method: Method | None) -> Any:
        """The Hugging Face model class that carries the method: what export saves and Summarizer loads."""
        return model if isinstance(model, ScaleformerForConditionalGeneration) else \
            ScaleformerForConditionalGeneration.from_parts(model, method)

    @property
    def backbone(self) -> Any:
        """The Hugging Face model the method reads (what the memory models size)."""
        return self.model.backbone

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

def _parts_from_config(run_config: dict[str, Any]) -> tuple[Any, Method, Any, OptimConfig, GenerationConfig]:
    """Backbone architecture (random weights: a checkpoint's replace them), method and tokenizer of a run."""
    from omegaconf import OmegaConf

    rc = to_config(OmegaConf.create(run_config))
    ready = prepare(rc.backbone, rc.method)
    return build_model(rc.backbone, ready.conf, weights=False), ready.method, ready.tokenizer, rc.optim, rc.generation
