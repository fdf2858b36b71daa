"""How sure a score is: bootstrap intervals over documents, and paired tests between two runs.

The statistics are scipy's (``scipy.stats.bootstrap`` with BCa, ``permutation_test`` with sign flips):
the same formulas and the same random draws in the same order, so the same p-values and intervals
(to ~1e-13: the jackknife below is exact where scipy's cancels); what differs is how they are computed. scipy materialises the whole resample array (``[resamples, docs]``), its BCa
jackknife (``[docs, docs - 1]``) and its flips (``[resamples, docs, 2]``): about 10 GB at 20,000
documents. Here resamples and flips are drawn a block of rows at a time (at most
:data:`CHUNK_ELEMENTS` values each) and the jackknife of a mean is its closed form, so memory is O(docs)
at any size. ``tests/metrics/test_stats.py`` checks these against scipy and against plain loops that
spell the math out.

- :func:`mean_ci`: a mean over documents and its 95% bootstrap interval (BCa; percentile where BCa is
  undefined, e.g. every resample on one side of the mean);
- :func:`small_ci` (a t interval, for fewer than :data:`SMALL_N` documents, where BCa covers ~0.87) and
  :func:`proportion_ci` (Clopper-Pearson, for a share of 0/1 outcomes: 0 of 64 still has an upper
  bound, 5.6%);
- :func:`seeds_ci` and :func:`seeds_paired`: seeds as a level of their own (module section below);
- :func:`paired`: the difference of two runs on the documents both scored: its mean, a 95% paired
  bootstrap interval and the two-sided p-value of a sign-flip permutation test: exact up to
  :data:`EXACT_MAX` documents, 10^6 Monte Carlo sign patterns (their error reported) below
  :data:`NORMAL_MIN`, the test's normal limit from there (``test="monte-carlo"``: scipy's 10,000 draws);
- :func:`holm`: Holm's step-down correction of a family of p-values.

A score that is not a finite number has no mean: every function refuses it (ValueError).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 10_000
SMALL_N = 20  # below: a t interval (BCa on 8 documents covered 0.87 in simulation)
EXACT_MAX = 20  # sign-flip p by enumeration up to 2^20 patterns: p as fine as 1e-6, exact
NORMAL_MIN = 30  # from here the sign-flip statistic's normal limit (deterministic, no floor on p)
MC_RESAMPLES = 1_000_000  # between: Monte Carlo, with its standard error in the record
SEED = 0
CHUNK_ELEMENTS = 1 << 21  # values per block of resamples: ~16 MB of float64 (+ as much of indices)
_EPS_TIES = 100 * np.finfo(float).eps  # scipy's relative tolerance for a null value equal to the observed one


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int
    method: str = field(default="BCa", compare=False)  # BCa | percentile | none (nothing varies)

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


@dataclass(frozen=True)
class Paired:
    """Run A minus run B on shared documents, and how the interval and the p-value were computed."""

    diff: float
    low: float
    high: float
    p_value: float
    n: int
    interval_method: str = "BCa"  # BCa | percentile | none (every difference equal: zero width)
    test_method: str = "exact"  # exact | monte-carlo | normal | two-level t (seeds_paired)
    resamples: int = RESAMPLES  # the interval's bootstrap resamples
    mc_error: float | None = None  # the Monte Carlo p-value's standard error, where it is one
    test_draws: int = 0  # sign patterns the p-value counted (exact: 2^n; monte-carlo: draws; normal: none)
    df: float | None = None  # the two-level t's degrees of freedom (Satterthwaite); None for the other tests


def _finite(x: np.ndarray, what: str) -> None:
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        raise ValueError(f"{what}: score {x[bad[0]]} of document {int(bad[0])} is not a finite number "
                         f"({bad.size} of {x.size} documents); a NaN or infinite score has no mean")


def _block(n: int) -> int:
    """Rows of ``n`` values per block: the memory bound, at least one row."""
    return max(1, CHUNK_ELEMENTS // n)


def _resampled_means(x: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """``[resamples]``: the means of ``x [docs]`` resampled with replacement, a block of rows at a time.
    Generator.integers draws the same stream whatever the block, so this equals scipy's one
    ``[resamples, docs]`` draw, row for row."""
    n = x.size
    out = np.empty(resamples)
    step = _block(n)
    for k in range(0, resamples, step):
        idx = rng.integers(0, n, (min(step, resamples - k), n))  # [rows, docs]
        out[k:k + idx.shape[0]] = np.take(x, idx).mean(axis=-1)  # np.take: x[idx], twice as fast
    return out


def _acceleration(x: np.ndarray) -> float:
    """BCa's acceleration for the mean of ``x [docs]``, from its jackknife in closed form: leaving x_i out
    gives (sum - x_i) / (n - 1), so (n - 1) * (the leave-one-out means' mean - that one) is x_i - mean.
    O(n), where scipy builds the ``[docs, docs - 1]`` leave-one-out samples (and loses ~1e-12 of a to
    their cancellation: intervals agree to ~1e-13)."""
    u = x - x.mean()  # [docs]
    u -= u.mean()  # the mean's own rounding, removed: a's sum of cubes cancels (exact to ~1e-14, not ~1e-11)
    return float(np.sum(u ** 3) / (6 * np.sum(u ** 2) ** 1.5))


def _interval(x: np.ndarray, means: np.ndarray) -> tuple[float, float, str]:
    """The BCa interval of the mean of ``x [docs]`` from its bootstrap ``means [resamples]`` (Efron &
    Tibshirani 14.3, 15.4, as scipy computes it); the percentile interval where BCa is undefined."""
    from scipy.special import ndtr, ndtri

    alpha = (1 - CONFIDENCE) / 2
    theta = x.mean()
    z0 = ndtri((np.count_nonzero(means < theta) + np.count_nonzero(means <= theta)) / (2 * means.size))
    with np.errstate(divide="ignore", invalid="ignore"):
        a = _acceleration(x)
        z = float(ndtri(alpha))
        bounds = [float(ndtr(z0 + (z0 + s) / (1 - a * (z0 + s)))) for s in (z, -z)]
    if all(np.isfinite(bounds)):
        lo, hi = np.quantile(means, bounds)
        if np.isfinite(lo) and np.isfinite(hi):
            return float(lo), float(hi), "BCa"
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return float(lo), float(hi), "percentile"


def _sign_flip_p(d: np.ndarray, rng: np.random.Generator, resamples: int) -> tuple[float, str]:
    """Two-sided p of "no difference" for ``d [docs]``: every sign pattern while there are at most
    ``resamples`` of them, else ``resamples`` random ones a block at a time (scipy's draws: a pattern's
    bit is the low bit of the next 32-bit draw, 0 flipping the document), counted with scipy's
    tolerance for ties."""
    n = d.size
    observed = d.mean()
    gamma = abs(_EPS_TIES * observed)
    if n < 63 and 2 ** n <= resamples:
        less = greater = 0
        step = _block(n)
        for k in range(0, 2 ** n, step):  # [rows, docs] sign patterns k .. k + rows, a block at a time
            flips = (np.arange(k, min(2 ** n, k + step))[:, None] >> np.arange(n)) & 1
            null = np.where(flips == 1, -d, d).mean(axis=-1)  # [rows]
            less += np.count_nonzero(null <= observed + gamma)
            greater += np.count_nonzero(null >= observed - gamma)
        return float(min(1.0, 2 * min(less, greater) / 2 ** n)), "exact"
    less = greater = 0
    step = _block(n)
    for k in range(0, resamples, step):
        bits = rng.integers(0, 2 ** 32, (min(step, resamples - k), n), dtype=np.uint32)  # [rows, docs]
        null = np.where((bits & 1) == 0, -d, d).mean(axis=-1)  # [rows]
        less += np.count_nonzero(null <= observed + gamma)
        greater += np.count_nonzero(null >= observed - gamma)
    return float(min(1.0, 2 * (min(less, greater) + 1) / (resamples + 1))), "monte-carlo"


def mean_ci(values: Sequence[float], *, seed: int = SEED, resamples: int = RESAMPLES) -> Interval:
    """Mean of per-document scores ``values [docs]`` and its 95% bootstrap interval."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("mean_ci needs at least one document's score")
    _finite(x, "mean_ci")
    mean = float(x.mean())
    if x.size == 1 or np.all(x == x[0]):
        return Interval(mean, mean, mean, int(x.size), "none")  # nothing varies: a zero-width interval
    lo, hi, method = _interval(x, _resampled_means(x, np.random.default_rng(seed), resamples))
    return Interval(mean, lo, hi, int(x.size), method)


def small_ci(values: Sequence[float]) -> Interval:
    """Mean of ``values [docs]`` with Student's t interval: below SMALL_N documents a bootstrap sees too
    few distinct resamples (BCa on 8 documents covered 0.87 of 0.95 in simulation)."""
    from scipy.stats import t as student

    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("small_ci needs at least one document's score")
    _finite(x, "small_ci")
    mean = float(x.mean())
    if x.size < 2 or np.all(x == x[0]):
        return Interval(mean, mean, mean, int(x.size), "none")
    h = float(student.ppf(0.5 + CONFIDENCE / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))
    return Interval(mean, mean - h, mean + h, int(x.size), "t")


def proportion_ci(successes: int, n: int, scale: float = 1.0) -> Interval:
    """A share of ``n`` 0/1 outcomes with its Clopper-Pearson interval (times ``scale``: 100 for a score
    in points). Exact, never wider than [0, 1], and with an upper bound at 0 of n (a bootstrap of all
    zeros gives "0 +-0")."""
    from scipy.stats import beta

    whole = all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in (successes, n))
    if not whole or n < 1 or not 0 <= successes <= n:
        raise ValueError(f"proportion_ci: {successes!r} of {n!r} is not a share (need whole numbers, "
                         "0 <= successes <= n, n >= 1)")
    a = (1 - CONFIDENCE) / 2
    lo = 0.0 if successes == 0 else float(beta.ppf(a, successes, n - successes + 1))
    hi = 1.0 if successes == n else float(beta.ppf(1 - a, successes + 1, n - successes))
    return Interval(scale * successes / n, scale * lo, scale * hi, n, "Clopper-Pearson")


