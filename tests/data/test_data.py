"""Data layer: synthetic set, local files (good and bad), references, truncation, cache, batches, hub."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import datasets  # noqa: F401  (imported before the tests flip HF_HUB_OFFLINE, as in a long-lived process)
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import ROOT, compose

from scaleformer.config import DataConfig, SplitNames
from scaleformer.data import Collator, DataError, HubUnavailableError, SummarizationDataModule, synthetic
from scaleformer.data.encode import encode_to
from scaleformer.data.examples import Row, iter_rows, to_rows
from scaleformer.data.sources import ROLES, HubSource, LocalSource, SyntheticSource
from scaleformer.model.tokenizer import load_offline_tokenizer
from scaleformer.runs.context import to_config

CONF = ROOT / "conf" / "data"
CHUNK, OVERLAP = 1024, 150  # the paper's window and overlap


def shipped(name: str, *overrides: str) -> DataConfig:
    """The data config `data=<name>` composes to, as `python train.py data=<name>` would."""
    return to_config(compose([f"data={name}", *overrides])).data


@pytest.fixture(scope="module")
def tok():
    return load_offline_tokenizer("bart")


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Spy on tokenization: one entry (its number of examples) per split tokenized rather than read from cache."""
    import scaleformer.data.datamodule as datamodule

    calls: list[int] = []

    def spy(folder, examples, *args, **kwargs):
        arrays, stats = encode_to(folder, examples, *args, **kwargs)
        calls.append(len(arrays["input_index"]))
        return arrays, stats

    monkeypatch.setattr(datamodule, "encode_to", spy)
    return calls


def rows(n: int, prefix: str = "doc") -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{i}", "input": f"Document {i} tells a story about lanterns and crates. " * (i + 1),
             "output": f"Summary {i}."} for i in range(n)]


def write(path: Path, data: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    ext = path.suffix
    if ext == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in data), encoding="utf-8")
    elif ext == ".json":
        path.write_text(json.dumps(data), encoding="utf-8")
    elif ext == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(data[0]))
            w.writeheader()
            w.writerows(data)
    elif ext == ".parquet":
        pq.write_table(pa.Table.from_pylist(data), path)
    return path


def local_cfg(tmp_path: Path, path: Path, **kw: Any) -> DataConfig:
    return DataConfig(name="t", source="local", path=str(path), cache_dir=str(tmp_path / "cache"), **kw)


def folder(tmp_path: Path, ext: str = "jsonl", train=None, validation=None, test=None) -> Path:
    d = tmp_path / "data"
    write(d / f"train.{ext}", train if train is not None else rows(6, "tr"))
    write(d / f"validation.{ext}", validation if validation is not None else rows(3, "va"))
    write(d / f"test.{ext}", test if test is not None else rows(3, "te"))
    return d


# ---- synthetic ---------------------------------------------------------------------------------------


def test_synthetic_deterministic(tmp_path: Path) -> None:
    a = synthetic.split_rows("validation", 5, 500)
    assert a == synthetic.split_rows("validation", 5, 500)
    assert a != synthetic.split_rows("test", 5, 500)
    p1 = synthetic.generate(tmp_path / "a", {"train": 3, "test": 2}, 400)
    p2 = synthetic.generate(tmp_path / "b", {"train": 3, "test": 2}, 400)
    assert p1["train"].read_bytes() == p2["train"].read_bytes()
    assert [json.loads(x)["id"] for x in p1["test"].read_text().splitlines()] == ["test-0000", "test-0001"]


def test_synthetic_long_enough_and_facts_spread(tok) -> None:
    """The shipped default gives > 4 windows of 1024/150, and the last fact lies far past token 1024."""
    cfg = shipped("synthetic")
    docs = synthetic.split_rows("train", 6, cfg.synthetic_words)
    stride = CHUNK - OVERLAP
    for r in docs:
        ids = tok(r["input"])["input_ids"]
        n_windows = 1 + math.ceil((len(ids) - CHUNK) / stride)
        assert n_windows > 4, len(ids)
        last_fact = r["input"].rindex("On day ")
        assert len(tok(r["input"][:last_fact])["input_ids"]) > 3 * CHUNK
        # The summary restates every fact in order, and the facts are findable in the document.
        n_facts = r["input"].count("On day ")
        assert f"records {n_facts} events" in r["output"] or f"lists {n_facts} events" in r["output"]
        labels = tok(r["output"])["input_ids"]
        assert len(labels) <= cfg.max_target_tokens


