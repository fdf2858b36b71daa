"""Local jsonl/json/csv/parquet files as (position, row) pairs, with errors naming file and line.

Why our own readers rather than ``datasets.load_dataset("json"|"csv"|"parquet")``: validation must
name the file, the line and the field (``train.jsonl:3: malformed JSON``), which `datasets`' Arrow
parsers cannot say; and the rows are needed as Python objects anyway (grouping by id), so a second,
bulk load after validating would only read everything twice. Parquet goes through pyarrow directly,
which is what `datasets` would call.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scaleformer.config import DataConfig
from scaleformer.data.errors import DataError, check_fields, required_fields
from scaleformer.io import iter_jsonl, parse_json

EXTENSIONS = ("jsonl", "json", "parquet", "csv")

Records = Iterator[tuple[str, dict[str, Any]]]


def _jsonl(path: Path) -> Records:
    """Bad UTF-8, bad JSON or a non-object raise with file:line; blank lines and a leading BOM are skipped."""
    for lineno, obj in iter_jsonl(path, DataError):
        if not isinstance(obj, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object per line, got {type(obj).__name__}")
        yield f"line {lineno}", obj


def _decode_whole(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: file is not valid UTF-8 ({e.reason} at byte {e.start})") from None


def _json(path: Path) -> Records:
    """A JSON array of objects, {"data": [...]}, a dict of columns, or JSON lines named .json."""
    text = _decode_whole(path)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":  # JSON lines in a .json file (common on the hub)
            yield from _jsonl(path)
            return
        raise DataError(f"{path}:{e.lineno}: malformed JSON ({e.msg}, column {e.colno})") from None
    except (ValueError, RecursionError):
        obj = parse_json(text, str(path), "malformed JSON", DataError)  # the same error, as one line
    if isinstance(obj, dict):
        lists = {k: v for k, v in obj.items() if isinstance(v, list)}
        if len(lists) == 1 and all(isinstance(x, dict) for x in next(iter(lists.values()))):
            obj = next(iter(lists.values()))
        elif lists and len(lists) == len(obj) and len({len(v) for v in lists.values()}) == 1:
            obj = [dict(zip(lists, vals)) for vals in zip(*lists.values())]
    if not isinstance(obj, list):
        raise DataError(f"{path}: expected a list of objects (or JSON lines); got a {type(obj).__name__}")
    for i, row in enumerate(obj):
        if not isinstance(row, dict):
            raise DataError(f"{path}: item {i} is a {type(row).__name__}, expected an object")
        yield f"row {i}", row


def _csv(path: Path) -> Records:
    """Strictly (the standard ``csv`` module, ``strict=True``): a row whose field count differs from the
    header's (an unquoted comma, a missing column), a quote never closed, a duplicated header column are
    errors naming file:line, never a shifted or dropped field."""
    text = _decode_whole(path)
    csv.field_size_limit(sys.maxsize)  # documents are longer than csv's 128 KiB default
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    start = 1  # the line a row starts on (a quoted field may span lines)

    def read() -> list[str] | None:
        """The next row (None at the end); csv's own errors as file:line of the row's first line."""
        try:
            return next(reader, None)
        except csv.Error as e:
            hint = ": a quoted field is never closed" if "end of data" in str(e) else ""
            raise DataError(f"{path}:{start}: malformed CSV ({e}){hint}") from None

    header = read()
    if header is None:
        return
    dup = next((h for h in header if header.count(h) > 1), None)
    if dup is not None:
        raise DataError(f"{path}:1: column {dup!r} appears twice in the header: rename one")
    while True:
        start = reader.line_num + 1
        row = read()
        if row is None:
            return
        if not row:  # a blank line
            continue
        if len(row) != len(header):
            why = ("an unquoted comma inside a field? quote fields that contain commas" if len(row) > len(header)
                   else "a missing column")
            raise DataError(f"{path}:{start}: {len(row)} fields where the header has {len(header)} ({why})")
        yield f"line {start}", dict(zip(header, row))


def _parquet(path: Path, cfg: DataConfig) -> Records:
    import pyarrow.parquet as pq

    check_fields(str(path), header_fields(path) or [], cfg)
    i = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=256, columns=required_fields(cfg)):  # streamed
        for row in batch.to_pylist():
            yield f"row {i}", row
            i += 1


def header_fields(path: Path) -> list[str] | None:
    """Field names from the header/schema/first object, cheaply; None when that needs a full parse."""
    ext = path.suffix.lower().lstrip(".")
    if ext == "parquet":
        import pyarrow.parquet as pq

        try:
            return list(pq.read_schema(path).names)
        except Exception as e:
            raise DataError(f"{path}: cannot read as parquet ({e})") from None
    if ext == "csv":
        with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:
            header = next(csv.reader(f), None)
        return list(header or [])
    if ext == "jsonl":
        for _, obj in _jsonl(path):
            return list(obj)
        return []
    return None


def file_records(path: Path, cfg: DataConfig) -> Records:
    """The rows of one local file, validated as they are read (parquet: its schema first)."""
    ext = path.suffix.lower().lstrip(".")
    if ext == "jsonl":
        return _jsonl(path)
    if ext == "json":
        return _json(path)
    if ext == "csv":
        return _csv(path)
    if ext == "parquet":
        return _parquet(path, cfg)
    raise DataError(f"{path}: unsupported extension {path.suffix!r}; use one of "
                    f"{', '.join('.' + e for e in EXTENSIONS)}")