# ---------------------------------------------------------------------------------- seeds as a level
# A cell trained with several seeds scores y[s, d] = mu + a_s + b_d + e_sd: a seed's overall shift a_s
# (variance sa^2), a document's difficulty b_d shared by every seed (sb^2), and the rest (se^2). The
# mean over the S x D grid has variance sa^2/S + sb^2/D + se^2/(S D). Averaging the seeds and resampling
# documents sees only the last two terms: with seed SD 1.5, document SD 8, 64 documents and 3 seeds its
# intervals cover ~0.86 and a true null is rejected far above 5%. A bootstrap that resamples seeds too
# cannot fix it with 3 seeds: it sees at most 10 distinct seed draws and underestimates sa^2 by a factor
# (S - 1) / S. So the two levels are estimated as the crossed random-effects ANOVA does (unbiased mean
# squares; Searle, Casella & McCulloch 1992, ch. 4) and the interval is Student's t with Satterthwaite's
# degrees of freedom (few when the seeds dominate: wide, as it must be with 3 seeds).
# tests/metrics/test_stats_seeds.py checks its coverage by simulation with a known seed effect.


@dataclass(frozen=True)
class Levels:
    """The variance components of a [seeds, docs] grid and the variance of its mean."""

    mean: float
    var_mean: float
    df: float
    seed_sd: float
    doc_sd: float
    rest_sd: float


