"""Summarization metrics as the compared papers report them: ROUGE (SCROLLS scorer) and BERTScore.

What lives where:

- ``compute``: ``compute_metrics``, the one entry point (run.py, the callbacks, scripts/score.py):
  drops hidden-reference documents, then ROUGE and, when enabled, BERTScore, as one flat dict.
- ``rouge``: SCROLLS-style ROUGE (``rouge_score`` F1 x 100, best reference per metric, geometric mean).
- ``sentences``: the sentence splitter ROUGE-Lsum needs (nltk punkt, or a regex fallback offline).
- ``notices``: once-per-run warnings (the BERTScore fallback, ROUGE on scripts outside a-z0-9).
- ``facts``: fact recall on the bundled synthetic ledgers (events the summary states correctly), and
  the most of it a reader of the first window alone can reach; absent on any other data.
- ``bertscore``: which model BERTScore uses (local folder, HF cache, hub, or the bundled offline
  MiniLM; the hub and cache questions go to ``scaleformer.model.hub``), the scorer, the scores and the
  bert-score hash recorded with them.
"""

from scaleformer.data.ledger_facts import compute_facts, window_ceiling
from scaleformer.metrics.bertscore import (
    OFFLINE_MODEL_NAME,
    PAPER_BERTSCORE_LAYERS,
    PAPER_BERTSCORE_MODEL,
    BertScoreHubError,
    BertScoreModel,
    BertScoreModelError,
    bertscore_hash,
    compute_bertscore,
    get_bertscorer,
    offline_model,
    resolve_bertscore_model,
)
from scaleformer.metrics.compute import compute_metrics, normalize_references
from scaleformer.metrics.notices import reset_notices
from scaleformer.metrics.rouge import ROUGE_TYPES, compute_rouge, scrolls_geomean
from scaleformer.metrics.sentences import get_splitter, split_sentences_regex

__all__ = [
    "OFFLINE_MODEL_NAME", "PAPER_BERTSCORE_LAYERS", "PAPER_BERTSCORE_MODEL", "ROUGE_TYPES",
    "BertScoreHubError", "BertScoreModel", "BertScoreModelError", "bertscore_hash", "compute_bertscore",
    "compute_facts",
    "compute_metrics", "compute_rouge", "get_bertscorer", "get_splitter", "normalize_references",
    "offline_model", "reset_notices", "resolve_bertscore_model", "scrolls_geomean", "split_sentences_regex",
    "window_ceiling",
]