def test_synthetic_multi_reference() -> None:
    train = synthetic.split_rows("train", 8, 300)
    ids = [r["id"] for r in train]
    repeated = {i for i in ids if ids.count(i) == 2}
    assert len(repeated) == 2 and len(train) == 10
    for i in repeated:
        a, b = [r for r in train if r["id"] == i]
        assert a["input"] == b["input"] and a["output"] != b["output"]


def test_synthetic_data_module(tmp_path: Path, tok) -> None:
    cfg = DataConfig(name="synthetic", source="synthetic", cache_dir=str(tmp_path), max_target_tokens=128,
                     synthetic_docs={"train": 4, "validation": 4, "test": 2}, synthetic_words=300)
    dm = SummarizationDataModule(cfg, tok)
    dm.setup()
    s = dm.summary()
    assert s["train"]["n_examples"] == 5 and s["train"]["n_ids"] == 4
    assert dm.has_split("test") and not dm.has_split("predict")
    assert s["validation"]["n_examples"] == 4 and s["validation"]["n_references"] == 5
    assert s["test"]["n_examples"] == 2


# ---- local files ------------------------------------------------------------------------------------


@pytest.mark.parametrize("ext", ["jsonl", "json", "csv", "parquet"])
def test_local_formats(tmp_path: Path, tok, ext: str) -> None:
    d = folder(tmp_path, ext)
    dm = SummarizationDataModule(local_cfg(tmp_path, d), tok)
    dm.setup()
    s = dm.summary()
    assert [s[r]["n_examples"] for r in ("train", "validation", "test")] == [6, 3, 3]
    item = dm.datasets["train"][2]
    src = rows(6, "tr")[2]
    assert item["id"] == "tr2"
    assert item["input_ids"].tolist() == tok(src["input"])["input_ids"]
    assert item["labels"].tolist() == tok(src["output"])["input_ids"]
    assert s["train"]["input_tokens_max"] == len(tok(rows(6)[5]["input"])["input_ids"])


def file_rows(tmp_path: Path, path: Path) -> list[Row]:
    """One file through LocalSource and the shared rows loop, as the data module reads it."""
    cfg = local_cfg(tmp_path, path, splits=SplitNames(train="train", validation=None, test=None))
    return to_rows(LocalSource(cfg).rows("train"), cfg)


def test_json_variants_and_list_targets(tmp_path: Path) -> None:
    cols = tmp_path / "cols.json"
    cols.write_text(json.dumps({"id": ["a", "b"], "input": ["x", "y"], "output": ["X", "Y"]}))
    assert [(r.id, r.target) for r in file_rows(tmp_path, cols)] == [("a", "X"), ("b", "Y")]
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"data": [{"id": "a", "input": "x", "output": ["X1", "X2"]}]}))
    assert [r.target for r in file_rows(tmp_path, wrapped)] == ["X1", "X2"]
    lines = tmp_path / "lines.json"
    lines.write_text('{"id": "a", "input": "x", "output": "X"}\n{"id": "b", "input": "y", "output": "Y"}\n')
    assert len(file_rows(tmp_path, lines)) == 2


def test_single_file_serves_configured_splits(tmp_path: Path, tok) -> None:
    f = write(tmp_path / "all.jsonl", rows(4))
    cfg = local_cfg(tmp_path, f, splits=SplitNames(train=None, validation="validation", test=None))
    dm = SummarizationDataModule(cfg, tok)
    dm.setup()
    assert list(dm.summary()) == ["validation"]
    assert dm.has_split("validation") and not dm.has_split("train") and not dm.has_split("test")
    assert dm.test_dataloader() == []
    with pytest.raises(DataError, match="data.splits.train is null"):
        dm.train_dataloader()


def test_missing_split_file(tmp_path: Path, tok) -> None:
    d = tmp_path / "d"
    write(d / "train.jsonl", rows(2))
    with pytest.raises(DataError, match=r"validation.*data.splits.validation=null"):
        SummarizationDataModule(local_cfg(tmp_path, d), tok).setup()


@pytest.mark.parametrize("ext", ["jsonl", "csv", "parquet", "json"])
def test_missing_field_names_file_field_and_fields(tmp_path: Path, tok, encoded: list[int], ext: str) -> None:
    bad = [{"id": "a", "document": "text", "output": "sum"}]
    d = folder(tmp_path, ext, test=bad)
    dm = SummarizationDataModule(local_cfg(tmp_path, d), tok)
    with pytest.raises(DataError) as e:
        dm.setup()
    msg = str(e.value)
    assert f"test.{ext}" in msg and "'input'" in msg and "document" in msg and "data.input_field" in msg
    assert encoded == []  # nothing was tokenized before the error


