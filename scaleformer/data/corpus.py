"""A continual-training corpus read as a stream, tokenized ahead into token shards, and read back as rows of n.

MASFormer continues its model on the Pile (section 4.1): 50,000 steps of 128 sequences of 8,192 tokens, 52B
tokens, far beyond what :mod:`scaleformer.data.lm` packs in memory (the tiny and smoke profiles' way). So with
``data.corpus`` (a hub dataset or a local folder; ``data.corpus_files``: its training files, e.g. the Pile's
``train/*.jsonl.zst``; ``data.corpus_field``: the text):

- the corpus is read once as a stream in its file order (no download of what is not read), each document
  wrapped in the tokenizer's document specials as ``data.lm`` packs them, into one flat stream of token ids kept
  in shards of :data:`SHARD_TOKENS` (uint16 where the vocabulary fits, else uint32) under
  ``<cache_dir>/corpus/``, keyed by the corpus and the tokenizer;
- only the tokens the run reads (``max_steps x`` the effective batch ``x n``); a longer run extends the same
  stream, whose prefix does not change, so a continued run reads the rows it would have read;
- training reads rows ``[i n, (i + 1) n)`` in stream order (the Pile was shuffled when it was built; one pass,
  no epochs), dealt to the processes by :class:`~scaleformer.data.sampler.ResumableSampler`;
- the stream's state (tokens, documents, shard sizes) is written after every batch of documents: a preparation
  killed midway continues from there; one process prepares at a time (an exclusive lock on the folder), the
  others wait on the lock and then read.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from scaleformer.data.corpus_files import corpus_paths, files_key, local_folder, local_texts
from scaleformer.data.errors import DataError
from scaleformer.errors import hide_secrets, redact
from scaleformer.io import atomic_write_json

log = logging.getLogger(__name__)

SHARD_TOKENS = 1 << 27  # 128M tokens a shard (256 MB as uint16): few files for 52B tokens, each memory-mapped
DOCS_PER_BATCH = 512  # documents tokenized together (the fast tokenizer's batch), then the state is written
VERSION = 1
META = "meta.json"


class CorpusRows(Dataset):
    """Rows of ``n`` tokens of a prepared corpus folder: row ``i`` is tokens ``[i n, (i + 1) n)`` (int64)."""

    def __init__(self, folder: Path, n: int) -> None:
        meta = json.loads((folder / META).read_text())
        dtype = np.dtype(meta["dtype"])
        self.shards = [np.memmap(folder / shard_name(k), dtype=dtype, mode="r", shape=(count,))
                       for k, count in enumerate(meta["shards"]) if count]
        self.starts = np.cumsum([0] + [len(s) for s in self.shards])  # [shards + 1] token offsets
        self.tokens, self.n, self.folder = int(meta["tokens"]), n, folder

    def __len__(self) -> int:
        return self.tokens // self.n

    def __getitem__(self, i: int) -> np.ndarray:
        lo, hi = i * self.n, (i + 1) * self.n
        if i < 0 or hi > self.tokens:
            raise IndexError(f"row {i} of {len(self)}")
        k = int(np.searchsorted(self.starts, lo, side="right")) - 1
        parts = []
        while lo < hi:  # a row may straddle shards
            end = min(hi, int(self.starts[k + 1]))
            parts.append(self.shards[k][lo - self.starts[k]:end - self.starts[k]])
            lo, k = end, k + 1
        return np.concatenate(parts).astype(np.int64)


def shard_name(k: int) -> str:
    return f"tokens-{k:05d}.bin"


def corpus_folder(cfg: Any, tokenizer_fp: str) -> Path:
    """``<cache_dir>/corpus/<corpus>-<key>``: the key covers the corpus, its files (a local folder's: their names,
    sizes, times and a hash of their ends, so a rewritten corpus is tokenized again), field, revision and tokenizer."""
    local = local_folder(cfg.corpus)
    files = files_key(local, corpus_paths(cfg, local)) if local is not None else None
    payload = {"v": VERSION, "corpus": cfg.corpus, "files": cfg.corpus_files, "field": cfg.corpus_field,
               "revision": cfg.corpus_revision, "tokenizer": tokenizer_fp, **({"local": files} if files else {})}
    key = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in str(cfg.corpus).rstrip("/").split("/")[-1])
    return Path(cfg.cache_dir) / "corpus" / f"{safe}-{key}"


def stream_texts(cfg: Any, skip: int) -> Iterator[str]:
    """The corpus's documents from the ``skip``-th on, in file order: a local folder read file by file
    (:mod:`scaleformer.data.corpus_files`: a damaged file is named), a hub dataset streamed by ``datasets``."""
    local = local_folder(cfg.corpus)
    if local is not None:
        yield from local_texts(cfg, local, skip)
        return
    import datasets

    files = {"train": cfg.corpus_files} if cfg.corpus_files else None
    try:
        ds = datasets.load_dataset(cfg.corpus, split="train", data_files=files, revision=cfg.corpus_revision,
                                   streaming=True)
        rows = iter(ds.skip(skip))
    except Exception as e:
        raise DataError(_unreadable(cfg, "cannot stream it", e) + ". Offline, point data.corpus at a local copy "
                        "in the same layout") from None
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except Exception as e:  # a file of the stream that is not what its name says
            raise DataError(_unreadable(cfg, "a file of it cannot be read", e)) from None
        text = row.get(cfg.corpus_field) if isinstance(row, dict) else None
        if not isinstance(text, str):
            raise DataError(f"data.corpus={redact(str(cfg.corpus))!r}: field {cfg.corpus_field!r} (data.corpus_field) "
                            f"is {type(text).__name__}, not text")
        yield text


def _unreadable(cfg: Any, what: str, e: BaseException) -> str:
    """The line from the setting (redacted), with the library's reason stripped of any secret the setting holds."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    reason = hide_secrets(first, str(cfg.corpus), str(cfg.corpus_files))
    files = f" (files {redact(str(cfg.corpus_files))!r})" if cfg.corpus_files else ""
    return (f"data.corpus={redact(str(cfg.corpus))!r}{files}: {what} "
            f"({type(e).__name__}: {reason})")


