"""Examples -> flat int32 token arrays plus offsets, with length and truncation statistics, as they stream.

Inputs get the tokenizer's document-level specials (BART ``<s> .. </s>``, T5 ``.. </s>``);
truncation keeps the closing special. Prefixes (queries) get none: the method adds them to every
chunk; a query longer than ``max_prefix_tokens`` is cut to it (SLED's ``max_prefix_length``).

A document is tokenized once per split however many examples read it (SCROLLS' train files repeat a
document once per reference, NarrativeQA once per question about its book): ``input_index`` maps each
example to its document. Token ids go to their sink as each batch is tokenized (a file under the cache's
temporary folder, or memory for small in-process uses), so a split of any size is read in bounded memory.

Why not ``datasets.Dataset.map(batched=True, num_proc=...)``: a fast tokenizer already encodes each
batch on all cores, so `map` measured no faster (slower on the default set, and worker processes did
not pay off on 400 long documents either); the loop below is what `map` would run, minus the Arrow
round trip.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from scaleformer.data.examples import Example

_BATCH = 64  # documents (and as many targets and queries) per tokenizer call
TOKEN_FILES = ("input_ids", "labels", "prefix_ids")  # raw int32 streams; their offsets are .npy arrays
OFFSETS = {"input_ids": "input_offsets", "labels": "label_offsets", "prefix_ids": "prefix_offsets"}


def truncate_ids(ids: list[int], max_len: int | None, suffix: tuple[int, ...]) -> tuple[list[int], bool]:
    """At most `max_len` ids, a cut sequence re-closed with the suffix specials; and whether it was cut."""
    if max_len is None or len(ids) <= max_len:
        return ids, False
    return ids[: max_len - len(suffix)] + list(suffix), True


class TokenStream:
    """Sequences of int32 ids appended to one stream (a file, or memory), with their offsets."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.offsets = [0]

    def add(self, ids: list[int]) -> None:
        arr = np.asarray(ids, dtype=np.int32)
        self.out.write(arr.tobytes())
        self.offsets.append(self.offsets[-1] + len(arr))

    def offsets_array(self) -> np.ndarray:
        return np.asarray(self.offsets, dtype=np.int64)


