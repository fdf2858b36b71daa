"""Synthetic documents for language modeling whose text has long-range dependencies: MASFormer's test offline.

Why: perplexity on ordinary text is decided mostly by the last few hundred tokens, so at tiny scale every
attention span would score alike, and the paper's claim (full attention in a few layers recovers what
block attention loses) could not show. Each document here opens with a *register* that binds facts:

- ``The keeper of Harbor Gate is Mara Quill.``   (a role at a place -> a person)
- ``Mara Quill lives at Copper Street.``          (a person -> a home)
- ``The Old Granary keeps 17 lanterns.``          (a place -> a count of things)

and then runs on as a town chronicle (the ledgers' filler sentences), in which each fact is *recalled*
later, one to three times, at random places: ``Toward evening the keeper of Harbor Gate, Mara Quill, ...``,
``... Mara Quill went home to Copper Street.``, ``... the lanterns kept at the Old Granary numbered 17.``
The recalled value (the name, the home, the count) follows its cue and can only be predicted from the
register or an earlier recall of the same fact: a model that cannot see that far back must guess among
the 60 x 50 names, 40 places or 100 counts.

Each row carries its dependencies as character spans, ``deps``: ``[value start, value end, antecedent
start]`` (the antecedent: where the same fact was last stated). :func:`dependency_share` turns them into
the share of tokens whose prediction needs context beyond one block, for a tokenizer and a block size:
the number a table states beside the perplexities.
"""

from __future__ import annotations

import random
from typing import Any

from scaleformer.data import synthetic
from scaleformer.data.synthetic import FIRST, LAST, OBJECTS, PLACES, stream_seed

TITLES = "keeper warden clerk baker smith porter healer miller scribe tailor carter brewer".split()
RECALL_LEAD = ("Toward evening", "Later that week", "At dawn", "By midday", "After the rain", "That spring",
               "Some days later", "Before the fair")


