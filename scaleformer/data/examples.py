"""Raw rows -> examples: the one loop every source goes through, then the reference rules.

SCROLLS convention: train keeps one row per (input, reference) pair, as the files come; validation
and test rows are grouped by id into one example with ``references: list[str]`` (metrics score
against the best reference), labels from the first reference.

Empty texts: a row whose input, or (train) target, is empty or whitespace is skipped and counted.
In an evaluation split where *no* row has a reference (SCROLLS test: references are hidden), every
example is kept with ``references == []`` and empty labels; where some rows have references, rows
without one are skipped and counted.

Field types (anything else is a DataError naming the file and line, or hub row, and the field):
input and prefix are strings (null = empty); the target is a string, null (no reference), or a list
of strings (several references of the one input: one row per reference, ``[]`` = none); the id is a
non-empty string or an integer. Rows sharing an id (the SCROLLS way to give several references)
must have the same input and prefix: a different one is an error naming the id and both rows,
never a silent merge.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from scaleformer.config import DataConfig
from scaleformer.data.errors import DataError, check_fields


@dataclass
class RawSplit:
    """What a source gives for one role: where it came from (for messages) and its raw rows."""

    where: str  # "<file>" or "hub dataset ... split 'x'": names the source in errors and the summary
    id_stem: str  # ids are "<id_stem>-<row number>" when data.id_field is null
    records: Iterable[tuple[str, dict[str, Any]]]  # (position such as "line 3", row); read once


@dataclass
class Row:
    id: str
    input: str
    target: str
    prefix: str | None
    loc: str = ""  # where the row came from, for messages: "<file>:<line>" or "<source> (row <n>)"


@dataclass
class Example:
    id: str
    input: str
    target: str  # first reference ("" when references are hidden)
    prefix: str | None
    references: list[str]


def locate(where: str, pos: str) -> str:
    """``file:3`` for a line of a local file, else ``<where> (row 3)``."""
    return f"{where}:{pos[5:]}" if pos.startswith("line ") else f"{where} ({pos})"


def _bad_type(loc: str, field: str, key: str, value: Any, expected: str) -> DataError:
    name = type(value).__name__
    kind = ("null" if value is None else "an empty string" if isinstance(value, str) and not value
            else f"{'an' if name[0] in 'aeiou' else 'a'} {name}")
    return DataError(f"{loc}: field {field!r} (data.{key}) must be {expected}, got {kind}")


def _unicode(value: str, loc: str, field: str, key: str) -> str:
    """A text that is valid Unicode: JSON's ``\\ud800`` escapes give lone surrogates, which no
    tokenizer, file or metric can take."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise DataError(f"{loc}: field {field!r} (data.{key}) holds a lone surrogate ({value[e.start]!r} at "
                        f"character {e.start}): not valid Unicode text") from None
    return value


def _string(obj: dict[str, Any], field: str, key: str, loc: str) -> str:
    """A text field: a string, or null for an empty text (counted as skipped)."""
    value = obj[field]
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _bad_type(loc, field, key, value, "a string (or null)")
    return _unicode(value, loc, field, key)


def _targets(obj: dict[str, Any], field: str, loc: str) -> list[str]:
    """References: a string, null (none), or a list of strings (several references of one input)."""
    value = obj[field]
    if value is None:
        return [""]
    if isinstance(value, str):
        return [_unicode(value, loc, field, "target_field")]
    if not isinstance(value, list):
        raise _bad_type(loc, field, "target_field", value, "a string, null or a list of strings (several references)")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise _bad_type(loc, f"{field}[{i}]", "target_field", item, "a string (one reference)")
        _unicode(item, loc, f"{field}[{i}]", "target_field")
    return value or [""]