def test_malformed_jsonl_line(tmp_path: Path, tok) -> None:
    d = folder(tmp_path)
    p = d / "validation.jsonl"
    lines = p.read_text().splitlines()
    lines[2] = '{"id": "va2", "input": "broken'
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"validation\.jsonl:3: malformed JSON"):
        SummarizationDataModule(local_cfg(tmp_path, d), tok).setup()


def test_non_utf8_jsonl_line(tmp_path: Path, tok) -> None:
    d = folder(tmp_path)
    p = d / "train.jsonl"
    data = p.read_bytes().split(b"\n")
    data[1] = b'{"id": "x", "input": "caf\xe9 au lait", "output": "s"}'
    p.write_bytes(b"\n".join(data))
    with pytest.raises(DataError, match=r"train\.jsonl:2: .*not valid UTF-8"):
        SummarizationDataModule(local_cfg(tmp_path, d), tok).setup()


def test_non_utf8_csv_reports_line(tmp_path: Path, tok) -> None:
    d = folder(tmp_path, "csv")
    p = d / "test.csv"
    p.write_bytes(p.read_bytes() + b'x9,"bad \xff byte",s\n')
    with pytest.raises(DataError, match=r"test\.csv:5: .*not valid UTF-8"):
        SummarizationDataModule(local_cfg(tmp_path, d), tok).setup()


def test_empty_texts_skipped_and_counted(tmp_path: Path, tok) -> None:
    train = rows(5) + [{"id": "e1", "input": "   ", "output": "s"}, {"id": "e2", "input": "text", "output": "\n "},
                       {"id": "e3", "input": None, "output": "s"}]
    val = rows(2) + [{"id": "v", "input": "text", "output": ""}]
    d = folder(tmp_path, train=train, validation=val)
    dm = SummarizationDataModule(local_cfg(tmp_path, d), tok)
    dm.setup()
    s = dm.summary()
    assert (s["train"]["n_rows"], s["train"]["n_skipped_empty"], s["train"]["n_examples"]) == (8, 3, 5)
    assert (s["validation"]["n_skipped_empty"], s["validation"]["n_examples"]) == (1, 2)
    assert not s["validation"]["hidden_references"]
    assert all(len(dm.datasets["train"][i]["labels"]) > 0 for i in range(5))


def test_train_split_all_empty_is_an_error(tmp_path: Path, tok) -> None:
    d = folder(tmp_path, train=[{"id": "a", "input": "x", "output": " "}])
    with pytest.raises(DataError, match="train split has no example"):
        SummarizationDataModule(local_cfg(tmp_path, d), tok).setup("fit")


def test_multi_reference_grouping(tmp_path: Path, tok) -> None:
    doc = "A long document about lanterns."
    val = [{"id": "a", "input": doc, "output": "first ref"}, {"id": "b", "input": "other doc", "output": "b ref"},
           {"id": "a", "input": doc, "output": "second ref"}]
    train = [{"id": "a", "input": doc, "output": "first ref"}, {"id": "a", "input": doc, "output": "second ref"}]
    d = folder(tmp_path, train=train, validation=val)
    dm = SummarizationDataModule(local_cfg(tmp_path, d), tok)
    dm.setup()
    v = dm.datasets["validation"]
    assert [v[i]["id"] for i in range(len(v))] == ["a", "b"]
    assert v[0]["references"] == ["first ref", "second ref"]
    assert v[0]["labels"].tolist() == tok("first ref")["input_ids"]
    s = dm.summary()
    assert (s["validation"]["n_ids"], s["validation"]["n_references"]) == (2, 3)
    assert (s["train"]["n_examples"], s["train"]["n_ids"]) == (2, 1)  # one row per (input, reference)
    # Without an id field every row is its own example.
    cfg = replace(local_cfg(tmp_path, d), id_field=None, cache_dir=str(tmp_path / "c2"))
    dm2 = SummarizationDataModule(cfg, tok)
    dm2.setup("validate")
    assert dm2.summary()["validation"]["n_examples"] == 3


def test_hidden_reference_test_split(tmp_path: Path, tok) -> None:
    test = [{"id": "t1", "input": "doc one", "output": ""}, {"id": "t2", "input": "doc two", "output": None},
            {"id": "t3", "input": " ", "output": ""}]
    d = folder(tmp_path, test=test)
    dm = SummarizationDataModule(local_cfg(tmp_path, d), tok)
    dm.setup("test")
    s = dm.summary()["test"]
    assert s["hidden_references"] and (s["n_examples"], s["n_skipped_empty"]) == (2, 1)
    batch = next(iter(SummarizationDataModule(local_cfg(tmp_path, d, eval_batch_size=2), tok).test_dataloader()))
    assert batch["references"] == [[], []] and sorted(batch["ids"]) == ["t1", "t2"]  # longest first
    assert batch["labels"].shape == (2, 0)
    assert batch["input_ids"].shape[0] == 2


