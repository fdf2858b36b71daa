"""Continual training's corpus (scaleformer.data.corpus): streamed from the Pile's layout, tokenized ahead into
shards, read back as rows of n; a longer run extends the same stream, and a killed preparation continues."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from scaleformer.data import corpus as corpus_module
from scaleformer.data.corpus import CorpusRows, prepare, stream_texts
from scaleformer.data.errors import DataError
from scaleformer.data.mirrors import PILE, write_pile
from scaleformer.model.tokenizer import load_offline_tokenizer, tokenizer_fingerprint

TEXTS = [f"document {i} says {' '.join(['word'] * (3 + i % 7))} and ends" for i in range(60)]


def _cfg(tmp_path, corpus="mem"):
    return SimpleNamespace(corpus=corpus, corpus_files=None, corpus_field="text", corpus_revision=None,
                           cache_dir=str(tmp_path / "cache"))


def _read(cfg, skip):
    yield from TEXTS[skip:]


@pytest.fixture(scope="module")
def tok():
    return load_offline_tokenizer()


def _stream(tok, texts):
    return np.concatenate([np.asarray(x) for x in tok(texts)["input_ids"]])


def test_rows_are_the_tokenized_stream_cut_in_n_across_shards(tmp_path, tok, monkeypatch):
    monkeypatch.setattr(corpus_module, "DOCS_PER_BATCH", 4)
    folder = prepare(_cfg(tmp_path), tok, tokenizer_fingerprint(tok), 200, read=_read, shard_tokens=37)
    rows = CorpusRows(folder, 16)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["tokens"] >= 200 and len(meta["shards"]) > 1 and meta["dtype"] == "uint16"
    flat = _stream(tok, TEXTS[: meta["docs"]])
    assert len(flat) == meta["tokens"] and len(rows) == meta["tokens"] // 16
    for i in range(len(rows)):  # rows straddle the 37-token shards
        assert np.array_equal(rows[i], flat[i * 16:(i + 1) * 16]) and rows[i].dtype == np.int64
    with pytest.raises(IndexError):
        rows[len(rows)]


def test_a_longer_run_extends_the_same_stream_and_a_killed_one_continues(tmp_path, tok, monkeypatch):
    monkeypatch.setattr(corpus_module, "DOCS_PER_BATCH", 4)
    fp = tokenizer_fingerprint(tok)
    whole = prepare(_cfg(tmp_path / "a"), tok, fp, 600, read=_read, shard_tokens=50)
    short = prepare(_cfg(tmp_path / "b"), tok, fp, 150, read=_read, shard_tokens=50)
    first = CorpusRows(short, 10)
    calls = []

    def dying(cfg, skip):  # a preparation killed after two batches of documents
        calls.append(skip)
        for n, text in enumerate(TEXTS[skip:]):
            if n == 8 and len(calls) == 1:
                (short / "tokens-00099.bin").write_bytes(b"half")  # a shard begun after the last state
                with open(short / f"tokens-{len(json.loads((short / 'meta.json').read_text())['shards']) - 1:05d}.bin",
                          "ab") as f:
                    f.write(b"\x01\x02\x03")  # bytes past the last state
                raise KeyboardInterrupt
            yield text

    with pytest.raises(KeyboardInterrupt):
        prepare(_cfg(tmp_path / "b"), tok, fp, 600, read=dying, shard_tokens=50)
    prepare(_cfg(tmp_path / "b"), tok, fp, 600, read=dying, shard_tokens=50)
    assert calls[0] < calls[1], "continued from the documents already written"
    a, b = CorpusRows(whole, 10), CorpusRows(short, 10)
    assert len(a) == len(b) and all(np.array_equal(a[i], b[i]) for i in range(len(a)))
    assert all(np.array_equal(first[i], b[i]) for i in range(len(first))), "the prefix did not change"
    assert not (short / "tokens-00099.bin").exists()


def test_the_pile_layout_streams_in_file_order(tmp_path, tok):
    folder = write_pile(tmp_path / PILE, {"train": 5, "validation": 1, "test": 1}, scale=0.1)
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.zst")) == [
        "test.jsonl.zst", "train/00.jsonl.zst", "train/01.jsonl.zst", "val.jsonl.zst"]
    cfg = _cfg(tmp_path, str(folder))
    cfg.corpus_files = "train/*.jsonl.zst"
    texts = list(stream_texts(cfg, 0))
    assert len(texts) == 5 and list(stream_texts(cfg, 3)) == texts[3:]
    ids = prepare(cfg, tok, tokenizer_fingerprint(tok), 10**9)  # more than there is: the whole corpus, said
    meta = json.loads((ids / "meta.json").read_text())
    assert meta["ended"] and meta["docs"] == 5 and meta["tokens"] == len(_stream(tok, texts))
    cfg.corpus_field = "meta"
    with pytest.raises(Exception, match="data.corpus_field"):
        next(stream_texts(cfg, 0))


def test_a_recorded_shard_that_is_gone_stops_in_one_line(tmp_path, tok):
    folder = prepare(_cfg(tmp_path), tok, tokenizer_fingerprint(tok), 50, read=_read, shard_tokens=20)
    (folder / "tokens-00001.bin").unlink()
    with pytest.raises(DataError, match=r"tokens-00001.bin, which is missing; delete the folder"):
        prepare(_cfg(tmp_path), tok, tokenizer_fingerprint(tok), 50, read=_read, shard_tokens=20)
