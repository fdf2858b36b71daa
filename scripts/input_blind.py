"""Does a trained model read its input? Score it against input-blind baselines of itself.

    python scripts/input_blind.py results/runs/<run>                 # validation split
    python scripts/input_blind.py results/runs/<run> --split test --limit 8
    python scripts/input_blind.py results/runs/<run> --out results/default/input_blind_validation.json

A summary scores ROUGE for its template as much as for its content, so a score is evidence only
if it falls when the input is taken away. The run's exported model (``<run>/model``) summarizes
each document of the split three ways, always scored against that document's own references:

- ``own document``: what the run's evaluation measures;
- ``another document``: the input of the next document of the split (rotated by one), so the
  output is fluent and on-task but about other events;
- ``no document``: a one-sentence input with no events (the model's prior);
- ``training summary``: no model at all, the training split's most frequent reference.

Writes ``<run>/eval/input_blind_<split>.json`` (or ``--out``; atomically) and prints one row per
baseline, with fact recall and town accuracy (the headline names the ledger's own town) where the data
are the synthetic ledgers.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

try:
    import scaleformer  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NO_DOCUMENT = "Ledger."


def split_examples(cfg: Any, role: str) -> list[Any]:
    """The split's examples (one per id, every reference) exactly as the run read them."""
    from scaleformer.data.examples import build_examples, to_rows
    from scaleformer.data.sources import make_source

    raw = make_source(cfg.data).rows(role)
    examples, _ = build_examples(to_rows(raw, cfg.data), train=role == "train", cap=None)
    return examples


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path, help="a run folder with an exported model/ (results/runs/<run>)")
    ap.add_argument("--split", default="validation", choices=["validation", "test"])
    ap.add_argument("--limit", type=int, default=None, help="the first N documents only")
    ap.add_argument("--out", type=Path, default=None, help="the results file (default <run>/eval/input_blind_<split>.json)")
    args = ap.parse_args(argv)

    from omegaconf import OmegaConf

    from scaleformer.errors import ConfigError
    from scaleformer.export.summarizer import Summarizer
    from scaleformer.io import atomic_write_json, refuse_overwrite
    from scaleformer.metrics import compute_metrics
    from scaleformer.runs.context import to_config

    run, model_dir = args.run_dir, args.run_dir / "model"
    if not (run / "config.yaml").is_file() or not model_dir.is_dir():
        print(f"error: {run}: not a finished run folder (needs config.yaml and model/)", file=sys.stderr)
        return 2
    try:  # before the model loads: the results file must not replace what the run is read from
        refuse_overwrite({"--out": args.out}, {"the run's config": run / "config.yaml"},
                         {"the run's exported model": model_dir})
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.limit is not None and args.limit < 2:
        print(f"error: --limit {args.limit}: must be >= 2 (a document needs another to swap with)", file=sys.stderr)
        return 2
    try:
        cfg = to_config(OmegaConf.load(run / "config.yaml"))
    except ConfigError as e:
        print(f"error: {run / 'config.yaml'}: {e}", file=sys.stderr)
        return 2
    docs = split_examples(cfg, args.split)[: args.limit]
    if len(docs) < 2:
        print(f"error: split {args.split!r} of {run} has {len(docs)} document(s); need >= 2", file=sys.stderr)
        return 2
    train_refs = Counter(e.target for e in split_examples(cfg, "train"))
    summarize = Summarizer.from_pretrained(model_dir)
    refs = [e.references for e in docs]
    inputs = {
        "own document": [e.input for e in docs],
        "another document": [docs[(i + 1) % len(docs)].input for i in range(len(docs))],
        "no document": [NO_DOCUMENT] * len(docs),
    }
    mcfg = cfg.metrics
    mcfg.bertscore.enabled = False  # ROUGE and fact recall say what this needs; BERTScore adds minutes
    made = summarize.record.get("run") or {}
    out: dict[str, Any] = {"run": str(run), "step": made.get("step"), "commit": made.get("commit"), "split": args.split,
                           "n": len(docs), "baselines": {}}
    for name, texts in inputs.items():
        preds = summarize.summarize(texts)
        out["baselines"][name] = {"scores": _scores(compute_metrics(preds, refs, mcfg)), "predictions": preds}
    top = train_refs.most_common(1)[0][0]
    out["baselines"]["training summary"] = {"scores": _scores(compute_metrics([top] * len(docs), refs, mcfg)),
                                            "predictions": [top] * len(docs)}
    path = args.out or run / "eval" / f"input_blind_{args.split}.json"
    atomic_write_json(path, out)
    keys = [k for k in ("rouge1", "rouge2", "rougeL", "fact_recall", "fact_field_recall", "town_accuracy")
            if k in out["baselines"]["own document"]["scores"]]
    print(f"{'input':<20}" + "".join(f"{COLUMN_LABELS[k]:>12}" for k in keys))
    for name, b in out["baselines"].items():
        print(f"{name:<20}" + "".join(f"{b['scores'][k]:>12.2f}" for k in keys))
    print(f"wrote {path}")
    return 0


# The names the documentation and the run summary use for these scores.
COLUMN_LABELS = {"rouge1": "R-1", "rouge2": "R-2", "rougeL": "R-L", "fact_recall": "Facts",
                 "fact_field_recall": "Fact parts", "town_accuracy": "Town"}


def _scores(m: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in m.items() if k.startswith(("rouge", "fact_", "town_")) and isinstance(v, int | float)}


if __name__ == "__main__":
    raise SystemExit(main())
