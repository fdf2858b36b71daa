"""All summarization metrics for one prediction set: the one call run.py, the callbacks and score.py make."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from scaleformer.config import MetricsConfig
from scaleformer.data.ledger_facts import compute_facts
from scaleformer.metrics.answers import answer_scores, task_score
from scaleformer.metrics.bertscore import compute_bertscore
from scaleformer.metrics.rouge import compute_rouge
from scaleformer.metrics.sentences import get_splitter

log = logging.getLogger(__name__)


def normalize_references(references: Sequence[Any]) -> list[list[str]]:
    """One list of non-blank reference strings per document (a bare string is one reference).

    Blank references and ``None`` are dropped, so a hidden-reference document (SCROLLS test) ends up
    with an empty list and is left out of the means instead of scoring 0.
    """
    out = []
    for refs in references:
        if refs is None:
            refs = []
        elif isinstance(refs, str):
            refs = [refs]
        out.append([r for r in refs if isinstance(r, str) and r.strip()])
    return out


def compute_metrics(
    predictions: list[str],
    references: list[list[str]],
    cfg: MetricsConfig,
    *,
    device: str | None = None,
    num_workers: int | None = None,
    task_metric: str = "rouge",
    rows: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """All metrics for one prediction set, as one flat dict ready for a results file.

    ``task_metric`` is the data's own metric (``data.task_metric``): ``rouge`` for summarization, or
    ``f1`` / ``exact_match`` for SCROLLS' question-answering tasks, which adds both answer scores;
    ``task_score`` is that metric's number (SCROLLS' geometric mean of R-1/2/L for ``rouge``).

    Documents without a reference (hidden test labels) are left out of every mean; if none has one,
    only metadata comes back with ``scored: False``. Scores are present only when computed: the
    ``bertscore_*`` scores are absent when BERTScore is disabled, the ``fact_*`` scores unless every
    reference is a synthetic ledger summary.

    ``rows``, when given (an empty list), gets one dict per scored document: its ``index`` among the
    predictions and every score computed for it. Each mean returned is the mean of these rows
    (``scores_<split>.jsonl`` in a run; :mod:`scaleformer.metrics.stats` computes intervals from them).
    """
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} reference lists")
    preds = [p if isinstance(p, str) else "" for p in predictions]
    refs = normalize_references(references)
    keep = [i for i, r in enumerate(refs) if r]
    bs = cfg.bertscore
    out: dict[str, Any] = {
        "scored": bool(keep),
        "n_examples": len(preds),
        "n_scored": len(keep),
        "n_empty_predictions": sum(1 for i in keep if not preds[i].strip()),
        "use_stemmer": cfg.use_stemmer,
        "sentence_splitter": get_splitter(cfg.sentence_splitter)[0],
        "rouge_tokenizer": cfg.rouge_tokenizer,
        "bertscore_enabled": bs.enabled,
        "bertscore_model_requested": bs.model_type if bs.enabled else None,
        "bertscore_idf": bs.idf,
        "bertscore_rescale_with_baseline": bs.rescale_with_baseline,
    }
    if not keep:
        log.warning("metrics: none of the %d documents has a reference (hidden test set?); not scored",
                    len(preds))
        return out
    if len(keep) < len(preds):
        log.warning("metrics: %d of %d documents have no reference and are left out",
                    len(preds) - len(keep), len(preds))
    kp, kr = [preds[i] for i in keep], [refs[i] for i in keep]
    per_doc: list[dict[str, Any]] = [{"index": i} for i in keep]
    out.update(compute_rouge(kp, kr, use_stemmer=cfg.use_stemmer,
                             sentence_splitter=cfg.sentence_splitter, num_workers=num_workers,
                             tokenizer=cfg.rouge_tokenizer, rows=per_doc))
    if task_metric != "rouge":  # question answering: SCROLLS' F1 and exact match, whichever the task reports
        out.update(answer_scores(kp, kr, rows=per_doc))
    out["task_metric"] = task_metric
    out["task_score"] = task_score(task_metric, out)
    if cfg.facts == "auto":  # ledger references only: absent, not zero, on any other data
        out.update(compute_facts(kp, kr, rows=per_doc))
    if bs.enabled:
        out.update(compute_bertscore(kp, kr, bs, device=device, rows=per_doc))
    if rows is not None:
        rows.extend(per_doc)
    return out
