"""Does run A beat run B? The paired difference on the documents both scored, its 95% interval and p-value.

    scaleformer compare results/runs/<run A> results/runs/<run B>
    scaleformer compare RUN_A RUN_B --split test --metric rouge1 --metric exact_match --json out.json

Each of RUN_A, RUN_B is a run folder (its newest evaluation), an evaluation folder
(``eval/step_<N>-<hash>/``) or a ``scores_<split>.jsonl`` file. Documents are matched by id; the two
runs must have scored the same documents against the same references, each document once, with
finite scores, or the command stops with one line saying what is wrong (a comparison over different
documents is not paired). The interval is a paired bootstrap over documents, the p-value a sign-flip
permutation test (:mod:`scaleformer.metrics.stats`, O(documents) memory at any size); the output
names the methods used. Each metric is a test of its own, so the p-values are Holm-corrected across the
metrics reported (the family): a run pair that differs on one metric of eight by chance is not a finding.
Both the raw and the adjusted p-value are reported; name one ``--metric`` for a single, uncorrected test.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from scaleformer.errors import ConfigError
from scaleformer.io import atomic_write_json, iter_jsonl, refuse_overwrite
from scaleformer.metrics.stats import holm, paired

DEFAULT_METRICS = ("rouge1", "rouge2", "rougeL", "rougeLsum", "f1", "exact_match", "bertscore_f1", "fact_recall")
_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
               type(None): "null"}


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


def _by_id(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """A jsonl file's rows by document id, and each id's line: every row an object with a string or
    integer id, each id once (a second row for a document would silently replace the first)."""
    rows: dict[str, dict[str, Any]] = {}
    lines: dict[str, int] = {}
    for line, r in iter_jsonl(path, ConfigError):
        if not isinstance(r, dict):
            raise ConfigError(f"{path}:{line}: a row must be a JSON object with an \"id\", got "
                              f"{_JSON_TYPES.get(type(r), type(r).__name__)}")
        if "id" not in r:
            raise ConfigError(f"{path}:{line}: the row has no \"id\"")
        key = r["id"]
        if isinstance(key, bool) or not isinstance(key, str | int):
            raise ConfigError(f"{path}:{line}: \"id\" must be a string or an integer, got {_short(key)}")
        if (k := str(key)) in rows:
            raise ConfigError(f"{path}:{line}: document id {k!r} appears twice (first on line {lines[k]}): "
                              "a document is scored once (ids are compared as strings)")
        rows[k], lines[k] = r, line
    return rows, lines


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def _references(scores: Path) -> dict[str, Any]:
    """Each document's references, from the predictions file beside the scores (absent: not checked)."""
    preds = scores.with_name(scores.name.replace("scores_", "predictions_", 1))
    if preds == scores or not preds.is_file():
        return {}
    return {k: r.get("reference") for k, r in _by_id(preds)[0].items()}


def load(scores: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any], dict[str, int]]:
    """A scores file's rows by id, the references beside it, and each id's line (for messages)."""
    rows, lines = _by_id(scores)
    if not rows:
        raise ConfigError(f"{scores}: no scored documents")
    return rows, _references(scores), lines


def _is_score(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _values(path: Path, rows: dict[str, dict[str, Any]], lines: dict[str, int], ids: list[str],
            metric: str) -> np.ndarray:
    """``[docs]``: one metric's scores in ``ids`` order; a NaN, an infinity or an integer beyond float's
    range has no mean, and is refused naming the file, the line, the document and the metric."""
    out = np.empty(len(ids))
    for j, i in enumerate(ids):
        try:
            out[j] = rows[i][metric]
        except OverflowError:
            out[j] = np.inf
    bad = np.flatnonzero(~np.isfinite(out))
    if bad.size:
        i = ids[int(bad[0])]
        raise ConfigError(f"{path}:{lines[i]}: document {i!r}: {metric}={_short(rows[i][metric])} is not a finite "
                          f"number ({bad.size} of {len(ids)} documents); a score without a finite value has no mean")
    return out


def compare(a: Path, b: Path, metrics: Sequence[str] | None = None) -> dict[str, Any]:
    """The paired comparison of two scores files, per metric (both files must hold it)."""
    (ra, refs_a, lines_a), (rb, refs_b, lines_b) = load(a), load(b)
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
              if all(_is_score(ra[i].get(k)) and _is_score(rb[i].get(k)) for i in ids)]
    missing = [k for k in (metrics or []) if k not in common]
    if missing:
        raise ConfigError(f"--metric {missing[0]}: not scored for every document of both runs")
    if not common:
        raise ConfigError(f"{a} and {b} share no metric scored for every document (looked for: "
                          f"{', '.join(DEFAULT_METRICS)}); name one with --metric")
    values = {k: (_values(a, ra, lines_a, ids, k), _values(b, rb, lines_b, ids, k)) for k in common}  # [docs] each
    for k, (xa, xb) in values.items():  # every refusal before the first resample
        with np.errstate(over="ignore"):
            far = np.flatnonzero(~np.isfinite(xa - xb))
        if far.size:
            i = ids[int(far[0])]
            raise ConfigError(f"document {i!r}: {k} A - B = {ra[i][k]!r} - {rb[i][k]!r} is beyond float's range "
                              f"({far.size} of {len(ids)} documents)")
    out: dict[str, Any] = {"a": str(a), "b": str(b), "n_documents": len(ids), "metrics": {},
                           "correction": {"method": "holm", "family": list(values)}}
    for k, (xa, xb) in values.items():
        p = paired(xa, xb)
        out["metrics"][k] = {"mean_a": float(xa.mean()), "mean_b": float(xb.mean()), "diff": p.diff,
                             "ci_low": p.low, "ci_high": p.high, "p_value": p.p_value,
                             "interval_method": p.interval_method, "test_method": p.test_method,
                             "resamples": p.resamples, "test_draws": p.test_draws, "mc_error": p.mc_error}
    # the family is the metrics compared here: each is a chance to find a difference that is not there
    for m, adjusted in zip(out["metrics"].values(), holm([m["p_value"] for m in out["metrics"].values()])):
        m["p_holm"] = adjusted
    return out


