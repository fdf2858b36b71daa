"""ROUGE as the SCROLLS scorer computes it (where SLED's and Unlimiformer's numbers come from).

``rouge_score`` F1 x 100, no stemming, texts split into sentences and joined with newlines (what
ROUGE-Lsum needs), per document and per metric the best score over its references, then the mean
over documents, plus the SCROLLS geometric mean of R-1, R-2 and R-L.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from multiprocessing import get_context
from typing import Any

from tqdm import tqdm

from scaleformer.metrics.sentences import get_splitter

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
# Below this many (prediction, reference) pairs a process pool costs more than it saves, and scoring
# is over too soon for a progress bar to tell anyone anything.
_MANY_PAIRS = 256


@lru_cache(maxsize=4)
def _rouge_scorer(use_stemmer: bool):
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)


def _rouge_doc(args: tuple[str, list[str], bool]) -> list[float]:
    """Best F1 (x100) over the references, per ROUGE type, for one already sentence-joined document."""
    pred, refs, use_stemmer = args
    scorer = _rouge_scorer(use_stemmer)
    best = [0.0] * len(ROUGE_TYPES)
    for ref in refs:
        s = scorer.score(ref, pred)  # rouge_score's order: (target, prediction)
        best = [max(b, s[t].fmeasure * 100.0) for b, t in zip(best, ROUGE_TYPES)]
    return best


def compute_rouge(
    predictions: Sequence[str],
    references: Sequence[Sequence[str]],
    *,
    use_stemmer: bool = False,
    sentence_splitter: str = "auto",
    num_workers: int | None = None,
) -> dict[str, Any]:
    """SCROLLS-style ROUGE over documents that each have at least one reference.

    Returns ``rouge1, rouge2, rougeL, rougeLsum`` (mean over documents of the per-document best F1
    x 100), ``rouge_geomean`` and the ``sentence_splitter`` that ran. ``num_workers`` (None = auto)
    spreads long test sets over processes: pure-Python LCS costs ~0.1 s per 600-word pair.
    """
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} reference lists")
    if not predictions:
        raise ValueError("compute_rouge needs at least one document")
    if any(len(r) == 0 for r in references):
        raise ValueError("every document passed to compute_rouge needs a reference; "
                         "use compute_metrics to skip hidden-reference documents")
    splitter_name, split = get_splitter(sentence_splitter)

    def join(text: str) -> str:
        return "\n".join(split(text))

    jobs = [(join(p), [join(r) for r in refs], use_stemmer) for p, refs in zip(predictions, references)]
    n_pairs = sum(len(j[1]) for j in jobs)
    many = n_pairs >= _MANY_PAIRS
    workers = num_workers if num_workers is not None else min(8, os.cpu_count() or 1) if many else 1
    # disable=None: shown on a terminal only, so logs, CI and tests stay quiet
    bar = {"total": len(jobs), "desc": "ROUGE", "unit": "doc", "leave": False, "disable": None if many else True}
    if workers > 1:
        # spawn, not fork: the caller may hold CUDA or torch thread pools that fork would corrupt
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            chunksize = max(1, len(jobs) // (workers * 4))
            per_doc = list(tqdm(pool.map(_rouge_doc, jobs, chunksize=chunksize), **bar))
    else:
        per_doc = [_rouge_doc(j) for j in tqdm(jobs, **bar)]

    result: dict[str, Any] = {
        t: sum(d[k] for d in per_doc) / len(per_doc) for k, t in enumerate(ROUGE_TYPES)
    }
    result["rouge_geomean"] = scrolls_geomean(result["rouge1"], result["rouge2"], result["rougeL"])
    result["sentence_splitter"] = splitter_name
    return result


def scrolls_geomean(rouge1: float, rouge2: float, rougeL: float) -> float:
    """SCROLLS' single summarization score: the geometric mean of the R-1, R-2 and R-L means."""
    return (rouge1 * rouge2 * rougeL) ** (1.0 / 3.0)
