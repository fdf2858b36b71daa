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
- :func:`seeds_ci`: the mean over seeds x documents, resampling documents (shared by every seed) and
  averaging the seeds, so seed noise and document sampling both show;
- :func:`paired`: the difference of two runs on the documents both scored: its mean, a 95% paired
  bootstrap interval and the two-sided p-value of a sign-flip permutation test (exact while the 2^n
  sign patterns number at most the resamples, i.e. up to 13 documents; Monte Carlo above);
- :func:`holm`: Holm's step-down correction of a family of p-values.

A score that is not a finite number has no mean: every function refuses it (ValueError).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 10_000
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
    test_method: str = "exact"  # exact (all 2^n sign patterns) | monte-carlo (RESAMPLES random ones)
    resamples: int = RESAMPLES


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
        flips = (np.arange(2 ** n)[:, None] >> np.arange(n)) & 1  # [2^n, docs]
        null = np.where(flips == 1, -d, d).mean(axis=-1)  # [2^n]
        less, greater = np.count_nonzero(null <= observed + gamma), np.count_nonzero(null >= observed - gamma)
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


def seeds_ci(scores: Sequence[Sequence[float]], *, seed: int = SEED, resamples: int = RESAMPLES) -> Interval:
    """Mean over ``scores [seeds, docs]`` (the same documents, in the same order, for every seed) with a
    95% interval from resampling documents and averaging over seeds."""
    x = np.asarray(scores, dtype=float)  # [seeds, docs]
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"seeds_ci needs scores [seeds, docs], got shape {x.shape}")
    per_doc = x.mean(axis=0)  # [docs]: a document's mean over seeds
    return mean_ci(per_doc, seed=seed, resamples=resamples)


def paired(a: Sequence[float], b: Sequence[float], *, seed: int = SEED, resamples: int = RESAMPLES) -> Paired:
    """A minus B on the same documents (``a[i]`` and ``b[i]`` score document i)."""
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
        return Paired(diff, lo, hi, 1.0, 1, how, "exact", resamples)
    # Sign flips of the differences: under "no difference" each document's sign is a coin toss.
    p, test = _sign_flip_p(d, np.random.default_rng(seed), resamples)
    return Paired(diff, lo, hi, p, int(d.size), how, test, resamples)


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
