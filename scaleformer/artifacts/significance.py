"""How sure each cell of a table is: intervals over documents and seeds, and paired tests against the
spec's baseline row, Holm-corrected over the test split's comparisons.

Everything is read from the runs' ``scores_<split>.jsonl`` (one row per document, written by every
evaluation; the references in ``predictions_<split>.jsonl`` beside them are checked to match before two
runs are paired). A cell's interval (:mod:`scaleformer.metrics.stats`):

- several seeds: both levels, a seed's shift and the documents (``seeds_ci``, Student's t), kept inside
  a bounded score's range;
- one seed: documents only, Clopper-Pearson for a share of 0/1 outcomes (EM, a town named), Student's t
  below ``SMALL_N`` documents, BCa otherwise;
- either way, a bounded score whose every outcome sits at one end of its range (a recall of 0 on every
  document and seed) gets the exact bound over its documents: t and the bootstrap see no spread there and
  would print "0.0 ±0.0", while 0 of 64 documents still allows a mean up to 5.6. The bound is Clopper-
  Pearson's at 0 (or n) of n, and it holds for any score X in [0, 1], not only a 0/1 one: X <= 1{X > 0},
  so P(X = 0) <= 1 - E[X] and P(n documents at 0) <= (1 - E[X])^n.

A method is compared with the baseline on the documents both scored: over seeds and documents where
both have the same number of seeds (``seeds_paired``), else on per-document means (``paired``): with one
seed each, a mark says that these two trained checkpoints differ, not that the methods do. Holm's family
is every comparison on the test split (columns x metrics x rows); dev is for choosing and gets p-values
but no marks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from scaleformer.io import iter_jsonl
from scaleformer.metrics.stats import (
    SMALL_N,
    Interval,
    holm,
    levels,
    mean_ci,
    paired,
    proportion_ci,
    seeds_ci,
    seeds_paired,
    small_ci,
)

ALPHA = 0.05
MARK = "*"  # differs from the baseline: paired test, Holm-corrected over the test split, p < ALPHA
FAMILY = "test"  # the split label whose comparisons make Holm's family
ASYMMETRY = 0.3  # an interval whose two sides differ by more than this share of its half-width prints [lo, hi]
REF = "_reference_sha"  # a score row's reference digest (from predictions_<split>.jsonl)
SHARES = ("exact_match", "town_accuracy")  # per document 0 or 100: the cell is a share of successes
# scores in [0, 100] whatever the model does (BERTScore, rescaled, can go below 0)
BOUNDED = ("rouge1", "rouge2", "rougeL", "rougeLsum", "f1", "fact_recall", "fact_field_recall", *SHARES)


def read_scores(result_dir: Path | None, split: str) -> dict[str, dict[str, Any]] | None:
    """A run's per-document scores of one split, by document id (None: the evaluation wrote none)."""
    if result_dir is None:
        return None
    path = Path(result_dir) / f"scores_{split}.jsonl"
    if not path.exists():
        return None
    rows = {str(r["id"]): r for _, r in iter_jsonl(path)}
    preds = path.with_name(f"predictions_{split}.jsonl")
    if preds.exists():
        for _, r in iter_jsonl(preds):
            if str(r.get("id")) in rows and "reference" in r:
                digest = hashlib.sha1(json.dumps(r["reference"], sort_keys=True).encode()).hexdigest()[:16]
                rows[str(r["id"])].setdefault(REF, digest)
    return rows


def check_references(a: Sequence[dict[str, dict[str, Any]]], b: Sequence[dict[str, dict[str, Any]]],
                     ids: Sequence[str], what: str) -> None:
    """Refuse to pair documents whose references differ between runs (same id, other data)."""
    for i in ids:
        refs = {s[i][REF] for s in [*a, *b] if REF in s[i]}
        if len(refs) > 1:
            raise ValueError(f"{what}: document {i!r} has different references in the runs compared "
                             f"({len(refs)} versions): they did not score the same data")


