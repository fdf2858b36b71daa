"""The model card (``README.md``) of an exported model: what a reader of the Hugging Face Hub needs.

YAML front matter the Hub reads (library, pipeline, tags, base model, datasets, a ``model-index``
with the scores), then the method and its settings, the backbone, the data, the scores with the
metric settings behind them, how the model was made (command, commit, seed, steps, versions) and how
to use it. No ``pipeline_tag``: transformers 5 has no summarization pipeline, and the model's class
(``model_type: scaleformer``) needs ``import scaleformer``, which the card's first lines say.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

CARD_FILE = "README.md"
# The package is not on PyPI: it installs from its source, as the repository's docs/using.md does.
INSTALL = ("Needs the scaleformer package, which is not on PyPI: install it from its source, "
           "`pip install -c requirements.lock .` in a checkout of the scaleformer repository "
           "(or `pip install git+<the repository's URL>`)")
_SCORES = ("rouge1", "rouge2", "rougeL", "rougeLsum", "bertscore_f1", "fact_recall", "fact_field_recall", "ppl")


def _front_matter(record: dict[str, Any]) -> dict[str, Any]:
    method = record["method"]
    backbone = record.get("backbone") or {}
    data = record.get("data")
    task = "text-generation" if record.get("task") == "language_modeling" else "summarization"
    meta: dict[str, Any] = {"library_name": "transformers",
                            "tags": ["scaleformer", "long-context", task, method["option"]]}
    base = backbone.get("pretrained")
    if isinstance(base, str) and "/" in base and not base.startswith(("/", ".", "asset:")):
        meta["base_model"] = base
    splits = (record.get("evaluation") or {}).get("splits") or {}
    results = []
    for split, scores in splits.items():
        metrics = [{"type": k, "value": round(float(scores[k]), 2)} for k in _SCORES
                   if isinstance(scores.get(k), int | float)]
        if metrics:
            results.append({"task": {"type": task},
                            "dataset": {"name": str(data), "type": str(data), "split": split},
                            "metrics": metrics})
    if results:
        meta["model-index"] = [{"name": str(record["run"].get("run_id")), "results": results}]
    return meta


def _table(rows: list[tuple[str, Any]]) -> str:
    return "\n".join(["| setting | value |", "|---|---|", *(f"| `{k}` | `{json.dumps(v)}` |" for k, v in rows)])


def model_card(record: dict[str, Any]) -> str:
    """The card's text, from a method record (``scaleformer.json``)."""
    method, run = record["method"], record.get("run") or {}
    backbone = record.get("backbone") or {}
    parts = ["---", yaml.safe_dump(_front_matter(record), sort_keys=False).strip(), "---", "",
             f"# {run.get('run_id') or 'scaleformer model'}", "",
             INSTALL + ", then `import scaleformer` before loading (it registers `model_type: scaleformer` "
             "with transformers' Auto classes).", "",
             f"A {backbone.get('model_type') or 'seq2seq'} {_what(record)} with the long-context method "
             f"**{method['option']}** (`{method['class']}`) by "
             "the scaleformer framework on `" + str(record.get("data")) + "`.", "",
             "## Method", "", _table(sorted(method["config"].items())), "",
             "## Backbone", "",
             f"`{backbone.get('name')}` ({backbone.get('pretrained') or 'randomly initialised'}), "
             f"{backbone.get('max_positions')} positions "
             + ("learned (the method reads longer sequences)." if record.get("decoder_only") else "per encoder pass."),
             ""]
    splits = (record.get("evaluation") or {}).get("splits") or {}
    if splits:
        head = [k for k in _SCORES if any(isinstance(s.get(k), int | float) for s in splits.values())]
        parts += ["## Evaluation", "", "| split | examples | " + " | ".join(head) + " |",
                  "|---|---|" + "---|" * len(head)]
        for split, s in splits.items():
            vals = [f"{s[k]:.2f}" if isinstance(s.get(k), int | float) else "" for k in head]
            parts.append(f"| {split} | {s.get('n_examples', '')} | " + " | ".join(vals) + " |")
        settings = record.get("metrics") or {}
        model = next((s.get("bertscore_model") for s in splits.values() if s.get("bertscore_model")), None)
        parts += ["", "Metric settings: " + ", ".join(f"`{k}={v}`" for k, v in settings.items()
                                                       if not isinstance(v, dict))
                  + (f"; BERTScore model `{model}`" if model else "") + ".", ""]
    else:
        parts += ["## Evaluation", "", "Not evaluated yet (the run writes the scores here when it has).", ""]
    versions = record.get("versions") or {}
    parts += ["## How it was made", "",
              f"- command: `{run.get('command')}`",
              f"- commit: `{run.get('commit')}`, seed {run.get('seed')}, step {run.get('step')}, "
              f"training identity `{run.get('training_hash')}`",
              "- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()), "",
              "## Use", "", *_use(record)]
    return "\n".join(parts)


def _what(record: dict[str, Any]) -> str:
    if record.get("task") == "language_modeling":
        return "causal language model, continually trained"
    return "summarizer (document, separator and summary as one sequence) trained" if record.get("decoder_only") \
        else "summarizer trained"


def _use(record: dict[str, Any]) -> list[str]:
    """How to load and run it: each kind through its own Auto class."""
    load = ["import scaleformer  # registers the model class with the Auto classes",
            f"from transformers import {'AutoModelForCausalLM' if record.get('decoder_only') else 'AutoModelForSeq2SeqLM'}"
            ", AutoTokenizer", "",
            f"model = {'AutoModelForCausalLM' if record.get('decoder_only') else 'AutoModelForSeq2SeqLM'}"
            '.from_pretrained("<this folder or hub id>")',
            'tokenizer = AutoTokenizer.from_pretrained("<this folder or hub id>")',
            'ids = tokenizer(open("report.txt").read(), return_tensors="pt").input_ids']
    if record.get("task") == "language_modeling":
        return ["The method travels with the model: its layers keep their attention spans at any length up to "
                "`max_length`.", "", "```python", *load, "print(model(ids, labels=ids).loss.exp())  # perplexity",
                "```", "", "Fine-tune it with any method: `python train.py backbone.pretrained=<this folder> ...` "
                "starts from its backbone's weights (the method that ran on them is not kept).", ""]
    if record.get("decoder_only"):
        return ["The method travels with the model. The summary continues the document after a separator, as the "
                "run read them: `Summarizer.from_pretrained(\"<this folder or hub id>\")(text)` or `scaleformer "
                "summarize --model <folder or hub id> --input report.txt` join them so.", ""]
    return ["The method travels with the model: `generate` reads the whole document (tokenize it "
            "without truncation) with the decoding settings of `generation_config.json`.", "", "```python", *load,
            "print(tokenizer.decode(model.generate(ids)[0], skip_special_tokens=True))", "```", "",
            "or `Summarizer.from_pretrained(\"<this folder or hub id>\")(text)`, or `scaleformer summarize "
            "--model <folder or hub id> --input report.txt`.", ""]
