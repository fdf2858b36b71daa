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
   full attention. No long-context method takes part, so no method is favoured.

Each method then fine-tunes this backbone on its column's training set (``experiments/*.yaml``).
Rebuild: ``python -m scaleformer.reader bart`` (and ``t5``); ``recipe.json`` beside the weights
records the recipe, its fingerprint, losses and wall time. CPU training is not bit-reproducible
across machines; the fingerprint says which recipe made the shipped weights.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ASSETS = Path(__file__).parent / "assets" / "readers"
CONF = Path(__file__).resolve().parents[1] / "conf" / "backbone"


@dataclass(frozen=True)
class Stage:
    """One pretraining stage: what the examples are and how long to train on them."""

    kind: str  # "copy" (random tokens) or "ledger" (short synthetic ledgers -> their summaries)
    steps: int
    batch: int
    lr: float
    warmup: int
    # copy: tokens per sequence; ledger: words per document (inclusive ranges).
    length: tuple[int, int]
    events: tuple[int, int] = (1, 9)  # ledger: key events per document


@dataclass(frozen=True)
class Recipe:
    name: str
    arch: str  # "bart" or "t5": the tokenizer flavour and model family
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

RECIPES = {
    "bart": Recipe("tiny_bart_reader", "bart", "tiny_bart", _stages("bart"), model_kwargs=_BART_SHAPES),
    "t5": Recipe("tiny_t5_reader", "t5", "tiny_t5", _stages("t5"), model_kwargs=_T5_SHAPES),
}


def asset_dir(name: str) -> Path:
    return ASSETS / name


def _sinusoids(n: int, d: int, std: float) -> Any:
    import torch

    pos = torch.arange(n, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float32) / d)
    table = torch.zeros(n, d)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return table * (std / table.std())


def build_model(recipe: Recipe) -> tuple[Any, Any]:
    """The tiny backbone of ``recipe.base`` (random weights) and its offline tokenizer."""
    import torch
    from omegaconf import OmegaConf

    from scaleformer.backbone import build_model as build
    from scaleformer.backbone import model_config
    from scaleformer.config import BackboneConfig
    from scaleformer.tokenizer import load_offline_tokenizer

    base = OmegaConf.to_container(OmegaConf.load(CONF / f"{recipe.base}.yaml"), resolve=True)
    kwargs = {**base["model_kwargs"], **recipe.model_kwargs}
    kwargs["dropout" if recipe.arch == "bart" else "dropout_rate"] = recipe.dropout
    cfg = BackboneConfig(name=recipe.name, arch=recipe.arch, tokenizer="offline", model_kwargs=kwargs,
                         attn_implementation="sdpa")
    tok = load_offline_tokenizer(recipe.arch)
    model = build(cfg, model_config(cfg, tok))
    if recipe.arch == "bart":
        with torch.no_grad():
            for emb in (model.model.encoder.embed_positions, model.model.decoder.embed_positions):
                emb.weight.copy_(_sinusoids(*emb.weight.shape, recipe.positions_std))
    return model, tok


def _copy_batch(stage: Stage, vocab: int, n_special: int, gen: Any) -> dict[str, Any]:
    import torch

    n = int(torch.randint(stage.length[0], stage.length[1] + 1, (1,), generator=gen))
    x = torch.randint(n_special, vocab, (stage.batch, n), generator=gen)
    return {"input_ids": x, "attention_mask": torch.ones_like(x), "labels": x}


def _ledger_batch(stage: Stage, tok: Any, rng: random.Random) -> dict[str, Any]:
    from scaleformer.data import synthetic

    words = rng.randint(*stage.length)  # one length per batch: little padding
    docs = [synthetic.make_document(rng, words, stage.events)[:2] for _ in range(stage.batch)]
    enc = tok([d for d, _ in docs], return_tensors="pt", padding=True, truncation=True, max_length=1024)
    lab = tok([r for _, r in docs], return_tensors="pt", padding=True)
    labels = lab["input_ids"].masked_fill(lab["attention_mask"] == 0, -100)
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}