class Encoder:
    """Tokenizes examples as they come into three streams (documents, labels, queries) plus per-example
    document indices; :meth:`finish` returns the offsets, the index and the statistics."""

    def __init__(self, tokenizer: Any, sinks: dict[str, BinaryIO], *, max_input_tokens: int | None,
                 max_target_tokens: int | None, suffix_special: tuple[int, ...], with_prefix: bool,
                 max_prefix_tokens: int | None = None) -> None:
        self.tok = tokenizer
        self.streams = {k: TokenStream(v) for k, v in sinks.items()}
        self.max_input, self.max_target, self.max_prefix = max_input_tokens, max_target_tokens, max_prefix_tokens
        self.suffix = suffix_special
        self.with_prefix = with_prefix
        self.doc_of: dict[bytes, int] = {}  # document fingerprint -> its index
        self.index: list[int] = []  # example -> document
        self.doc_len: list[int] = []  # tokens of each document before truncation
        self.doc_cut: list[bool] = []
        self.tgt_lens: list[int] = []
        self.n_tgt_trunc = self.n_prefix_trunc = 0
        self._docs: list[str] = []  # pending: new documents, targets and queries, tokenized a batch at a time
        self._targets: list[str] = []
        self._prefixes: list[str] = []

    def _tokenize(self, texts: list[str], specials: bool) -> list[list[int]]:
        return self.tok(texts, add_special_tokens=specials, split_special_tokens=True, verbose=False)["input_ids"]

    def add(self, e: Example) -> None:
        key = hashlib.blake2b(e.input.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        doc = self.doc_of.get(key)
        if doc is None:
            doc = self.doc_of[key] = len(self.doc_of)
            self._docs.append(e.input)
        self.index.append(doc)
        self._targets.append(e.target)
        if self.with_prefix:
            self._prefixes.append(e.prefix or "")
        if len(self._docs) >= _BATCH or len(self._targets) >= 4 * _BATCH:
            self.flush()

    def flush(self) -> None:
        if self._docs:
            for ids in self._tokenize(self._docs, True):
                self.doc_len.append(len(ids))
                ids, cut = truncate_ids(list(ids), self.max_input, self.suffix)
                self.doc_cut.append(cut)
                self.streams["input_ids"].add(ids)
        if self._targets:
            for text, ids in zip(self._targets, self._tokenize(self._targets, True)):
                if not text:  # hidden reference: no labels
                    self.streams["labels"].add([])
                    continue
                self.tgt_lens.append(len(ids))
                ids, cut = truncate_ids(list(ids), self.max_target, self.suffix)
                self.n_tgt_trunc += cut
                self.streams["labels"].add(ids)
        if self._prefixes:
            for ids in self._tokenize(self._prefixes, False):
                cut = self.max_prefix is not None and len(ids) > self.max_prefix
                self.n_prefix_trunc += cut
                self.streams["prefix_ids"].add(list(ids[: self.max_prefix] if cut else ids))
        self._docs, self._targets, self._prefixes = [], [], []

    def finish(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Offsets and the example -> document index (the token streams are in their sinks), and statistics."""
        self.flush()
        index = np.asarray(self.index, dtype=np.int64)
        lens = np.asarray(self.doc_len, dtype=np.int64)[index] if len(index) else np.zeros(0, np.int64)
        stats = {
            "input_tokens_mean": round(float(lens.mean()), 1) if len(lens) else 0.0,
            "input_tokens_max": int(lens.max(initial=0)),
            "n_truncated": int(np.asarray(self.doc_cut, dtype=bool)[index].sum()) if len(index) else 0,
            "target_tokens_mean": round(float(np.mean(self.tgt_lens)), 1) if self.tgt_lens else 0.0,
            "target_tokens_max": int(max(self.tgt_lens, default=0)),
            "n_target_truncated": int(self.n_tgt_trunc),
            "n_documents": len(self.doc_of),
        }
        if self.with_prefix:
            stats["n_prefix_truncated"] = int(self.n_prefix_trunc)
        arrays = {OFFSETS[k]: s.offsets_array() for k, s in self.streams.items()}
        arrays["input_index"] = index
        return arrays, stats


def encode_to(folder: Path, examples: Iterable[Example], tokenizer: Any, **settings: Any
              ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Tokenize ``examples`` as they come into ``folder``: ``<stream>.bin`` (raw int32) per token stream, and
    the offsets and index returned (with the statistics) for the caller to save beside them."""
    names = [k for k in TOKEN_FILES if k != "prefix_ids" or settings.get("with_prefix")]
    files = {k: open(Path(folder) / f"{k}.bin", "wb") for k in names}  # noqa: SIM115 (closed below)
    try:
        enc = Encoder(tokenizer, files, **settings)
        for e in examples:
            enc.add(e)
        return enc.finish()
    finally:
        for f in files.values():
            f.close()


def encode(
    examples: Iterable[Example],
    tokenizer: Any,
    *,
    max_input_tokens: int | None,
    max_target_tokens: int | None,
    suffix_special: tuple[int, ...],
    with_prefix: bool,
    max_prefix_tokens: int | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Token arrays in memory (``input_ids``/``labels``/``prefix_ids`` + ``*_offsets``, ``input_index``) and
    their statistics: :class:`Encoder` with memory sinks, for small in-process uses.

    Text is text: a literal ``<s>`` or ``</s>`` inside a document, query or reference (HTML's strike-through,
    code, markup) is tokenized as characters (``split_special_tokens``), never as a control token.
    """
    names = [k for k in TOKEN_FILES if k != "prefix_ids" or with_prefix]
    buffers = {k: io.BytesIO() for k in names}
    enc = Encoder(tokenizer, buffers, max_input_tokens=max_input_tokens, max_target_tokens=max_target_tokens,
                  suffix_special=suffix_special, with_prefix=with_prefix, max_prefix_tokens=max_prefix_tokens)
    for e in examples:
        enc.add(e)
    arrays, stats = enc.finish()
    for k, buf in buffers.items():
        arrays[k] = np.frombuffer(buf.getvalue(), dtype=np.int32)
    return arrays, stats
