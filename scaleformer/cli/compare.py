"""Does run A beat run B? The paired difference on the documents both scored, its 95% interval and p-value.

    scaleformer compare results/runs/<run A> results/runs/<run B>
    scaleformer compare RUN_A RUN_B --split test --metric rouge1 --metric exact_match --json out.json

Each of RUN_A, RUN_B is a run folder (its newest evaluation), an evaluation folder
(``eval/step_<N>-<hash>/``) or a ``scores_<split>.jsonl`` file. Documents are matched by id; the two
runs must have scored the same documents against the same references, or the command stops with one
line saying how they differ (a comparison over different documents is not paired). The interval is
a paired bootstrap over documents, the p-value a sign-flip permutation test
(:mod:`scaleformer.metrics.stats`); one comparison, so no multiple-testing correction here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scaleformer.errors import ConfigError
from scaleformer.io import atomic_write_json, iter_jsonl
from scaleformer.metrics.stats import paired

DEFAULT_METRICS = ("rouge1", "rouge2", "rougeL", "rougeLsum", "f1", "exact_match", "bertscore_f1", "fact_recall")


def scores_file(path: Path, split: str | None) -> Path:
    """The scores file a path names: the file itself, an evaluation folder's, or a run's newest evaluation's."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise ConfigError(f"{path}: no such run, evaluation folder or scores file")
    evals = [path] if list(path.glob("scores_*.jsonl")) else sorted(
        (p for p in (path / "eval").glob("step_*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    if not evals:
        raise ConfigError(f"{path}: holds no evaluation with per-document scores (scores_<split>.jsonl); "
                          "runs evaluated before this version can be re-evaluated with trainer.do_train=false")
    folder = evals[-1]
    names = sorted(p.name for p in folder.glob("scores_*.jsonl"))
    if split is None:
        split = next((s for s in ("test", "validation") if f"scores_{s}.jsonl" in names), None)
        if split is None and names:
            split = names[0].removeprefix("scores_").removesuffix(".jsonl")
    f = folder / f"scores_{split}.jsonl"
    if not f.is_file():
        raise ConfigError(f"{folder}: no scores for split {split!r} (has: {', '.join(names) or 'none'})")
    return f


def _references(scores: Path) -> dict[str, Any]:
    """Each document's references, from the predictions file beside the scores (absent: not checked)."""
    preds = scores.with_name(scores.name.replace("scores_", "predictions_", 1))
    if not preds.is_file():
        return {}
    return {str(r["id"]): r.get("reference") for _, r in iter_jsonl(preds)}


def load(scores: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    rows = {str(r["id"]): r for _, r in iter_jsonl(scores)}
    if not rows:
        raise ConfigError(f"{scores}: no scored documents")
    return rows, _references(scores)


def compare(a: Path, b: Path, metrics: Sequence[str] | None = None) -> dict[str, Any]:
    """The paired comparison of two scores files, per metric (both files must hold it)."""
    (ra, refs_a), (rb, refs_b) = load(a), load(b)
    only_a, only_b = sorted(set(ra) - set(rb)), sorted(set(rb) - set(ra))
    if only_a or only_b:
        example = (only_a or only_b)[0]
        raise ConfigError(f"the runs scored different documents ({len(only_a)} only in A, {len(only_b)} only in B, "
                          f"e.g. {example!r}): compare runs evaluated on the same split of the same data")
    ids = sorted(ra)
    differ = [i for i in ids if i in refs_a and i in refs_b and refs_a[i] != refs_b[i]]
    if differ:
        raise ConfigError(f"the runs' references differ for {len(differ)} of {len(ids)} documents (e.g. "
                          f"{differ[0]!r}): the scores are not comparable")
    common = [k for k in (metrics or DEFAULT_METRICS)
              if all(isinstance(ra[i].get(k), int | float) and isinstance(rb[i].get(k), int | float) for i in ids)]
    missing = [k for k in (metrics or []) if k not in common]
    if missing:
        raise ConfigError(f"--metric {missing[0]}: not scored for every document of both runs")
    out: dict[str, Any] = {"a": str(a), "b": str(b), "n_documents": len(ids), "metrics": {}}
    for k in common:
        xa, xb = [float(ra[i][k]) for i in ids], [float(rb[i][k]) for i in ids]
        p = paired(xa, xb)
        out["metrics"][k] = {"mean_a": sum(xa) / len(xa), "mean_b": sum(xb) / len(xb), "diff": p.diff,
                             "ci_low": p.low, "ci_high": p.high, "p_value": p.p_value}
    return out


def render(result: dict[str, Any]) -> str:
    lines = [f"A: {result['a']}", f"B: {result['b']}", f"{result['n_documents']} documents scored by both; "
             "A - B, 95% paired bootstrap interval, sign-flip permutation p-value", "",
             f"{'metric':<14}{'A':>8}{'B':>8}{'A - B':>8}  {'95% CI':<18}{'p':>8}"]
    for k, m in result["metrics"].items():
        ci = f"[{m['ci_low']:+.2f}, {m['ci_high']:+.2f}]"
        lines.append(f"{k:<14}{m['mean_a']:>8.2f}{m['mean_b']:>8.2f}{m['diff']:>+8.2f}  {ci:<18}{m['p_value']:>8.4f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scaleformer compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_a", type=Path, help="run folder, evaluation folder or scores_<split>.jsonl")
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--split", default=None, help="the split to compare (default: test, else validation)")
    ap.add_argument("--metric", action="append", default=None, help="a score to compare (repeatable; default: all)")
    ap.add_argument("--json", type=Path, default=None, help="also write the comparison to this file")
    args = ap.parse_args(argv)
    try:
        result = compare(scores_file(args.run_a, args.split), scores_file(args.run_b, args.split), args.metric)
    except (ConfigError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(render(result))
    if args.json is not None:
        atomic_write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