def test_caps_after_grouping(tmp_path: Path, tok) -> None:
    val = [{"id": "a", "input": "x", "output": "1"}, {"id": "a", "input": "x", "output": "2"},
           {"id": "b", "input": "y", "output": "3"}, {"id": "c", "input": "z", "output": "4"}]
    d = folder(tmp_path, validation=val)
    dm = SummarizationDataModule(local_cfg(tmp_path, d, max_train_examples=4, max_eval_examples=2), tok)
    dm.setup()
    assert len(dm.datasets["train"]) == 4
    v = dm.datasets["validation"]
    assert [v[i]["id"] for i in range(len(v))] == ["a", "b"] and v[0]["references"] == ["1", "2"]


@pytest.mark.parametrize("flavour", ["bart", "t5"])
def test_truncation_keeps_closing_special(tmp_path: Path, flavour: str) -> None:
    t = load_offline_tokenizer(flavour)
    long = [{"id": "x", "input": "lanterns and crates " * 50, "output": "the ledger records events " * 20}]
    d = folder(tmp_path, train=long + rows(2))
    dm = SummarizationDataModule(local_cfg(tmp_path, d, max_input_tokens=16, max_target_tokens=8), t)
    dm.setup("fit")
    item = dm.datasets["train"][0]
    ids, labels = item["input_ids"].tolist(), item["labels"].tolist()
    assert len(ids) == 16 and ids[-1] == t.eos_token_id and len(labels) == 8 and labels[-1] == t.eos_token_id
    full = t(long[0]["input"])["input_ids"]
    assert ids[:-1] == full[:15]  # starts like the untruncated input (with <s> for bart)
    assert (ids[0] == t.bos_token_id) == (flavour == "bart")
    s = dm.summary()["train"]
    assert s["n_truncated"] >= 1 and s["input_tokens_max"] == len(full) and s["n_target_truncated"] >= 1


def test_max_lengths_must_exceed_specials(tmp_path: Path, tok) -> None:
    with pytest.raises(DataError, match="data.max_input_tokens=2"):
        SummarizationDataModule(local_cfg(tmp_path, tmp_path, max_input_tokens=2), tok)


def test_tokenization_cache(tmp_path: Path, tok, encoded: list[int]) -> None:
    d = folder(tmp_path)
    cfg = local_cfg(tmp_path, d)
    first = SummarizationDataModule(cfg, tok)
    first.setup()
    assert encoded == [6, 3, 3]
    second = SummarizationDataModule(cfg, tok)
    second.setup()
    assert encoded == [6, 3, 3]  # all three splits read from the cache
    assert second.summary() == first.summary()
    assert second.datasets["train"][3]["input_ids"].tolist() == first.datasets["train"][3]["input_ids"].tolist()
    # Any change to what tokenization depends on misses the cache.
    third = SummarizationDataModule(replace(cfg, max_input_tokens=8), tok)
    third.setup("fit")
    assert encoded[3:] == [6, 3]
    fourth = SummarizationDataModule(cfg, load_offline_tokenizer("t5"))
    fourth.setup("test")
    assert encoded[5:] == [3]
    write(d / "test.jsonl", rows(4, "te"))  # the file changed
    fifth = SummarizationDataModule(cfg, tok)
    fifth.setup()
    assert encoded[6:] == [4] and len(fifth.datasets["test"]) == 4  # train and validation: cache hits


# ---- sources and the shared rows loop -------------------------------------------------------------


def test_local_source_check_reads_headers_only(tmp_path: Path) -> None:
    d = folder(tmp_path, "csv", test=[{"id": "a", "document": "text", "output": "s"}])
    train = d / "train.csv"
    train.write_bytes(train.read_bytes() + b'x9,"bad \xff byte",s\n')  # found only by a full read
    src = LocalSource(local_cfg(tmp_path, d))
    with pytest.raises(DataError, match=r"test\.csv: missing field 'input'.*document"):
        src.check()
    raw = src.rows("validation")
    assert (raw.where, raw.id_stem) == (str(d / "validation.csv"), "validation")
    assert [(pos, r["id"]) for pos, r in raw.records] == [("line 2", "va0"), ("line 3", "va1"), ("line 4", "va2")]
    with pytest.raises(DataError, match=r"train\.csv:8: .*not valid UTF-8"):
        list(src.rows("train").records)
    import hashlib

    assert src.identity("train") == {"path": str(train.resolve()), "size": train.stat().st_size,
                                     "sha256": hashlib.sha256(train.read_bytes()).hexdigest()}


