"""Perplexity over held-out documents, as MASFormer reports it: overall and by document length.

Each document contributes its summed negative log-likelihood (nats) and its count of predicted tokens
(every token after the first). Perplexity is token-weighted, ``exp(sum nll / sum tokens)`` over the
documents (the paper's Table 1), and by length bucket ``((k - 1) B, k B]`` of the document's tokens (its
Figure 3, B = 1,024). Its 95% interval resamples *documents* (a percentile bootstrap of the same ratio):
tokens of one document are not independent draws, so an interval over tokens would be far too narrow.

Where the data marks dependency tokens (:mod:`scaleformer.data.synthetic_lm`), the same is given for them
alone and for those whose antecedent lies beyond one block (``dependency``): the tokens full attention
should help with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from scaleformer.metrics.stats import CONFIDENCE, RESAMPLES, SEED, Interval

CHUNK = 1 << 20  # (resample, document) index pairs drawn at a time
MAX_NATS = math.log(np.finfo(float).max)  # ~709.8: the largest mean NLL whose exp is a finite float


def ratio_ci(nll: Sequence[float], tokens: Sequence[int], *, seed: int = SEED, resamples: int = RESAMPLES
             ) -> Interval:
    """``exp(sum nll / sum tokens)`` over documents and its 95% percentile-bootstrap interval over documents."""
    x, n = np.asarray(nll, dtype=float), np.asarray(tokens, dtype=float)
    if x.size == 0 or n.sum() <= 0:
        raise ValueError("perplexity needs at least one document with a predicted token")
    if not np.all(np.isfinite(x)):
        raise ValueError("perplexity: a document's log-likelihood is not finite")
    if (x < 0).any() or (n < 0).any():  # a sum of -log p is >= 0; below it, the scores are not NLLs (ppl < 1)
        i = int(np.flatnonzero((x < 0) | (n < 0))[0])
        raise ValueError(f"perplexity: document {i} has nll={x[i]:g} over {n[i]:g} tokens: a negative "
                         "log-likelihood sum (or count) is no score of a probability; perplexity would be below 1")
    mean = x.sum() / n.sum()
    if mean > MAX_NATS:
        raise ValueError(f"perplexity: {mean:.4g} nats a token, above {MAX_NATS:.0f} (its exp overflows a float): the "
                         "model's predictions have diverged; no perplexity to report")
    point = math.exp(mean)
    if x.size == 1:
        return Interval(point, point, point, 1, "none")
    rng = np.random.default_rng(seed)
    rows = max(1, CHUNK // x.size)
    stats = []
    for start in range(0, resamples, rows):
        idx = rng.integers(0, x.size, size=(min(rows, resamples - start), x.size))  # [r, docs]
        tok = n[idx].sum(1)
        stats.append(np.where(tok > 0, x[idx].sum(1) / np.maximum(tok, 1), np.nan))
    means = np.concatenate(stats)
    means = means[np.isfinite(means)]
    alpha = (1 - CONFIDENCE) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return Interval(point, math.exp(lo), math.exp(min(hi, MAX_NATS)), int(x.size), "percentile")


def _entry(ci: Interval, tokens: int) -> dict[str, Any]:
    return {"ppl": round(ci.mean, 4), "ppl_low": round(ci.low, 4), "ppl_high": round(ci.high, 4),
            "n_docs": ci.n, "tokens": int(tokens), "interval": ci.method}


def bucket_label(length: int, width: int) -> str:
    """The paper's bucket of a document of ``length`` tokens: ``((k - 1) B, k B]``."""
    k = max(1, -(-length // width))
    return f"({(k - 1) * width}, {k * width}]"


def perplexity(rows: Sequence[dict[str, Any]], bucket: int = 1024, *, seed: int = SEED) -> dict[str, Any]:
    """Scores of one split from per-document rows (``nll``, ``tokens``, ``length`` and, where the data has them,
    ``dep_nll``/``dep_tokens``/``far_nll``/``far_tokens``)."""
    if bucket <= 0:
        raise ValueError(f"bucket={bucket}: must be > 0 tokens")
    nll, tok = [r["nll"] for r in rows], [r["tokens"] for r in rows]
    out: dict[str, Any] = {**_entry(ratio_ci(nll, tok, seed=seed), sum(tok)), "bucket_tokens": bucket}
    out["loss"] = round(sum(nll) / max(sum(tok), 1), 6)  # nats per token
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(bucket_label(int(r["length"]), bucket), []).append(i)
    out["by_length"] = {
        label: _entry(ratio_ci([nll[i] for i in idx], [tok[i] for i in idx], seed=seed), sum(tok[i] for i in idx))
        for label, idx in sorted(groups.items(), key=lambda kv: int(kv[0][1:].split(",")[0]))
        if sum(tok[i] for i in idx) > 0}
    for key, name in (("dep", "dependency"), ("far", "dependency_beyond_block")):
        have = [r for r in rows if r.get(f"{key}_tokens")]
        if have:
            out[name] = _entry(ratio_ci([r[f"{key}_nll"] for r in have], [r[f"{key}_tokens"] for r in have],
                                        seed=seed), sum(r[f"{key}_tokens"] for r in have))
    return out
