"""A split is read in bounded memory: checked row by row, then tokenized as it streams, each document stored
once however many rows carry it (NarrativeQA: every question with its whole book), the example caps applied
while reading. The tokens are the ones the whole-split path gives."""

from __future__ import annotations

import json

import numpy as np

from scaleformer.bench.read_memory import measure, write_split
from scaleformer.config import DataConfig, SplitNames
from scaleformer.data.datamodule import SummarizationDataModule
from scaleformer.data.encode import encode
from scaleformer.data.examples import build_examples, to_rows
from scaleformer.data.sources import LocalSource
from scaleformer.model.tokenizer import load_offline_tokenizer, special_token_ids


def _cfg(path, cache, **kw) -> DataConfig:
    return DataConfig(**{"name": "nqa", "source": "local", "path": str(path), "cache_dir": str(cache),
                         "query_split": "blank_line", "max_target_tokens": 64, "splits": SplitNames("x", None, None),
                         **kw})


def test_the_peak_does_not_follow_the_rows_when_they_repeat_their_books(tmp_path):
    small = write_split(tmp_path / "a" / "x.jsonl", 12, 2, 30000)
    large = write_split(tmp_path / "b" / "x.jsonl", 120, 2, 30000)  # 10x the rows (~22 MB), the same two books
    s_small, s_large = (measure("streaming", p, tmp_path / f"c{i}") for i, p in enumerate((small, large)))
    m_large = measure("in_memory", large, tmp_path / "c3")
    assert s_small["examples"] == 12 and s_large["examples"] == m_large["examples"] == 120
    growth = s_large["peak_growth_mb"] - s_small["peak_growth_mb"]
    assert growth < 8, (s_small, s_large)  # ~20 MB more of rows read, none of their text held
    # the whole split in memory holds every row's text: its peak follows the file
    assert m_large["peak_growth_mb"] > s_large["peak_growth_mb"] + 15, (m_large, s_large)


def test_streamed_tokens_are_the_whole_split_paths_and_each_book_is_stored_once(tmp_path):
    path = write_split(tmp_path / "x.jsonl", 12, 3, 800)
    tok = load_offline_tokenizer("bart")
    cfg = _cfg(path, tmp_path / "cache", max_prefix_tokens=4)
    dm = SummarizationDataModule(cfg, tok)
    dm.setup()
    got = dm.datasets["train"]
    examples, _ = build_examples(to_rows(LocalSource(cfg).rows("train"), cfg), train=True, cap=None)
    want, _ = encode(examples, tok, max_input_tokens=None, max_target_tokens=64,
                     suffix_special=special_token_ids(tok)[1], with_prefix=True, max_prefix_tokens=4)
    assert len(np.diff(got.arrays["input_offsets"])) == 3 == dm.summary()["train"]["n_documents"]
    for i, e in enumerate(examples):
        item = got[i]
        whole = tok(e.input, add_special_tokens=True, split_special_tokens=True)["input_ids"]
        assert item["input_ids"].tolist() == whole and item["id"] == e.id
        assert item["prefix_ids"].tolist() == tok(e.prefix, add_special_tokens=False)["input_ids"][:4]
        off = want["label_offsets"]
        assert item["labels"].tolist() == want["labels"][off[i]:off[i + 1]].tolist()
    assert dm.summary()["train"]["n_prefix_truncated"] == 12


def test_a_cap_stops_reading_a_training_split_and_keeps_an_evaluation_examples_later_references(tmp_path):
    rows = [{"id": f"d{i % 3}", "input": f"doc {i % 3} " * 20, "output": f"ref {i}"} for i in range(9)]
    (tmp_path / "x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok = load_offline_tokenizer("bart")
    train = SummarizationDataModule(_cfg(tmp_path / "x.jsonl", tmp_path / "c1", query_split=None, max_train_examples=4), tok)
    train.setup()
    assert train.summary()["train"]["n_examples"] == 4 and train.summary()["train"]["n_rows"] == 4  # stopped there
    ev = DataConfig(name="nqa", source="local", path=str(tmp_path / "x.jsonl"), cache_dir=str(tmp_path / "c2"),
                    max_eval_examples=2, splits=SplitNames(None, "x", None))
    dm = SummarizationDataModule(ev, tok)
    dm.setup()
    split = dm.datasets["validation"]
    assert split.ids == ["d0", "d1"] and split.references == [["ref 0", "ref 3", "ref 6"], ["ref 1", "ref 4", "ref 7"]]