def test_synthetic_source_generates_then_reads(tmp_path: Path) -> None:
    cfg = DataConfig(name="synthetic", source="synthetic", cache_dir=str(tmp_path),
                     synthetic_docs={"train": 2, "validation": 4, "test": 0}, synthetic_words=150)
    src = SyntheticSource(cfg)
    src.check()  # generates the set, then reads each file's first row for its fields
    assert sorted(p.name for p in src.file("train").parent.glob("*.jsonl")) == [
        "test.jsonl", "train.jsonl", "validation.jsonl"]
    raw = src.rows("validation")
    assert [r for _, r in raw.records] == synthetic.split_rows("validation", 4, 150)
    assert list(src.rows("test").records) == []
    assert src.identity("validation")["path"] == str(Path(raw.where).resolve())


def hub_files_cfg(tmp_path: Path, files: dict[str, Path], **kw: Any) -> DataConfig:
    return DataConfig(name="h", source="hub", hub_id="json", cache_dir=str(tmp_path / "c"),
                      data_files={s: str(p) for s, p in files.items()}, **kw)


def test_hub_source_check_and_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    d = folder(tmp_path)
    src = HubSource(hub_files_cfg(tmp_path, {"train": d / "train.jsonl", "validation": d / "validation.jsonl"},
                                  splits=SplitNames(test=None)))
    src.check()  # offline: no probe; a local or cached dataset may still load
    raw = src.rows("validation")
    assert raw.where.startswith("data=h: json files ") and raw.where.endswith("split 'validation'")
    assert [(pos, r["id"]) for pos, r in raw.records] == [("row 0", "va0"), ("row 1", "va1"), ("row 2", "va2")]
    assert src.identity("train")["data_files"]["train"] == str(d / "train.jsonl")


def test_one_rows_loop_serves_every_source(tmp_path: Path, tok, monkeypatch: pytest.MonkeyPatch) -> None:
    """The synthetic files read as synthetic, as a local folder and through the hub builder: same examples."""
    import datasets.config

    import scaleformer.data.datamodule as datamodule

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    seen = []
    monkeypatch.setattr(datamodule, "iter_rows", lambda raw, cfg: seen.append(cfg.source) or iter_rows(raw, cfg))
    cfg = DataConfig(name="s", source="synthetic", cache_dir=str(tmp_path / "s"),
                     synthetic_docs={"train": 2, "validation": 4, "test": 1}, synthetic_words=150)
    syn = SummarizationDataModule(cfg, tok)
    syn.setup()
    files = Path(syn.summary()["train"]["source"]).parent
    local = SummarizationDataModule(local_cfg(tmp_path, files), tok)
    local.setup()
    hub = SummarizationDataModule(hub_files_cfg(tmp_path, {r: files / f"{r}.jsonl" for r in ROLES}), tok)
    hub.setup()
    assert seen == ["synthetic"] * 6 + ["local"] * 6 + ["hub"] * 6  # each split checked, then tokenized
    for role in ROLES:
        want = syn.datasets[role]
        assert len(want) > 0
        for dm in (local, hub):
            got = dm.datasets[role]
            assert (got.ids, got.references) == (want.ids, want.references)
            assert got.arrays["input_ids"].tolist() == want.arrays["input_ids"].tolist()


# ---- batches ----------------------------------------------------------------------------------------


def test_collate_shapes_and_padding(tmp_path: Path, tok) -> None:
    train = [{"id": "a", "q": "who?", "input": "short doc", "output": "s"},
             {"id": "b", "q": "where and when?", "input": "a much longer document " * 5, "output": "a longer summary"}]
    d = folder(tmp_path, train=train, validation=train, test=train)
    cfg = local_cfg(tmp_path, d, prefix_field="q", batch_size=2, eval_batch_size=2)
    dm = SummarizationDataModule(cfg, tok)
    loader = dm.val_dataloader()
    assert next(iter(loader))["ids"] == ["b", "a"], "evaluation batches documents longest first"
    b = loader.collate_fn([dm.datasets["validation"][i] for i in (0, 1)])  # the collator, in file order
    assert b["ids"] == ["a", "b"] and b["references"] == [["s"], ["a longer summary"]]
    n0, n1 = (len(tok(r["input"])["input_ids"]) for r in train)
    assert b["input_ids"].shape == (2, n1) and b["input_ids"].dtype == torch.long
    assert b["attention_mask"][0].tolist() == [1] * n0 + [0] * (n1 - n0)
    assert (b["input_ids"][0, n0:] == tok.pad_token_id).all() and b["input_ids"][0, n0 - 1] == tok.eos_token_id
    t0, t1 = (len(tok(r["output"])["input_ids"]) for r in train)
    assert b["labels"].shape == (2, t1) and (b["labels"][0, t0:] == -100).all()
    p0, p1 = (tok(r["q"], add_special_tokens=False)["input_ids"] for r in train)
    assert b["prefix_ids"].shape == (2, len(p1)) and b["prefix_ids"][0, : len(p0)].tolist() == p0
    assert b["prefix_mask"][0].tolist() == [1] * len(p0) + [0] * (len(p1) - len(p0))
    assert (b["prefix_ids"][0, len(p0):] == tok.pad_token_id).all()
    assert "prefix_ids" not in Collator(0)([dm.datasets["validation"][0]])