def methods_line(result: dict[str, Any]) -> str:
    """How the intervals and p-values were computed (the same for every metric but where BCa is undefined)."""
    ms = result["metrics"]
    if not ms:
        return ""
    first = next(iter(ms.values()))
    other = [f"{k}: {m['interval_method']}" for k, m in ms.items() if m["interval_method"] != "BCa"]
    how = first["test_method"]
    test = (f"all 2^{result['n_documents']} sign patterns (exact)" if how == "exact"
            else "its normal limit (30 documents or more: no Monte Carlo floor on p)" if how == "normal"
            else f"{first.get('test_draws') or first['resamples']:,} random sign patterns (Monte Carlo"
                 + (f", p's standard error up to {max(m.get('mc_error') or 0 for m in ms.values()):.1g})"
                    if first.get("mc_error") is not None else ")"))
    return (f"interval: BCa bootstrap{' (' + ', '.join(other) + ')' if other else ''}, {first['resamples']:,} "
            f"resamples; p: sign-flip permutation test, {test}")


def correction_line(result: dict[str, Any]) -> str:
    """Which tests the adjusted p-values were corrected over, so a reader knows what the family was."""
    family = result["correction"]["family"]
    if len(family) == 1:
        return "p (Holm): one metric compared, so no correction (the same as p)"
    return (f"p (Holm): Holm's correction across the {len(family)} metrics compared here (the family: "
            f"{', '.join(family)}); p is each metric's own, uncorrected")


def render(result: dict[str, Any]) -> str:
    """The comparison as a table, with how it was computed and what the correction covered."""
    lines = [f"A: {result['a']}", f"B: {result['b']}", f"{result['n_documents']} documents scored by both; "
             "A - B, 95% paired bootstrap interval, sign-flip permutation p-value", methods_line(result),
             correction_line(result), "",
             f"{'metric':<14}{'A':>8}{'B':>8}{'A - B':>8}  {'95% CI':<18}{'p':>8}{'p (Holm)':>10}"]
    for k, m in result["metrics"].items():
        ci = f"[{m['ci_low']:+.2f}, {m['ci_high']:+.2f}]"
        lines.append(f"{k:<14}{m['mean_a']:>8.2f}{m['mean_b']:>8.2f}{m['diff']:>+8.2f}  {ci:<18}"
                     f"{m['p_value']:>8.4f}{m['p_holm']:>10.4f}")
    return "\n".join(lines)


def _check_output(path: Path) -> None:
    """Refuse a --json path that cannot be written as a file, before any work."""
    if path.is_dir():
        raise ConfigError(f"--json {path}: is a folder; name a file, e.g. {path / 'compare.json'}")
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise ConfigError(f"--json {path}: {blocker} is a file, not a folder")


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
        if args.json is not None:
            _check_output(args.json)
        a, b = scores_file(args.run_a, args.split), scores_file(args.run_b, args.split)
        if args.json is not None:  # the comparison never lands on a file it reads
            refuse_overwrite({"--json": args.json}, [(f"run {w}'s {kind}", s.with_name(s.name.replace("scores_", kind + "_", 1)))
                                                     for w, s in (("A", a), ("B", b)) for kind in ("scores", "predictions")])
        result = compare(a, b, args.metric)
        print(render(result))
        if args.json is not None:
            atomic_write_json(args.json, result)
    except (ConfigError, ValueError, KeyError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