def _is_share(values: list[list[float]], metric: str) -> float | None:
    """The scale (1 or 100) of a SHARES metric whose every value is 0 or that scale."""
    if metric not in SHARES:
        return None
    flat = {v for row in values for v in row}
    for scale in (100.0, 1.0):
        if flat <= {0.0, scale}:
            return scale
    return None


def _edge_ci(values: list[list[float]], metric: str) -> Interval | None:
    """The exact bound of a bounded score whose every value sits at one end of its range (module
    docstring), over its documents; None where the values spread."""
    flat = {v for row in values for v in row}
    if metric not in BOUNDED or len(flat) != 1:
        return None
    scale, (v,) = _is_share(values, metric) or 100.0, flat
    if v not in (0.0, scale):
        return None
    n = len(values[0])
    ci = proportion_ci(n if v else 0, n, scale)
    return ci if metric in SHARES else replace(ci, method="exact bound")


def cell_interval(values: list[list[float]], metric: str = "") -> tuple[Interval, dict[str, Any]]:
    """A cell's interval from ``values [seeds, docs]`` and what it rests on (module docstring). A bounded
    score outside [0, 100] is refused (an interval of it would come out with its low above its high); every
    interval of a bounded score is kept inside that range."""
    if metric in BOUNDED:
        bad = [v for row in values for v in row if not 0.0 <= v <= 100.0]
        if bad:
            raise ValueError(f"cell_interval: {metric} score {bad[0]!r} is outside [0, 100] ({len(bad)} of "
                             f"{sum(map(len, values))} scores): not a {metric} in points")
    per_doc = [sum(col) / len(col) for col in zip(*values)]
    edge = _edge_ci(values, metric)
    if len(values) >= 2 and len(values[0]) >= 2:
        lv = levels(values)
        ci = seeds_ci(values)
        if edge is not None:  # every outcome alike: t has no spread, the documents bound it
            ci = edge
        elif metric in BOUNDED:  # t knows no range: 0.3 +-0.4 of a recall is [0, 0.7]
            ci = replace(ci, low=max(ci.low, 0.0), high=min(ci.high, 100.0))
        return ci, {"seed_sd": lv.seed_sd, "doc_sd": lv.doc_sd}
    if (scale := _is_share(values, metric)) is not None:
        return proportion_ci(round(sum(per_doc) / scale), len(per_doc), scale), {}
    if edge is not None:
        return edge, {}
    ci = small_ci(per_doc) if len(per_doc) < SMALL_N else mean_ci(per_doc)
    if metric in BOUNDED:  # as the several-seed path: t and a bootstrap know no range
        ci = replace(ci, low=max(ci.low, 0.0), high=min(ci.high, 100.0))
    return ci, {}


def _matrix(seed_scores: Sequence[dict[str, dict[str, Any]]], metric: str,
            ids: Sequence[str]) -> list[list[float]] | None:
    """``[seeds, docs]`` values of one metric, or None where a document lacks it."""
    out = []
    for scores in seed_scores:
        row = [scores[i].get(metric) for i in ids]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in row):
            return None
        out.append([float(v) for v in row])
    return out


def _shared_ids(seed_scores: Sequence[dict[str, dict[str, Any]]]) -> list[str]:
    ids = set(seed_scores[0])
    for s in seed_scores[1:]:
        ids &= set(s)
    return sorted(ids)


def scores_interval(seed_scores: Sequence[dict[str, dict[str, Any]]], metric: str
                    ) -> tuple[Interval, dict[str, Any]] | None:
    """The interval of one metric over the documents every seed scored (with ``n_docs``, ``n_seeds`` and
    what :func:`cell_interval` adds), or None where a document lacks the metric: a table cell's, a
    figure point's."""
    got = _values(seed_scores, metric)
    if got is None:
        return None
    ids, values = got
    ci, extra = cell_interval(values, metric)
    return ci, {"n_docs": len(ids), "n_seeds": len(seed_scores), **extra}