def test_loader_order(tmp_path: Path, tok) -> None:
    d = folder(tmp_path, train=rows(20), validation=rows(10))
    cfg = local_cfg(tmp_path, d)

    def order(dm: SummarizationDataModule, split: str) -> list[str]:
        return [i for b in dm.dataloader(split) for i in b["ids"]]

    a = order(SummarizationDataModule(cfg, tok, seed=1), "train")
    assert a == order(SummarizationDataModule(cfg, tok, seed=1), "train")
    assert a != order(SummarizationDataModule(cfg, tok, seed=2), "train")
    assert sorted(a) == sorted(r["id"] for r in rows(20)) and a != [r["id"] for r in rows(20)]
    assert order(SummarizationDataModule(cfg, tok), "validation") == [r["id"] for r in rows(10)]


# ---- hub --------------------------------------------------------------------------------------------


def hub_cfg(tmp_path: Path) -> DataConfig:
    return DataConfig(name="govreport", source="hub", hub_id="json", cache_dir=str(tmp_path),
                      data_files={"validation": "zip://gov_report/validation.jsonl::"
                                                "https://huggingface.co/datasets/tau/scrolls/resolve/main/gov_report.zip"})


@pytest.mark.parametrize("libs_offline", [True, False])
def test_hub_offline_fails_fast_and_clearly(tmp_path: Path, tok, monkeypatch: pytest.MonkeyPatch,
                                            libs_offline: bool, network_attempts: list[str]) -> None:
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # libs_offline=False: the flag was set after `datasets` was imported (it would still retry ~25 s).
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", libs_offline)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", libs_offline)
    for cfg in (hub_cfg(tmp_path), shipped("booksum", f"data.cache_dir={tmp_path}")):
        with pytest.raises(HubUnavailableError) as e:
            SummarizationDataModule(cfg, tok).setup("validate")
        assert not network_attempts, "offline, nothing may try the network (datasets would retry ~25 s)"
        msg = str(e.value)
        named = {"govreport": "data=govreport: hub dataset 'tau/scrolls' (file gov_report.zip)",
                 "booksum": "data=booksum: hub dataset 'abertsch/booksum-fullbooks'"}[cfg.name]
        assert named in msg and "'json'" not in msg, msg  # the data set, not the loader that reads it
        assert "cannot be reached" in msg and "data.source=local data.path=" in msg
        assert f"fields {cfg.input_field}, {cfg.target_field}" in msg


def test_hub_unreachable_probe(tmp_path: Path, tok, monkeypatch: pytest.MonkeyPatch) -> None:
    import scaleformer.data.sources as sources
    import scaleformer.model.hub as hub

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sources, "hub_offline", lambda: False)
    monkeypatch.setattr(hub, "offline_mode", lambda: False)
    probed = []
    monkeypatch.setattr(hub, "_probe", lambda host, port: probed.append(host) or f"{host}:{port}: timed out")
    with pytest.raises(HubUnavailableError, match="huggingface.co:443: timed out"):
        SummarizationDataModule(hub_cfg(tmp_path), tok).setup("validate")
    assert probed == ["huggingface.co"]