def _resume(recipe: Recipe, folder: Path) -> tuple[Any, list[dict[str, Any]]]:
    """A model folder written by this recipe's first stages, and their history (to run the rest)."""
    from transformers import AutoModelForSeq2SeqLM

    info = json.loads((Path(folder) / "recipe.json").read_text(encoding="utf-8"))
    done = [Stage(**{**st, "length": tuple(st["length"]), "events": tuple(st["events"])})
            for st in info["recipe"]["stages"]]
    mine = json.loads(json.dumps({**asdict(recipe), "stages": None}))  # tuples as JSON lists, like the file's
    if tuple(done) != recipe.stages[: len(done)] or {**info["recipe"], "stages": None} != mine:
        raise SystemExit(f"{folder}: not written by the first stages of recipe {recipe.name}")
    return AutoModelForSeq2SeqLM.from_pretrained(str(folder), use_safetensors=True), list(info["stages"])


def pretrain(recipe: Recipe, out_dir: Path, log: Any = print, resume: Path | None = None) -> dict[str, Any]:
    """Run every stage of ``recipe`` (or those after ``resume``'s) and write the model folder plus
    ``recipe.json`` (atomically). Each stage draws from its own seeded stream, so resuming after stage
    k runs the same data as a run from scratch."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    from scaleformer.data import synthetic
    from scaleformer.io import atomic_write_json
    from scaleformer.tokenizer import load_offline_tokenizer

    torch.manual_seed(recipe.seed)
    history: list[dict[str, Any]] = []
    if resume is None:
        model, tok = build_model(recipe)
    else:  # the finished stages' weights; no random model to build and throw away
        model, history = _resume(recipe, resume)
        tok = load_offline_tokenizer(recipe.arch)
    model.train()
    for i, stage in enumerate(recipe.stages[len(history):], start=len(history)):
        gen = torch.Generator().manual_seed(recipe.seed + i)
        rng = random.Random(synthetic._int_seed(recipe.seed, f"reader-{recipe.arch}-{i}"))
        opt = torch.optim.AdamW(model.parameters(), lr=stage.lr, weight_decay=0.01)
        sched = get_linear_schedule_with_warmup(opt, stage.warmup, stage.steps)
        t0, losses = time.time(), []
        for step in range(stage.steps):
            batch = (_copy_batch(stage, len(tok), 4, gen) if stage.kind == "copy"
                     else _ledger_batch(stage, tok, rng))
            loss = model(**batch).loss
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if (step + 1) % 100 == 0 or step + 1 == stage.steps:
                log(f"{recipe.name} stage {i + 1} ({stage.kind}) step {step + 1}/{stage.steps}: "
                    f"loss {sum(losses[-100:]) / len(losses[-100:]):.3f} ({time.time() - t0:.0f} s)")
        history.append({"kind": stage.kind, "final_loss": round(sum(losses[-100:]) / len(losses[-100:]), 4),
                        "time_s": round(time.time() - t0, 1)})
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    model.save_pretrained(tmp)
    info = {"recipe": asdict(recipe), "fingerprint": recipe.fingerprint(), "stages": history,
            "wall_time_s": round(sum(h["time_s"] for h in history), 1), "load_average": os.getloadavg(),
            "torch": torch.__version__, "threads": torch.get_num_threads()}
    atomic_write_json(tmp / "recipe.json", info)
    if out_dir.exists():
        import shutil

        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Rebuild a shipped tiny pretrained backbone.")
    ap.add_argument("arch", choices=sorted(RECIPES))
    ap.add_argument("--out", default=None, help="default: scaleformer/assets/readers/<name>")
    ap.add_argument("--resume", default=None, help="a folder this recipe's first stages wrote: run the rest")
    args = ap.parse_args(argv)
    recipe = RECIPES[args.arch]
    info = pretrain(recipe, Path(args.out) if args.out else asset_dir(recipe.name),
                    resume=Path(args.resume) if args.resume else None)
    print(json.dumps({k: info[k] for k in ("fingerprint", "stages", "wall_time_s", "load_average")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
