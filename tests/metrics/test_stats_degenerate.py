"""Every interval and test of scaleformer.metrics.stats at its degenerate inputs: zero variance, one seed, one
document, NaN, empty, unequal lengths, out-of-range scores. Each either answers (and the answer is the limit the
math gives) or refuses in one line naming the value; none returns NaN or crashes elsewhere."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scaleformer.artifacts.significance import cell_interval
from scaleformer.metrics import stats

NAN = float("nan")
GRID = np.arange(24, dtype=float).reshape(3, 8)  # [seeds, docs]


def _ok(x) -> bool:
    """An answer with no NaN in it."""
    vals = [v for v in (getattr(x, k, None) for k in ("mean", "low", "high", "diff", "p_value")) if v is not None]
    return all(isinstance(v, float) and math.isfinite(v) for v in vals)


ANSWERS = [
    ("mean_ci-zero-variance", lambda: stats.mean_ci([5.0] * 8), lambda r: (r.low, r.high, r.method) == (5.0, 5.0, "none")),
    ("mean_ci-one-document", lambda: stats.mean_ci([5.0]), lambda r: r.n == 1 and r.low == r.high == 5.0),
    ("small_ci-zero-variance", lambda: stats.small_ci([3.0, 3.0]), lambda r: r.method == "none"),
    ("small_ci-one-document", lambda: stats.small_ci([3.0]), lambda r: r.n == 1 and r.low == r.high == 3.0),
    ("proportion_ci-none", lambda: stats.proportion_ci(0, 64, 100.0), lambda r: r.low == 0.0 and 5.5 < r.high < 5.7),
    ("proportion_ci-all", lambda: stats.proportion_ci(8, 8), lambda r: r.high == 1.0 and r.low > 0.6),
    ("seeds_ci-one-seed", lambda: stats.seeds_ci([[1.0, 2.0, 3.0]]), lambda r: r.n == 3),
    ("seeds_ci-one-document", lambda: stats.seeds_ci([[10.0], [20.0], [30.0]]),
     lambda r: r.n == 1 and r.method == "t over seeds" and r.low < 20.0 < r.high),
    ("seeds_ci-zero-variance", lambda: stats.seeds_ci([[2.0, 2.0], [2.0, 2.0]]), lambda r: r.low == r.high == 2.0),
    ("seeds_paired-certain", lambda: stats.seeds_paired(GRID + 5, GRID), lambda r: (r.diff, r.p_value) == (5.0, 0.0)),
    ("seeds_paired-nothing", lambda: stats.seeds_paired(GRID, GRID), lambda r: (r.diff, r.p_value) == (0.0, 1.0)),
    ("paired-zero-variance", lambda: stats.paired([6.0] * 8, [1.0] * 8), lambda r: r.diff == 5.0 and r.p_value < 0.01),
    ("paired-one-document", lambda: stats.paired([2.0], [1.0]), lambda r: r.p_value == 1.0),
    ("sign_flip-all-zero", lambda: stats.sign_flip_p([0.0] * 5), lambda r: r[0] == 1.0),
    ("cell_interval-one-seed-clamped", lambda: cell_interval([[0.0, 0.0, 0.0, 10.0]], "rouge1")[0],
     lambda r: r.low == 0.0 and r.high <= 100.0),
    ("cell_interval-several-seeds-at-zero", lambda: cell_interval([[0.0] * 4, [0.0] * 4], "rouge1")[0],
     lambda r: r.low == 0.0 and r.high > 0.0),
]


@pytest.mark.parametrize("what, call, holds", ANSWERS, ids=[a[0] for a in ANSWERS])
def test_degenerate_inputs_with_an_answer_get_the_limit(what, call, holds):
    result = call()
    assert holds(result), result
    assert isinstance(result, tuple) or _ok(result), result


REFUSED = [
    ("mean_ci-empty", lambda: stats.mean_ci([]), "at least one"),
    ("mean_ci-nan", lambda: stats.mean_ci([1.0, NAN]), "not a finite number"),
    ("small_ci-empty", lambda: stats.small_ci([]), "at least one"),
    ("small_ci-nan", lambda: stats.small_ci([NAN, 1.0]), "not a finite number"),
    ("proportion_ci-fraction", lambda: stats.proportion_ci(2.5, 5), "not a share"),
    ("proportion_ci-over", lambda: stats.proportion_ci(6, 5), "not a share"),
    ("proportion_ci-empty", lambda: stats.proportion_ci(0, 0), "not a share"),
    ("seeds_ci-empty", lambda: stats.seeds_ci([]), "same documents"),
    ("seeds_ci-unequal", lambda: stats.seeds_ci([[1.0, 2.0], [3.0]]), "documents per seed"),
    ("seeds_ci-nan", lambda: stats.seeds_ci([[1.0, NAN], [2.0, 3.0]]), "not a finite number"),
    ("seeds_paired-one-seed", lambda: stats.seeds_paired([[1.0, 2.0]], [[1.0, 2.0]]), ">= 2 x 2"),
    ("seeds_paired-unequal", lambda: stats.seeds_paired(GRID, GRID[:, :4]), "one shape"),
    ("seeds_paired-nan", lambda: stats.seeds_paired(GRID + NAN, GRID), "not a finite number"),
    ("levels-one-seed", lambda: stats.levels([[1.0, 2.0]]), "at least 2 seeds"),
    ("paired-empty", lambda: stats.paired([], []), "same documents"),
    ("paired-unequal", lambda: stats.paired([1.0, 2.0], [1.0]), "same documents"),
    ("paired-nan", lambda: stats.paired([1.0, NAN], [1.0, 2.0]), "not a finite number"),
    ("sign_flip-empty", lambda: stats.sign_flip_p([]), "at least one"),
    ("sign_flip-nan", lambda: stats.sign_flip_p([1.0, NAN]), "not a finite number"),
    ("holm-out-of-range", lambda: stats.holm([0.5, 1.5]), "not in \\[0, 1\\]"),
    ("holm-nan", lambda: stats.holm([NAN]), "not in \\[0, 1\\]"),
    ("cell_interval-out-of-range", lambda: cell_interval([[150.0, 90.0]], "rouge1"), "outside \\[0, 100\\]"),
    ("cell_interval-negative", lambda: cell_interval([[-1.0, 90.0]], "f1"), "outside \\[0, 100\\]"),
]


@pytest.mark.parametrize("what, call, says", REFUSED, ids=[r[0] for r in REFUSED])
def test_degenerate_inputs_without_an_answer_are_refused_in_one_line(what, call, says):
    with pytest.raises(ValueError, match=says) as e:
        call()
    assert "\n" not in str(e.value)