def test_hub_path_reads_scrolls_style_zip(tmp_path: Path, tok, monkeypatch: pytest.MonkeyPatch) -> None:
    """The json builder on `zip://<task>/<split>.jsonl::<zip>` (how the SCROLLS configs load), minus the network."""
    import zipfile

    import datasets.config
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    z = tmp_path / "gov_report.zip"
    with zipfile.ZipFile(z, "w") as f:
        for split, data in (("train", rows(3, "tr") + rows(1, "tr")), ("validation", rows(2, "va")),
                            ("test", [dict(r, output="") for r in rows(2, "te")])):
            f.writestr(f"gov_report/{split}.jsonl", "".join(json.dumps(r) + "\n" for r in data))
    cfg = DataConfig(name="gov", source="hub", hub_id="json", cache_dir=str(tmp_path / "c"),
                     data_files={s: f"zip://gov_report/{s}.jsonl::{z}" for s in ("train", "validation", "test")})
    dm = SummarizationDataModule(cfg, tok)
    dm.setup()
    s = dm.summary()
    assert (s["train"]["n_examples"], s["train"]["n_ids"]) == (4, 3)
    assert s["test"]["hidden_references"] and s["test"]["n_examples"] == 2
    assert dm.datasets["validation"][1]["labels"].tolist() == tok(rows(2)[1]["output"])["input_ids"]
    bad = replace(cfg, input_field="document", cache_dir=str(tmp_path / "c2"))
    with pytest.raises(DataError, match=r"split 'train': missing field 'document'.*'input'"):
        SummarizationDataModule(bad, tok).setup()


# ---- shipped configs --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["synthetic", "summscreen", "govreport", "booksum", "local"])
def test_data_configs_validate(name: str) -> None:
    path = CONF / f"{name}.yaml"
    assert path.read_text().startswith(f"# python train.py data={name}")
    cfg = shipped(name, *(["data.path=/some/file.jsonl"] if name == "local" else []))
    assert cfg.name == name
    if name == "govreport":
        assert cfg.max_input_tokens == 16384
    if name == "booksum":
        assert cfg.max_input_tokens is None and (cfg.input_field, cfg.target_field, cfg.id_field) == (
            "book", "summary", "bid")


# ---- hardening: ids, field types, BOM ----------------------------------------------------------------


def val_only(tmp_path: Path, path: Path, **kw: Any) -> DataConfig:
    return local_cfg(tmp_path, path, splits=SplitNames(train=None, validation="validation", test=None), **kw)


@pytest.mark.parametrize("ext", ["jsonl", "csv", "json"])
def test_same_id_different_input_is_an_error_naming_both_rows(tmp_path: Path, tok, ext: str) -> None:
    val = [{"id": "a", "input": "doc one", "output": "r1"}, {"id": "b", "input": "doc two", "output": "r2"},
           {"id": "a", "input": "another document", "output": "r3"}]
    f = write(tmp_path / f"validation.{ext}", val)
    with pytest.raises(DataError) as e:
        SummarizationDataModule(val_only(tmp_path, f), tok).prepare_data()
    first, second = {"jsonl": ("1", "3"), "csv": ("2", "4"), "json": (" (row 0)", " (row 2)")}[ext]
    sep = "" if ext == "json" else ":"
    assert str(e.value).startswith(f"{f}{sep}{first} and {f}{sep}{second}: id 'a' has two different 'input' texts")
    assert "data.input_field" in str(e.value) and "\n" not in str(e.value)


def test_same_id_same_input_gives_several_references(tmp_path: Path, tok) -> None:
    val = [{"id": "a", "input": "doc", "output": "r1"}, {"id": "a", "input": "doc", "output": ["r2", "r3"]},
           {"id": 7, "input": "other", "output": "r4"}]
    dm = SummarizationDataModule(val_only(tmp_path, write(tmp_path / "validation.jsonl", val)), tok)
    dm.setup("validate")
    v = dm.datasets["validation"]
    assert v.ids == ["a", "7"] and v.references == [["r1", "r2", "r3"], ["r4"]]


def test_same_id_different_prefix_is_an_error(tmp_path: Path, tok) -> None:
    val = [{"id": "a", "q": "who?", "input": "doc", "output": "r1"},
           {"id": "a", "q": "when?", "input": "doc", "output": "r2"}]
    f = write(tmp_path / "validation.jsonl", val)
    with pytest.raises(DataError, match=r"validation\.jsonl:1 and .*validation\.jsonl:2: id 'a' has two different "
                                        r"'q' texts \(data\.prefix_field\)"):
        SummarizationDataModule(val_only(tmp_path, f, prefix_field="q"), tok).prepare_data()


def test_hub_rows_conflict_names_row_indices(tmp_path: Path) -> None:
    from scaleformer.data.examples import RawSplit

    raw = RawSplit("hub dataset 'x' split 'validation'", "validation",
                   iter([("row 0", {"id": "a", "input": "d1", "output": "r"}),
                         ("row 5", {"id": "a", "input": "d2", "output": "r"})]))
    with pytest.raises(DataError, match=r"^hub dataset 'x' split 'validation' \(row 0\) and hub dataset 'x' split "
                                        r"'validation' \(row 5\): id 'a'"):
        to_rows(raw, DataConfig(name="x", source="hub", hub_id="x"))


