"""Answer metrics of the SCROLLS question-answering tasks: token F1 and exact match.

The official SCROLLS evaluator (``tau/scrolls`` ``metrics/scrolls.py``, with its ``f1`` and
``exact_match`` modules; see tau-nlp/scrolls ``evaluator/``) scores answers as SQuAD v1.1 does:
both strings are normalised (lower-cased, ASCII punctuation removed, the articles a/an/the removed,
whitespace collapsed), F1 is the harmonic mean of token precision and recall over the multiset of
shared tokens, exact match is equality of the normalised strings, and a prediction with several
references gets its best score over them. Scores are reported x100, averaged over documents.

Per task (SCROLLS paper, Table 1): Qasper and NarrativeQA report F1; QuALITY and ContractNLI exact
match; GovReport, SummScreenFD and QMSum ROUGE, summarised by the geometric mean of ROUGE-1/2/L
(``rouge_geomean``). The SCROLLS score is the mean of the seven tasks' scores (:func:`scrolls_score`).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")

# The metric each SCROLLS task reports, by our data option names.
TASK_METRICS = {
    "govreport": "rouge", "summscreen": "rouge", "qmsum": "rouge",
    "qasper": "f1", "narrative_qa": "f1", "quality": "exact_match", "contract_nli": "exact_match",
}


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop articles, collapse whitespace (in the evaluator's order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _f1_one(prediction: str, reference: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(reference).split()
    shared = sum((Counter(pred) & Counter(ref)).values())
    if shared == 0:  # also when either side normalises to nothing
        return 0.0
    precision, recall = shared / len(pred), shared / len(ref)
    return 2 * precision * recall / (precision + recall)


def _as_list(references: str | Sequence[str]) -> list[str]:
    refs = [references] if isinstance(references, str) else list(references)
    if not refs:
        raise ValueError("an answer needs at least one reference")
    return refs


def token_f1(prediction: str, references: str | Sequence[str]) -> float:
    """Best token F1 (0-1) of ``prediction`` against any reference."""
    return max(_f1_one(prediction, r) for r in _as_list(references))


def exact_match(prediction: str, references: str | Sequence[str]) -> float:
    """1.0 when the normalised prediction equals any normalised reference, else 0.0."""
    norm = normalize_answer(prediction)
    return float(any(norm == normalize_answer(r) for r in _as_list(references)))


def answer_scores(predictions: Sequence[str], references: Sequence[Sequence[str]],
                  rows: list[dict[str, Any]] | None = None) -> dict[str, float]:
    """Mean F1 and exact match over documents, x100 as the evaluator reports them; ``rows`` (one dict
    per document) receive each document's own."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} reference lists")
    per_doc = [{"f1": 100 * token_f1(p, r), "exact_match": 100 * exact_match(p, r)}
               for p, r in zip(predictions, references)]
    if rows is not None:
        for row, d in zip(rows, per_doc, strict=True):
            row.update(d)
    n = max(len(predictions), 1)
    return {k: sum(d[k] for d in per_doc) / n for k in ("f1", "exact_match")}


def task_score(metric: str, scores: Mapping[str, float]) -> float:
    """The number a task reports: ``rouge`` -> the geometric mean of R-1/2/L, else the named score."""
    return float(scores["rouge_geomean"] if metric == "rouge" else scores[metric])


def scrolls_score(task_scores: Mapping[str, float]) -> float:
    """The SCROLLS benchmark score: the plain mean of the seven tasks' own scores."""
    missing = sorted(set(TASK_METRICS) - set(task_scores))
    if missing:
        raise ValueError(f"the SCROLLS score needs all seven tasks; missing {', '.join(missing)}")
    return sum(task_scores[t] for t in TASK_METRICS) / len(TASK_METRICS)


def scores_by_window(predictions: Sequence[str], references: Sequence[Sequence[str]],
                     inside: Sequence[bool]) -> dict[str, dict[str, float]]:
    """EM and F1 apart for answers inside and past truncation's window: a method that reads past it
    earns its score on the ``past`` ones, where a reader of the first window can only guess."""
    out = {}
    for name, flag in (("inside", True), ("past", False)):
        keep = [i for i, f in enumerate(inside) if f == flag]
        out[name] = {"n": len(keep), **answer_scores([predictions[i] for i in keep], [references[i] for i in keep])}
    return out
