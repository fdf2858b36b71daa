"""A local corpus folder read file by file, so that a damaged file stops the preparation in one line.

``datasets``' streaming reader of a local ``.jsonl.zst`` cut in half yields nothing and raises nothing: a run
trained on half the corpus without a word. So a local folder (the Pile's layout, a mirror of it) is read
here: its files in sorted order (as ``datasets`` resolves ``data.corpus_files``), each decompressed by its
suffix (``.zst``, ``.gz``, ``.xz``, ``.bz2`` or none) and checked to end where its format says it ends, each
line a JSON object whose ``data.corpus_field`` is text. A file that is truncated, corrupt, not UTF-8 or not
JSON lines is named with its line. The folder's files also key the token cache (:func:`files_key`): a
corpus rewritten in place is tokenized again, never read from the old tokens.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scaleformer.data.errors import DataError

CHUNK = 1 << 20  # bytes read at a time
JSON_LINES = (".jsonl", ".json")
COMPRESSED = (".zst", ".gz", ".xz", ".bz2")


def local_folder(corpus: Any) -> Path | None:
    """The corpus's folder when ``data.corpus`` names one on this machine (else a hub dataset: None)."""
    if not isinstance(corpus, str):
        return None
    path = Path(corpus).expanduser()
    return path if path.is_dir() else None


def _patterns(files: Any) -> list[str] | None:
    if files is None:
        return None
    if isinstance(files, str):
        return [files]
    if isinstance(files, list | tuple) and files and all(isinstance(f, str) for f in files):
        return list(files)
    raise DataError(f"data.corpus_files={files!r}: must be a glob or a list of globs relative to data.corpus")


def corpus_paths(cfg: Any, folder: Path) -> list[Path]:
    """The training files of a local corpus, sorted: ``data.corpus_files``' globs, else the files under a
    ``train`` folder or named for it, else every JSON-lines file (``datasets``' rule for a folder's train split)."""
    patterns = _patterns(cfg.corpus_files)
    if patterns is not None:
        found = sorted({p for pat in patterns for p in folder.glob(pat) if p.is_file()})
        if not found:
            raise DataError(f"data.corpus_files={cfg.corpus_files!r}: matches no file in {folder}")
    else:
        found = sorted(p for p in folder.rglob("*") if p.is_file() and _readable(p))
        train = [p for p in found if "train" in p.relative_to(folder).as_posix()]
        found = train or found
        if not found:
            raise DataError(f"data.corpus={str(folder)!r}: holds no JSON-lines file (.jsonl, .json, optionally .zst, "
                            ".gz, .xz or .bz2); name its training files with data.corpus_files")
    for p in found:
        if not _readable(p):
            raise DataError(f"{p}: a local corpus is read as JSON lines (.jsonl or .json, optionally compressed "
                            f"{', '.join(COMPRESSED)}); data.corpus_files matched this file")
    return found


def _readable(path: Path) -> bool:
    suffixes = path.suffixes[-2:] if path.suffix in COMPRESSED else path.suffixes[-1:]
    return bool(suffixes) and suffixes[0] in JSON_LINES


def files_key(folder: Path, paths: list[Path]) -> list[list[Any]]:
    """What the token cache is keyed by: each file's name, size, modification time and a SHA-256 of its first
    and last MiB (hashing a Pile-sized file whole at every start would take minutes)."""
    out = []
    for p in paths:
        st = p.stat()
        h = hashlib.sha256()
        with open(p, "rb") as f:
            h.update(f.read(CHUNK))
            if st.st_size > 2 * CHUNK:
                f.seek(-CHUNK, 2)
                h.update(f.read(CHUNK))
        out.append([p.relative_to(folder).as_posix(), st.st_size, st.st_mtime_ns, h.hexdigest()[:16]])
    return out


def _zstd_chunks(path: Path) -> Iterator[bytes]:
    import zstandard

    frames, obj, seen = 0, None, False
    dctx = zstandard.ZstdDecompressor()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            while block:
                if obj is None:
                    obj, seen = dctx.decompressobj(), False
                try:
                    out = obj.decompress(block)
                except zstandard.ZstdError as e:
                    raise DataError(f"{path}: not a readable zstandard file ({e}); the corpus file is damaged") from None
                seen = True
                if out:
                    yield out
                if obj.eof:  # one frame ended: the rest of the block begins the next
                    frames, block, obj = frames + 1, obj.unused_data, None
                else:
                    block = b""
    if (obj is not None and seen) or frames == 0:  # a frame begun and not ended, or none at all
        raise DataError(f"{path}: the zstandard stream ends before its frame does (the file is truncated: "
                        f"{path.stat().st_size} bytes); copy it again")


def _stream_chunks(path: Path, opener: Any, name: str) -> Iterator[bytes]:
    try:
        with opener(path, "rb") as f:
            while block := f.read(CHUNK):
                yield block
    except (EOFError, OSError, lzma.LZMAError, ValueError) as e:
        raise DataError(f"{path}: not a readable {name} file ({e}); the corpus file is damaged or truncated") from None


def _chunks(path: Path) -> Iterator[bytes]:
    if path.suffix == ".zst":
        return _zstd_chunks(path)
    if path.suffix in (".gz", ".xz", ".bz2"):
        opener, name = {".gz": (gzip.open, "gzip"), ".xz": (lzma.open, "xz"), ".bz2": (bz2.open, "bzip2")}[path.suffix]
        return _stream_chunks(path, opener, name)
    return _stream_chunks(path, open, "text")


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    rest, number = b"", 0
    for block in _chunks(path):
        parts = (rest + block).split(b"\n")
        rest = parts.pop()
        for line in parts:
            number += 1
            yield number, line
    if rest:
        yield number + 1, rest


def file_texts(path: Path, field: str) -> Iterator[str]:
    """The ``field`` of each JSON-lines row of one corpus file, checked line by line."""
    for number, raw in _lines(path):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"{path}:{number}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                            "a corpus file is UTF-8 JSON lines") from None
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            why = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deep"
            raise DataError(f"{path}:{number}: not a JSON line ({why}); a corpus file holds one JSON object a "
                            "line") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}:{number}: is a JSON {type(row).__name__}, not an object; a corpus file holds "
                            "one JSON object a line")
        text = row.get(field)
        if not isinstance(text, str):
            raise DataError(f"{path}:{number}: field {field!r} (data.corpus_field) is "
                            f"{'missing' if field not in row else type(text).__name__}, not text")
        yield text


def local_texts(cfg: Any, folder: Path, skip: int) -> Iterator[str]:
    """The local corpus's documents from the ``skip``-th on, file after file."""
    seen = 0
    for path in corpus_paths(cfg, folder):
        for text in file_texts(path, cfg.corpus_field):
            if seen >= skip:
                yield text
            seen += 1