@pytest.mark.parametrize(("row", "field", "got"), [
    ({"id": "a", "input": {"text": "doc"}, "output": "s"}, "'input' (data.input_field)", "a dict"),
    ({"id": "a", "input": ["p1", "p2"], "output": "s"}, "'input' (data.input_field)", "a list"),
    ({"id": "a", "input": "doc", "output": 3}, "'output' (data.target_field)", "an int"),
    ({"id": "a", "input": "doc", "output": ["ok", {"t": 1}]}, r"'output\[1\]' (data.target_field)", "a dict"),
    ({"id": 1.5, "input": "doc", "output": "s"}, "'id' (data.id_field)", "a float"),
    ({"id": None, "input": "doc", "output": "s"}, "'id' (data.id_field)", "null"),
    ({"id": True, "input": "doc", "output": "s"}, "'id' (data.id_field)", "a bool"),
])
def test_non_string_fields_name_file_line_and_field(tmp_path: Path, tok, row, field, got) -> None:
    good = {"id": "z", "input": "fine", "output": "fine"}
    f = write(tmp_path / "validation.jsonl", [good, row])
    with pytest.raises(DataError) as e:
        SummarizationDataModule(val_only(tmp_path, f), tok).prepare_data()
    msg = str(e.value)
    assert msg.startswith(f"{f}:2: field {field.replace(chr(92), '')} must be "), msg
    assert msg.endswith(f"got {got}") and "\n" not in msg


def test_empty_id_in_csv_is_an_error(tmp_path: Path, tok) -> None:
    f = tmp_path / "validation.csv"
    f.write_text("id,input,output\na,doc,s\n,doc two,s\n")
    with pytest.raises(DataError, match=r"validation\.csv:3: field 'id' \(data\.id_field\) must be a non-empty "
                                        r"string or an integer .*data\.id_field=null.*got an empty string"):
        SummarizationDataModule(val_only(tmp_path, f), tok).prepare_data()


def test_empty_reference_list_keeps_the_document(tmp_path: Path, tok) -> None:
    test = [{"id": "t1", "input": "doc one", "output": []}, {"id": "t2", "input": "doc two", "output": []}]
    cfg = local_cfg(tmp_path, write(tmp_path / "test.jsonl", test), splits=SplitNames(None, None, "test"))
    dm = SummarizationDataModule(cfg, tok)
    dm.setup("test")
    s = dm.summary()["test"]
    assert s["hidden_references"] and s["n_examples"] == 2


@pytest.mark.parametrize("ext", ["jsonl", "json", "csv", "lines.json"])
def test_a_bom_is_accepted_alike_by_every_reader(tmp_path: Path, ext: str) -> None:
    data = rows(3, "va")
    plain = write(tmp_path / "plain" / f"validation.{ext.split('.')[-1]}", data)
    if ext == "lines.json":
        plain.write_text("".join(json.dumps(r) + "\n" for r in data), encoding="utf-8")
    bom = tmp_path / "bom" / plain.name
    bom.parent.mkdir()
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    got = {}
    for name, f in (("plain", plain), ("bom", bom)):
        cfg = val_only(tmp_path, f)
        LocalSource(cfg).check()
        got[name] = [(r.id, r.input, r.target) for r in to_rows(LocalSource(cfg).rows("validation"), cfg)]
    assert got["bom"] == got["plain"] and [i for i, _, _ in got["bom"]] == ["va0", "va1", "va2"]


def test_document_lengths_follow_a_published_average_with_a_spread(tmp_path):
    """synthetic_words_spread draws each document's words (lognormal, mean synthetic_words) from its own
    stream: at 0 the documents and their folder are those of before; above 0 the lengths vary around the
    mean, and the real text grows with them."""
    import math
    import statistics

    from scaleformer.data import synthetic

    same = synthetic.generate(tmp_path / "a", {"test": 3}, 300)
    assert synthetic.generate(tmp_path / "a", {"test": 3}, 300, spread=0.0) == same
    lengths = synthetic.doc_lengths("test", 400, 2000, 7, 0.6)
    assert abs(statistics.mean(lengths) / 2000 - 1) < 0.1
    assert abs(statistics.stdev(math.log(n) for n in lengths) - 0.6) < 0.06
    rows = synthetic.split_rows("test", 6, 2000, 7, spread=0.6)
    words: dict[str, int] = {}
    for r in rows:  # multi-reference ids repeat their document
        words.setdefault(r["id"], len(r["input"].split()))
    drawn = synthetic.doc_lengths("test", 6, 2000, 7, 0.6)
    assert len(words) == 6 and all(abs(w - n) / n < 0.1 for w, n in zip(words.values(), drawn))
