"""Seeds as a level of their own (scaleformer.metrics.stats.levels): simulated cells with a known seed
effect, where averaging the seeds and resampling documents (the one-level method) undercovers, and the
two-level interval covers within 0.93-0.97; p-values fine enough that a clear mark is not a coin flip."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from scaleformer.metrics import stats

SEEDS, DOCS, SEED_SD, DOC_SD, REST_SD = 3, 64, 1.5, 8.0, 4.0


def _grid(rng: np.random.Generator, mu: float = 40.0) -> np.ndarray:
    """``[seeds, docs]``: mu + a seed's shift + a document's difficulty (shared by the seeds) + the rest."""
    return (mu + rng.normal(0, SEED_SD, (SEEDS, 1)) + rng.normal(0, DOC_SD, (1, DOCS))
            + rng.normal(0, REST_SD, (SEEDS, DOCS)))


def test_two_level_intervals_cover_with_a_seed_effect_and_the_one_level_ones_do_not():
    rng = np.random.default_rng(0)
    trials, two, one = 1500, 0, 0
    for _ in range(trials):
        x = _grid(rng)
        ci = stats.seeds_ci(x)
        two += ci.low <= 40.0 <= ci.high
        flat = stats.mean_ci(x.mean(axis=0), resamples=1000)  # the one-level method: seeds averaged first
        one += flat.low <= 40.0 <= flat.high
    assert ci.method == "two-level t"
    assert 0.93 <= two / trials <= 0.97
    assert one / trials < 0.90  # ~0.87: it never sees a seed's shift


def test_two_level_paired_test_holds_its_level_and_finds_a_real_difference():
    rng = np.random.default_rng(1)
    trials = 1500
    shared = [rng.normal(0, DOC_SD, (1, DOCS)) for _ in range(trials)]  # the documents both methods read
    def method(doc: np.ndarray, mu: float) -> np.ndarray:
        return mu + rng.normal(0, SEED_SD, (SEEDS, 1)) + doc + rng.normal(0, REST_SD, (SEEDS, DOCS))
    null = [stats.seeds_paired(method(d, 40.0), method(d, 40.0)) for d in shared]
    rejected = np.mean([p.p_value < 0.05 for p in null])
    flat = np.mean([stats.paired(method(d, 40.0).mean(0), method(d, 40.0).mean(0), test="auto").p_value < 0.05
                    for d in shared[:300]])
    assert 0.03 <= rejected <= 0.07 and flat > 0.2  # one level: a seed's shift reads as a difference
    assert all(p.low <= p.diff <= p.high and p.test_method == "two-level t" for p in null[:10])
    big = stats.seeds_paired(method(shared[0], 50.0), method(shared[0], 40.0))
    assert big.p_value < 0.05 and big.low < 10.0 < big.high


def test_levels_recover_known_components():
    rng = np.random.default_rng(2)
    x = 40 + rng.normal(0, 3.0, (40, 1)) + rng.normal(0, 8.0, (1, 400)) + rng.normal(0, 2.0, (40, 400))
    lv = stats.levels(x)
    assert lv.seed_sd == pytest.approx(3.0, rel=0.25) and lv.doc_sd == pytest.approx(8.0, rel=0.1)
    assert lv.rest_sd == pytest.approx(2.0, rel=0.05)
    assert stats.seeds_ci(x[:1]).method != "two-level t"  # one seed: documents only
    with pytest.raises(ValueError, match="at least 2 seeds"):
        stats.levels(x[:1])


def test_a_clear_difference_is_marked_whatever_the_rng_seed():
    """20% above Holm's first threshold for 180 comparisons: the same p (and mark) under every RNG seed."""
    n, m = 64, 180
    z = 1.2 * norm.isf(0.05 / m / 2)
    rng = np.random.default_rng(3)
    d = rng.normal(0, 5, n)
    d = d - d.mean() + z * np.sqrt(np.sum((d - d.mean()) ** 2)) / n  # its normal-limit z is ~1.2 x the threshold's
    ps = {stats.paired(d + 50, np.full(n, 50.0), seed=s).p_value for s in range(20)}
    assert len(ps) == 1 and ps.pop() * m < 0.05


@pytest.mark.parametrize("n", [12, 20, 25])
def test_small_families_get_exact_or_fine_p_values(n):
    rng = np.random.default_rng(n)
    d = rng.normal(2.0, 3.0, n)
    p, how, draws, err = stats.sign_flip_p(d)
    if n <= stats.EXACT_MAX:
        assert how == "exact" and draws == 2 ** n and err is None
        assert p == stats._sign_flip_p(d, np.random.default_rng(0), 2 ** n)[0]
    else:
        assert how == "monte-carlo" and draws == stats.MC_RESAMPLES and 0 < err < 1e-3
        normal = stats.sign_flip_p(np.tile(d, 2))  # 2n >= NORMAL_MIN: the normal limit
        assert normal[1] == "normal" and 0 <= normal[0] <= 1


def test_proportion_and_small_sample_intervals():
    zero = stats.proportion_ci(0, 64, scale=100)
    assert zero.mean == 0 and zero.low == 0 and zero.high == pytest.approx(5.6, abs=0.05)
    half = stats.proportion_ci(32, 64)
    assert half.low < 0.5 < half.high and half.method == "Clopper-Pearson"
    with pytest.raises(ValueError, match="65 of 64"):
        stats.proportion_ci(65, 64)
    t8 = stats.small_ci([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    assert t8.method == "t" and t8.low == pytest.approx(4.5 - 2.3646 * np.std(range(1, 9), ddof=1) / np.sqrt(8), abs=1e-3)
