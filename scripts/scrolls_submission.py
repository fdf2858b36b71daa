"""Turn test predictions into SCROLLS' official submission files.

    python scripts/scrolls_submission.py results/runs/<govreport run>/eval/<evaluation>/predictions_test.jsonl \
        results/runs/<summscreen run>/eval/<evaluation>/predictions_test.jsonl --out results/scrolls

All seven tasks: GovReport, SummScreenFD and QMSum (summaries), Qasper and NarrativeQA (free answers),
QuALITY (the chosen option's text) and ContractNLI (Entailment / Contradiction / Not mentioned); the
predictions are the generated text in every case. Writes, for each SCROLLS task the predictions cover, ``<task>.json``: the mapping ``{id: prediction}``
that SCROLLS' evaluator reads ("Predictions Format", tau-nlp/scrolls evaluator/README.md), and
``scrolls_predictions.csv`` with the columns ``Task, ID, Prediction`` that the leaderboard takes
(evaluator/prepare_submission.py writes that file from all seven tasks' JSON files). The task of a
predictions file is read from the run's own config (the ``zip://<task>/...`` data files of the
SCROLLS data configs), so a file from another dataset is refused rather than mislabelled.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from scaleformer.io import atomic_write_json, atomic_write_text, read_jsonl, refuse_overwrite  # noqa: E402

SCROLLS_TASKS = ("gov_report", "summ_screen_fd", "qmsum", "narrative_qa", "qasper", "quality", "contract_nli")
# The data option (conf/data/) that evaluates each task.
DATA_OPTION = {"gov_report": "govreport", "summ_screen_fd": "summscreen", "qmsum": "qmsum",
               "narrative_qa": "narrative_qa", "qasper": "qasper", "quality": "quality", "contract_nli": "contract_nli"}
COLUMNS = ("Task", "ID", "Prediction")


def task_of(predictions: Path) -> str:
    """The SCROLLS task of a predictions file, from the evaluation's config.yaml beside it."""
    cfg_path = predictions.parent / "config.yaml"
    if not cfg_path.is_file():
        raise ValueError(f"{predictions}: no config.yaml beside it, cannot tell its SCROLLS task "
                         "(pass files from results/runs/<run>/eval/<evaluation>/)")
    data = (yaml.safe_load(cfg_path.read_text(encoding="utf-8")) or {}).get("data", {})
    files = " ".join(str(v) for v in (data.get("data_files") or {}).values())
    tasks = {m for m in re.findall(r"zip://([a-z_]+)/", files) if m in SCROLLS_TASKS}
    if len(tasks) != 1:
        raise ValueError(f"{predictions}: data {data.get('name')!r} is not a SCROLLS task (its data files name "
                         f"{sorted(tasks) or 'none'}); SCROLLS tasks: {', '.join(SCROLLS_TASKS)}")
    return tasks.pop()


def predictions_by_id(path: Path) -> dict[str, str]:
    """``{id: prediction}``; every row needs both, and an id appears once."""
    out: dict[str, str] = {}
    for n, row in enumerate(read_jsonl(path), 1):
        doc_id, pred = row.get("id"), row.get("prediction")
        if not isinstance(doc_id, str) or not isinstance(pred, str):
            raise ValueError(f"{path}:{n}: needs a string 'id' and 'prediction'")
        if doc_id in out:
            raise ValueError(f"{path}:{n}: id {doc_id!r} appears twice")
        out[doc_id] = pred
    if not out:
        raise ValueError(f"{path}: no predictions")
    return out


def submission_csv(tasks: dict[str, dict[str, str]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for task, preds in tasks.items():
        for doc_id, pred in preds.items():
            w.writerow([task, doc_id, pred])
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("predictions", nargs="+", type=Path, help="predictions_test.jsonl files of SCROLLS runs")
    ap.add_argument("--out", type=Path, default=Path("results/scrolls"), help="output folder")
    args = ap.parse_args(argv)
    tasks: dict[str, dict[str, str]] = {}
    try:
        if args.out.exists() and not args.out.is_dir():
            raise ValueError(f"--out={args.out}: is a file; give the folder the task files and the CSV go to")
        for path in args.predictions:
            task = task_of(path)
            if task in tasks:
                raise ValueError(f"{path}: a second predictions file for {task}")
            tasks[task] = predictions_by_id(path)
        refuse_overwrite([("--out", args.out / n) for n in (*(f"{t}.json" for t in tasks), "scrolls_predictions.csv")],
                         [*(("a predictions file", p) for p in args.predictions),
                          *(("the config.yaml of a predictions file", p.parent / "config.yaml") for p in args.predictions)])
    except (ValueError, OSError) as e:
        raise SystemExit(f"error: {e}") from None
    written: list[Any] = [atomic_write_json(args.out / f"{t}.json", p) for t, p in tasks.items()]
    written.append(atomic_write_text(args.out / "scrolls_predictions.csv", submission_csv(tasks)))
    for p in written:
        print(f"wrote {p}")
    missing = [t for t in SCROLLS_TASKS if t not in tasks]
    if missing:
        runs = ", ".join(f"{t} (data={DATA_OPTION[t]})" for t in missing)
        print(f"note: the leaderboard takes all seven tasks; still missing {runs}: evaluate them on the test "
              "split and pass their predictions_test.jsonl here too")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
