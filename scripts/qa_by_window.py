"""EM and F1 of QA runs on the bundled ledgers, apart for answers inside and past truncation's window.

    .venv/bin/python scripts/qa_by_window.py results/tiny/runs/ledgersqa-*
    .venv/bin/python scripts/qa_by_window.py results/tiny/runs/ledgersqa-* --out results/tiny/table_qa_by_window.json
    .venv/bin/python scripts/qa_by_window.py results/tiny/runs/ledgersqa-{truncation,sled}-* --paired truncation

Why: the table's EM and F1 mix answers a first-window reader can see with ones it can only guess.
Split by where the answer lies (after the question, in the backbone's window), a method that reads
past the window shows it on the ``past`` answers. Each run's own config names its data files. Several
runs of one method (seeds) are averaged. ``--paired BASE`` tests each method's EM and F1 against BASE's
on each subset of the test split, paired on the questions (and over seeds where both have the same
several: scaleformer.metrics.stats.seeds_paired), Holm-corrected over those tests: a subset chosen after
the table, so a finding to follow up, not a claim of the table.
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


def run_scores(run_dir: Path, per_question: dict[str, list[dict[str, Any]]] | None = None
               ) -> tuple[str, dict[str, dict[str, dict[str, float]]]]:
    """(method option, split -> inside/past -> n, exact_match, f1) from a run's newest evaluation;
    ``per_question`` (split -> rows) receives each question's id, ``inside``, EM and F1."""
    from omegaconf import OmegaConf

    from scaleformer.data.sources import SyntheticSource
    from scaleformer.metrics.answers import answer_scores, scores_by_window
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
        if per_question is not None:
            rows = [{"id": p["id"], "inside": f} for p, f in zip(preds, inside)]
            answer_scores([p["prediction"] for p in preds], [p["reference"] for p in preds], rows)
            per_question[split] = rows
    written = json.loads(evals[-1].read_text(encoding="utf-8"))["method"]
    return str(written.get("option") or written["name"]), out


def _mean(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """Each split's inside/past scores averaged over a method's seeds (the question counts are shared)."""
    return {split: {part: {k: (v if k == "n" else sum(s[split][part][k] for s in per_seed) / len(per_seed))
                           for k, v in per_seed[0][split][part].items()} for part in per_seed[0][split]}
            for split in per_seed[0]}


def _grid(runs: list[dict[str, list[dict[str, Any]]]], split: str, metric: str, ids: list[str]) -> list[list[float]]:
    """``[seeds, questions]`` scores of one metric on the questions ``ids``."""
    by_id = [{r["id"]: r[metric] for r in run[split]} for run in runs]
    return [[seed[i] for i in ids] for seed in by_id]


def paired_by_window(questions: dict[str, list[dict[str, list[dict[str, Any]]]]], base: str,
                     split: str = "test") -> list[dict[str, Any]]:
    """Each method minus ``base`` on the inside and past questions of ``split``, EM and F1, Holm-corrected
    over these tests. ``questions``: method -> its seeds' per-question rows by split."""
    from scaleformer.metrics.stats import holm, paired, seeds_paired

    if base not in questions:
        raise SystemExit(f"error: --paired {base}: no run of {base} among the runs given")
    tests = []
    for method, seeds in questions.items():
        if method == base:
            continue
        for part, flag in (("inside", True), ("past", False)):
            ids = sorted(r["id"] for r in seeds[0][split] if r["inside"] == flag)
            for metric in ("exact_match", "f1"):
                mine, theirs = (_grid(runs, split, metric, ids) for runs in (seeds, questions[base]))
                p = (seeds_paired(mine, theirs) if len(mine) == len(theirs) >= 2 else
                     paired([sum(c) / len(c) for c in zip(*mine)], [sum(c) / len(c) for c in zip(*theirs)]))
                tests.append({"method": method, "subset": part, "metric": metric, "n": len(ids),
                              "seeds": [len(mine), len(theirs)], "diff": p.diff, "low": p.low, "high": p.high,
                              "p": p.p_value, "test": p.test_method})
    for t, adjusted in zip(tests, holm([t["p"] for t in tests])):
        t["p_holm"] = adjusted
    return tests


def window_markdown(data: dict[str, Any]) -> str:
    """The ``--out`` JSON's scores as a table: each method's split, inside and past the window."""
    lines = ["| method | split | inside: n | EM | F1 | past: n | EM | F1 |", "|---|---|---|---|---|---|---|---|"]
    for method, by_split in data.items():
        for split in ("validation", "test"):
            if method == "paired" or split not in by_split:
                continue
            i, p = by_split[split]["inside"], by_split[split]["past"]
            lines.append(f"| {method} | {split} | {i['n']} | {i['exact_match']:.1f} | {i['f1']:.1f} | {p['n']} "
                         f"| {p['exact_match']:.1f} | {p['f1']:.1f} |")
    return "\n".join(lines)


def paired_markdown(paired: dict[str, Any]) -> str:
    """The ``--out`` JSON's ``paired`` tests as a sentence and a table."""
    lines = [f"| method | answers | questions | seeds | metric | minus {paired['base']} | 95% interval | p | Holm p |",
             "|---|---|---|---|---|---|---|---|---|"]
    label = {"exact_match": "EM", "f1": "F1"}
    for t in paired["tests"]:
        lines.append(f"| {t['method']} | {t['subset']} | {t['n']} | {t['seeds'][0]}/{t['seeds'][1]} | "
                     f"{label[t['metric']]} | {t['diff']:+.1f} | [{t['low']:+.1f}, {t['high']:+.1f}] | "
                     f"{t['p']:.2g} | {t['p_holm']:.2g} |")
    return (f"the {paired['split']} split, paired on the questions and over the seeds (two-level t), Holm over "
            f"these {len(paired['tests'])} tests; a subset chosen after the table was read, so a follow-up, not a "
            "claim of the table.\n\n" + "\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders (results/<profile>/runs/ledgersqa-*)")
    ap.add_argument("--out", type=Path, help="also write the scores as JSON (method -> split -> inside/past)")
    ap.add_argument("--paired", metavar="BASE", help="test each method against BASE on each subset (test split)")
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
    by_method: dict[str, list[tuple[str, Any]]] = {}
    questions: dict[str, list[dict[str, list[dict[str, Any]]]]] = {}
    for run in args.runs:
        rows: dict[str, list[dict[str, Any]]] = {}
        method, scores = run_scores(run, rows)
        by_method.setdefault(method, []).append((run.name, scores))
        questions.setdefault(method, []).append(rows)
    written: dict[str, Any] = {}
    for method, runs in by_method.items():
        scores = _mean([s for _, s in runs])
        written[method] = {"run": ";".join(name for name, _ in runs), "n_seeds": len(runs), **scores}
    print(window_markdown(written))
    if args.paired:
        tests = paired_by_window(questions, args.paired)
        print(f"\nminus {args.paired}, test split, Holm over these {len(tests)} tests:")
        for t in tests:
            print(f"{t['method']} {t['subset']} ({t['n']} questions, seeds {t['seeds'][0]}/{t['seeds'][1]}) "
                  f"{t['metric']}: {t['diff']:+.1f} [{t['low']:+.1f}, {t['high']:+.1f}] p={t['p']:.2g} "
                  f"Holm p={t['p_holm']:.2g} ({t['test']})")
        written["paired"] = {"base": args.paired, "split": "test", "tests": tests}
    if args.out:
        from scaleformer.io import atomic_write_json

        atomic_write_json(args.out, written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