def levels(scores: Sequence[Sequence[float]]) -> Levels:
    """The crossed two-level decomposition of ``scores [seeds, docs]`` (at least 2 of each)."""
    x = np.asarray(scores, dtype=float)  # [seeds, docs]
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 2:
        raise ValueError(f"levels needs scores [seeds, docs] with at least 2 seeds and 2 documents, got {x.shape}")
    _finite(x.ravel(), "levels")
    s, n = x.shape
    m = float(x.mean())
    by_seed, by_doc = x.mean(axis=1), x.mean(axis=0)  # [seeds], [docs]
    ms_seed = n * float(np.sum((by_seed - m) ** 2)) / (s - 1)
    ms_doc = s * float(np.sum((by_doc - m) ** 2)) / (n - 1)
    rest = x - by_seed[:, None] - by_doc[None, :] + m  # [seeds, docs]
    ms_rest = float(np.sum(rest ** 2)) / ((s - 1) * (n - 1))
    combo = ms_seed + ms_doc - ms_rest  # E = S D Var(mean)
    if combo <= 0:  # the rest outweighs both levels (rare): drop the subtraction, conservative
        combo, df = ms_seed + ms_doc, (ms_seed + ms_doc) ** 2 / (ms_seed ** 2 / (s - 1) + ms_doc ** 2 / (n - 1) or 1.0)
    else:
        df = combo ** 2 / (ms_seed ** 2 / (s - 1) + ms_doc ** 2 / (n - 1) + ms_rest ** 2 / ((s - 1) * (n - 1)))
    return Levels(m, combo / (s * n), float(max(df, 1.0)), float(np.sqrt(max(0.0, (ms_seed - ms_rest) / n))),
                  float(np.sqrt(max(0.0, (ms_doc - ms_rest) / s))), float(np.sqrt(ms_rest)))


