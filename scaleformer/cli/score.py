"""Recompute ROUGE/BERTScore from a saved predictions file, without a GPU or a training run.

    scaleformer score results/runs/<run>/predictions_test.jsonl --out metrics_rescored.json
    scaleformer score preds.jsonl --bertscore-model facebook/bart-large-mnli   # the paper's, or fail
    scaleformer score preds.jsonl --no-bertscore
    scaleformer score preds.jsonl --no-bertscore --scores scores.jsonl   # one row per document, for compare
    scaleformer score preds.jsonl --json                     # the metrics as JSON on stdout (for scripts)

It prints a short table: one row for the split the file holds (``predictions_<split>.jsonl``), each metric
with its 95% interval over the documents (the tables' rules: t below 20 documents, BCa above, Clopper-Pearson
for exact match), then the BERTScore model. ``--json`` prints the whole record instead, as before.

Defaults are train.py's (the ``metrics`` section of conf/config.yaml): BERTScore with the bundled offline
MiniLM, so scoring needs no network (``--bertscore-model auto`` takes the paper's bart-large-mnli when it
loads, else the MiniLM, and says so); the output says which ran (``bertscore_model``) and with which settings
(``score_settings``). Quiet unless ``-v``: the libraries' loading bars and INFO lines stay off.

Rows are ``{"id", "prediction", "reference"}`` where ``reference`` is a string or a list of strings
(``references`` is accepted too; ``[]`` or null: hidden, not scored). Rows sharing an id (SCROLLS
lists one row per reference) are merged into one document with several references; their
predictions must agree. A bad file (not UTF-8, malformed JSON, a missing or mistyped field, no rows)
stops with one line naming the file and line, and a non-zero exit status; so does an ``--out`` or
``--scores`` that is the predictions file or the other output, before anything is scored.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Any

from scaleformer.artifacts.significance import cell_interval, interval_text
from scaleformer.config import MetricsConfig
from scaleformer.errors import ConfigError
from scaleformer.io import atomic_write_json, atomic_write_jsonl, iter_jsonl, refuse_overwrite
from scaleformer.metrics import PAPER_BERTSCORE_MODEL, BertScoreModelError, compute_metrics
from scaleformer.resources import conf_dir, installed
from scaleformer.runs.console import quiet

TRAIN_CONFIG = conf_dir() / "config.yaml"


def train_defaults(config_yaml: Path = TRAIN_CONFIG) -> MetricsConfig:
    """The metrics settings train.py runs with, read from its config file so the two cannot drift.

    Only the ``metrics`` section is read (typed by MetricsConfig): rescoring must not depend on the
    backbone, data or method groups composing. A missing section is an error, not a silent fallback
    to the dataclass defaults (whose BERTScore model is the paper's, which fails offline).
    """
    from omegaconf import OmegaConf

    section = OmegaConf.load(config_yaml).get("metrics")
    if section is None:
        raise ConfigError(f"{config_yaml} has no metrics section: scaleformer score reads train.py's "
                          "metrics defaults from there")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(MetricsConfig), section))
    except Exception as e:
        raise ConfigError(f"{config_yaml}: metrics section: {str(e).splitlines()[0]}") from None


def _reference_list(value: Any, where: str, key: str) -> list[str]:
    """A row's references: a string, a list of strings, or null/[] when they are hidden."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(r, str) for r in value):
        return list(value)
    raise ValueError(f"{where}: {key!r} must be a string or a list of strings, got {_kind(value)}")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        inner = sorted({type(v).__name__ for v in value if not isinstance(v, str)})
        return f"a list containing {', '.join(inner)}"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def load_predictions(path: str | Path) -> tuple[list[str], list[list[str]]]:
    """Predictions and reference lists, one per document id (first-seen order)."""
    _, predictions, references = load_documents(path)
    return predictions, references


def load_documents(path: str | Path) -> tuple[list[Any], list[str], list[list[str]]]:
    """Ids, predictions and reference lists, one per document id (first-seen order).

    Every problem is a ValueError naming the file and line: bad UTF-8 or JSON, a line that is not
    an object, a missing or non-string ``prediction``, a missing or malformed ``reference``, an id
    seen again with another prediction, or no rows at all.
    """
    docs: dict[Any, dict[str, Any]] = {}
    for lineno, row in iter_jsonl(path):
        where = f"{path}:{lineno}"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a JSON object with id, prediction, reference; got {_kind(row)}")
        if "prediction" not in row:
            raise ValueError(f"{where}: row has no 'prediction' (it has {sorted(row)})")
        pred = "" if row["prediction"] is None else row["prediction"]
        if not isinstance(pred, str):
            raise ValueError(f"{where}: 'prediction' must be a string, got {_kind(pred)}")
        if "reference" not in row and "references" not in row:
            raise ValueError(f"{where}: row has no 'reference' (it has {sorted(row)}); "
                             "use [] for a document whose references are hidden")
        ref_key = "reference" if "reference" in row else "references"
        refs = _reference_list(row[ref_key], where, ref_key)
        key = row.get("id", f"#line{lineno}")
        if not isinstance(key, str | int) or isinstance(key, bool):
            raise ValueError(f"{where}: 'id' must be a string or an integer, got {_kind(key)}")
        if key not in docs:
            docs[key] = {"prediction": pred, "references": refs, "line": lineno}
        elif docs[key]["prediction"] != pred:
            raise ValueError(f"{where}: id {key!r} appears again (first at line {docs[key]['line']}) "
                             "with a different prediction")
        else:
            docs[key]["references"].extend(r for r in refs if r not in docs[key]["references"])
    if not docs:
        raise ValueError(f"{path}: no prediction rows (the file is empty or blank); expected one JSON object per "
                         "line with id, prediction, reference")
    return list(docs), [d["prediction"] for d in docs.values()], [d["references"] for d in docs.values()]


def _settings(args: argparse.Namespace, defaults: MetricsConfig) -> MetricsConfig:
    """train.py's settings with the command line's changes; a layer count follows its model."""
    bs = defaults.bertscore
    model = args.bertscore_model or bs.model_type
    num_layers = args.bertscore_num_layers
    if num_layers is None and model in (bs.model_type, "auto", PAPER_BERTSCORE_MODEL):
        num_layers = bs.num_layers  # another model: bert-score's own table (or an error naming the key)
    return dataclasses.replace(
        defaults,
        use_stemmer=args.use_stemmer or defaults.use_stemmer,
        sentence_splitter=args.sentence_splitter or defaults.sentence_splitter,
        rouge_tokenizer=args.rouge_tokenizer or defaults.rouge_tokenizer,
        bertscore=dataclasses.replace(bs, enabled=bs.enabled and not args.no_bertscore, model_type=model,
                                      num_layers=num_layers,
                                      batch_size=bs.batch_size if args.batch_size is None else args.batch_size),
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    try:
        defaults = train_defaults()
    except ConfigError as e:
        sys.exit(f"error: {e}")
    ap = argparse.ArgumentParser(prog="scaleformer score", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("predictions", help="predictions .jsonl (id, prediction, reference)")
    ap.add_argument("--out", help="write the metrics here (atomically); default: print only")
    ap.add_argument("--scores", help="write one row per scored document here (id and every metric: what "
                                     "`scaleformer compare` and intervals read); default with --out: "
                                     "<out>.scores.jsonl beside it")
    ap.add_argument("--no-bertscore", action="store_true", help="ROUGE only")
    ap.add_argument("--bertscore-model", default=None,
                    help="hub id, local folder, 'offline' (bundled MiniLM) or 'auto' (the paper's model "
                         f"when it loads, else offline; default: {defaults.bertscore.model_type}, as train.py)")
    ap.add_argument("--bertscore-num-layers", type=int, default=None,
                    help="layer for a local folder or unlisted hub model (default: the paper's 11 for "
                         "bart-large-mnli, bert-score's table for others)")
    ap.add_argument("--batch-size", type=int, default=None,
                    help=f"BERTScore batch size (default: {defaults.bertscore.batch_size})")
    ap.add_argument("--sentence-splitter", choices=("auto", "nltk", "regex"), default=None,
                    help=f"default: {defaults.sentence_splitter}")
    ap.add_argument("--use-stemmer", action="store_true", help="not the SCROLLS default")
    ap.add_argument("--rouge-tokenizer", choices=("scrolls", "unicode"), default=None,
                    help=f"default: {defaults.rouge_tokenizer} (unicode keeps non-Latin letters; see docs/reliability.md)")
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    ap.add_argument("--task-metric", choices=("rouge", "f1", "exact_match"), default="rouge",
                    help="the task's own metric (SCROLLS): f1 or exact_match add both answer scores")
    ap.add_argument("--json", action="store_true", help="print the metrics record as JSON instead of the table")
    ap.add_argument("-v", "--verbose", action="store_true", help="the libraries' progress bars and INFO lines too")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    quiet(verbose=args.verbose or None)

    try:
        cfg = _settings(args, defaults)
    except ConfigError as e:
        sys.exit(f"error: {e} (scaleformer score: see --help for the flag that sets it)")
    path = Path(args.predictions)
    if not path.is_file():
        sys.exit(f"error: predictions file {path}: " + ("is a folder, not a file" if path.is_dir() else
                                                        "no such file"))
    scores_path = args.scores or (str(Path(args.out).with_suffix("")) + ".scores.jsonl" if args.out else None)
    try:  # before anything is scored or written: a path typo must not cost the predictions
        refuse_overwrite({"--out": args.out, "--scores" if args.scores else "--scores (default, beside --out)":
                          scores_path}, {"the predictions file": path, "train.py's config": TRAIN_CONFIG})
    except ConfigError as e:
        sys.exit(f"error: {e}")
    try:
        ids, predictions, references = load_documents(path)
    except (ValueError, OSError) as e:
        sys.exit(f"error: {e}")
    device = args.device
    if device is None and cfg.bertscore.enabled:  # resolved here so the output records what ran
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    per_doc: list[dict[str, Any]] = []
    try:
        metrics = compute_metrics(predictions, references, cfg, device=device, task_metric=args.task_metric,
                                  rows=per_doc)
    except BertScoreModelError as e:
        sys.exit(f"error: {e} (scaleformer score: --bertscore-model offline|auto|PATH, or --no-bertscore)")
    except RuntimeError as e:  # e.g. --sentence-splitter nltk without its data
        sys.exit(f"error: {str(e).splitlines()[0]}")
    metrics["predictions_file"] = str(args.predictions)
    metrics["score_settings"] = {
        "metrics": dataclasses.asdict(cfg),
        "defaults_from": "conf/config.yaml",
        "device": device,
        "versions": {d: installed(d) for d in ("rouge-score", "bert-score", "nltk")},
    }
    for flag, target, write in (("--out", args.out, lambda f: atomic_write_json(f, metrics)),
                                ("--scores", scores_path, lambda f: atomic_write_jsonl(f, [
                                    {"id": ids[d["index"]], **{k: v for k, v in d.items() if k != "index"}}
                                    for d in per_doc]))):
        if not target:
            continue
        try:
            write(target)
        except OSError as e:
            sys.exit(f"error: {flag} {target}: cannot write ({e.strerror or e})")
        print(f"wrote {target}", file=sys.stderr)
    print(json.dumps(metrics, indent=2) if args.json else table(split_of(path), metrics, per_doc))
    return metrics


# The columns, in the order a run's own table prints them (scaleformer.runs.console).
COLUMNS = (("rouge1", "R-1"), ("rouge2", "R-2"), ("rougeL", "R-L"), ("rougeLsum", "R-Lsum"), ("f1", "F1"),
           ("exact_match", "EM"), ("bertscore_f1", "BERTScore"), ("fact_recall", "Facts"),
           ("fact_field_recall", "Fact parts"), ("town_accuracy", "Town"))


def split_of(path: Path) -> str:
    """The split a predictions file holds, by a run's naming (``predictions_test.jsonl``), else its name."""
    stem = path.stem
    return stem.removeprefix("predictions_") if stem.startswith("predictions_") else stem


def table(split: str, metrics: dict[str, Any], per_doc: list[dict[str, Any]]) -> str:
    """One row: each metric's mean over the scored documents and its 95% interval where there are several."""
    shown = [(k, label) for k, label in COLUMNS if isinstance(metrics.get(k), int | float)]
    cells = []
    for key, _ in shown:
        values = [d[key] for d in per_doc if isinstance(d.get(key), int | float)]
        text = f"{metrics[key]:.1f}"
        if len(values) >= 2:
            ci, _ = cell_interval([values], key)
            text += f" {interval_text(ci.mean, ci.low, ci.high)}"
        cells.append(text)
    width = max([12, *(len(c) + 2 for c in cells)])
    head = f"{'split':<12}{'n':>6}" + "".join(f"{label:>{width}}" for _, label in shown)
    row = f"{split:<12}{metrics.get('n_scored', 0):>6}" + "".join(f"{c:>{width}}" for c in cells)
    lines = [head, row]
    if not metrics.get("scored"):
        lines.append(f"{metrics.get('n_examples', 0)} documents, none with a reference: nothing to score (hidden)")
    if metrics.get("bertscore_model"):
        lines.append(f"BERTScore: {metrics['bertscore_model']} (layer {metrics.get('bertscore_num_layers')}, "
                     f"{metrics.get('bertscore_model_source')})")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
