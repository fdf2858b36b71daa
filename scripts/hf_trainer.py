"""Train a long-context model with Hugging Face's own Seq2SeqTrainer: ``scaleformer.wrap`` + Trainer.

    python scripts/hf_trainer.py --output /tmp/hf-run            # offline: tiny reader, generated ledgers
    python scripts/hf_trainer.py --model facebook/bart-base --method scaleformer_middle \\
        --train train.jsonl --validation dev.jsonl --steps 2000 --output runs/bart-sfm

The framework's own path (``python train.py method=...``) adds the tables, identities and checks; this
one is for researchers whose training script is already a ``Seq2SeqTrainer``. Rows are jsonl with
``input`` and ``output`` (``--input-field`` / ``--target-field``) and, for question answering, a
``query`` (``--query-field``) that every chunk reads first: it travels as ``prefix_ids`` /
``prefix_mask``, which the model's ``forward`` and ``generate`` take, so Trainer's predict loop keeps
it (no custom trainer). The output folder loads with ``AutoModelForSeq2SeqLM.from_pretrained`` after
``import scaleformer``. Needs ``accelerate`` (``pip install 'scaleformer[hf]'``), as every Trainer does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

import scaleformer

TINY = "asset:readers/tiny_bart_reader"


class Collator:
    """Pads a batch: documents and queries with the pad id, labels with -100 (ignored by the loss)."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, rows: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        out = {"input_ids": self._pad([r["input_ids"] for r in rows], self.pad_id)}
        out["attention_mask"] = self._pad([[1] * len(r["input_ids"]) for r in rows], 0)
        if "labels" in rows[0]:
            out["labels"] = self._pad([r["labels"] for r in rows], -100)
        if "prefix_ids" in rows[0]:
            out["prefix_ids"] = self._pad([r["prefix_ids"] for r in rows], self.pad_id)
            out["prefix_mask"] = self._pad([[1] * len(r["prefix_ids"]) for r in rows], 0)
        return out

    @staticmethod
    def _pad(seqs: list[list[int]], value: int) -> torch.Tensor:
        width = max(len(s) for s in seqs)
        return torch.tensor([s + [value] * (width - len(s)) for s in seqs], dtype=torch.long)  # [batch, width]


def encode_rows(rows: list[dict[str, Any]], tokenizer: Any, input_field: str = "input",
                target_field: str = "output", query_field: str | None = None) -> list[dict[str, list[int]]]:
    """Token ids per row; documents are never truncated (the method reads them whole), and text that looks
    like a special token (``<s>`` in HTML) stays text."""
    out = []
    for r in rows:
        ex = {"input_ids": tokenizer(r[input_field], split_special_tokens=True, verbose=False)["input_ids"],
              "labels": tokenizer(r[target_field], split_special_tokens=True)["input_ids"]}
        if query_field:
            ex["prefix_ids"] = tokenizer(r[query_field], add_special_tokens=False, split_special_tokens=True)["input_ids"]
        out.append(ex)
    return out


def build_trainer(model: Any, tokenizer: Any, train: list[dict], validation: list[dict], output: str | Path,
                  steps: int, lr: float = 1e-4, batch_size: int = 2, max_new_tokens: int = 64,
                  num_beams: int = 1) -> Any:
    """A Seq2SeqTrainer for a wrapped model; evaluation generates with the method (predict_with_generate)."""
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model.generation_config.max_new_tokens = max_new_tokens
    model.generation_config.num_beams = num_beams
    args = Seq2SeqTrainingArguments(
        output_dir=str(output), max_steps=steps, learning_rate=lr, per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=batch_size, predict_with_generate=True, logging_steps=1, save_strategy="no",
        report_to=[], use_cpu=not torch.cuda.is_available(), seed=0, warmup_steps=0, weight_decay=0.0,
        dataloader_num_workers=0)
    return Seq2SeqTrainer(model=model, args=args, train_dataset=train, eval_dataset=validation,
                          data_collator=Collator(tokenizer.pad_token_id), processing_class=tokenizer)


def _value(text: str) -> Any:
    """A --set value: JSON where it parses (100, 0.5, true, [1, 2]), else the text itself (random, first)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _read(path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/hf_trainer.py", description=__doc__.splitlines()[0])
    p.add_argument("--model", default=TINY, help="hub id or folder of a seq2seq model (default: the tiny reader)")
    p.add_argument("--method", default="scaleformer_middle", help="an option of conf/method/")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="method parameters (middle_tokens=100)")
    p.add_argument("--max-positions", type=int, help="the encoder's window (needed for T5-like models)")
    p.add_argument("--train", help="jsonl training rows (default: generated ledgers)")
    p.add_argument("--validation", help="jsonl validation rows (default: generated ledgers)")
    p.add_argument("--input-field", default="input")
    p.add_argument("--target-field", default="output")
    p.add_argument("--query-field")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--output", required=True, help="folder for the trained model")
    a = p.parse_args(argv)

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from scaleformer.resources import resolve_asset

    path = resolve_asset(a.model)
    backbone = AutoModelForSeq2SeqLM.from_pretrained(path, use_safetensors=True)  # weights are data, never code
    if a.model == TINY:
        from scaleformer.model.tokenizer import load_offline_tokenizer

        tokenizer = load_offline_tokenizer("bart")
    else:
        tokenizer = AutoTokenizer.from_pretrained(path)
    params = dict(kv.split("=", 1) for kv in a.set)
    model = scaleformer.wrap(backbone, a.method, tokenizer=tokenizer, max_positions=a.max_positions,
                             **{k: _value(v) for k, v in params.items()})
    if a.train:
        train, val = _read(a.train), _read(a.validation) if a.validation else []
    else:
        from scaleformer.data.synthetic import split_rows

        train, val = split_rows("train", 8, 1200, seed=3), split_rows("validation", 2, 1200, seed=3)
    fields = dict(input_field=a.input_field, target_field=a.target_field, query_field=a.query_field)
    trainer = build_trainer(model, tokenizer, encode_rows(train, tokenizer, **fields),
                            encode_rows(val, tokenizer, **fields), a.output, a.steps, a.lr)
    trainer.train()
    trainer.save_model(a.output)
    if val:
        print(json.dumps(trainer.evaluate(), indent=1))
    print(f"saved to {a.output}: AutoModelForSeq2SeqLM.from_pretrained({a.output!r}) after `import scaleformer`",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
