"""Atomic file writing, the project's one writer: a killed run never leaves a half-written file or folder.

- Every write goes to a temp file ``.<name>.<random>.tmp`` in the target's folder, is fsynced, then
  renamed over the target (:func:`atomic_write_bytes` and friends; :func:`atomic_file` hands the temp
  path to a library that writes it itself, e.g. ``torch.save``). A folder (an exported model, a
  tokenized cache entry) is built beside its target and renamed into place (:func:`atomic_dir`). The result has the permissions of a plain ``open()``: ``0666`` minus
  the umask (``mkstemp`` alone would make it ``0600``).
- A command refuses, before it writes anything, to write over one of its own inputs or over another of
  its outputs (:func:`refuse_overwrite`): an atomic rename still destroys what was there.
- A killed writer leaves its temp file behind. The first time a process writes into a folder, it
  removes that folder's temp files (names ``.<name>.<token>.tmp``, the pattern of these writers and
  of the checkpoint writer) whose modification time is older than the process itself: they cannot
  belong to a write still in progress in this process, and a run folder has one process at a time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from scaleformer.errors import ConfigError

log = logging.getLogger(__name__)

# Temp files of the atomic writers: ".<target name>.<token>.tmp" (token: mkstemp's or a pid).
_TEMP_NAME = re.compile(r"^\..+\.[^.]+\.tmp$")
# When this process started writing: temp files last modified before it are left by earlier processes.
_STARTED = time.time()
_swept: set[Path] = set()
_umask_lock = threading.Lock()


def current_umask() -> int:
    """The process umask, read without changing it where Linux allows (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _umask_lock:  # os.umask can only be read by setting it
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def remove_stale_temps(folder: str | Path, *, older_than: float | None = None) -> list[Path]:
    """Delete ``.<name>.<token>.tmp`` files in `folder` last modified before `older_than` (default:
    this process's start); returns what was removed. Other files and sub-folders are never touched."""
    cutoff = _STARTED if older_than is None else older_than
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        if not _TEMP_NAME.match(entry.name):
            continue
        try:
            if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except FileNotFoundError:  # removed meanwhile (its writer renamed it)
            continue
    if removed:
        log.info("removed %d temp file(s) left by an interrupted write in %s: %s", len(removed), folder,
                 ", ".join(p.name for p in removed))
    return removed


def _sweep_once(folder: Path) -> None:
    key = folder.resolve()
    if key not in _swept:
        _swept.add(key)
        remove_stale_temps(folder)


@contextlib.contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """A temp path beside ``path`` for a writer that opens it itself; renamed over ``path`` (fsynced,
    mode 0666 & ~umask) when the block ends without an error, removed otherwise."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep_once(path.parent)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        os.close(fd)
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write to a temp file in the same folder, fsync, then rename over `path` (mode 0666 & ~umask)."""
    with atomic_file(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


@contextlib.contextmanager
def atomic_dir(path: str | Path, *, replace: bool = True) -> Iterator[Path]:
    """A temp folder beside ``path`` to fill; it becomes ``path`` when the block ends without an error.

    ``replace``: an existing ``path`` is swapped out (kept until the new one is in place, then
    removed); otherwise an existing complete ``path`` wins (another process, e.g. a DDP rank, made the
    same folder first) and the temp folder is dropped. Files get 0666 & ~umask, folders 0777 & ~umask,
    as if created in place (``mkdtemp`` alone makes the folder 0700).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmpdir"))
    try:
        yield tmp
        umask = current_umask()
        for root, dirs, names in os.walk(tmp):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o777 & ~umask)
            for n in names:
                os.chmod(os.path.join(root, n), 0o666 & ~umask)
        os.chmod(tmp, 0o777 & ~umask)
        if not replace:
            try:
                os.rename(tmp, path)  # fails when path exists (non-empty): the first writer wins
            except OSError:
                if not path.exists():
                    raise
            return
        old = path.with_name(f".{path.name}.old")
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def atomic_write_result(stem: str | Path, doc: Any, markdown: str) -> str:
    """A bench's two files, ``<stem>.json`` (the measurements) and ``<stem>.md`` (their rendering), each written
    atomically; returns the rendering (printed by the benches)."""
    stem = Path(stem)
    atomic_write_json(stem.with_suffix(".json"), doc)
    atomic_write_text(stem.with_suffix(".md"), markdown)
    return markdown


def atomic_write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> Path:
    return atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def parse_json(text: str, where: str, what: str, error: type[Exception] = ValueError) -> Any:
    """``json.loads`` whose every failure is one line naming ``where`` (file:line): bad syntax, a number
    of more than Python's 4,300 digits, nesting deeper than the parser's recursion limit."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{where}: {what} ({e.msg}, column {e.colno})") from None
    except RecursionError:
        raise error(f"{where}: {what} (nested too deeply to parse)") from None
    except ValueError as e:  # int(str) beyond sys.get_int_max_str_digits()
        if "digits" in str(e):
            raise error(f"{where}: a number of more than {sys.get_int_max_str_digits()} digits; write "
                        "long ids as strings") from None
        raise error(f"{where}: {what} ({str(e).splitlines()[0]})") from None


def read_json_record(path: str | Path, what: str, where: str | None = None,
                     error: type[Exception] = ValueError) -> dict[str, Any]:
    """A JSON object from a UTF-8 file (a config, a record), or ``error`` in one line: ``<where>: not a
    readable <what> (why)`` for a missing, unreadable, non-UTF-8 or malformed file, ``<where>: <what> is a JSON
    object, got a <type>`` for any other value. ``where`` defaults to the path."""
    where = str(path) if where is None else where
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{where}: not a readable {what} (not UTF-8: {e.reason} at byte {e.start})") from None
    except OSError as e:
        raise error(f"{where}: not a readable {what} ({e.strerror or e})") from None
    value = parse_json(text, where, f"not a readable {what}", error)
    if not isinstance(value, dict):
        raise error(f"{where}: a {what} is a JSON object, got a {type(value).__name__}")
    return value


def iter_jsonl(path: str | Path, error: type[Exception] = ValueError) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a UTF-8 jsonl file (a leading BOM is skipped).

    Bad UTF-8 or bad JSON raises ``error`` (ValueError; the data layer's DataError) naming the file and
    the line number: the one jsonl reader of the project (data files, predictions, scores).
    """
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise error(f"{path}:{lineno}: line is not valid UTF-8 ({e.reason} at byte {e.start})") from None
            if not line.strip():
                continue
            yield lineno, parse_json(line, f"{path}:{lineno}", "malformed JSON line", error)


def read_jsonl(path: str | Path) -> list[Any]:
    """Every row of a jsonl file; a malformed line raises ValueError naming the file and line number."""
    return [value for _, value in iter_jsonl(path)]


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file: ``os.path.samefile`` when both exist (so a symlink or a hard
    link to it counts), else their resolved paths (an output not written yet)."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return Path(a).resolve() == Path(b).resolve()


Named = Mapping[str, str | Path | None] | Iterable[tuple[str, str | Path | None]]


def _pairs(named: Named | None) -> list[tuple[str, Path]]:
    items = named.items() if isinstance(named, Mapping) else (named or [])
    return [(k, Path(v)) for k, v in items if v is not None and str(v) != ""]


def refuse_overwrite(outputs: Named, inputs: Named | None = None, folders: Named | None = None) -> None:
    """Raise a ConfigError naming the option when an output is one of the command's ``inputs``, lies
    inside one of its input ``folders`` (an exported model), or is another of its ``outputs``. Each is a
    mapping (or pairs) of a label to a path; None: not used. Called before any heavy work, so a path
    typo costs one line and no file."""
    named = _pairs(outputs)
    for i, (key, out) in enumerate(named):
        for what, src in _pairs(inputs):
            if same_file(out, src):
                raise ConfigError(f"{key}={str(out)!r}: is {what} ({src}), which it reads; writing there would "
                                  "overwrite it: name another file")
        for what, folder in _pairs(folders):
            if folder.is_dir() and out.resolve().is_relative_to(folder.resolve()):
                raise ConfigError(f"{key}={str(out)!r}: is inside {what} ({folder}), which it reads: write "
                                  "outside that folder")
        for other, earlier in named[:i]:
            if same_file(out, earlier):
                raise ConfigError(f"{key}={str(out)!r}: is also where {other} goes; one would overwrite the "
                                  "other: give them different paths")
