"""Which interval a cell gets, which comparisons make Holm's family, and what a cell prints
(scaleformer.artifacts.significance), on hand-made per-document scores."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scaleformer.artifacts import significance as sig
from scaleformer.metrics import stats


def _scores(values, metric="rouge1", refs=None):
    return {f"d{i}": {"id": f"d{i}", metric: float(v), **({sig.REF: refs[i]} if refs else {})}
            for i, v in enumerate(values)}


def _row(split, method, metric="rouge1", ours=1.0):
    return {"split": split, "method": method, "dataset": "x", "metric": metric, "ours": ours}


def test_holm_runs_over_the_test_split_only_and_names_its_family():
    rng = np.random.default_rng(0)
    base = rng.normal(40, 8, 64)
    scores = {}
    for split in ("dev", "test"):
        scores[(split, "trunc", "x")] = [_scores(base)]
        scores[(split, "a", "x")] = [_scores(base + 3 + rng.normal(0, 1, 64))]
        scores[(split, "b", "x")] = [_scores(base + rng.normal(0, 1, 64))]
    rows = [_row(s, m) for s in ("dev", "test") for m in ("trunc", "a", "b")]
    sig.annotate(rows, scores, "trunc")
    by = {(r["split"], r["method"]): r for r in rows}
    assert by[("test", "a")]["significant"] is True and by[("test", "a")]["family"] == "test (2 comparisons)"
    pa, pb = by[("test", "a")]["p_value"], by[("test", "b")]["p_value"]
    assert by[("test", "a")]["p_holm"] == pytest.approx(min(1.0, 2 * pa)) and by[("test", "b")]["p_holm"] == pytest.approx(max(pb, 2 * pa))
    assert by[("dev", "a")]["p_value"] is not None and by[("dev", "a")]["significant"] is None  # dev: no mark
    assert by[("dev", "a")]["p_holm"] is None and by[("test", "trunc")]["p_value"] is None


def test_pairs_with_different_references_are_refused():
    refs = ["r0", "r1", "r2"]
    scores = {("test", "trunc", "x"): [_scores([1, 2, 3], refs=refs)],
              ("test", "a", "x"): [_scores([2, 3, 4], refs=["r0", "other", "r2"])]}
    with pytest.raises(ValueError, match="document 'd1' has different references"):
        sig.annotate([_row("test", "trunc"), _row("test", "a")], scores, "trunc")


def test_read_scores_takes_the_reference_digest_from_the_predictions(tmp_path):
    (tmp_path / "scores_test.jsonl").write_text(json.dumps({"id": "q1", "exact_match": 100.0}) + "\n")
    (tmp_path / "predictions_test.jsonl").write_text(json.dumps({"id": "q1", "prediction": "a", "reference": ["b"]}) + "\n")
    got = sig.read_scores(tmp_path, "test")
    assert len(got["q1"][sig.REF]) == 16 and got["q1"]["exact_match"] == 100.0


def test_a_share_gets_clopper_pearson_few_documents_get_t_and_several_seeds_two_levels():
    zero, _ = sig.cell_interval([[0.0] * 64], "exact_match")
    assert zero.method == "Clopper-Pearson" and zero.high == pytest.approx(5.6, abs=0.05)
    assert sig.cell_text({"ours": 0.0, "ci_low": zero.low, "ci_high": zero.high}) == "0.0 [0.0, 5.6]"
    # a bounded score at one end on every document: no spread for t or BCa, the documents still bound it
    rouge_zero, _ = sig.cell_interval([[0.0] * 64], "rouge1")
    assert rouge_zero.method == "exact bound" and (rouge_zero.low, rouge_zero.high) == (0.0, zero.high)
    full, _ = sig.cell_interval([[100.0] * 64], "fact_recall")
    assert full.method == "exact bound" and full.high == 100.0 and full.low == pytest.approx(94.4, abs=0.05)
    assert sig.cell_interval([[0.0] * 63 + [1.0]], "rouge1")[0].method != "exact bound"
    assert sig.cell_interval([[0.0] * 64], "bertscore_f1")[0].high == 0.0  # unbounded: no bound to lean on
    eight, _ = sig.cell_interval([[float(v) for v in range(8)]], "rouge1")
    assert eight == stats.small_ci(range(8)) and eight.method == "t"
    grid = np.random.default_rng(1).normal(30, 5, (3, 40)).tolist()
    two, extra = sig.cell_interval(grid, "rouge1")
    assert two == stats.seeds_ci(grid) and set(extra) == {"seed_sd", "doc_sd"}


def test_several_seeds_keep_a_bounded_score_in_range_and_an_all_zero_share_gets_its_bound():
    zeros, _ = sig.cell_interval([[0.0] * 64] * 3, "exact_match")  # 0 of 64 questions, three seeds
    assert zeros.method == "Clopper-Pearson" and zeros.high == pytest.approx(5.6, abs=0.05)
    recall, extra = sig.cell_interval([[0.0] * 64] * 3, "fact_recall")  # a recall of 0 everywhere: the same bound
    assert recall.method == "exact bound" and recall.high == zeros.high and extra["seed_sd"] == 0.0
    rare = [[0.0] * 63 + [20.0], [0.0] * 64, [0.0] * 64]  # one document's recall, one seed: t reaches below 0
    low, _ = sig.cell_interval(rare, "fact_recall")
    assert stats.seeds_ci(rare).low < 0 and low.low == 0.0 and low.high == stats.seeds_ci(rare).high
    assert sig.cell_interval(rare, "bertscore")[0] == stats.seeds_ci(rare)  # unbounded: as t gives it


def test_asymmetric_intervals_print_both_ends():
    assert sig.interval_text(1.8, 0.0, 7.1) == "[0.0, 7.1]"
    assert sig.interval_text(48.2, 46.3, 50.1) == "±1.9"
    assert sig.interval_text(5.0, 5.0, 5.0) == "±0.0"


def test_several_seeds_are_compared_over_both_levels():
    rng = np.random.default_rng(2)
    doc = rng.normal(0, 8, 50)
    grids = {m: [_scores(40 + shift + doc + rng.normal(0, 1.5) + rng.normal(0, 2, 50)) for _ in range(3)]
             for m, shift in (("trunc", 0.0), ("a", 6.0))}
    rows = [_row("test", "trunc"), _row("test", "a")]
    sig.annotate(rows, {("test", m, "x"): v for m, v in grids.items()}, "trunc")
    assert rows[1]["test_method"] == "two-level t" and rows[1]["n_seeds"] == 3 and rows[1]["seed_sd"] is not None
    means = {m: [np.mean([d["rouge1"] for d in s.values()]) for s in v] for m, v in grids.items()}
    assert rows[1]["diff_seed_min"] == pytest.approx(min(means["a"]) - max(means["trunc"]))
    assert rows[1]["diff_seed_max"] == pytest.approx(max(means["a"]) - min(means["trunc"]))
    assert "the methods differ over seeds" in sig.caption("trunc", "Trunc.", [1, 2, 3])
    assert "these trained checkpoints differ" in sig.caption("trunc", "Trunc.", [42])


def test_a_table_restated_from_its_csv_takes_the_test_family_and_share_intervals():
    from scaleformer.artifacts.restate import restate_rows

    def row(split, method, metric, ours, p=None, n=64):
        return {"split": split, "method": method, "metric": metric, "ours": ours, "n_docs": n, "n_seeds": 1,
                "p_value": p, "p_holm": 0.5, "significant": True, "ci_low": 1.0, "ci_high": 2.0}

    zero = row("test", "b", "fact_recall", 0.0) | {"ci_low": 0.0, "ci_high": 0.0}  # rendered "0.0 ±0.0" before
    rows = restate_rows([row("dev", "a", "exact_match", 0.0, 0.001), row("test", "a", "exact_match", 0.0, 0.001),
                         row("test", "b", "rouge1", 30.0, 0.02), row("test", "trunc", "rouge1", 31.0), zero])
    dev, a, b, trunc, zero = rows
    assert zero["ci_method"] == "exact bound" and zero["ci_high"] == pytest.approx(5.6, abs=0.05)
    assert dev["significant"] is None and dev["p_holm"] is None  # dev: no mark
    assert a["p_holm"] == pytest.approx(0.002) and a["significant"] is True and a["family"] == "test (2 comparisons)"
    assert b["p_holm"] == pytest.approx(0.02) and b["significant"] is True
    assert a["ci_high"] == pytest.approx(5.6, abs=0.05) and a["ci_method"] == "Clopper-Pearson"
    assert (b["ci_low"], b["ci_high"]) == (1.0, 2.0) and trunc["p_holm"] is None  # kept; baseline untested


def test_seed_spread_compares_with_the_cells_own_standard_error():
    rows = [{"split": "test", "metric": "rouge1", "seed_sd": "0.9", "doc_sd": "5.0", "n_docs": "100"}] * 3
    text = sig.seed_spread(rows, "rouge1", "R-1")
    assert "a mean over 100 documents has a document standard error of 0.50, so one seed's shift is larger" in text
    assert sig.seed_spread([{**rows[0], "seed_sd": ""}], "rouge1", "R-1") == ""


def test_seeds_agree_names_unmarked_cells_whose_every_seed_is_on_one_side():
    def row(method, dataset, lo, hi, significant="False", metric="rouge1"):
        return {"split": "test", "method": method, "dataset": dataset, "metric": metric, "significant": significant,
                "diff_seed_min": lo, "diff_seed_max": hi, "n_seeds": "3"}

    rows = [row("sled", "9k", "0.5", "4.0"), row("sled", "30k", "1.0", "6.0"), row("mem", "9k", "-2.0", "3.0"),
            row("sf", "9k", "-5.0", "-1.0"), row("unl", "9k", "2.0", "5.0", "True"), row("x", "9k", "", ""),
            row("sled", "2k", "1.0", "2.0"), row("sled", "9k", "1.0", "2.0", metric="f1")]
    text = sig.seeds_agree(rows, "rouge1", "R-1", {"sled": "SLED"}, {"9k": "9k", "30k": "30k"}, "trunc")
    assert "R-1 above every trunc seed's: SLED (9k, 30k) and below every trunc seed's: sf (9k), yet unmarked: 3 seeds agree" in text
    assert "mem" not in text and "unl" not in text and "2k" not in text  # mixed, marked, other column
    assert sig.seeds_agree(rows[2:3], "rouge1", "R-1", {}, {"9k": "9k"}, "trunc") == ""
