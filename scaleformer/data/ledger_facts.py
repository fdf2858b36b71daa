"""Scoring that knows the bundled synthetic ledgers: fact recall, and what truncation's window can hold.

It lives with the ledgers (:mod:`scaleformer.data.synthetic`), whose grammar it reads back; the
generic metrics call :func:`compute_facts`, which scores nothing where the references are not ledgers.

Fact recall: how many of the reference's events a summary states.

Why: ROUGE on the ledgers rewards the template ("The ledger of X records N events. ... at the ...")
as much as the content, so a model that ignores its input scores about as well as one that reads
it. Every reference event is five facts (actor, verb, count, item, place) drawn from the fixed
vocabulary of :mod:`scaleformer.data.synthetic`, so they can be read back exactly from any text.

- ``fact_recall``: share of the reference's events whose five parts one predicted sentence states
  correctly (x 100, mean over documents, best reference per document).
- ``fact_field_recall``: share of the reference events' parts stated, with each predicted sentence
  credited to at most one reference event (partial credit: a right place with a wrong count).
- ``fact_precision``: share of the predicted event sentences that are reference events.
- ``town_accuracy``: share of documents whose summary names the ledger's own town in its headline
  ("The ledger of <town> records ..."); the town is stated once, at the document's start.

Scored only where every scored document's references are ledger summaries (the synthetic task's
grammar); elsewhere :func:`compute_facts` returns nothing, so the keys are absent, never zero.
:func:`window_ceiling` gives the most a reader of the first window alone can recall;
:func:`window_answer_ceiling`, for the QA ledgers, the share of answers inside truncation's window.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from scaleformer.data import synthetic
from scaleformer.model.vocab import special_token_ids

FIELDS = ("who", "verb", "n", "obj", "where")


@dataclass(frozen=True)
class Event:
    """One stated event; a field the text does not state is None."""

    who: str | None
    verb: str | None
    n: str | None
    obj: str | None
    where: str | None

    def complete(self) -> bool:
        return all(getattr(self, f) is not None for f in FIELDS)

    def matches(self, other: Event) -> int:
        """How many of the five parts agree (a missing part never agrees)."""
        return sum(1 for f in FIELDS if getattr(self, f) is not None and getattr(self, f) == getattr(other, f))


def _alt(words: Sequence[str]) -> str:
    """Regex alternation, longest first, so "sacks of flour" wins over a shorter prefix."""
    return "|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True))


@lru_cache(maxsize=1)
def _patterns() -> dict[str, re.Pattern[str]]:
    s = synthetic  # the generator's vocabulary, which the patterns read back
    places = _alt([p.removeprefix("the ") for p in s.PLACES])
    who = rf"(?:{_alt(s.FIRST)}) (?:{_alt(s.LAST)})"
    return {
        "header": re.compile(rf"^(?:The ledger of (?:{places}) records \d+ events|"
                             rf"Volume \d+ of the (?:{places}) ledger lists \d+ events)\.?$"),
        "event": re.compile(rf"^(?P<who>{who}) (?P<verb>{_alt(s.VERBS)}) (?P<n>\d+) (?P<obj>{_alt(s.OBJECTS)}) "
                            rf"at (?P<where>(?:the )?(?:{places}))\.?$"),
        "paraphrase": re.compile(rf"^At (?P<where>(?:the )?(?:{places})), (?P<who>{who}) (?P<verb>{_alt(s.VERBS)}) "
                                 rf"(?P<n>\d+) (?P<obj>{_alt(s.OBJECTS)})\.?$"),
        "doc_event": re.compile(rf"On day \d+, (?P<who>{who}) (?P<verb>{_alt(s.VERBS)}) (?P<n>\d+) "
                                rf"(?P<obj>{_alt(s.OBJECTS)}) at (?P<where>(?:the )?(?:{places}))\."),
        "town": re.compile(rf"\bledger of (?P<a>(?:the )?(?:{places}))\b|\bof (?P<b>(?:the )?(?:{places})) ledger\b",
                           re.IGNORECASE),
        "who": re.compile(rf"\b{who}\b"),
        "verb": re.compile(rf"\b(?:{_alt(s.VERBS)})\b"),
        "n": re.compile(r"\b\d+\b"),
        "obj": re.compile(rf"\b(?:{_alt(s.OBJECTS)})\b"),
        "where": re.compile(rf"(?:\bthe )?\b(?:{places})\b"),
    }


def sentences(text: str) -> list[str]:
    """Sentences of a summary: the ledgers' names, items and places hold no full stop."""
    return [s.strip() for s in re.split(r"(?<=\.)\s+|\n+", text.strip()) if s.strip()]


def _place(text: str) -> str:
    """Places are compared without their article ("At the Hay Loft" and "at the Hay Loft" agree)."""
    return text.removeprefix("the ").removeprefix("The ")


def reference_events(reference: str) -> list[Event] | None:
    """The events of a ledger summary, or None when the text is not one (wrong grammar anywhere)."""
    pat = _patterns()
    parts = sentences(reference)
    if not parts or not pat["header"].match(parts[0]):
        return None
    events = []
    for s in parts[1:]:
        m = pat["event"].match(s) or pat["paraphrase"].match(s)
        if m is None:
            return None
        events.append(Event(m["who"], m["verb"], m["n"], m["obj"], _place(m["where"])))
    return events or None


def headline_town(text: str) -> str | None:
    """The town a ledger summary's headline names (the first one stated), without its article."""
    m = _patterns()["town"].search(text)
    return _place((m["a"] or m["b"]).lower()).removeprefix("the ") if m else None


