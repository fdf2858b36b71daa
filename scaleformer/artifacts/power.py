"""What a table's held-out test split can show: the smallest difference from the baseline found with 80%
power at 0.05 after Holm's correction, computed from the table's own paired intervals (never promised
before the run).

m is the test split's comparisons, the family Holm corrects over (Holm's first step is Bonferroni's).
With one seed the paired test is on the documents: (z_{1-0.05/(2m)} + z_{0.8}) x SE, SE = the paired
interval's half-width / 1.96. Over seeds and documents it is a t on few degrees of freedom (the CSV's
``diff_df``): (t_{1-0.05/(2m), df} + t_{0.8, df}) x SE, SE = half-width / t_{0.975, df}, per comparison.
"""

from __future__ import annotations

from typing import Any

ALPHA, POWER = 0.05, 0.8


def detectable(rows: list[dict[str, Any]], metric: str, label: str, source: str) -> str:
    """The power sentence for ``metric`` (shown as ``label``) from a table CSV's ``rows`` (``source``: the
    CSV's path, for the sentence and the errors). ValueError where the table holds no test to read."""
    from scipy.stats import norm
    from scipy.stats import t as student

    tested = [r for r in rows if r.get("p_value") and r["split"] == "test" and r.get("ours")]
    if not tested:
        raise ValueError(f"{source}: no paired tests on the test split (rendered before intervals existed)")
    m = len(tested)
    mine = [r for r in tested if r["metric"] == metric]
    if not mine:
        raise ValueError(f"{source}: no test-split {metric} comparison")
    dfs = [float(r["diff_df"]) if r.get("diff_df") else None for r in mine]

    def q(p: float, df: float | None) -> float:
        return float(norm.ppf(p) if df is None else student.ppf(p, df))

    ses = [(float(r["diff_ci_high"]) - float(r["diff_ci_low"])) / 2 / q(0.975, df) for r, df in zip(mine, dfs)]
    need = sorted((q(1 - ALPHA / (2 * m), df) + q(POWER, df)) * se for se, df in zip(ses, dfs))
    ses.sort()
    n = sorted({str(r["n_docs"]) for r in tested})
    if any(df is not None for df in dfs):
        known = sorted(df for df in dfs if df is not None)
        mid = known[len(known) // 2]
        rule = (f"(t(1 - 0.05/{2 * m}, df) + t(0.8, df)) x SE per comparison, df the two-level test's "
                f"(median {mid:.1f}" + (": few seeds leave few, so the multiplier is large)" if mid < 30 else ")"))
    else:
        rule = f"(z(1 - 0.05/{2 * m}) + z(0.8)) x SE = {q(1 - ALPHA / (2 * m), None) + q(POWER, None):.2f} x SE"
    return (f"Power of `{source}`'s test split ({'/'.join(n)} documents per cell, {m} comparisons with the baseline "
            f"on the test split, the family of the correction): the paired {label} differences have a median "
            f"standard error of {ses[len(ses) // 2]:.2f} points{_range(ses, '.2f', 'from ')}, so a difference of "
            f"{need[len(need) // 2]:.1f} points{_range(need, '.1f')} is found with 80% power at 0.05 after the "
            f"correction: {rule}.")


def _range(xs: list[float], fmt: str, lead: str = "") -> str:
    """`` (from a to b)`` of sorted ``xs`` as printed; nothing where one comparison (or all alike) gives it."""
    lo, hi = f"{xs[0]:{fmt}}", f"{xs[-1]:{fmt}}"
    return "" if lo == hi else f" ({lead}{lo} to {hi})"
