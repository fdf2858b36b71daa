"""Train a long-context model with Hugging Face's own Seq2SeqTrainer: ``scaleformer.wrap`` + Trainer.

    python scripts/hf_trainer.py --output /tmp/hf-run            # offline: tiny reader, generated ledgers
    python scripts/hf_trainer.py --model facebook/bart-base --method scaleformer_middle \\
        --train train.jsonl --validation dev.jsonl --steps 2000 --output runs/bart-sfm

The framework's own path (``python train.py method=...``) adds the tables, identities and checks; this
one is for researchers whose training script is already a ``Seq2SeqTrainer``. Rows are jsonl with
``input`` and ``output`` (``--input-field`` / ``--target-field``) and, for question answering, a
``query`` (``--query-field``) that every chunk reads first: it travels as ``prefix_ids`` /
``prefix_mask``, which the model's ``forward`` and ``generate`` take, so Trainer's predict loop keeps
it (no custom trainer). Evaluation generates and reports the project's ROUGE (``eval_rouge1/2/L``).
The output folder loads with ``AutoModelForSeq2SeqLM.from_pretrained`` after ``import scaleformer``, and
``scaleformer summarize --model`` reads it. Needs ``accelerate`` (``pip install 'scaleformer[hf]'``), as
every Trainer does.

Data: with neither file, generated ledgers (8 rows to train on, 2 to evaluate on); with ``--train``, your
rows, evaluated on ``--validation`` when given (no evaluation otherwise). ``--validation`` alone is
refused: it would evaluate a model trained on generated ledgers, not on your data. A mistake (a
``--set`` without ``=``, an unknown method or parameter, a model folder that does not exist, a line that
is not JSON, a row without its field) stops with one line, ``error: ...``, before the model loads.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

import scaleformer
from scaleformer.errors import ConfigError, UserError, check, redact

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


def rouge_metrics(tokenizer: Any) -> Any:
    """Trainer's ``compute_metrics``: the project's ROUGE (SCROLLS scorer) of the generated summaries
    against the labels, so evaluation reports ``eval_rouge1/2/L`` and not the loss alone."""
    import numpy as np

    from scaleformer.metrics import ROUGE_TYPES, compute_rouge

    def text(ids: Any) -> list[str]:  # padding across batches is -100, which no tokenizer decodes
        ids = np.where(np.asarray(ids) < 0, tokenizer.pad_token_id, ids)
        return [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]

    def compute(pred: Any) -> dict[str, float]:
        predictions = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
        preds, refs = text(predictions), text(pred.label_ids)
        keep = [i for i, r in enumerate(refs) if r]  # an empty reference is skipped and counted, as the data layer does
        counts = {"n_scored": len(keep), "n_no_reference": len(refs) - len(keep)}
        if not keep:  # no ROUGE keys would fail a Trainer that selects on one far from here: say why now
            raise ValueError(f"compute_metrics: nothing to score: {len(refs)} prediction(s), "
                             f"{counts['n_no_reference']} without a reference; give the evaluation documents "
                             "with references")
        scores = compute_rouge([preds[i] for i in keep], [[refs[i]] for i in keep])
        return {**{k: round(scores[k], 4) for k in (*ROUGE_TYPES, "rouge_geomean")}, **counts}
    return compute


def build_trainer(model: Any, tokenizer: Any, train: list[dict], validation: list[dict], output: str | Path,
                  steps: int, lr: float = 1e-4, batch_size: int = 2, max_new_tokens: int = 64,
                  num_beams: int = 1) -> Any:
    """A Seq2SeqTrainer for a wrapped model; evaluation generates with the method (predict_with_generate)
    and scores ROUGE."""
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    model.generation_config.max_new_tokens = max_new_tokens
    model.generation_config.num_beams = num_beams
    args = Seq2SeqTrainingArguments(
        output_dir=str(output), max_steps=steps, learning_rate=lr, per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=batch_size, predict_with_generate=True, logging_steps=1, save_strategy="no",
        report_to=[], use_cpu=not torch.cuda.is_available(), seed=0, warmup_steps=0, weight_decay=0.0,
        dataloader_num_workers=0)
    return Seq2SeqTrainer(model=model, args=args, train_dataset=train, eval_dataset=validation,
                          data_collator=Collator(tokenizer.pad_token_id), processing_class=tokenizer,
                          compute_metrics=rouge_metrics(tokenizer))


def _value(text: str) -> Any:
    """A --set value: JSON where it parses (100, 0.5, true, [1, 2]), else the text itself (random, first)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_set(items: list[str]) -> dict[str, Any]:
    """``--set key=value`` pairs as method parameters; an item without ``=`` or a key is refused."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        check(bool(sep and key.strip()), "--set", item, "expected KEY=VALUE (a method parameter, e.g. "
              "middle_tokens=100)")
        out[key.strip()] = _value(value)
    return out


def method_settings(option: str, params: dict[str, Any]) -> dict[str, Any]:
    """The method config of ``conf/method/<option>`` with ``params`` applied, validated before any model
    loads: an unknown option or parameter names the close one."""
    from omegaconf import OmegaConf

    from scaleformer.compose import compose_config
    from scaleformer.methods import REGISTRY, method_config
    from scaleformer.resources import group_options

    options = group_options("method")
    check(option in options, "--method", option, f"not an option of conf/method/{_close(option, options)}; "
          f"choose one of {', '.join(options)}")
    settings = OmegaConf.to_container(compose_config([f"method={option}"]).method, resolve=True)
    known = [f.name for f in fields(REGISTRY[settings["name"]].Config) if f.name != "name"]
    for key, value in params.items():
        check(key in known, f"--set {key}", value, f"method {option} has no parameter {key!r}{_close(key, known)}; "
              f"its parameters: {', '.join(known)}")
    method_config({**settings, **params})  # types and ranges
    return {**settings, **params}


def _close(word: str, choices: list[str]) -> str:
    match = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {match[0]}?)" if match else ""


def read_rows(path: str, flag: str, needed: dict[str, str]) -> list[dict[str, Any]]:
    """The rows of a jsonl file; each must be an object holding a string in every ``needed`` field
    (field -> the flag naming it). A bad line is named by file and line number."""
    from scaleformer.io import iter_jsonl

    check(Path(path).is_file(), flag, path, "no such file")
    rows = []
    for n, row in iter_jsonl(path, ConfigError):
        if not isinstance(row, dict):
            raise ConfigError(f"{path}:{n}: each line must be a JSON object with {', '.join(map(repr, needed))}, "
                              f"got a {type(row).__name__}")
        for field, named_by in needed.items():
            if not isinstance(row.get(field), str):
                have = ", ".join(map(repr, row)) or "none"
                raise ConfigError(f"{path}:{n}: field {field!r} missing or not a string ({named_by} names it; "
                                  f"the row's fields: {have})")
            if not row[field].strip() and named_by in ("--input-field", "--target-field"):
                what = "document" if named_by == "--input-field" else "reference"  # a score against nothing
                raise ConfigError(f"{path}:{n}: field {field!r} ({named_by}) is empty: a row needs its {what}")
        rows.append(row)
    check(bool(rows), flag, path, "no rows (the file has no non-empty line)")
    return rows


def load_backbone(model: str) -> tuple[Any, Any]:
    """The seq2seq model and its tokenizer; a folder that does not exist, a Hub id that cannot be reached
    or a folder that holds no model is one ConfigError/HubUnreachableError naming ``--model``."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from scaleformer.model.hub import check_available, is_local
    from scaleformer.resources import resolve_asset

    path = resolve_asset(model)
    if not is_local(path):
        hub_id = re.fullmatch(r"[\w-][\w.-]*(/[\w-][\w.-]*)?", model) is not None
        check(hub_id, "--model", model, "no such folder (give a model folder or a Hub id such as facebook/bart-base)")
        check_available(path, "model weights", "Pass a local model folder with --model.")
    try:
        backbone = AutoModelForSeq2SeqLM.from_pretrained(path, use_safetensors=True)  # weights are data, never code
        if model == TINY:
            from scaleformer.model.tokenizer import load_offline_tokenizer

            return backbone, load_offline_tokenizer("bart")
        return backbone, AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--model {model}: not a loadable seq2seq model ({str(e).strip().splitlines()[0]})") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python scripts/hf_trainer.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=TINY, help="hub id or folder of a seq2seq model (default: the tiny reader)")
    p.add_argument("--method", default="scaleformer_middle", help="an option of conf/method/")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="method parameters (middle_tokens=100)")
    p.add_argument("--max-positions", type=int, help="the encoder's window (needed for T5-like models)")
    p.add_argument("--train", help="jsonl training rows (default: generated ledgers)")
    p.add_argument("--validation", help="jsonl rows to evaluate on after training; needs --train (default: "
                   "generated ledgers without --train, no evaluation with it)")
    p.add_argument("--input-field", default="input")
    p.add_argument("--target-field", default="output")
    p.add_argument("--query-field")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--output", required=True, help="folder for the trained model")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        return run(a)
    except UserError as e:  # a setting, a file, the network: one line, never a traceback
        raise SystemExit(f"error: {redact(str(e).strip().splitlines()[0])}") from None