def predicted_events(prediction: str) -> list[Event]:
    """Every sentence that states at least two event parts, read leniently (first match per part)."""
    pat = _patterns()
    out = []
    for s in sentences(prediction):
        if pat["header"].match(s) or "ledger" in s.lower():
            continue  # the headline ("The ledger of X records 7 events.") states no event
        found = {f: (m.group(0) if (m := pat[f].search(s)) else None) for f in FIELDS}
        if found["where"] is not None:
            found["where"] = _place(found["where"])
        if sum(v is not None for v in found.values()) >= 2:
            out.append(Event(**found))
    return out


def score_document(prediction: str, events: list[Event]) -> dict[str, float]:
    """Recall, field recall and precision of one prediction against one reference's events."""
    pred = predicted_events(prediction)
    # One-to-one credit: pairs with the most agreeing parts first (exact matches before partial ones).
    pairs = sorted(((e.matches(p), i, j) for i, e in enumerate(events) for j, p in enumerate(pred)),
                   key=lambda t: (-t[0], t[1], t[2]))
    used_ref: set[int] = set()
    used_pred: set[int] = set()
    exact = fields = 0
    for k, i, j in pairs:
        if k == 0 or i in used_ref or j in used_pred:
            continue
        used_ref.add(i)
        used_pred.add(j)
        fields += k
        exact += k == len(FIELDS)
    return {"fact_recall": 100.0 * exact / len(events),
            "fact_field_recall": 100.0 * fields / (len(FIELDS) * len(events)),
            "fact_precision": 100.0 * exact / len(pred) if pred else 0.0}


def compute_facts(predictions: Sequence[str], references: Sequence[Sequence[str]],
                  rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Fact scores (mean over documents, best reference each), or {} unless every reference is a ledger.

    ``references`` are the non-empty reference lists of the scored documents (as ROUGE gets them);
    ``rows`` (one dict per document) receive each document's own scores.
    """
    parsed = [[reference_events(r) for r in refs] for refs in references]
    if not parsed or any(not refs or any(ev is None for ev in refs) for refs in parsed):
        return {}
    totals = {"fact_recall": 0.0, "fact_field_recall": 0.0, "fact_precision": 0.0}
    n_events = towns = 0
    for i, (pred, refs, texts) in enumerate(zip(predictions, parsed, references)):
        scores = [score_document(pred, ev) for ev in refs]
        best = max(scores, key=lambda s: (s["fact_recall"], s["fact_field_recall"]))
        for k in totals:
            totals[k] += best[k]
        n_events += len(refs[0])
        town = headline_town(pred)
        named = town is not None and any(town == headline_town(r) for r in texts)
        towns += named
        if rows is not None:
            rows[i].update({**{k: best[k] for k in totals}, "town_accuracy": 100.0 * named})
    n = len(predictions)
    return {**{k: v / n for k, v in totals.items()}, "town_accuracy": 100.0 * towns / n, "fact_events": n_events}


def document_events(document: str) -> list[tuple[int, int, Event]]:
    """(start char, end char, event) of each event a ledger document states, in order."""
    return [(m.start(), m.end(), Event(m["who"], m["verb"], m["n"], m["obj"], _place(m["where"])))
            for m in _patterns()["doc_event"].finditer(document)]


def window_ceiling(documents: Sequence[str], tokenizer: Any, window: int) -> dict[str, Any]:
    """The fact recall a reader of the first ``window`` tokens alone can reach: the share of each
    document's events lying wholly inside the window truncation keeps (its closing specials
    included), averaged over documents as :func:`compute_facts` averages recall.
    """
    _, suffix = special_token_ids(tokenizer)
    if window <= len(suffix):
        raise ValueError(f"window={window}: must exceed the {len(suffix)} closing special tokens")
    shares = []
    for doc in documents:
        events = document_events(doc)
        if not events:
            raise ValueError(f"a document of {len(doc)} characters states no ledger event: not a ledger")
        enc = tokenizer(doc, add_special_tokens=True, split_special_tokens=True)
        if len(enc["input_ids"]) <= window:
            shares.append(1.0)
            continue
        last = window - len(suffix)  # tokens [0, last) survive truncation
        seen = sum(1 for _, end, _ in events if enc.char_to_token(end - 1) < last)
        shares.append(seen / len(events))
    return {"fact_ceiling": 100.0 * sum(shares) / len(shares), "n_documents": len(shares)}


def answers_inside_window(rows: Sequence[Mapping[str, str]], tokenizer: Any, window: int) -> list[bool]:
    """Per row: does its answer lie wholly inside the window truncation keeps?

    rows: ``query``, ``input`` and ``output`` of the bundled QA ledgers, whose answer is stated in
    the document (the event's sentence, "On day 3, Ada Moss bought 27 lanterns at the Mill."). Truncation
    reads the query first, then the document up to the window (its specials included), so a reader
    of that window alone can state at most these answers.
    """
    _, suffix = special_token_ids(tokenizer)
    inside = []
    for row in rows:
        doc, answer = row["input"], row["output"].rstrip(".")
        end = doc.find(answer)
        if end < 0:
            raise ValueError(f"answer {row['output']!r} is not stated in its document: not a QA ledger")
        end += len(answer)
        query = len(tokenizer(row["query"], add_special_tokens=False, split_special_tokens=True)["input_ids"])
        enc = tokenizer(doc, add_special_tokens=True, split_special_tokens=True)
        last = window - query - len(suffix)  # document tokens [0, last) survive truncation
        inside.append(enc.char_to_token(end - 1) < last)
    return inside


def window_answer_ceiling(rows: Sequence[Mapping[str, str]], tokenizer: Any, window: int) -> float:
    """The share (x100) of questions whose answer lies inside truncation's window: its ceiling on EM."""
    inside = answers_inside_window(rows, tokenizer, window)
    return 100.0 * sum(inside) / max(len(inside), 1)