def _values(seed_scores: Sequence[dict[str, dict[str, Any]]], metric: str
            ) -> tuple[list[str], list[list[float]]] | None:
    """The documents every seed scored and ``[seeds, docs]`` values of ``metric`` on them (None: none, or a
    document lacks it)."""
    ids = _shared_ids(seed_scores) if seed_scores else []
    values = _matrix(seed_scores, metric, ids) if ids else None
    return None if values is None else (ids, values)


def point_fields(metric: str, extra: Sequence[str], seed_scores: Sequence[dict[str, dict[str, Any]]]
                 ) -> dict[str, Any]:
    """A figure point's numbers from its seeds' per-document scores: ``metric``'s mean (``ours``) and
    interval, and each ``extra`` metric's mean and interval (``<m>``, ``<m>_ci_low``, ``<m>_ci_high``)."""
    out: dict[str, Any] = {}
    for m in (metric, *extra):
        got = scores_interval(seed_scores, m)
        if got is None:
            continue
        ci, info = got
        mean = sum(sum(d[m] for d in s.values()) / len(s) for s in seed_scores) / len(seed_scores)
        if m == metric:
            out.update(ours=mean, ci_low=ci.low, ci_high=ci.high, ci_method=ci.method, n_docs=info["n_docs"],
                       n_seeds=info["n_seeds"])
        else:
            out.update({m: mean, f"{m}_ci_low": ci.low, f"{m}_ci_high": ci.high})
    return out


def annotate(rows: list[dict[str, Any]], scores: dict[tuple[str, str, str], list[dict[str, dict[str, Any]]]],
             baseline: str | None, family: str = FAMILY) -> None:
    """Add to each table row (``split``, ``method``, ``dataset``, ``metric``, ``ours``) its interval and,
    against ``baseline``, the paired difference, its interval, p and (on the ``family`` split) the
    Holm-adjusted p and the mark (in place).

    ``scores``: (split label, method, dataset) -> the per-document scores of each seed's run. Rows
    without scores (a missing run, the ceiling row, runs evaluated before scores files existed) keep
    empty fields: no interval is ever invented.
    """
    tested = []
    for r in rows:
        r.update({"ci_low": None, "ci_high": None, "ci_method": None, "n_docs": None, "n_seeds": None,
                  "seed_sd": None, "doc_sd": None, "baseline": baseline or "", "diff_vs_baseline": None,
                  "diff_ci_low": None, "diff_ci_high": None, "diff_df": None, "diff_seed_min": None,
                  "diff_seed_max": None, "p_value": None, "test_method": None, "p_holm": None, "family": None,
                  "significant": None})
        seed_scores = scores.get((r["split"], r["method"], r["dataset"]))
        if r["ours"] is None or not seed_scores:
            continue
        got = _values(seed_scores, r["metric"])
        if got is None:
            continue
        ids, values = got
        ci, extra = cell_interval(values, r["metric"])
        r.update(ci_low=ci.low, ci_high=ci.high, ci_method=ci.method, n_docs=len(ids), n_seeds=len(seed_scores),
                 **extra)
        base = scores.get((r["split"], baseline, r["dataset"])) if baseline and r["method"] != baseline else None
        if not base:
            continue
        shared = sorted(set(ids) & set(_shared_ids(base)))
        theirs = _matrix(base, r["metric"], shared) if shared else None
        if theirs is None:
            continue
        check_references(seed_scores, base, shared, f"{r['method']} against {baseline} on {r['dataset']} "
                                                    f"({r['split']})")
        where = {i: k for k, i in enumerate(ids)}
        mine = [[row[where[i]] for i in shared] for row in values]  # [seeds, shared docs]
        if len(mine) == len(theirs) >= 2 and len(shared) >= 2:
            p = seeds_paired(mine, theirs)
            # the seeds' own means: > 0 at the minimum, every seed of this row is above every baseline seed
            am, bm = [sum(s) / len(s) for s in mine], [sum(s) / len(s) for s in theirs]
            r.update(diff_seed_min=min(am) - max(bm), diff_seed_max=max(am) - min(bm))
        else:
            p = paired([sum(c) / len(c) for c in zip(*mine)], [sum(c) / len(c) for c in zip(*theirs)])
        r.update(diff_vs_baseline=p.diff, diff_ci_low=p.low, diff_ci_high=p.high, diff_df=p.df, p_value=p.p_value,
                 test_method=p.test_method)
        if r["split"] == family:
            tested.append(r)
    for r, adjusted in zip(tested, holm([r["p_value"] for r in tested]) if tested else []):
        r.update(p_holm=adjusted, significant=adjusted < ALPHA, family=f"{family} ({len(tested)} comparisons)")