def _grid(scores: Sequence[Sequence[float]], what: str) -> np.ndarray:
    """``scores [seeds, docs]`` as an array: every seed scored the same number of documents, every score finite."""
    rows = [list(r) for r in scores]
    if not rows or len({len(r) for r in rows}) != 1 or not rows[0]:
        raise ValueError(f"{what} needs scores [seeds, docs] with the same documents for every seed, got "
                         f"{[len(r) for r in rows]} documents per seed")
    x = np.asarray(rows, dtype=float)
    _finite(x.ravel(), what)
    return x


def seeds_ci(scores: Sequence[Sequence[float]], *, seed: int = SEED, resamples: int = RESAMPLES) -> Interval:
    """Mean over ``scores [seeds, docs]`` (the same documents, in the same order, for every seed) with a
    95% interval over both levels (Student's t on :func:`levels`); one seed: documents only (BCa); one
    document: seeds only (Student's t over them; ``n`` counts documents, 1)."""
    from scipy.stats import t as student

    x = _grid(scores, "seeds_ci")  # [seeds, docs]
    if x.shape[0] == 1:
        return mean_ci(x[0], seed=seed, resamples=resamples)
    if x.shape[1] == 1:  # the seeds are the only spread there is
        t = small_ci(x[:, 0])
        return Interval(t.mean, t.low, t.high, 1, "t over seeds" if t.method == "t" else t.method)
    lv = levels(x)
    h = float(student.ppf(0.5 + CONFIDENCE / 2, lv.df) * np.sqrt(lv.var_mean))
    return Interval(lv.mean, lv.mean - h, lv.mean + h, int(x.shape[1]), "two-level t")


