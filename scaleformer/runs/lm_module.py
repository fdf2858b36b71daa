"""The LightningModule of causal language modeling: MASFormer's continual training and its perplexity.

The backbone is a decoder-only model whose layers the method routes to their spans, held as
:class:`~scaleformer.model.hf_causal.ScaleformerForCausalLM` (the object the Auto class and the summarization
module hold); this module owns the objective: the next-token loss over
packed sequences in training, and per-document sums of the negative log-likelihood for perplexity
(:mod:`scaleformer.metrics.perplexity`). Optimiser, schedule, clipping and the non-finite stop are the
summarization module's (:class:`~scaleformer.runs.optimization.OptimizedModule`).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
import torch.nn.functional as F

from scaleformer.config import GenerationConfig, OptimConfig
from scaleformer.data.synthetic_lm import beyond_block
from scaleformer.methods.base import Method
from scaleformer.model.backbone import build_model, prepare
from scaleformer.model.hf_causal import ScaleformerForCausalLM
from scaleformer.runs.checkpoints import META_KEY
from scaleformer.runs.context import to_config
from scaleformer.runs.optimization import OptimizedModule
from scaleformer.runs.sharding import shard

log = logging.getLogger("scaleformer")


def token_nll(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Negative log-likelihood of each next token, fp32: ``logits [B, N, V]``, ``ids [B, N]`` -> ``[B, N - 1]``
    (position t scores token t + 1; 0 where ``mask`` says the token is padding)."""
    nll = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), ids[:, 1:], reduction="none")  # [B, N-1]
    return nll if mask is None else nll * mask[:, 1:].to(nll.dtype)


class LanguageModelModule(OptimizedModule):
    """Continual training of a causal LM through a span method, and its per-document likelihoods.

    Built by a run from its parts, or from the run's resolved config alone (``run_config``, the checkpoint's
    hyperparameters), which rebuilds the backbone, routes it by the method, then loads the trained weights.
    """

    task = "language_modeling"  # what an export's record and card say

    def __init__(self, model: torch.nn.Module | None = None, method: Method | None = None, tokenizer: Any = None,
                 optim: OptimConfig | None = None, meta: dict[str, Any] | None = None,
                 run_config: dict[str, Any] | None = None, dependency_block: int = 1024,
                 generation: GenerationConfig | None = None) -> None:
        super().__init__()
        if model is None:
            if run_config is None:
                raise ValueError("LanguageModelModule needs its parts (model, method, tokenizer) or run_config")
            from omegaconf import OmegaConf

            rc = to_config(OmegaConf.create(run_config))
            ready = prepare(rc.backbone, rc.method)
            model, method, tokenizer, optim = build_model(rc.backbone, ready.conf, weights=False), ready.method, \
                ready.tokenizer, rc.optim
            dependency_block, generation = rc.metrics.dependency_block, rc.generation
        if run_config is not None:
            self.save_hyperparameters({"run_config": run_config})
        # "lm.": its weights' names say which objective wrote them (a summarization checkpoint's are "model.")
        # the Hugging Face class that carries the method (layers routed to their spans), as the summarization
        # module, the Summarizer and AutoModelForCausalLM hold it
        self.lm = model if isinstance(model, ScaleformerForCausalLM) else ScaleformerForCausalLM.from_parts(model, method)
        self.method, self.tokenizer = self.lm.method, tokenizer
        self.optim_cfg = optim or OptimConfig()
        self.gen_cfg = generation or GenerationConfig()  # what an export's generation config says
        self.meta = meta or {}
        self.dependency_block = dependency_block
        self.val_rows: list[dict[str, Any]] = []

    @property
    def model(self) -> torch.nn.Module:
        """The routed causal LM (what the shared optimiser reads)."""
        return self.lm

    def configure_model(self) -> None:
        """Under ``trainer.strategy=fsdp`` (the only strategy that gives the module a device mesh): shard the
        routed LM layer by layer (:mod:`scaleformer.runs.sharding`)."""
        if self.device_mesh is not None:
            shard(self.lm, self.device_mesh["data_parallel"])

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.check_finite()  # never a checkpoint of diverged weights
        checkpoint[META_KEY] = self.meta

    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        """The mean next-token loss over the batch's real tokens."""
        ids, mask = batch["input_ids"], batch.get("attention_mask")
        logits = self.model(input_ids=ids, attention_mask=mask).logits  # [B, N, V]
        nll = token_nll(logits, ids, mask)  # [B, N-1]
        count = mask[:, 1:].sum() if mask is not None else torch.tensor(nll.numel(), device=nll.device)
        return nll.sum() / count.clamp(min=1)

    @torch.no_grad()
    def score(self, batch: dict[str, Any]) -> list[dict[str, Any]]:
        """Per document: summed NLL over its predicted tokens and their count, its length; and the same over its
        marked dependency tokens, all of them and those whose antecedent lies before their block. Summed on the
        device and read back once per batch (no host sync per document)."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        nll = token_nll(self.model(input_ids=ids, attention_mask=mask).logits, ids, mask)  # [B, N-1]
        lengths = mask.sum(1)  # [B]
        n = ids.shape[1]
        # every marked token in the cut, flattened over the batch: its row, its position, whether it is far
        marked = [(i, t, beyond_block(t, a, self.dependency_block))
                  for i, deps in enumerate(batch["deps"]) for t, a in deps if 1 <= t < n]
        dep = torch.zeros(2, len(ids), dtype=nll.dtype, device=nll.device)  # [all | far, B]
        counts = [[0, 0] for _ in ids]
        if marked:
            row = torch.tensor([i for i, _, _ in marked], device=nll.device)
            value = nll[row, torch.tensor([t - 1 for _, t, _ in marked], device=nll.device)]  # t scored at t - 1
            far = torch.tensor([f for _, _, f in marked], device=nll.device)
            dep[0].index_add_(0, row, value)
            dep[1].index_add_(0, row[far], value[far])
            for i, _, f in marked:
                counts[i][0] += 1
                counts[i][1] += f
        sums, dep_sums, far_sums, lens = torch.stack([nll.sum(1), dep[0], dep[1], lengths.to(nll.dtype)]).tolist()
        if hasattr(self.method, "count_evaluated") and not self.training:  # the method's mean C over the documents
            self.method.count_evaluated([int(x) for x in lens], self.method.n_layers)
        rows = []
        for i, doc in enumerate(batch["ids"]):
            length = int(lens[i])
            row = {"id": doc, "nll": sums[i], "tokens": length - 1, "length": length}
            if counts[i][0]:
                row |= {"dep_nll": dep_sums[i], "dep_tokens": counts[i][0],
                        "far_nll": far_sums[i], "far_tokens": counts[i][1]}
            rows.append(row)
        return rows

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.val_rows.extend(self.score(batch))

    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> list[dict[str, Any]]:
        return self.score(batch)

    def on_validation_epoch_start(self) -> None:
        self.check_finite()
        self.val_rows = []

    def on_validation_epoch_end(self) -> None:
        # Each process scored its own share of the documents: the token-weighted loss is over every process's
        # (summed across them, so every process logs, and an early stop decides on, the same number).
        local = torch.tensor([sum(r["nll"] for r in self.val_rows), sum(r["tokens"] for r in self.val_rows)],
                             dtype=torch.float64, device=self.device)
        nll, tokens = self.trainer.strategy.reduce(local, reduce_op="sum").tolist()
        if tokens:
            self.log("val/loss", nll / tokens, prog_bar=True)
            self.log("val/ppl", math.exp(nll / tokens))
