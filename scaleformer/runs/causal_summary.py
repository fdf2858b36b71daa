"""Summarization fine-tuning of a decoder-only model through a span method: MASFormer's section 4.2.

The summarization run is unchanged (its data module, validation, selection, predictions, ROUGE and BERTScore,
intervals); only the module differs. Each batch of documents and references becomes one causal sequence per
document, ``[document | query | sep | summary | eos]`` of at most ``n = method.max_length`` tokens
(:mod:`scaleformer.ops.causal_join`, where the choices the paper leaves open are argued); the loss is the
next-token loss on the summary's tokens only, averaged per document and then over documents (as the
encoder-decoder runs average theirs, :mod:`scaleformer.ops.loss`); generation continues the prompt
(document, query, separator), left-padded, with the run's decoding settings (the paper's: greedy,
``generation.num_beams=1``), for at most ``data.max_target_tokens - 1`` new tokens, the room the sequence left.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import torch

from scaleformer.config import DataConfig, GenerationConfig, OptimConfig
from scaleformer.errors import ConfigError
from scaleformer.methods.base import Method
from scaleformer.model.hf_causal import ScaleformerForCausalLM
from scaleformer.ops.causal_join import IGNORE, Specials, causal_summaries, join
from scaleformer.runs.lm_module import token_nll
from scaleformer.runs.module import SummarizationModule

log = logging.getLogger("scaleformer")


def check_causal_summary(rc: Any) -> None:
    """What a decoder-only summarization run cannot do, refused before anything loads."""
    n, room = rc.method.max_length, rc.data.max_target_tokens
    if n - room < 2:
        raise ConfigError(f"data.max_target_tokens={room}: a decoder-only model reads the document and its summary "
                          f"in one sequence of method.max_length={n} tokens; leave the document at least 2")
    g, t = rc.generation, rc.trainer
    refused = {"generation.static_cache": g.static_cache, "generation.step_decoding": g.step_decoding,
               "trainer.measure_cost": t.measure_cost, "data.bucket": rc.data.bucket}
    for key, value in refused.items():
        if value:
            raise ConfigError(f"{key}={value}: not available for a decoder-only backbone yet (encoder-decoder "
                              "backbones only); leave it off")


class CausalSummarizationModule(SummarizationModule):
    """Training and generation of a routed causal LM on (document, summary) pairs: the summarization run's module
    for a decoder-only backbone. ``room``: the summary's tokens in the sequence (``data.max_target_tokens``)."""

    decoder_only = True

    def __init__(self, model: torch.nn.Module | None = None, method: Method | None = None, tokenizer: Any = None,
                 optim: OptimConfig | None = None, generation: GenerationConfig | None = None,
                 meta: dict[str, Any] | None = None, run_config: dict[str, Any] | None = None,
                 room: int | None = None) -> None:
        super().__init__(model, method, tokenizer, optim, generation, meta, run_config)
        data = (run_config or {}).get("data") or {}
        self.room = int(room or data.get("max_target_tokens") or DataConfig.max_target_tokens)
        self.n = int(self.method.cfg.max_length)
        self.specials = Specials.of(self.tokenizer)
        # Hugging Face's causal LMs take logits_to_keep (generation's prefill uses it); a custom one may not.
        self.head_keeps = "logits_to_keep" in inspect.signature(self.model.backbone.forward).parameters

    @staticmethod
    def carry(model: torch.nn.Module, method: Method) -> ScaleformerForCausalLM:
        """The Hugging Face class that carries the method (its layers routed to their spans)."""
        return model if isinstance(model, ScaleformerForCausalLM) else ScaleformerForCausalLM.from_parts(model, method)

    def joined(self, batch: dict[str, Any], with_summary: bool) -> dict[str, Any]:
        return join(batch["input_ids"], batch["attention_mask"], batch["labels"] if with_summary else None,
                    self.specials, n=self.n, room=self.room, prefix_ids=batch.get("prefix_ids"),
                    prefix_mask=batch.get("prefix_mask"))

    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        """Each document's mean next-token loss over its summary tokens, then their mean."""
        seq = self.joined(batch, with_summary=True)
        width = seq["targets"].shape[1]
        # The output head runs only where the loss is: from the position before the earliest summary token on (K of
        # the T positions; at n = 8,192 with a 256-token summary, the head's FLOPs and the [B, T, V] fp32 logits and
        # their gradient, 1.6 GB each at a 50k vocabulary, shrink 30-fold).
        k = width - seq["first_target"] + 1
        targets = seq["targets"][:, width - k:]  # [B, K], -100 outside the summaries
        head = {"logits_to_keep": k} if self.head_keeps else {}
        out = self.model(input_ids=seq["input_ids"], attention_mask=seq["attention_mask"], **head)
        logits = out.logits[:, -k:]  # [B, K, V] (a head without logits_to_keep computed all T)
        scored = (targets[:, 1:] != IGNORE)  # [B, K-1]: position t predicts token t + 1
        nll = token_nll(logits, targets.clamp(min=0), scored.new_ones(targets.shape)) * scored  # [B, T-1]
        per_doc = nll.sum(1) / scored.sum(1).clamp(min=1)  # [B]
        return per_doc.mean()

    @torch.no_grad()
    def generate(self, batch: dict[str, Any]) -> list[str]:
        return causal_summaries(self.model, self.tokenizer, self.gen_cfg, batch, n=self.n, room=self.room)