def prepare(cfg: Any, tokenizer: Any, tokenizer_fp: str, tokens: int, *,
            read: Callable[[Any, int], Iterator[str]] = stream_texts, shard_tokens: int = SHARD_TOKENS) -> Path:
    """The corpus folder holding at least ``tokens`` tokens (fewer only where the corpus ends), extended if needed."""
    folder = corpus_folder(cfg, tokenizer_fp)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one writer; the others wait here, then find the tokens there
        meta = read_meta(folder, tokenizer)
        if meta["tokens"] >= tokens or meta.get("ended"):
            return folder
        t0, before = time.perf_counter(), meta["tokens"]
        log.info("data.corpus=%s: tokenizing %d more tokens into %s (from document %d)", cfg.corpus,
                 tokens - before, folder, meta["docs"])
        _extend(folder, meta, tokenizer, read(cfg, meta["docs"]), tokens, shard_tokens)
        log.info("data.corpus=%s: %d tokens of %d documents in %.0f s", cfg.corpus, meta["tokens"], meta["docs"],
                 time.perf_counter() - t0)
    return folder


SHARD_FILE = re.compile(r"tokens-(\d{5})\.bin")


def read_meta(folder: Path, tokenizer: Any) -> dict[str, Any]:
    """The stream's state, checked against the shards on disk. A shard longer than recorded is cut back (a write
    killed after the last state); one shorter than recorded is damaged and refused: extending it would train on
    zeros. A shard begun after the last state is removed; any other file is left alone."""
    path = folder / META
    dtype = "uint16" if len(tokenizer) <= np.iinfo(np.uint16).max + 1 else "uint32"
    if path.is_file():
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise DataError(f"{path}: not a readable corpus state ({e}); delete {folder} to tokenize the corpus "
                            "again") from None
        _check_meta(path, meta, dtype)
    else:
        meta = {"v": VERSION, "tokens": 0, "docs": 0, "shards": [], "dtype": dtype}
    size = np.dtype(meta["dtype"]).itemsize
    for k, count in enumerate(meta["shards"]):
        f = folder / shard_name(k)
        if not f.is_file():
            raise DataError(f"{folder}: {META} records {count} tokens in {f.name}, which is missing; delete the "
                            "folder to tokenize the corpus again")
        have = f.stat().st_size
        if have < count * size:
            raise DataError(f"{f}: holds {have // size} tokens ({have} bytes), {META} records {count}: the shard is "
                            f"damaged; delete {folder} to tokenize the corpus again")
        if have > count * size:
            with open(f, "r+b") as h:
                h.truncate(count * size)
    for stray in folder.glob("tokens-*.bin"):  # a shard begun after the last state
        m = SHARD_FILE.fullmatch(stray.name)
        if m and int(m[1]) >= len(meta["shards"]):
            stray.unlink()
    return meta


def _check_meta(path: Path, meta: Any, dtype: str) -> None:
    def bad(why: str) -> DataError:
        return DataError(f"{path}: {why}; delete {path.parent} to tokenize the corpus again")

    if not isinstance(meta, dict):
        raise bad(f"holds a JSON {type(meta).__name__}, not the corpus state")
    for key in ("tokens", "docs"):
        v = meta.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise bad(f"{key}={v!r} is not a count")
    shards = meta.get("shards")
    if not isinstance(shards, list) or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in shards):
        raise bad(f"shards={shards!r} is not a list of token counts")
    if sum(shards) != meta["tokens"]:
        raise bad(f"its shards hold {sum(shards)} tokens, its total says {meta['tokens']}")
    if meta.get("dtype") != dtype:
        raise bad(f"dtype={meta.get('dtype')!r}, and this tokenizer's ids need {dtype}")


def _extend(folder: Path, meta: dict[str, Any], tokenizer: Any, texts: Iterator[str], tokens: int,
            shard_tokens: int) -> None:
    dtype = np.dtype(meta["dtype"])
    shards = meta["shards"]
    batch: list[str] = []
    done = False
    while not done:
        batch.clear()
        for text in texts:
            batch.append(text)
            if len(batch) == DOCS_PER_BATCH:
                break
        if not batch:
            meta["ended"] = True  # the corpus holds fewer tokens than asked: say so, read what there is
            break
        ids = np.concatenate([np.asarray(x, dtype=dtype) for x in tokenizer(batch)["input_ids"]])
        at = 0
        while at < len(ids):  # append to the last shard, opening the next when it is full
            if not shards or shards[-1] == shard_tokens:
                shards.append(0)
            take = min(len(ids) - at, shard_tokens - shards[-1])
            with open(folder / shard_name(len(shards) - 1), "ab") as f:
                f.write(ids[at:at + take].tobytes())
            shards[-1] += take
            at += take
        meta["tokens"] += len(ids)
        meta["docs"] += len(batch)
        done = meta["tokens"] >= tokens
        atomic_write_json(folder / META, meta)  # the state after whole documents only
    if meta.get("ended"):
        atomic_write_json(folder / META, meta)
        log.warning("data.corpus: the corpus ended at %d tokens, before the %d the run reads", meta["tokens"], tokens)
