"""Sentence splitting for ROUGE-Lsum.

The SCROLLS scorer (where SLED's and Unlimiformer's numbers come from) joins ``nltk.sent_tokenize``
sentences with newlines before ROUGE-Lsum. nltk's punkt data cannot be downloaded everywhere, so a
regex splitter that mimics punkt on the common cases ships as a fallback; results record which ran,
because Lsum moves a little with the splitter (R-1/R-2/R-L do not: rouge_score ignores newlines).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

# Abbreviations that (practically) never end a sentence: no split after them.
_NEVER_FINAL = frozenset(
    "mr mrs ms messrs dr prof rev hon st mt gen sen rep gov lt col capt sgt cmdr adm supt "
    "vs v cf viz e.g i.e approx".split()
)
# Abbreviations that precede a number ("No. 5", "Fig. 3"): no split when a digit follows.
_BEFORE_NUMBER = frozenset("no nos fig figs vol vols p pp art sec ch eq ed pt".split())
# Abbreviations that can end a sentence ("... Acme Inc. The firm ..."): split only when a common
# sentence opener follows, which is how punkt's orthographic heuristic behaves on these.
_MAYBE_FINAL = frozenset(
    "etc inc ltd co corp jr sr bros dept est jan feb apr jun jul aug sep sept oct nov dec".split()
)
_OPENERS = frozenset(
    "the a an this that these those it its he she they we i you his her their our my there here "
    "in on at as for after before when while if but and however also meanwhile then thus so "
    "according one some many most all each both".split()
)

# A candidate boundary: terminal punctuation, optional closing quotes/brackets, then whitespace.
_BOUNDARY = re.compile(r"""(?:\.\s?\.\s?\.|…|[.!?]+)["'”’)\]]*(?=\s)""")
_DOTTED_ACRONYM = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$")  # U.S, e.g, a.m, Ph.D (final dot stripped)


def split_sentences_regex(text: str) -> list[str]:
    """Split on terminal punctuation, not after abbreviations, initials, decimals or mid-ellipsis."""
    sentences: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        before = text[start : m.start()].split()
        after = text[m.end() :].split(maxsplit=1)
        if not before or not after:
            continue  # nothing before (leading punctuation) or the text ends here anyway
        if _is_boundary(m.group(0), before[-1], after[0]):
            sentences.append(text[start : m.end()].strip())
            start = m.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return [s for s in sentences if s]


def _is_boundary(punct: str, word: str, nxt: str) -> bool:
    core = punct.rstrip("\"'”’)]")
    if "!" in core or "?" in core:
        return True
    nxt_clean = nxt.lstrip("\"'“‘([")
    if not nxt_clean:
        return True
    if core != ".":  # ellipsis: a pause unless a capitalised word follows
        return nxt_clean[0].isupper()
    w = word.lstrip("\"'“‘([").lower()
    if w in _NEVER_FINAL:
        return False
    if w in _BEFORE_NUMBER and nxt_clean[0].isdigit():
        return False
    if len(w) == 1 and w.isalpha() and word.lstrip("\"'“‘([")[0].isupper():
        return False  # an initial: "J. Smith"
    if w in _MAYBE_FINAL or _DOTTED_ACRONYM.match(w):
        return nxt_clean[0].isupper() and nxt_clean.rstrip(",;:").lower() in _OPENERS
    return True


@lru_cache(maxsize=1)
def nltk_available() -> bool:
    """True when nltk's punkt data is installed (sent_tokenize raises LookupError without it)."""
    try:
        import nltk

        nltk.sent_tokenize("A test. Another one.")
    except (ImportError, LookupError):
        return False
    return True


def get_splitter(kind: str = "auto") -> tuple[str, Callable[[str], list[str]]]:
    """Return (name that ran, function): "auto" prefers nltk punkt and falls back to the regex splitter."""
    if kind not in ("auto", "nltk", "regex"):
        raise ValueError(f"sentence_splitter={kind!r}: must be auto, nltk or regex")
    if kind == "regex" or (kind == "auto" and not nltk_available()):
        return "regex", split_sentences_regex
    if not nltk_available():
        raise RuntimeError(
            "metrics.sentence_splitter=nltk but nltk's punkt data is not installed (and cannot be "
            "downloaded here). Install it with `python -m nltk.downloader punkt_tab` where a network is "
            "available, or set metrics.sentence_splitter=auto or regex."
        )
    import nltk

    return "nltk", nltk.sent_tokenize
