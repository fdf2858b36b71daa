"""scaleformer.artifacts.power: the detectable difference of a test split, from its own paired intervals."""

from __future__ import annotations

import pytest
from scipy.stats import norm
from scipy.stats import t as student

from scaleformer.artifacts.power import detectable


def _row(metric: str, half: float, df: float | None = None, split: str = "test") -> dict:
    return {"split": split, "metric": metric, "ours": "1.0", "p_value": "0.5", "n_docs": "64",
            "diff_ci_low": str(-half), "diff_ci_high": str(half), "diff_df": "" if df is None else str(df)}


def test_one_seed_uses_z_over_the_test_family_and_several_seeds_use_t_on_their_df():
    rows = [_row("rouge1", 1.96), _row("rouge1", 1.96), _row("rouge1", 9.0, split="dev")]  # dev is no family
    mult = norm.ppf(1 - 0.05 / 4) + norm.ppf(0.8)
    text = detectable(rows, "rouge1", "R-1", "t.csv")
    assert "2 comparisons" in text and f"a difference of {mult:.1f} points" in text and f"= {mult:.2f} x SE" in text
    df = 3.0
    se = 1.0
    seeds = [_row("rouge1", student.ppf(0.975, df) * se, df)] * 2
    need = (student.ppf(1 - 0.05 / 4, df) + student.ppf(0.8, df)) * se
    text = detectable(seeds, "rouge1", "R-1", "t.csv")
    assert f"median standard error of {se:.2f}" in text and f"a difference of {need:.1f} points" in text
    assert "median 3.0: few seeds leave few" in text and need > mult  # few degrees of freedom ask for more
    assert "(from " not in text  # every comparison alike: no range to print
    many = detectable([_row("rouge1", 2.0, 90.0), _row("rouge1", 3.0, 90.0)], "rouge1", "R-1", "t.csv")
    assert "median 90.0)" in many and "few seeds" not in many and "(from 1.0" in many


def test_a_table_without_tests_is_named():
    with pytest.raises(ValueError, match="t.csv: no paired tests"):
        detectable([_row("rouge1", 1.0, split="dev")], "rouge1", "R-1", "t.csv")
    with pytest.raises(ValueError, match="no test-split f1 comparison"):
        detectable([_row("rouge1", 1.0)], "f1", "F1", "t.csv")
