"""How sure a score is: bootstrap intervals over documents, and paired tests between two runs.

Why scipy (``scipy.stats.bootstrap`` / ``permutation_test``) rather than our own loops: both are
maintained, vectorised and documented, and BCa intervals are easy to get subtly wrong. The plain
loops that spell the math out live in ``tests/metrics/test_stats.py`` as the reference these are
checked against.

- :func:`mean_ci`: a mean over documents and its 95% bootstrap interval (BCa; percentile where BCa is
  undefined, e.g. every document scoring the same);
- :func:`seeds_ci`: the mean over seeds x documents, resampling documents (shared by every seed) and
  averaging the seeds, so seed noise and document sampling both show;
- :func:`paired`: the difference of two runs on the documents both scored: its mean, a 95% paired
  bootstrap interval and the two-sided p-value of a sign-flip permutation test (exact below 2^14
  documents' worth of flips, Monte Carlo above);
- :func:`holm`: Holm's step-down correction of a family of p-values.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 10_000
SEED = 0


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


@dataclass(frozen=True)
class Paired:
    """Run A minus run B on shared documents."""

    diff: float
    low: float
    high: float
    p_value: float
    n: int


def _bootstrap(data: tuple[np.ndarray, ...], stat, *, paired: bool, seed: int, resamples: int) -> tuple[float, float]:
    from scipy import stats

    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy warns, then returns NaN, where BCa is degenerate
            res = stats.bootstrap(data, stat, paired=paired, vectorized=True, axis=-1, confidence_level=CONFIDENCE,
                                  n_resamples=resamples, method=method, random_state=np.random.default_rng(seed))
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if np.isfinite(lo) and np.isfinite(hi):
            return lo, hi
    return float("nan"), float("nan")


def mean_ci(values: Sequence[float], *, seed: int = SEED, resamples: int = RESAMPLES) -> Interval:
    """Mean of per-document scores ``values [docs]`` and its 95% bootstrap interval."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("mean_ci needs at least one document's score")
    mean = float(x.mean())
    if x.size == 1 or np.all(x == x[0]):
        return Interval(mean, mean, mean, int(x.size))  # nothing varies: a zero-width interval
    lo, hi = _bootstrap((x,), lambda a, axis=-1: a.mean(axis=axis), paired=False, seed=seed, resamples=resamples)
    return Interval(mean, lo, hi, int(x.size))


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
    from scipy import stats

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"paired needs two score lists over the same documents, got {x.shape} and {y.shape}")
    d = x - y  # [docs]
    diff = float(d.mean())
    if np.all(d == d[0]):  # nothing to resample: a zero-width interval
        lo = hi = diff
    else:
        lo, hi = _bootstrap((d,), lambda v, axis=-1: v.mean(axis=axis), paired=False, seed=seed, resamples=resamples)
    if d.size == 1:  # its two sign flips give +d and -d, both as extreme as d: the exact p-value is 1
        return Paired(diff, lo, hi, 1.0, 1)
    # Sign flips of the differences: under "no difference" each document's sign is a coin toss.
    res = stats.permutation_test((x, y), lambda u, v, axis=-1: (u - v).mean(axis=axis), permutation_type="samples",
                                 vectorized=True, n_resamples=resamples, alternative="two-sided",
                                 random_state=np.random.default_rng(seed))
    return Paired(diff, lo, hi, float(res.pvalue), int(d.size))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (same order): significant at ``alpha`` where adjusted <= alpha."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p)
    m = p.size
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()