def _row_id(obj: dict[str, Any], field: str, loc: str) -> str:
    """An id: a non-empty string or an integer (hub sets such as BookSum number their documents);
    integers become their decimal text, so ids are compared as strings."""
    value = obj[field]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.strip():
        return _unicode(value, loc, field, "id_field")
    raise _bad_type(loc, field, "id_field", "" if isinstance(value, str) else value,
                    "a non-empty string or an integer (or set data.id_field=null to number the rows)")


def _conflict(first: str, loc: str, row_id: str, field: str, key: str) -> DataError:
    return DataError(
        f"{first} and {loc}: id {row_id!r} has two different {field!r} texts (data.{key}); rows "
        "sharing an id must share the document (each such row adds a reference to it): give the "
        "documents distinct ids")


def split_query(text: str, mode: str, loc: str) -> tuple[str, str]:
    """(query, document) of a SCROLLS input, which is the query, a blank line, then the document.

    The rule is SCROLLS' (Shaham et al., 2022, sec. 3: "we prepend [the query] to the text, using two
    newlines as a natural separator"), split back as SLED's ``tau/sled`` data and lm-evaluation-harness'
    SCROLLS tasks do: ``blank_line`` cuts at the first blank line; ``options`` (QuALITY, whose question
    is followed by its options "(A) ... (D) ..." after a blank line) at the first blank line after the
    options' "(D)", looked for after the question, which may itself say "(D)".
    """
    start = 0
    if mode == "options":  # the options follow the question's blank line: a "(D)" inside the question is text
        question_end = text.find("\n\n")
        start = text.find("(D)", max(question_end, 0))
        if start < 0:
            raise DataError(f"{loc}: no answer options \"(A) ... (D)\" before the document (data.query_split="
                            "options reads QuALITY's format)")
    cut = text.find("\n\n", start)
    if cut < 0:
        raise DataError(f"{loc}: no blank line between the query and the document (data.query_split={mode} "
                        "reads SCROLLS' 'query\\n\\ndocument' inputs); set data.query_split=null if it has no query")
    return text[:cut].strip(), text[cut + 2:].strip()


def _digest(text: str | None) -> bytes | None:
    """A document's fingerprint: rows sharing an id are compared by it, so no text is kept to compare."""
    return None if text is None else hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


@dataclass
class _Seen:
    """What an id's first row leaves behind for the rows after it: fingerprints, not texts."""

    value: Any  # the id as it came (an int or a str)
    loc: str
    input: bytes | None
    prefix: bytes | None


def iter_rows(raw: RawSplit, cfg: DataConfig) -> Iterator[Row]:
    """Check each row's fields and flatten list-valued targets (several references for one input), as the
    rows stream: memory stays bounded whatever the split's size (per id, a fingerprint and where it was).

    Every field must be a string (null = empty); the target may also be a list of strings, one row
    per reference; the id a non-empty string or an integer. Rows sharing an id must have the same
    input (and prefix): else a DataError names the id and both rows.
    """
    seen: dict[str, _Seen] = {}
    for n, (pos, obj) in enumerate(raw.records):
        loc = locate(raw.where, pos)
        check_fields(loc, list(obj), cfg)
        row_id = _row_id(obj, cfg.id_field, loc) if cfg.id_field else f"{raw.id_stem}-{n}"
        text = _string(obj, cfg.input_field, "input_field", loc)
        prefix = _string(obj, cfg.prefix_field, "prefix_field", loc) if cfg.prefix_field else None
        if cfg.query_split and text.strip():
            prefix, text = split_query(text, cfg.query_split, loc)
        targets = _targets(obj, cfg.target_field, loc)
        if cfg.id_field:
            _check_same(seen, row_id, obj[cfg.id_field], loc, text, prefix, cfg)
        for t in targets:
            yield Row(row_id, text, t, prefix, loc)