def check_output(output: str, model: str | None = None) -> None:
    """``--output`` is new, empty or a model folder, and not the ``--model`` folder it starts from (nor a
    folder around or inside it): the save replaces it whole."""
    out = Path(output)
    if model and Path(model).exists():
        src = Path(model).resolve()
        check(not (out.resolve() == src or src.is_relative_to(out.resolve()) or out.resolve().is_relative_to(src)),
              "--output", output, f"is (or holds, or is inside) the --model folder {model}, which the save would "
                                  "replace with the trained model: give a new folder")
    check(not out.exists() or out.is_dir(), "--output", output, "is a file; give a folder for the trained model")
    check(not out.is_dir() or not any(out.iterdir()) or (out / "config.json").is_file(), "--output", output,
          "holds files that are not a model's, and the save replaces the folder whole; give a new folder")


def save(trainer: Any, output: str) -> None:
    """The model, tokenizer and training arguments, built beside ``output`` and swapped in (a killed save
    leaves no half folder), every file with the umask's mode: safetensors writes weights 0600 itself."""
    from scaleformer.io import atomic_dir

    with atomic_dir(output) as tmp:
        trainer.save_model(str(tmp))


def run(a: argparse.Namespace) -> int:
    check(a.steps >= 1, "--steps", a.steps, "must be >= 1")
    check_output(a.output, a.model)
    check(math.isfinite(a.lr) and a.lr > 0, "--lr", a.lr, "must be a finite number > 0")
    check(a.validation is None or a.train is not None, "--validation", a.validation,
          "needs --train (alone it would evaluate a model trained on generated ledgers)")
    settings = method_settings(a.method, parse_set(a.set))
    needed = {a.input_field: "--input-field", a.target_field: "--target-field"}
    if a.query_field:
        needed[a.query_field] = "--query-field"
    if a.train:  # read and checked before the model loads
        train = read_rows(a.train, "--train", needed)
        val = read_rows(a.validation, "--validation", needed) if a.validation else []
    else:
        from scaleformer.data.synthetic import split_rows

        train, val = split_rows("train", 8, 1200, seed=3), split_rows("validation", 2, 1200, seed=3)
    backbone, tokenizer = load_backbone(a.model)
    model = scaleformer.wrap(backbone, settings, tokenizer=tokenizer, max_positions=a.max_positions)
    columns = dict(input_field=a.input_field, target_field=a.target_field, query_field=a.query_field)
    trainer = build_trainer(model, tokenizer, encode_rows(train, tokenizer, **columns),
                            encode_rows(val, tokenizer, **columns), a.output, a.steps, a.lr)
    trainer.train()
    save(trainer, a.output)
    if val:
        print(json.dumps(trainer.evaluate(), indent=1))
    print(f"saved to {a.output}: AutoModelForSeq2SeqLM.from_pretrained({a.output!r}) after `import scaleformer`",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
