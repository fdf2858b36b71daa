"""Raw rows -> examples: the one loop every source goes through, then the reference rules.

SCROLLS convention: train keeps one row per (input, reference) pair, as the files come; validation
and test rows are grouped by id into one example with ``references: list[str]`` (metrics score
against the best reference), labels from the first reference.

Empty texts: a row whose input, or (train) target, is empty or whitespace is skipped and counted.
In an evaluation split where *no* row has a reference (SCROLLS test: references are hidden), every
example is kept with ``references == []`` and empty labels; where some rows have references, rows
without one are skipped and counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from scaleformer.config import DataConfig
from scaleformer.data.errors import check_fields


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


@dataclass
class Example:
    id: str
    input: str
    target: str  # first reference ("" when references are hidden)
    prefix: str | None
    references: list[str]


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def to_rows(raw: RawSplit, cfg: DataConfig) -> list[Row]:
    """Check each row's fields and flatten list-valued targets (several references for one input)."""
    rows = []
    for n, (pos, obj) in enumerate(raw.records):
        check_fields(f"{raw.where} ({pos})", list(obj), cfg)
        row_id = _text(obj[cfg.id_field]) if cfg.id_field else f"{raw.id_stem}-{n}"
        prefix = _text(obj[cfg.prefix_field]) if cfg.prefix_field else None
        targets = obj[cfg.target_field]
        for t in targets if isinstance(targets, list) else [targets]:
            rows.append(Row(row_id, _text(obj[cfg.input_field]), _text(t), prefix))
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