def interval_text(mean: float, low: float, high: float, digits: int = 1) -> str:
    """``±h`` where the interval is symmetric enough, ``[lo, hi]`` where its sides differ by more than
    ASYMMETRY of its half-width (a bounded score near 0, a Clopper-Pearson interval): "1.8 ±3.6" would
    hide that it is [0, 7.1]."""
    half = (high - low) / 2
    if half > 0 and abs((high - mean) - (mean - low)) > ASYMMETRY * half:
        return f"[{low:.{digits}f}, {high:.{digits}f}]"
    return f"±{half:.{digits}f}"


def cell_text(r: dict[str, Any]) -> str:
    """``48.2 ±1.9*`` or ``1.8 [0.0, 7.1]``: the mean, its 95% interval, the mark where it differs from
    the baseline; the mean alone where no per-document scores exist."""
    if r.get("ours") is None:  # hidden references: the leaderboard scores it, from the run's prediction file
        return "leaderboard" if str(r.get("status", "")).startswith("leaderboard") else "–"
    text = f"{r['ours']:.1f}"
    if r.get("ci_low") is not None:
        text += " " + interval_text(r["ours"], r["ci_low"], r["ci_high"])
    return text + (MARK if r.get("significant") else "")


def caption(baseline: str | None, label: str, seeds: Sequence[Any], family: str = FAMILY) -> str:
    """What the interval and the mark mean, for the rendered table."""
    if len(seeds) <= 1:
        text = ("One seed per cell: each interval is over documents only (t below 20 documents, Clopper-Pearson "
                "for a share of 0/1 outcomes, BCa otherwise; the exact bound where every outcome sits at 0 or 100: "
                "0 of 64 is at most 5.6); `±h` is its half-width, `[lo, hi]` where its sides differ.")
    else:
        text = (f"{len(seeds)} seeds per cell: each interval is over seeds and documents (two levels, Student's t, "
                "kept inside a bounded score's range; the exact bound over the documents where every outcome sits "
                "at 0 or 100: 0 of 64 is at most 5.6); `±h` is its half-width, `[lo, hi]` where its sides differ.")
    if baseline:
        what = "these trained checkpoints differ" if len(seeds) <= 1 else "the methods differ over seeds"
        text += (f" `{MARK}`: {what} from {label}'s (paired on the same documents; Holm-corrected over the "
                 f"{family} split's comparisons, p < {ALPHA}; other splits are for choosing and get no mark); "
                 "no mark: no difference shown.")
    return text


