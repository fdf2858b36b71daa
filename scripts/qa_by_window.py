"""EM and F1 of QA runs on the bundled ledgers, apart for answers inside and past truncation's window.

    .venv/bin/python scripts/qa_by_window.py results/tiny/runs/ledgersqa-*
    .venv/bin/python scripts/qa_by_window.py results/tiny/runs/ledgersqa-* --out results/tiny/table_qa_by_window.json

Why: the table's EM and F1 mix answers a first-window reader can see with ones it can only guess.
Split by where the answer lies (after the question, in the backbone's window), a method that reads
past the window shows it on the ``past`` answers. Each run's own config names its data files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# The runs of one table share their backbone and data files: the tokenizer is loaded, and where each
# answer lies computed (every document tokenized), once for all of them, not once per run.
_TOKENIZERS: dict[str, tuple[Any, int]] = {}
_INSIDE: dict[tuple[str, str], dict[str, bool]] = {}


def _tokenizer(backbone: Any) -> tuple[Any, int]:
    """The backbone's tokenizer and window (its max positions)."""
    from scaleformer.model.backbone import load_tokenizer, max_positions, model_config

    if backbone.name not in _TOKENIZERS:
        tok = load_tokenizer(backbone)
        _TOKENIZERS[backbone.name] = tok, max_positions(backbone, model_config(backbone, tok))
    return _TOKENIZERS[backbone.name]


def _inside_by_id(data_file: Path, backbone: Any) -> dict[str, bool]:
    """id -> does its answer lie inside truncation's window, for every row of a QA data file."""
    from scaleformer.data.ledger_facts import answers_inside_window

    key = (str(data_file), backbone.name)
    if key not in _INSIDE:
        tok, window = _tokenizer(backbone)
        rows = {}
        for line in data_file.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            rows[row["id"]] = row
        _INSIDE[key] = dict(zip(rows, answers_inside_window(list(rows.values()), tok, window)))
    return _INSIDE[key]


def run_scores(run_dir: Path) -> tuple[str, dict[str, dict[str, dict[str, float]]]]:
    """(method option, split -> inside/past -> n, exact_match, f1) from a run's newest evaluation."""
    from omegaconf import OmegaConf

    from scaleformer.data.sources import SyntheticSource
    from scaleformer.metrics.answers import scores_by_window
    from scaleformer.runs.context import to_config

    rc = to_config(OmegaConf.load(run_dir / "config.yaml"))
    if rc.data.source != "synthetic" or rc.data.synthetic_task != "qa":
        raise SystemExit(f"{run_dir}: not a run on the bundled QA ledgers (data={rc.data.name})")
    evals = sorted((run_dir / "eval").glob("*/metrics.json"), key=lambda p: p.stat().st_mtime)
    if not evals:
        raise SystemExit(f"{run_dir}: no evaluation (eval/*/metrics.json) yet")
    source, out = SyntheticSource(rc.data), {}
    for pred_file in sorted(evals[-1].parent.glob("predictions_*.jsonl")):
        split = pred_file.stem.removeprefix("predictions_")
        inside_by_id = _inside_by_id(source.file(split), rc.backbone)
        preds = [json.loads(line) for line in pred_file.read_text(encoding="utf-8").splitlines()]
        inside = [inside_by_id[p["id"]] for p in preds]
        out[split] = scores_by_window([p["prediction"] for p in preds], [p["reference"] for p in preds], inside)
    written = json.loads(evals[-1].read_text(encoding="utf-8"))["method"]
    return str(written.get("option") or written["name"]), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders (results/<profile>/runs/ledgersqa-*)")
    ap.add_argument("--out", type=Path, help="also write the scores as JSON (method -> split -> inside/past)")
    args = ap.parse_args(argv)
    if args.out:  # before anything is read: the scores must not replace a run's own files
        from scaleformer.errors import ConfigError
        from scaleformer.io import refuse_overwrite

        read = [f for run in args.runs for f in (run / "config.yaml", *(run / "eval").glob("*/metrics.json"),
                                                 *(run / "eval").glob("*/predictions_*.jsonl"))]
        try:
            refuse_overwrite({"--out": args.out}, [("one of the runs' files", f) for f in read])
        except ConfigError as e:
            raise SystemExit(f"error: {e}") from None
    print("| method | split | inside: n | EM | F1 | past: n | EM | F1 |\n|---|---|---|---|---|---|---|---|")
    written: dict[str, Any] = {}
    for run in args.runs:
        method, scores = run_scores(run)
        written[method] = {"run": run.name, **scores}
        for split, s in scores.items():
            i, p = s["inside"], s["past"]
            print(f"| {method} | {split} | {i['n']} | {i['exact_match']:.1f} | {i['f1']:.1f} "
                  f"| {p['n']} | {p['exact_match']:.1f} | {p['f1']:.1f} |")
    if args.out:
        from scaleformer.io import atomic_write_json

        atomic_write_json(args.out, written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