def _facts(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """``n`` facts with distinct cues: (kind, cue words, value)."""
    places = rng.sample(PLACES, k=min(len(PLACES), 2 * n))
    facts: list[dict[str, Any]] = []
    people: set[str] = set()
    for i in range(n):
        kind = ("name", "home", "count")[i % 3]
        place = places[i]
        if kind == "name":
            who = _new_person(rng, people)
            facts.append({"kind": kind, "title": rng.choice(TITLES), "place": place, "value": who})
        elif kind == "home":
            who = _new_person(rng, people)
            facts.append({"kind": kind, "who": who, "value": places[n + i]})
        else:
            facts.append({"kind": kind, "place": place, "obj": rng.choice(OBJECTS), "value": str(rng.randint(2, 99))})
    return facts


def _new_person(rng: random.Random, taken: set[str]) -> str:
    while True:
        who = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        if who not in taken:
            taken.add(who)
            return who


def _cap(place: str) -> str:
    return place[0].upper() + place[1:]


def _statement(f: dict[str, Any]) -> tuple[str, str]:
    """The register's sentence, split at the value: (text before it, text after it)."""
    if f["kind"] == "name":
        return f"The {f['title']} of {f['place']} is ", "."
    if f["kind"] == "home":
        return f"{f['who']} lives at ", "."
    return f"{_cap(f['place'])} keeps ", f" {f['obj']}."


def _recall(f: dict[str, Any], rng: random.Random) -> tuple[str, str]:
    """A later sentence whose cue comes first and the value after it: (before the value, after it)."""
    lead = rng.choice(RECALL_LEAD)
    if f["kind"] == "name":
        return f"{lead} the {f['title']} of {f['place']}, ", ", locked the doors."
    if f["kind"] == "home":
        return f"{lead} {f['who']} went home to ", "."
    return f"{lead} the {f['obj']} kept at {f['place']} numbered ", "."


def make_lm_document(rng: random.Random, n_words: int, n_facts: int = 12) -> dict[str, Any]:
    """One document of about ``n_words`` words: the register of ``n_facts`` facts, then the chronicle with every
    fact recalled one to three times; ``deps`` as the module's docstring says."""
    facts = _facts(rng, n_facts)
    text, deps = "", []
    last: dict[int, int] = {}  # fact -> where its value was last stated (a character offset)

    def say(i: int, before: str, after: str, recalled: bool) -> None:
        nonlocal text
        text += ("" if not text else " ") + before
        start = len(text)
        text += facts[i]["value"]
        if recalled:
            deps.append([start, len(text), last[i]])
        last[i] = start
        text += after

    for i, f in enumerate(facts):
        say(i, *_statement(f), recalled=False)
    register_words = len(text.split())
    recalls = [i for i in range(n_facts) for _ in range(rng.randint(1, 3))]
    rng.shuffle(recalls)
    people = [f.get("who") or f["value"] for f in facts if f["kind"] != "count"]
    n_fill = max(len(recalls), (n_words - register_words) // 12)  # filler sentences run ~12 words
    slots = sorted(rng.sample(range(n_fill), len(recalls)))
    for k in range(n_fill):
        text += " " + synthetic._filler(rng, people)
        while slots and slots[0] == k:
            slots.pop(0)
            i = recalls.pop()
            say(i, *_recall(facts[i], rng), recalled=True)
    return {"input": text, "output": "", "deps": deps}


def lm_rows(split: str, n_docs: int, n_words: int, seed: int = synthetic.DEFAULT_SEED,
            n_events: tuple[int, int] = (12, 12), spread: float = 0.0) -> list[dict[str, Any]]:
    """Rows (``id``, ``input``: the text, ``output``: empty, ``deps``) of one split; ``n_events``' upper end is the
    most facts a register binds (the ledgers' setting, reused)."""
    rng = random.Random(stream_seed(seed, f"lm-{split}"))
    # a fact per WORDS_PER_FACT words (3 at least), so a short document is short: its recalls fit its length
    return [{"id": f"{split}-lm-{i:04d}", **make_lm_document(rng, n, max(3, min(n_events[1], n // WORDS_PER_FACT)))}
            for i, n in enumerate(synthetic.doc_lengths(split, n_docs, n_words, seed, spread))]


WORDS_PER_FACT = 60
lm_rows.version = 1  # type: ignore[attr-defined]  # bump when the documents' text changes (cached files rebuilt)


def dependency_tokens(offsets: list[tuple[int, int]], deps: list[list[int]]) -> list[tuple[int, int]]:
    """(token index, antecedent token index) of every token inside a dependency's value, from the tokenizer's
    character ``offsets`` of one document."""
    starts = [s for s, _ in offsets]
    out = []
    for v0, v1, ante in deps:
        a = _token_at(starts, ante)
        out += [(t, a) for t, (s, e) in enumerate(offsets) if s < v1 and e > v0 and e > s]
    return out


def _token_at(starts: list[int], char: int) -> int:
    lo, hi = 0, len(starts) - 1
    while lo < hi:  # the last token starting at or before char
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if starts[mid] <= char else (lo, mid - 1)
    return lo


def beyond_block(token: int, antecedent: int, block: int) -> bool:
    """Whether block attention of size ``block`` cannot reach a token's antecedent: it lies before the first token
    of the token's own block (blocks start at multiples of ``block``, as :class:`~scaleformer.ops.spans.Span`'s)."""
    return antecedent < token // block * block


def dependency_share(tokenizer: Any, rows: list[dict[str, Any]], block: int, max_tokens: int | None = None
                     ) -> dict[str, float | int]:
    """How many tokens need context beyond one block of ``block`` tokens: the antecedent of their value lies in an
    earlier block (so block attention cannot reach it), over every predicted token of the documents cut to
    ``max_tokens``; also of the value tokens alone, and those within reach."""
    n_tokens = n_value = n_far = 0
    for row in rows:
        enc = tokenizer(row["input"], return_offsets_mapping=True, add_special_tokens=False)
        offsets = enc["offset_mapping"][:max_tokens] if max_tokens else enc["offset_mapping"]
        n_tokens += max(len(offsets) - 1, 0)  # every token after the first is predicted
        for t, a in dependency_tokens(offsets, row.get("deps") or []):
            if t >= len(offsets):
                continue
            n_value += 1
            n_far += int(beyond_block(t, a, block))
    return {"block": block, "tokens": n_tokens, "value_tokens": n_value, "beyond_block": n_far,
            "share_beyond_block": n_far / n_tokens if n_tokens else 0.0,
            "share_of_values_beyond_block": n_far / n_value if n_value else 0.0}


synthetic.ROW_MAKERS["lm"] = lm_rows