def seed_counts(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    """method -> the seeds its cells rest on (the most over its cells; rows without scores left out)."""
    out: dict[str, int] = {}
    for r in rows:
        if r.get("n_seeds"):
            out[r["method"]] = max(out.get(r["method"], 0), int(r["n_seeds"]))
    return out


def table_caption(baseline: str | None, label: str, counts: dict[str, int], labels: dict[str, str],
                  default: int = 1, family: str = FAMILY) -> str:
    """:func:`caption` for a table whose rows may rest on different numbers of seeds (``counts``, from
    :func:`seed_counts`; ``default`` where no row has scores): each row's intervals and marks say what
    they rest on."""
    ns = set(counts.values()) or {default}
    if len(ns) == 1:
        return caption(baseline, label, range(ns.pop()), family)
    several = ", ".join(f"{labels.get(m, m)} {n}" for m, n in counts.items() if n > 1)
    text = (f"Seeds differ by row ({several}; the other rows 1): a row with several seeds has intervals over "
            "seeds and documents (two levels, Student's t, inside a bounded score's range); a row with one, over "
            "documents only (t below 20 documents, Clopper-Pearson for a share of 0/1 outcomes, BCa otherwise); "
            "either way the exact bound where every outcome sits at 0 or 100; `±h` is the half-width, `[lo, hi]` where its sides differ.")
    if baseline:
        text += (f" `{MARK}`: a difference from {label}'s (paired on the same documents; Holm-corrected over the "
                 f"{family} split's comparisons, p < {ALPHA}; other splits are for choosing and get no mark): the "
                 "methods differ over seeds where both rows have the same several seeds, these trained "
                 "checkpoints differ elsewhere; no mark: no difference shown.")
    return text


# ---- words for the pages that quote a table's CSV (scripts/render_results.py)

def mark_meaning(rows: list[dict[str, str]]) -> str:
    """What a mark claims, from the seeds the table's cells rest on."""
    seeds = sorted({int(r["n_seeds"]) for r in rows if r["split"] == "test" and r.get("n_seeds")})
    if seeds and seeds[0] >= 2:
        return (f"where the paired test over {'/'.join(map(str, seeds))} seeds and the documents finds the methods "
                "differ (Holm-corrected over the test split's comparisons)")
    return ("where the paired test finds that these one-seed checkpoints differ (Holm-corrected over the test "
            "split's comparisons; one trained seed per method, so not yet a claim about the methods)")


def seeds_agree(rows: list[dict[str, str]], metric: str, label: str, names: dict[str, str],
                columns: dict[str, str], baseline: str) -> str:
    """The unmarked test cells of ``metric`` whose every seed sits above (or below) every seed of the
    baseline: the seeds agree, yet the test over seeds and documents did not show a difference after the
    correction (a few seeds leave it few degrees of freedom). '' where there are none. ``names``: method
    labels; ``columns``: the datasets to read, with their labels."""
    found: dict[str, dict[str, list[str]]] = {"above": {}, "below": {}}
    seeds = set()
    for r in rows:
        if (r["split"] != "test" or r["metric"] != metric or r["dataset"] not in columns
                or r.get("significant") == "True" or r.get("diff_seed_min") in (None, "")):
            continue
        side = "above" if float(r["diff_seed_min"]) > 0 else "below" if float(r["diff_seed_max"]) < 0 else ""
        if side:
            found[side].setdefault(names.get(r["method"], r["method"]), []).append(columns[r["dataset"]])
            seeds.add(str(r.get("n_seeds") or "several"))
    said = [f"{side} every {baseline} seed's: " + "; ".join(f"{m} ({', '.join(c)})" for m, c in got.items())
            for side, got in found.items() if got]
    return (f" Every seed's {label} {' and '.join(said)}, yet unmarked: {'/'.join(sorted(seeds))} seeds agree, the "
            "test over seeds and documents could not show it after the correction." if said else "")


def seed_spread(rows: list[dict[str, str]], metric: str, label: str) -> str:
    """The median seed SD beside the median document SD of a metric's multi-seed test cells ('' if none)."""
    import statistics

    cells = [r for r in rows if r["split"] == "test" and r["metric"] == metric and r.get("seed_sd")]
    if not cells:
        return ""
    seed = statistics.median(float(r["seed_sd"]) for r in cells)
    doc = statistics.median(float(r["doc_sd"]) for r in cells)
    n = round(statistics.median(float(r["n_docs"]) for r in cells))
    se = doc / n ** 0.5
    return (f" Across seeds a cell's {label} moves by a median SD of {seed:.2f} points, against a "
            f"document SD of {doc:.1f} ({len(cells)} test cells): a mean over {n} documents has a document "
            f"standard error of {se:.2f}, so one seed's shift is {'larger' if seed > se else 'smaller'}.")
