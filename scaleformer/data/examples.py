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

from collections.abc import Iterable, Sequence
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


def _conflict(first: Row, row: Row, field: str, key: str) -> DataError:
    return DataError(
        f"{first.loc} and {row.loc}: id {row.id!r} has two different {field!r} texts (data.{key}); rows "
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


def to_rows(raw: RawSplit, cfg: DataConfig) -> list[Row]:
    """Check each row's fields and flatten list-valued targets (several references for one input).

    Every field must be a string (null = empty); the target may also be a list of strings, one row
    per reference; the id a non-empty string or an integer. Rows sharing an id must have the same
    input (and prefix): else a DataError names the id and both rows.
    """
    rows: list[Row] = []
    first: dict[str, Row] = {}
    id_kind: dict[str, tuple[Any, str]] = {}  # id text -> (the value it first came as, where)
    for n, (pos, obj) in enumerate(raw.records):
        loc = locate(raw.where, pos)
        check_fields(loc, list(obj), cfg)
        row_id = _row_id(obj, cfg.id_field, loc) if cfg.id_field else f"{raw.id_stem}-{n}"
        if cfg.id_field:
            value, where = id_kind.setdefault(row_id, (obj[cfg.id_field], loc))
            if type(value) is not type(obj[cfg.id_field]):
                raise DataError(f"{where} and {loc}: ids {value!r} and {obj[cfg.id_field]!r} (field "
                                f"{cfg.id_field!r}, data.id_field) are an integer and a string with the same text: "
                                "they would merge into one document; use one type for every id")
        text = _string(obj, cfg.input_field, "input_field", loc)
        prefix = _string(obj, cfg.prefix_field, "prefix_field", loc) if cfg.prefix_field else None
        if cfg.query_split and text.strip():
            prefix, text = split_query(text, cfg.query_split, loc)
        targets = _targets(obj, cfg.target_field, loc)
        row = Row(row_id, text, targets[0], prefix, loc)
        seen = first.setdefault(row_id, row)
        if seen is not row:
            if seen.input != text:
                raise _conflict(seen, row, cfg.input_field, "input_field")
            if seen.prefix != prefix:
                if cfg.query_split:  # the query came from the input's own text, not a field
                    raise DataError(f"{seen.loc} and {row.loc}: id {row_id!r} has two different queries (the text "
                                    f"before the document in field {cfg.input_field!r}, data.query_split="
                                    f"{cfg.query_split}); rows sharing an id must share the query: give the "
                                    "documents distinct ids")
                raise _conflict(seen, row, str(cfg.prefix_field), "prefix_field")
        rows.extend(Row(row_id, text, t, prefix, loc) for t in targets)
    return rows


def build_examples(rows: Sequence[Row], *, train: bool, cap: int | None) -> tuple[list[Example], dict[str, Any]]:
    """Apply the empty-text rule, group evaluation rows by id, take the first `cap` examples."""
    stats: dict[str, Any] = {"n_rows": len(rows), "n_skipped_empty": 0}
    kept = []
    for r in rows:
        if not r.input.strip():
            stats["n_skipped_empty"] += 1
        else:
            kept.append(r)
    hidden = not train and bool(kept) and not any(r.target.strip() for r in kept)
    if not hidden:
        n = len(kept)
        kept = [r for r in kept if r.target.strip()]
        stats["n_skipped_empty"] += n - len(kept)
    stats["hidden_references"] = hidden
    if train:
        examples = [Example(r.id, r.input, r.target, r.prefix, [r.target]) for r in kept]
    else:
        groups: dict[str, Example] = {}
        for r in kept:
            ex = groups.get(r.id)
            if ex is None:
                groups[r.id] = Example(r.id, r.input, r.target if not hidden else "", r.prefix,
                                       [] if hidden else [r.target])
            elif not hidden:
                ex.references.append(r.target)
        examples = list(groups.values())
    if cap is not None:
        examples = examples[:cap]
    stats["n_examples"] = len(examples)
    stats["n_ids"] = len({e.id for e in examples})
    stats["n_references"] = sum(len(e.references) for e in examples)
    return examples, stats
