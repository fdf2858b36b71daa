"""Pretraining the tiny readers by their recipes (:mod:`scaleformer.model.readers`), on the CPU.

    python -m scaleformer.runs.pretrain_reader bart [--out DIR] [--resume DIR]     # t5, bart_qa
    python -m scaleformer.runs.pretrain_reader bart_qa --resume scaleformer/assets/readers/tiny_bart_reader

Stage 1 copies random token sequences, stages 2-3 summarize short synthetic ledgers with plain
full attention (no long-context method takes part, so none is favoured); the QA reader's stages 4-5
answer a question about one event of such a ledger. A recipe that extends another's stages
resumes from that reader's folder. Each stage draws from its
own seeded stream, so resuming after stage k runs the same data as a run from scratch. The folder
is written atomically with ``recipe.json`` (recipe, fingerprint, losses, wall time).

A plain loop, not the runs' Lightning step: a stage is a data stream and a learning rate over the bare
backbone (no method, run folder, checkpoints or evaluation), which a run would carry for nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from scaleformer.config import BackboneConfig
from scaleformer.data import synthetic, synthetic_lm
from scaleformer.io import atomic_dir, atomic_write_json
from scaleformer.methods.truncation import prepend_prefix
from scaleformer.model.backbone import build_model as build
from scaleformer.model.backbone import model_config
from scaleformer.model.readers import RECIPES, Recipe, Stage, asset_dir
from scaleformer.model.tokenizer import load_offline_tokenizer, save_tokenizer
from scaleformer.resources import conf_dir


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

    base = OmegaConf.to_container(OmegaConf.load(conf_dir() / "backbone" / f"{recipe.base}.yaml"), resolve=True)
    kwargs = {**base["model_kwargs"], **recipe.model_kwargs}
    for key in {"bart": ("dropout",), "t5": ("dropout_rate",), "gpt2": ("resid_pdrop", "embd_pdrop", "attn_pdrop")
                }[recipe.arch]:
        kwargs[key] = recipe.dropout
    cfg = BackboneConfig(name=recipe.name, arch=recipe.arch, tokenizer="offline", model_kwargs=kwargs,
                         attn_implementation="sdpa")
    tok = load_offline_tokenizer(recipe.arch)
    model = build(cfg, model_config(cfg, tok))
    if recipe.arch in ("bart", "gpt2"):
        with torch.no_grad():
            tables = (model.model.encoder.embed_positions, model.model.decoder.embed_positions) \
                if recipe.arch == "bart" else (model.transformer.wpe,)
            for emb in tables:
                emb.weight.copy_(_sinusoids(*emb.weight.shape, recipe.positions_std))
    return model, tok


def _copy_batch(stage: Stage, vocab: int, n_special: int, gen: Any) -> dict[str, Any]:
    import torch

    n = int(torch.randint(stage.length[0], stage.length[1] + 1, (1,), generator=gen))
    x = torch.randint(n_special, vocab, (stage.batch, n), generator=gen)
    return {"input_ids": x, "attention_mask": torch.ones_like(x), "labels": x}


def _ledger_batch(stage: Stage, tok: Any, rng: random.Random) -> dict[str, Any]:
    words = rng.randint(*stage.length)  # one length per batch: little padding
    docs = [synthetic.make_document(rng, words, stage.events)[:2] for _ in range(stage.batch)]
    enc = tok([d for d, _ in docs], return_tensors="pt", padding=True, truncation=True, max_length=1024)
    lab = tok([r for _, r in docs], return_tensors="pt", padding=True)
    labels = lab["input_ids"].masked_fill(lab["attention_mask"] == 0, -100)
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}


def _qa_batch(stage: Stage, tok: Any, rng: random.Random) -> dict[str, Any]:
    """Short ledgers with one question each, laid out ``[question][<s> document </s>]`` by the same
    function that joins every method's query prefix to its input; the label is the asked event."""
    words = rng.randint(*stage.length)
    rows = [synthetic.qa_example(rng, words, stage.events) for _ in range(stage.batch)]
    query = tok([r["query"] for r in rows], add_special_tokens=False, padding=True, return_tensors="pt")
    docs = tok([r["input"] for r in rows], truncation=True, padding=True, return_tensors="pt",
               max_length=1024 - query["input_ids"].shape[1])
    ids, mask = prepend_prefix(query["input_ids"], query["attention_mask"], docs["input_ids"],
                               docs["attention_mask"], tok.pad_token_id)
    lab = tok([r["output"] for r in rows], return_tensors="pt", padding=True)
    labels = lab["input_ids"].masked_fill(lab["attention_mask"] == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _lm_batch(stage: Stage, tok: Any, rng: random.Random, n: int) -> dict[str, Any]:
    """Rows of ``n`` tokens cut from a stream of short long-dependency documents (their facts recalled within a
    row or two): the reading skill, learned where the facts are mostly in view; packed, as a causal LM is
    pretrained."""
    import torch

    stream: list[int] = []
    while len(stream) < stage.batch * n:
        doc = synthetic_lm.make_lm_document(rng, rng.randint(*stage.length), rng.randint(*stage.events))
        stream += tok(doc["input"])["input_ids"]
    x = torch.tensor(stream[: stage.batch * n]).view(stage.batch, n)
    return {"input_ids": x, "labels": x}


def _resume(recipe: Recipe, folder: Path) -> tuple[Any, list[dict[str, Any]]]:
    """A model folder written by this recipe's first stages, and their history (to run the rest)."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    info = json.loads((Path(folder) / "recipe.json").read_text(encoding="utf-8"))
    done = [Stage(**{**st, "length": tuple(st["length"]), "events": tuple(st["events"])})
            for st in info["recipe"]["stages"]]
    # Tuples as JSON lists, like the file's; the name may differ (a recipe extending another's stages).
    mine = json.loads(json.dumps({**asdict(recipe), "stages": None, "name": None}))
    if tuple(done) != recipe.stages[: len(done)] or {**info["recipe"], "stages": None, "name": None} != mine:
        raise SystemExit(f"{folder}: not written by the first stages of recipe {recipe.name}")
    auto = AutoModelForCausalLM if recipe.arch == "gpt2" else AutoModelForSeq2SeqLM
    return auto.from_pretrained(str(folder), use_safetensors=True), list(info["stages"])


def pretrain(recipe: Recipe, out_dir: Path, log: Any = print, resume: Path | None = None) -> dict[str, Any]:
    """Run every stage of ``recipe`` (or those after ``resume``'s) and write the model folder plus
    ``recipe.json`` (atomically). Each stage draws from its own seeded stream, so resuming after stage
    k runs the same data as a run from scratch."""
    import torch
    from transformers import get_linear_schedule_with_warmup

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
        rng = random.Random(synthetic.stream_seed(recipe.seed, f"reader-{recipe.arch}-{i}"))
        opt = torch.optim.AdamW(model.parameters(), lr=stage.lr, weight_decay=0.01)
        sched = get_linear_schedule_with_warmup(opt, stage.warmup, stage.steps)
        t0, losses = time.time(), []
        for step in range(stage.steps):
            batch = (_copy_batch(stage, len(tok), 4, gen) if stage.kind == "copy"
                     else _lm_batch(stage, tok, rng, model.config.n_positions) if stage.kind == "lm"
                     else _qa_batch(stage, tok, rng) if stage.kind == "qa" else _ledger_batch(stage, tok, rng))
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
    info = {"recipe": asdict(recipe), "fingerprint": recipe.fingerprint(), "stages": history,
            "wall_time_s": round(sum(h["time_s"] for h in history), 1), "load_average": os.getloadavg(),
            "torch": torch.__version__, "threads": torch.get_num_threads()}
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        save_tokenizer(tok, tmp)  # the tokenizer it was trained with: AutoTokenizer.from_pretrained(folder)
        atomic_write_json(tmp / "recipe.json", info)
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Rebuild a shipped tiny pretrained backbone.")
    ap.add_argument("arch", choices=sorted(RECIPES))
    ap.add_argument("--out", default=None, help="default: the shipped folder, scaleformer/assets/readers/<name>")
    ap.add_argument("--resume", default=None, help="a folder this recipe's first stages wrote: run the rest")
    args = ap.parse_args(argv)
    recipe = RECIPES[args.arch]
    info = pretrain(recipe, Path(args.out) if args.out else asset_dir(recipe.name),
                    resume=Path(args.resume) if args.resume else None)
    print(json.dumps({k: info[k] for k in ("fingerprint", "stages", "wall_time_s", "load_average")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