def _check_same(seen: dict[str, _Seen], row_id: str, value: Any, loc: str, text: str, prefix: str | None,
                cfg: DataConfig) -> None:
    """Rows sharing an id share one document (and query), and the id is one type (``7`` and ``"7"`` would merge)."""
    first = seen.get(row_id)
    if first is None:
        seen[row_id] = _Seen(value, loc, _digest(text), _digest(prefix))
        return
    if type(first.value) is not type(value):
        raise DataError(f"{first.loc} and {loc}: ids {first.value!r} and {value!r} (field {cfg.id_field!r}, "
                        "data.id_field) are an integer and a string with the same text: they would merge into one "
                        "document; use one type for every id")
    if first.input != _digest(text):
        raise _conflict(first.loc, loc, row_id, cfg.input_field, "input_field")
    if first.prefix != _digest(prefix):
        if cfg.query_split:  # the query came from the input's own text, not a field
            raise DataError(f"{first.loc} and {loc}: id {row_id!r} has two different queries (the text "
                            f"before the document in field {cfg.input_field!r}, data.query_split="
                            f"{cfg.query_split}); rows sharing an id must share the query: give the "
                            "documents distinct ids")
        raise _conflict(first.loc, loc, row_id, str(cfg.prefix_field), "prefix_field")


def to_rows(raw: RawSplit, cfg: DataConfig) -> list[Row]:
    """Every row of a split, checked (:func:`iter_rows`), as a list: for small splits and scripts."""
    return list(iter_rows(raw, cfg))


def hidden_references(rows: Iterable[Row]) -> bool:
    """Whether rows with a document exist and none of them has a reference: an evaluation split like that keeps
    its examples with hidden references (SCROLLS' test splits) instead of skipping them all."""
    documents = references = False
    for r in rows:
        if r.input.strip():
            documents = True
            if r.target.strip():
                references = True
                break
    return documents and not references


def iter_examples(rows: Iterable[Row], *, train: bool, cap: int | None, hidden: bool,
                  stats: dict[str, Any]) -> Iterator[Example]:
    """Examples as their rows stream: the empty-text rule, evaluation rows grouped by id, the first ``cap``.

    An evaluation example is yielded at its id's first row, and a later row of that id appends its reference
    to the example already yielded (its document, query and first reference are known at once; the list of
    references is complete when the rows are). Training rows are examples one by one, so a cap stops the
    reading; an evaluation split is read to its end for the references of the examples it kept. ``stats``
    (filled in place): rows read, rows skipped as empty, and the counts of what was kept.
    """
    stats.update(n_rows=0, n_skipped_empty=0, hidden_references=hidden and not train)
    hidden = hidden and not train
    groups: dict[str, Example] = {}
    train_ids: set[str] = set()
    n = 0
    for r in rows:
        stats["n_rows"] += 1
        if not r.input.strip() or (not hidden and not r.target.strip()):
            stats["n_skipped_empty"] += 1
            continue
        if train:
            if cap is not None and n >= cap:
                stats["n_rows"] -= 1  # not read: the cap stopped here
                break
            n += 1
            train_ids.add(r.id)
            yield Example(r.id, r.input, r.target, r.prefix, [r.target])
            continue
        ex = groups.get(r.id)
        if ex is not None:
            if not hidden:
                ex.references.append(r.target)
            continue
        if cap is not None and len(groups) >= cap:
            continue  # past the cap: read on only for the kept ids' later references
        ex = groups[r.id] = Example(r.id, r.input, "" if hidden else r.target, r.prefix, [] if hidden else [r.target])
        yield ex
    stats["n_examples"] = n if train else len(groups)
    stats["n_ids"] = len(train_ids) if train else len(groups)
    stats["n_references"] = n if train else sum(len(e.references) for e in groups.values())


def build_examples(rows: Sequence[Row], *, train: bool, cap: int | None) -> tuple[list[Example], dict[str, Any]]:
    """Apply the empty-text rule, group evaluation rows by id, take the first `cap` examples (all in memory:
    :func:`iter_examples` streams)."""
    stats: dict[str, Any] = {}
    examples = list(iter_examples(rows, train=train, cap=cap, hidden=not train and hidden_references(rows),
                                  stats=stats))
    return examples, stats
