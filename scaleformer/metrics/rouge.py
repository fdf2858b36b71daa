"""ROUGE as the SCROLLS scorer computes it (where SLED's and Unlimiformer's numbers come from).

``rouge_score`` F1 x 100, no stemming, texts split into sentences and joined with newlines (what
ROUGE-Lsum needs), per document and per metric the best score over its references, then the mean
over documents, plus the SCROLLS geometric mean of R-1, R-2 and R-L.

Tokens (``metrics.rouge_tokenizer``):

- ``scrolls`` (default, the papers' numbers): rouge_score's tokenizer: lower-case, every character
  outside ``a-z0-9`` becomes a space. Text in another script (Arabic, Hebrew, Japanese, Cyrillic,
  ...) has no tokens at all and scores 0 even when the prediction equals the reference, so when
  fewer than half of the letters and digits of the predictions or of the references are ``a-z0-9``
  the run warns once (and metrics.json carries ``rouge_warning``).
- ``unicode``: NFKC-normalise and lower-case; a token is a run of Unicode letters, combining marks
  and digits (categories L*, M*, N*), everything else separates tokens; each Han, Hiragana or
  Katakana character is a token of its own (those scripts put no spaces between words). No word
  segmentation otherwise (Thai, Lao, Khmer runs stay whole). With ``use_stemmer`` only ``a-z0-9``
  tokens longer than 3 characters are Porter-stemmed, as rouge_score does. On ASCII
  text it gives exactly the ``scrolls`` tokens.
"""

from __future__ import annotations

import logging
import os
import unicodedata
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from multiprocessing import get_context
from typing import Any

from tqdm import tqdm

from scaleformer.metrics.notices import notice_once
from scaleformer.metrics.sentences import get_splitter

log = logging.getLogger(__name__)

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
TOKENIZERS = ("scrolls", "unicode")
# Below this share of a-z0-9 among the letters and digits, scrolls-tokenized ROUGE is not meaningful.
MIN_ASCII_SHARE = 0.5
# Below this many (prediction, reference) pairs a process pool costs more than it saves, and scoring
# is over too soon for a progress bar to tell anyone anything.
_MANY_PAIRS = 256


def _one_per_char(ch: str) -> bool:
    """Han ideographs, Hiragana and Katakana: scripts without spaces between words."""
    o = ord(ch)
    return (0x3040 <= o <= 0x30FF or 0x31F0 <= o <= 0x31FF or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF
            or 0xF900 <= o <= 0xFAFF or 0xFF66 <= o <= 0xFF9D or 0x20000 <= o <= 0x3FFFF)


def unicode_tokens(text: str, stemmer: object | None = None) -> list[str]:
    """The ``unicode`` tokenizer (see the module docstring)."""
    tokens: list[str] = []
    current: list[str] = []

    def flush() -> None:
        if current:
            tokens.append("".join(current))
            current.clear()

    for ch in unicodedata.normalize("NFKC", text).lower():
        if _one_per_char(ch):
            flush()
            tokens.append(ch)
        elif unicodedata.category(ch)[0] in "LMN":
            current.append(ch)
        else:
            flush()
    flush()
    if stemmer is not None:
        tokens = [stemmer.stem(t) if len(t) > 3 and t.isascii() else t for t in tokens]
    return tokens


class UnicodeTokenizer:
    """rouge_score's tokenizer interface (``tokenize(text)``) over :func:`unicode_tokens`."""

    def __init__(self, use_stemmer: bool = False) -> None:
        from nltk.stem import porter

        self._stemmer = porter.PorterStemmer() if use_stemmer else None

    def tokenize(self, text: str) -> list[str]:
        return unicode_tokens(text, self._stemmer)


def ascii_share(texts: Sequence[str]) -> float | None:
    """Share of the letters and digits in `texts` that are a-z/A-Z/0-9 (None when there are none)."""
    alnum = ascii_ = 0
    for t in texts:
        for ch in t:
            if ch.isalnum():
                alnum += 1
                ascii_ += ch.isascii()
    return ascii_ / alnum if alnum else None


def script_warning(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> str | None:
    """Why scrolls-tokenized ROUGE says little about these texts, or None when it is meaningful."""
    shares = {"predictions": ascii_share(predictions), "references": ascii_share([r for rs in references for r in rs])}
    low = {k: v for k, v in shares.items() if v is not None and v < MIN_ASCII_SHARE}
    if not low:
        return None
    said = " and ".join(f"{v:.0%} of the {k}'" for k, v in low.items())
    return (f"ROUGE is not meaningful for this script: only {said} letters and digits are a-z0-9, and "
            "metrics.rouge_tokenizer=scrolls (rouge_score's tokenizer) drops every other character; "
            "set metrics.rouge_tokenizer=unicode to keep letters of every script (not comparable to "
            "the papers' ROUGE)")


@lru_cache(maxsize=8)
def _rouge_scorer(use_stemmer: bool, tokenizer: str = "scrolls"):
    from rouge_score import rouge_scorer

    if tokenizer == "unicode":
        return rouge_scorer.RougeScorer(list(ROUGE_TYPES), tokenizer=UnicodeTokenizer(use_stemmer))
    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)


def _rouge_doc(args: tuple[str, list[str], bool, str]) -> list[float]:
    """Best F1 (x100) over the references, per ROUGE type, for one already sentence-joined document."""
    pred, refs, use_stemmer, tokenizer = args
    scorer = _rouge_scorer(use_stemmer, tokenizer)
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
    tokenizer: str = "scrolls",
    rows: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """SCROLLS-style ROUGE over documents that each have at least one reference.

    ``rows`` (one dict per document), when given, receive each document's own scores: the means
    returned are exactly their means.

    Returns ``rouge1, rouge2, rougeL, rougeLsum`` (mean over documents of the per-document best F1
    x 100), ``rouge_geomean``, the ``sentence_splitter`` that ran, the ``rouge_tokenizer`` and, when
    scrolls tokens miss most of the text, ``rouge_warning`` (also logged once per run).
    ``num_workers`` (None = auto) spreads long test sets over processes: pure-Python LCS costs
    ~0.1 s per 600-word pair.
    """
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"metrics.rouge_tokenizer={tokenizer!r}: must be one of {', '.join(TOKENIZERS)}")
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

    jobs = [(join(p), [join(r) for r in refs], use_stemmer, tokenizer) for p, refs in zip(predictions, references)]
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

    if rows is not None:
        for row, d in zip(rows, per_doc, strict=True):
            row.update(zip(ROUGE_TYPES, d))
    result: dict[str, Any] = {
        t: sum(d[k] for d in per_doc) / len(per_doc) for k, t in enumerate(ROUGE_TYPES)
    }
    result["rouge_geomean"] = scrolls_geomean(result["rouge1"], result["rouge2"], result["rougeL"])
    result["sentence_splitter"] = splitter_name
    result["rouge_tokenizer"] = tokenizer
    warning = script_warning(predictions, references) if tokenizer == "scrolls" else None
    if warning:
        notice_once("rouge-script", warning)
        result["rouge_warning"] = warning
    return result


def scrolls_geomean(rouge1: float, rouge2: float, rougeL: float) -> float:
    """SCROLLS' single summarization score: the geometric mean of the R-1, R-2 and R-L means."""
    return (rouge1 * rouge2 * rougeL) ** (1.0 / 3.0)
