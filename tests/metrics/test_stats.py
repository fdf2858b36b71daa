"""Intervals and paired tests against plain loops that spell out the math; per-document scores add up."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from scaleformer.metrics import stats


def _percentile_loop(x: np.ndarray, rng: np.random.Generator, n: int = 4000) -> tuple[float, float]:
    """The bootstrap as written in a textbook: resample documents with replacement, take the mean."""
    means = []
    for _ in range(n):
        means.append(x[rng.integers(0, x.size, x.size)].mean())
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


@pytest.mark.parametrize("case", range(6))
def test_mean_ci_agrees_with_a_plain_bootstrap_loop(case):
    rng = np.random.default_rng(case)
    n = int(rng.integers(60, 300))
    x = np.clip(rng.normal(40, 15, n), 0, 100) if case % 2 else 100.0 * (rng.random(n) < 0.3)  # ROUGE-like, EM-like
    got = stats.mean_ci(x, seed=case)
    lo, hi = _percentile_loop(x, np.random.default_rng(100 + case))
    width = hi - lo
    assert got.mean == pytest.approx(x.mean())
    assert got.low < got.mean < got.high and got.n == n
    # BCa and percentile differ by a skew correction and Monte Carlo noise: a few % of the width
    assert abs(got.low - lo) < 0.1 * width and abs(got.high - hi) < 0.1 * width, (got, lo, hi)
    se = x.std(ddof=1) / np.sqrt(n)
    assert got.half_width == pytest.approx(1.96 * se, rel=0.15)  # the normal approximation, roughly


def _sign_flip_p(d: np.ndarray) -> float:
    """Exact two-sided sign-flip test: every one of the 2^n sign patterns, counted."""
    observed = abs(d.mean())
    hits = sum(abs((d * np.array(s)).mean()) >= observed - 1e-12 for s in itertools.product((1, -1), repeat=d.size))
    return hits / 2 ** d.size


@pytest.mark.parametrize("case, n", [(c, 11) for c in range(5)] + [(5, 1), (6, 2)])
def test_paired_p_value_is_the_exact_sign_flip_test(case, n):
    # n=1 is the dry run's one evaluation document: scipy refuses a sample of one, the exact test is p=1.
    rng = np.random.default_rng(case)
    a = rng.normal(50, 10, n)
    b = a - rng.normal(0.8 * case, 3, n)  # a real difference from case 2 on
    got = stats.paired(a, b)
    assert got.diff == pytest.approx((a - b).mean()) and got.n == n
    assert got.p_value == pytest.approx(_sign_flip_p(a - b), abs=1e-9)
    assert got.low <= got.diff <= got.high


def test_paired_finds_a_known_difference_and_not_a_null_one():
    rng = np.random.default_rng(7)
    base = rng.normal(40, 12, 400)
    noise = rng.normal(0, 4, 400)
    better = base + 2.0 + noise - noise.mean()  # exactly +2 points on average, on the same documents
    same = base + rng.normal(0, 4, 400)
    hit, null = stats.paired(better, base), stats.paired(same, base)
    assert hit.p_value < 0.001 and hit.low < 2.0 < hit.high and hit.low > 0
    assert null.p_value > 0.05 and null.low < 0 < null.high
    identical = stats.paired(base, base)
    assert identical.diff == 0 and identical.p_value == 1.0 and identical.low == identical.high == 0


def test_degenerate_and_bad_inputs():
    assert stats.mean_ci([5.0, 5.0, 5.0]) == stats.Interval(5.0, 5.0, 5.0, 3)
    with pytest.raises(ValueError, match="at least one document"):
        stats.mean_ci([])
    with pytest.raises(ValueError, match="same documents"):
        stats.paired([1.0, 2.0], [1.0])


def test_seeds_ci_takes_both_levels_and_one_seed_is_documents_only():
    rng = np.random.default_rng(3)
    scores = rng.normal(30, 10, (3, 120))  # [seeds, docs]
    got = stats.seeds_ci(scores)
    assert got.mean == pytest.approx(scores.mean()) and got.n == 120 and got.method == "two-level t"
    assert stats.seeds_ci(scores[:1]) == stats.mean_ci(scores[0])  # tests/metrics/test_stats_seeds.py: coverage


def test_holm_matches_its_definition():
    rng = np.random.default_rng(5)
    for _ in range(20):
        p = rng.random(int(rng.integers(1, 8))) ** 2
        m = p.size
        order = np.argsort(p)
        want = np.empty(m)
        for k, i in enumerate(order):  # max over the smaller ones of (m - j) p_(j), capped at 1
            want[i] = min(1.0, max((m - j) * p[order[j]] for j in range(k + 1)))
        assert stats.holm(p) == pytest.approx(want.tolist())


def test_per_document_rows_average_to_the_reported_means():
    """compute_metrics' rows: one per scored document; each metric's mean is the reported mean
    (ROUGE, fact recall, town accuracy, answer F1/EM, BERTScore)."""
    from scaleformer.config import MetricsConfig
    from scaleformer.data.synthetic import split_rows
    from scaleformer.metrics import compute_metrics

    docs = split_rows("validation", 6, 200, seed=4)
    preds = [d["output"] if i % 2 else d["output"].split(".")[0] for i, d in enumerate(docs)]
    refs = [[d["output"]] for d in docs]
    refs[2] = []  # a hidden reference: left out of the means and of the rows
    cfg = MetricsConfig()
    cfg.bertscore.model_type = "offline"
    cfg.bertscore.num_layers = None
    for task in ("rouge", "f1"):
        rows: list[dict] = []
        m = compute_metrics(preds, refs, cfg, task_metric=task, rows=rows)
        assert [r["index"] for r in rows] == [i for i, r in enumerate(refs) if r] and len(rows) == len(docs) - 1
        keys = ["rouge1", "rouge2", "rougeL", "rougeLsum", "fact_recall", "fact_field_recall", "town_accuracy",
                "bertscore_f1"] + (["f1", "exact_match"] if task == "f1" else [])
        for k in keys:
            assert np.mean([r[k] for r in rows]) == pytest.approx(m[k], abs=1e-9), k


def test_a_run_writes_scores_beside_its_predictions(tmp_path):
    """scores_<split>.jsonl: one row per document, ids and lengths, means equal to metrics.json's."""
    from conftest import compose

    from scaleformer.runs.run import run

    result = run(compose([f"paths.root={tmp_path}/results", f"paths.cache={tmp_path}/cache", "seed=5",
                          "data.synthetic_docs.train=2", "data.synthetic_docs.validation=3",
                          "data.synthetic_docs.test=0", "data.splits.test=null", "trainer.max_steps=1",
                          "trainer.eval_splits=[validation]", "trainer.enable_progress_bar=false",
                          "generation.num_beams=1", "generation.max_new_tokens=6", "metrics.bertscore.enabled=false"]))
    ev = next((Path(tmp_path) / "results" / "runs" / result["run_id"] / "eval").glob("step_1-*"))
    preds = [json.loads(line) for line in (ev / "predictions_validation.jsonl").read_text().splitlines()]
    rows = [json.loads(line) for line in (ev / "scores_validation.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [p["id"] for p in preds] and all(r["input_tokens"] > 0 for r in rows)
    saved = json.loads((ev / "metrics.json").read_text())["splits"]["validation"]
    for k in ("rouge1", "rouge2", "rougeL", "rougeLsum", "fact_recall", "town_accuracy"):
        assert np.mean([r[k] for r in rows]) == pytest.approx(saved[k], abs=1e-9), k
    from scaleformer.cli import compare

    run_dir = Path(tmp_path) / "results" / "runs" / result["run_id"]
    same = compare.compare(compare.scores_file(run_dir, None), compare.scores_file(ev, "validation"))
    assert same["n_documents"] == len(rows)
    assert all(m["diff"] == 0 and m["p_value"] == 1.0 for m in same["metrics"].values())


def _eval_folder(root: Path, name: str, scores: list[float], refs: list[str], ids: list[str]) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "scores_validation.jsonl").write_text("".join(
        json.dumps({"id": i, "input_tokens": 100, "rouge1": s, "exact_match": 100.0 * (s > 40)}) + "\n"
        for i, s in zip(ids, scores)))
    (folder / "predictions_validation.jsonl").write_text("".join(
        json.dumps({"id": i, "prediction": "p", "reference": r}) + "\n" for i, r in zip(ids, refs)))
    return folder


def test_compare_reports_a_known_difference_and_refuses_unpaired_runs(tmp_path, capsys):
    from scaleformer.cli import compare

    rng = np.random.default_rng(11)
    ids = [f"doc-{i}" for i in range(150)]
    refs = [f"summary {i}" for i in range(150)]
    b = rng.normal(40, 10, 150)
    noise = rng.normal(0, 3, 150)
    a = b + 5.0 + noise - noise.mean()  # A is exactly 5 points better on average
    fa = _eval_folder(tmp_path, "a", a.tolist(), refs, ids)
    fb = _eval_folder(tmp_path, "b", b.tolist(), refs, ids)
    assert compare.main([str(fa), str(fb), "--metric", "rouge1", "--json", str(tmp_path / "cmp.json")]) == 0
    out = capsys.readouterr().out
    assert "150 documents scored by both" in out and "+5.00" in out
    got = json.loads((tmp_path / "cmp.json").read_text())["metrics"]["rouge1"]
    assert got["diff"] == pytest.approx(5.0) and got["ci_low"] < 5.0 < got["ci_high"] and got["p_value"] < 1e-3

    fewer = _eval_folder(tmp_path, "fewer", b[:149].tolist(), refs[:149], ids[:149])
    assert compare.main([str(fa), str(fewer)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: the runs scored different documents (1 only in A, 0 only in B") and "\n" not in err
    other = _eval_folder(tmp_path, "other-refs", b.tolist(), [r + "!" if i < 3 else r for i, r in enumerate(refs)], ids)
    assert compare.main([str(fa), str(other)]) == 2
    assert "references differ for 3 of 150 documents" in capsys.readouterr().err
    assert compare.main([str(fa), str(fb), "--metric", "bertscore_f1"]) == 2
    assert "--metric bertscore_f1: not scored" in capsys.readouterr().err
    assert compare.main([str(tmp_path / "nowhere"), str(fb)]) == 2


# ---- O(documents) memory: the closed-form jackknife and resamples drawn a block at a time ---------------


def _scipy_interval(x: np.ndarray, seed: int) -> tuple[float, float]:
    """scipy's BCa interval of the mean (its n x (n - 1) jackknife), as stats used to call it."""
    from scipy import stats as sp

    res = sp.bootstrap((x,), lambda a, axis=-1: a.mean(axis=axis), vectorized=True, axis=-1, n_resamples=10_000,
                       method="BCa", random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


@pytest.mark.parametrize("case", range(8))
def test_closed_form_jackknife_gives_scipys_bca_interval(case):
    rng = np.random.default_rng(case)
    n = int(rng.integers(2, 120))
    x = [np.clip(rng.normal(40, 15, n), 0, 100), 100.0 * (rng.random(n) < 0.2), rng.lognormal(2, 1, n),
         rng.normal(0, 1, n) - 1e3][case % 4]  # ROUGE-like, EM-like, skewed, far from 0
    if np.all(x == x[0]):
        x[0] += 1.0
    got = stats.mean_ci(x, seed=case)
    lo, hi = _scipy_interval(x, case)
    assert got.method == "BCa"
    assert abs(got.low - lo) <= 1e-12 and abs(got.high - hi) <= 1e-12, (got.low - lo, got.high - hi)
    # the acceleration from the plain leave-one-out loop, in exact fractions (far from 0, float's rounding of
    # the leave-one-out means shows in the 9th digit of a)
    q = [Fraction(v) for v in x]
    theta = [(sum(q) - q[i]) / (n - 1) for i in range(n)]
    u = [(n - 1) * (sum(theta) / n - t) for t in theta]
    want = float(sum(v ** 3 for v in u)) / (6 * float(sum(v ** 2 for v in u)) ** 1.5)
    assert stats._acceleration(x) == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_paired_interval_and_p_are_scipys_at_a_fixed_seed():
    from scipy import stats as sp

    rng = np.random.default_rng(21)
    for n in (14, 57, 300):  # 14: the first size past the exact test
        a = rng.normal(40, 10, n)
        b = a - rng.normal(0.7, 3, n)
        got = stats.paired(a, b, seed=3, test="monte-carlo")
        lo, hi = _scipy_interval(a - b, 3)
        perm = sp.permutation_test((a, b), lambda u, v, axis=-1: (u - v).mean(axis=axis), permutation_type="samples",
                                   vectorized=True, n_resamples=10_000, alternative="two-sided",
                                   random_state=np.random.default_rng(3))
        assert got.test_method == "monte-carlo" and got.p_value == perm.pvalue
        assert got.low == pytest.approx(lo, abs=1e-12) and got.high == pytest.approx(hi, abs=1e-12)


@pytest.mark.parametrize("block", [1, 7, 64, 10 ** 9])
def test_blocks_of_resamples_give_the_one_block_result(monkeypatch, block):
    """Blocks of 1 row, of 7 values (less than a row: one row), of 64 rows, or everything at once: the
    same draws in the same order, so the same interval and p-value, bit for bit."""
    rng = np.random.default_rng(9)
    a, b = rng.normal(30, 8, 200), rng.normal(29, 8, 200)
    monkeypatch.setattr(stats, "CHUNK_ELEMENTS", 10 ** 9)
    def both():
        return stats.paired(a, b, seed=4, resamples=3001, test="monte-carlo"), stats.mean_ci(a, seed=4, resamples=3001)
    whole = both()
    monkeypatch.setattr(stats, "CHUNK_ELEMENTS", block * 200 if block in (1, 64) else block)
    assert both() == whole
    assert whole[0].test_method == "monte-carlo" and whole[0].p_value > 0.0


def test_bca_falls_back_to_percentile_where_it_is_undefined():
    """Every resample below the mean (z0 = +inf): BCa's bounds are NaN, the percentile interval is used."""
    x = np.array([1.0, 2.0, 9.0])
    means = np.linspace(0.0, 3.0, 1000)  # all below the mean, 4
    lo, hi, method = stats._interval(x, means)
    assert method == "percentile" and (lo, hi) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])))


def test_holm_refuses_what_is_not_a_p_value():
    assert stats.holm([]) == [] and stats.holm([0.0, 1.0]) == [0.0, 1.0]
    for bad in (-0.5, 1.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"holm: p-value .* \(position 1\) is not in \[0, 1\]"):
            stats.holm([0.03, bad])