def seeds_paired(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> Paired:
    """A minus B over ``[seeds, docs]`` each, on the same documents: the difference grid (seed i of A
    against seed i of B: the seeds of two methods are independent draws, so any pairing is one) through
    :func:`levels`, its t interval and two-sided p on Satterthwaite's degrees of freedom."""
    from scipy.stats import t as student

    x, y = _grid(a, "seeds_paired, run A"), _grid(b, "seeds_paired, run B")
    if x.shape != y.shape or x.shape[0] < 2 or x.shape[1] < 2:
        raise ValueError(f"seeds_paired needs two [seeds, docs] grids of one shape (>= 2 x 2), got {x.shape} "
                         f"and {y.shape}")
    lv = levels(x - y)
    se = float(np.sqrt(lv.var_mean))
    h = float(student.ppf(0.5 + CONFIDENCE / 2, lv.df)) * se
    # no spread at all: the t statistic's limit. The same difference on every seed and document is certain
    # (p 0, where paired() on the seeds' means gives its smallest p); no difference anywhere is none (p 1).
    p = (1.0 if lv.mean == 0 else 0.0) if se == 0 else float(min(1.0, 2 * student.sf(abs(lv.mean) / se, lv.df)))
    return Paired(lv.mean, lv.mean - h, lv.mean + h, p, int(x.shape[1]), "two-level t", "two-level t", 0,  # analytic
                  df=lv.df)


def paired(a: Sequence[float], b: Sequence[float], *, seed: int = SEED, resamples: int = RESAMPLES,
           test: str = "auto") -> Paired:
    """A minus B on the same documents (``a[i]`` and ``b[i]`` score document i). ``test``: ``auto`` (see
    :func:`sign_flip_p`) or ``monte-carlo`` (``resamples`` random sign patterns, scipy's draws)."""
    if test not in ("auto", "monte-carlo"):
        raise ValueError(f"paired: test={test!r} is not one of auto, monte-carlo")
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"paired needs two score lists over the same documents, got {x.shape} and {y.shape}")
    _finite(x, "paired, run A")
    _finite(y, "paired, run B")
    d = x - y  # [docs]
    _finite(d, "paired, A - B")  # finite scores whose difference overflows
    diff = float(d.mean())
    if np.all(d == d[0]):  # nothing to resample: a zero-width interval
        lo, hi, how = diff, diff, "none"
    else:
        lo, hi, how = _interval(d, _resampled_means(d, np.random.default_rng(seed), resamples))
    if d.size == 1:  # its two sign flips give +d and -d, both as extreme as d: the exact p-value is 1
        return Paired(diff, lo, hi, 1.0, 1, how, "exact", resamples, test_draws=2)
    # Sign flips of the differences: under "no difference" each document's sign is a coin toss.
    if test == "monte-carlo":
        p, how_p = _sign_flip_p(d, np.random.default_rng(seed), resamples)
        draws = 2 ** d.size if how_p == "exact" else resamples
        return Paired(diff, lo, hi, p, int(d.size), how, how_p, resamples, test_draws=draws)
    p, how_p, draws, err = sign_flip_p(d, seed=seed)
    return Paired(diff, lo, hi, p, int(d.size), how, how_p, resamples, err, draws)


def sign_flip_p(d: Sequence[float], *, seed: int = SEED) -> tuple[float, str, int, float | None]:
    """(p, method, sign patterns used, Monte Carlo error) of the sign-flip test of ``d [docs]``, fine
    enough for Holm over a table: 10,000 random patterns stop at p = 2e-4, above Holm's first threshold
    for 180 comparisons (2.8e-4), so the mark of a clear difference was a coin flip of the RNG seed.
    Exact up to EXACT_MAX documents; 10^6 patterns below NORMAL_MIN; then the normal limit of the
    statistic (sum d_i s_i with s_i = +-1 has variance sum d_i^2): deterministic and smooth."""
    x = np.asarray(d, dtype=float)
    n = x.size
    if n == 0:
        raise ValueError("sign_flip_p needs at least one document's difference")
    _finite(x, "sign_flip_p")
    if n <= EXACT_MAX:
        p, how = _sign_flip_p(x, np.random.default_rng(seed), 2 ** n)
        return p, how, 2 ** n, None
    if n < NORMAL_MIN:
        p, how = _sign_flip_p(x, np.random.default_rng(seed), MC_RESAMPLES)
        return p, how, MC_RESAMPLES, float(np.sqrt(p * (1 - p) / MC_RESAMPLES))
    from scipy.special import ndtr

    scale = float(np.sqrt(np.sum(x ** 2)))
    z = abs(float(np.sum(x))) / scale if scale > 0 else 0.0
    return float(min(1.0, 2 * ndtr(-z))), "normal", 0, None


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (same order): significant at ``alpha`` where adjusted <= alpha. A value
    outside [0, 1] is not a p-value, and one below 0 would make the whole family look significant."""
    p = np.asarray(p_values, dtype=float)  # [tests]
    bad = np.flatnonzero(~((p >= 0) & (p <= 1)))  # NaN fails both
    if bad.size:
        raise ValueError(f"holm: p-value {p_values[int(bad[0])]!r} (position {int(bad[0])}) is not in [0, 1]")
    order = np.argsort(p)
    adjusted = np.empty(p.size)
    # the k-th smallest gets the running max of (m - j) p_(j) over j <= k, capped at 1
    adjusted[order] = np.maximum.accumulate(np.minimum(1.0, (p.size - np.arange(p.size)) * p[order]))
    return adjusted.tolist()
