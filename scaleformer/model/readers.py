"""Tiny pretrained backbones: the offline stand-ins for bart-base and t5-base that the tiny profile
and the embedded default fine-tune.

Why: a randomly initialised tiny model trained on the ledgers learns their template and never
starts copying from its input (measured: 3,000 steps of 16 short ledgers, loss stuck at 2.0, fact
recall 0), so every method looked alike. The paper's methods all fine-tune a *pretrained* backbone;
here that backbone is made by a fixed two-stage recipe on the CPU and shipped under
``scaleformer/assets/readers/<name>/`` (a Hugging Face model folder, loaded with
``backbone.pretrained``):

1. **copying**: random token sequences copied verbatim, which teaches cross-attention to carry a
   token from the input to the output (BART's learned positions start from sinusoids so that
   alignment extends beyond the lengths seen);
2. **short ledgers**: synthetic ledgers of at most one window (every event in view), generated from
   their own random stream (never the train/validation/test splits), summarized with plain
   full attention. No long-context method takes part, so no method is favoured;
3. **short questions** (``tiny_bart_qa_reader`` only): the same in-view ledgers with one question
   each about one event ("What happened on day 213?" -> the event's sentence), the question
   prepended as every method prepends its query. A reader that has only summarized never looks a
   day up (fine-tuned on the long QA ledgers alone, SLED reached EM 0 after 1,500 steps): this is
   the reading skill a pretrained backbone brings, learned where everything is in view, so no
   long-context method is favoured (the layout is truncation's own: query, then the document).

Each method then fine-tunes this backbone on its column's training set (``experiments/*.yaml``).
Rebuild: ``python -m scaleformer.runs.pretrain_reader bart`` (``t5``, ``bart_qa``); ``recipe.json`` beside the weights
records the recipe, its fingerprint, losses and wall time. CPU training is not bit-reproducible
across machines; the fingerprint says which recipe made the shipped weights.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scaleformer.resources import assets_dir, resolve_asset


@dataclass(frozen=True)
class Stage:
    """One pretraining stage: what the examples are and how long to train on them."""

    # "copy" (random tokens), "ledger" (short synthetic ledgers -> their summaries), "qa" (short
    # ledgers with a question prepended -> the asked event's sentence) or "lm" (a causal LM on packed short
    # long-dependency documents, scaleformer.data.synthetic_lm)
    kind: str
    steps: int
    batch: int
    lr: float
    warmup: int
    # copy: tokens per sequence; ledger, lm: words per document (inclusive ranges).
    length: tuple[int, int]
    events: tuple[int, int] = (1, 9)  # ledger: key events per document; lm: facts per register


@dataclass(frozen=True)
class Recipe:
    name: str
    arch: str  # "bart", "t5" or "gpt2": the tokenizer flavour and model family
    base: str  # conf/backbone/<base>.yaml: the shapes (model_kwargs) of the tiny backbone it extends
    stages: tuple[Stage, ...]
    seed: int = 20250101
    dropout: float = 0.0
    positions_std: float = 0.02  # scale of BART's sinusoidal position initialisation
    # Shapes replacing the base's (a d=64, 2-layer model bound a ledger event's five parts poorly:
    # 18% of in-view events exact, 64% of their parts).
    model_kwargs: dict[str, Any] = field(default_factory=dict)

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


# T5 has no absolute positions and its cross-attention no position bias at all: it copies by content
# (an encoder state holding its predecessor's token, matched against the token just written), a
# circuit it found on 4-16-token sequences in ~2,000 steps; 400 steps of 8-64 tokens at lr 2e-3 left
# the loss at 6.5 (of ln 1738 = 7.5), where BART's sinusoid-initialised positions reach 0.28.
_COPY = {"bart": Stage("copy", steps=400, batch=64, lr=2e-3, warmup=30, length=(8, 64)),
         "t5": Stage("copy", steps=3000, batch=32, lr=1e-3, warmup=30, length=(4, 16))}


def _stages(arch: str) -> tuple[Stage, ...]:
    # The last stage fills the whole 1024-token window: BART's learned positions beyond the lengths
    # seen stay untrained, and a reader trained on <= 600 words found 5% of the events of 800-word
    # ledgers exactly (25% of 400-word ones), while every chunked method feeds it full windows.
    return (_COPY[arch],
            Stage("ledger", steps=1200, batch=16, lr=1e-3, warmup=50, length=(60, 600)),
            Stage("ledger", steps=600, batch=12, lr=5e-4, warmup=20, length=(400, 860)))


_BART_SHAPES = {"d_model": 128, "encoder_layers": 3, "decoder_layers": 3, "encoder_attention_heads": 4,
                "decoder_attention_heads": 4, "encoder_ffn_dim": 512, "decoder_ffn_dim": 512}
_T5_SHAPES = {"d_model": 128, "d_kv": 32, "d_ff": 512, "num_layers": 3, "num_decoder_layers": 3, "num_heads": 4}

# The decoder-only reader (MASFormer as its paper runs it): GPT-2's shape with 128 learned positions, pretrained as a
# causal LM on packed short documents whose facts are mostly recalled in view (the paper's GPT-3 XL: 1,024 positions,
# the Pile); 6 layers, so that one full layer is the paper's share (l = 4 of 24). The span methods then continue it
# at 8 x 128 = 1,024 tokens (experiment=masformer_lm).
_GPT2_SHAPES = {"n_embd": 128, "n_layer": 6, "n_head": 4, "n_inner": 512, "n_positions": 128}

RECIPES = {
    "bart": Recipe("tiny_bart_reader", "bart", "tiny_bart", _stages("bart"), model_kwargs=_BART_SHAPES),
    "t5": Recipe("tiny_t5_reader", "t5", "tiny_t5", _stages("t5"), model_kwargs=_T5_SHAPES),
    # tiny_bart_reader's stages, then questions: `--resume` from the shipped tiny_bart_reader runs only
    # the question stages (from tiny_bart_qa_reader: only those it lacks). At least two events per
    # ledger, so every question needs a look-up.
    # The loss was still falling fast when the first QA stage ended (0.48 -> 0.39 over its last 500
    # steps; 8.6% of in-view questions exact, F1 69.4), hence a second one at half the rate; after it,
    # 25.0% exact (F1 81.9) with the loss still falling, and the methods' errors on the long ledgers
    # mostly one wrong field (often the actor), hence a third, longer one: loss 0.24 -> 0.12, 46.9%
    # exact (F1 90.1).
    "bart_qa": Recipe("tiny_bart_qa_reader", "bart", "tiny_bart", _stages("bart") + (
        Stage("qa", steps=3000, batch=16, lr=1e-3, warmup=30, length=(100, 850), events=(2, 9)),
        Stage("qa", steps=1500, batch=16, lr=5e-4, warmup=30, length=(100, 850), events=(2, 9)),
        Stage("qa", steps=3000, batch=16, lr=3e-4, warmup=30, length=(100, 850), events=(2, 9))),
        model_kwargs=_BART_SHAPES),
    "gpt2": Recipe("tiny_gpt2_reader", "gpt2", "tiny_gpt2", (
        Stage("lm", steps=2500, batch=32, lr=2e-3, warmup=50, length=(40, 160), events=(2, 4)),),
        model_kwargs=_GPT2_SHAPES),
}


def asset_dir(name: str) -> Path:
    """Where a shipped reader's model folder lives (``backbone.pretrained: asset:readers/<name>``)."""
    return assets_dir() / "readers" / name


def recipe_fingerprint(pretrained: Any) -> str | None:
    """The recipe fingerprint in a reader folder's ``recipe.json`` (``asset:`` names resolved); None
    for a hub id or a folder without one.

    Why: run identities carry it, since ``asset:readers/x`` names a folder whose weights change when
    its recipe does; without it a rebuilt reader would silently reuse runs fine-tuned from the old
    weights."""
    if not isinstance(pretrained, str) or not pretrained:
        return None
    try:
        info = json.loads((Path(resolve_asset(pretrained)) / "recipe.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fingerprint = info.get("fingerprint") if isinstance(info, dict) else None
    return fingerprint if isinstance(fingerprint, str) else None
