"""Hostile inputs, seventh round, first half: the decoder-only side's security, its corpus and its runs. A config
file that would write a file, a password in a corpus URL, a corpus cut short, damaged or rewritten, an empty or
too short training set, duplicate ids and the numbers perplexity cannot take. One row per case (the ``Case`` rows of
test_hostile_table): a refusal in one line naming the value and the limit, or a check that the outcome is right.
The chain, exports, resumes, tables and bills are the second half (``test_hostile_round7_chain``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, compose
from test_hostile_table import Case, check_table, run_case

from scaleformer.data.errors import DataError
from scaleformer.errors import ConfigError

PASSWORD = "s3cr3t-Pw"  # noqa: S105 (a test credential: it must appear nowhere)


# ---- security ---------------------------------------------------------------------------------------------


def config_dir_entry(group: str, allow: bool = False) -> Any:
    """An experiment file under ``--config-dir`` whose ``callbacks`` (or ``logger``) entry names a function of the
    package that writes a file (``scaleformer.io.atomic_write_text``); ``allow``: the file also lists it in
    ``allowed_targets``. Nothing is written, the command stops in one line."""
    def trigger(tmp: Path, _: Path | None) -> None:
        conf = tmp / "my_conf" / "experiment"
        conf.mkdir(parents=True)
        marker = tmp / "written-by-a-config"
        allowed = "allowed_targets: [scaleformer.io.atomic_write_text]\n" if allow else ""
        (conf / "shared.yaml").write_text(f"# @package _global_\n{allowed}{group}:\n  x:\n"
                                          f"    _target_: scaleformer.io.atomic_write_text\n"
                                          f"    path: {marker}\n    text: pwned\n")
        done = subprocess.run([sys.executable, "train.py", "--config-dir", str(tmp / "my_conf"), "experiment=shared",
                               "debug=default", "backbone=tiny_bart", f"paths.root={tmp}/results",
                               f"paths.cache={tmp}/cache"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert done.returncode != 0 and not marker.exists(), done.stderr[-2000:]
        err = done.stderr.strip().splitlines()
        want = (f"{group} entry 'scaleformer.io.atomic_write_text': is not a lightning.pytorch" if allow else
                f"{group}.x._target_='scaleformer.io.atomic_write_text': not instantiated: a {group} entry must be "
                "one of the classes for it")
        assert "Traceback" not in done.stderr and err[-1].startswith("error: ") and want in err[-1], done.stderr[-2000:]
    return trigger


def checkpoint_dir_outside_root(tmp: Path, _: Path | None) -> Any:
    """Lightning's own ModelCheckpoint, a class the group allows, pointed at a folder outside the results."""
    from scaleformer.runs.context import to_config

    return to_config(compose([f"paths.root={tmp}/results", "+callbacks.ck._target_=lightning.pytorch.callbacks."
                              "ModelCheckpoint", f"+callbacks.ck.dirpath={tmp}/elsewhere"]))


def hydra_logging_file(tmp: Path, _: Path | None) -> Any:
    """Hydra's job_logging in a shared file, with a FileHandler at a path of its choosing (dictConfig opens it)."""
    from scaleformer.cli import train

    conf = tmp / "my_conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "logs.yaml").write_text("# @package _global_\nhydra:\n  job_logging:\n    handlers:\n      f:\n"
                                    f"        class: logging.FileHandler\n        filename: {tmp}/elsewhere.log\n")
    try:
        return train.check_composed_targets(["--config-dir", str(tmp / "my_conf"), "experiment=logs"])
    finally:
        assert not (tmp / "elsewhere.log").exists()


def corpus_password(tmp: Path, _: Path | None) -> None:
    """``data.corpus`` a URL with a password: the run stops in one line, and the password is in no line printed
    (stdout, stderr) and no file written (results, cache), in either URL form (``://`` and datasets' ``:/``)."""
    url = f"https://alice:{PASSWORD}@example.invalid/pile"
    done = subprocess.run([sys.executable, "train.py", "experiment=masformer_lm", f"data.corpus='{url}'",
                           "trainer.max_steps=2", "method.max_length=256", "data.synthetic_docs.validation=1",
                           "data.synthetic_docs.test=1", f"paths.root={tmp}/results", f"paths.cache={tmp}/cache"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: data.corpus='https://alice:***@example.invalid/pile': cannot stream it"), last
    assert PASSWORD not in done.stdout + done.stderr
    for path in tmp.rglob("*"):
        assert not path.is_file() or PASSWORD.encode() not in path.read_bytes(), path
    from scaleformer.errors import hide_secrets, redact

    for form in (url, url.replace("://", ":/"), f"hf://{PASSWORD}@host/x"):
        assert PASSWORD not in redact(form), form
    assert PASSWORD not in hide_secrets(f"at /x/{PASSWORD.replace('-', '%2D')} and {PASSWORD}", url)


# ---- the corpus ---------------------------------------------------------------------------------------------


def _tok() -> Any:
    from scaleformer.model.tokenizer import load_offline_tokenizer

    return load_offline_tokenizer("gpt2")


def _corpus(tmp: Path, files: str | None = "train/*.jsonl.zst") -> SimpleNamespace:
    return SimpleNamespace(corpus=str(tmp / "pile"), corpus_files=files, corpus_field="text", corpus_revision=None,
                           cache_dir=str(tmp / "cache"))


def _pile(tmp: Path) -> Path:
    from scaleformer.data.mirrors import write_pile

    return write_pile(tmp / "pile", {"train": 6, "validation": 1, "test": 1}, scale=0.1)


def _prepare(cfg: SimpleNamespace, tokens: int = 10**9) -> Path:
    from scaleformer.data.corpus import prepare
    from scaleformer.model.tokenizer import tokenizer_fingerprint

    tok = _tok()
    return prepare(cfg, tok, tokenizer_fingerprint(tok), tokens)


def truncated_shard(how: str) -> Any:
    """One ``.jsonl.zst`` file of the Pile's layout cut in half (or overwritten with noise): the preparation stops
    naming the file, before a token of it is trained on (datasets' reader yielded nothing and raised nothing)."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        f = _pile(tmp) / "train" / "01.jsonl.zst"
        data = f.read_bytes()
        f.write_bytes(data[: len(data) // 2] if how == "cut" else b"\x28\xb5\x2f\xfd" + os.urandom(200))
        return _prepare(_corpus(tmp))
    return trigger


def shard_shorter_than_recorded(tmp: Path, _: Path | None) -> Any:
    """A token shard shorter than meta.json records: refused, never extended with zeros."""
    folder = _prepare(_corpus(tmp))
    shard = folder / "tokens-00000.bin"
    shard.write_bytes(shard.read_bytes()[:-256])
    return _prepare(_corpus(tmp))


def rewritten_corpus_is_tokenized_again(tmp: Path, _: Path | None) -> None:
    """A local corpus rewritten in place (same names): a new token cache, whose rows are the new text's."""
    from scaleformer.data.corpus import CorpusRows, stream_texts

    (tmp / "pile" / "train").mkdir(parents=True)
    f = tmp / "pile" / "train" / "00.jsonl"
    f.write_text("".join(json.dumps({"text": f"the old text {i} " * 30}) + "\n" for i in range(4)))
    cfg = _corpus(tmp, "train/*.jsonl")
    old = _prepare(cfg)
    f.write_text("".join(json.dumps({"text": f"a new story {i} " * 30}) + "\n" for i in range(4)))
    new = _prepare(cfg)
    assert new != old
    tok = _tok()
    want = np.concatenate([np.asarray(x) for x in tok(list(stream_texts(cfg, 0)))["input_ids"]])
    rows = CorpusRows(new, 16)
    assert np.array_equal(np.concatenate([rows[i] for i in range(len(rows))]), want[: len(rows) * 16])
    assert "new story" in tok.decode(rows[0])


def corpus_line(content: bytes) -> Any:
    """A local corpus file whose second line is not UTF-8, or is a JSON array: the file and line."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        (tmp / "pile" / "train").mkdir(parents=True)
        (tmp / "pile" / "train" / "00.jsonl").write_bytes(b'{"text": "fine"}\n' + content + b"\n")
        return _prepare(_corpus(tmp, "train/*.jsonl"))
    return trigger


def meta_damaged(how: str) -> Any:
    """The token folder's ``meta.json`` not JSON: one line naming it. A stray ``tokens-abc.bin``: not the
    project's file name, left alone, and the folder reads as before."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        _pile(tmp)
        folder = _prepare(_corpus(tmp))
        if how == "stray":
            (folder / "tokens-abc.bin").write_bytes(b"x")
            assert _prepare(_corpus(tmp)) == folder and (folder / "tokens-abc.bin").exists()
            return None
        (folder / "meta.json").write_text("{not json")
        return _prepare(_corpus(tmp))
    return trigger


def _pile_first(trigger: Any) -> Any:
    def go(tmp: Path, folder: Path | None) -> Any:
        _pile(tmp)
        return trigger(tmp, folder)
    return go


# ---- language-model runs ------------------------------------------------------------------------------------


def _lm_data(tmp: Path, *overrides: str, rows: int | None = 8) -> Any:
    from scaleformer.data.lm import LanguageModelingData
    from scaleformer.runs.context import to_config

    rc = to_config(compose(["experiment=masformer_lm", "method.max_length=256", f"paths.cache={tmp}/cache",
                            "data.synthetic_docs.validation=2", "data.synthetic_docs.test=2", *overrides]))
    dm = LanguageModelingData(rc.data, _tok(), rc.method.max_length, train_rows=rows)
    dm.setup()
    return dm


def lm_local(rows: list[dict[str, Any]], *extra: str, split: str = "test") -> Any:
    """A local language-model folder whose ``split`` holds ``rows`` (the others two plain documents)."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        for s in ("train", "validation", "test"):
            body = rows if s == split else [{"id": f"{s}{i}", "input": "a plain document " * 40} for i in range(2)]
            (tmp / f"{s}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in body))
        return _lm_data(tmp, "data.source=local", f"data.path={tmp}", *extra)
    return trigger


def lm_without_output(tmp: Path, _: Path | None) -> None:
    """Documents with only an id and a text: a language-model source needs no reference."""
    dm = lm_local([{"id": "a", "input": "one text " * 50}, {"id": "b", "input": "another text " * 50}])(tmp, None)
    assert [d.id for d in dm.docs["test"]] == ["a", "b"] and dm.packed is not None


def corpus_shorter_than_a_sequence(tmp: Path, _: Path | None) -> Any:
    (tmp / "pile" / "train").mkdir(parents=True)
    (tmp / "pile" / "train" / "00.jsonl").write_text(json.dumps({"text": "too short"}) + "\n")
    return _lm_data(tmp, f"data.corpus={tmp}/pile", "data.corpus_files=train/*.jsonl")


def world_size_of_a_device_list(tmp: Path, _: Path | None) -> None:
    from scaleformer.runs.sharding import world_size

    assert world_size("gpu", "0,1", 1) == 2 and world_size("gpu", "1,", 2) == 2 and world_size("cpu", [0, 1, 2], 1) == 3


def perplexity_of(nll: float) -> Any:
    def trigger(tmp: Path, _: Path | None) -> Any:
        from scaleformer.metrics.perplexity import perplexity

        return perplexity([{"nll": nll, "tokens": 10, "length": 11}, {"nll": 5.0, "tokens": 10, "length": 11}])
    return trigger


def gpt_neo_backbone(tmp: Path, _: Path | None) -> Any:
    """A GPT-Neo folder with the default sdpa: the project's refusal (GPT-Neo runs its own attention code), before
    transformers builds anything."""
    from transformers import GPTNeoConfig

    from scaleformer.model.backbone import prepare
    from scaleformer.runs.context import to_config

    GPTNeoConfig(num_layers=2, attention_types=[[["global", "local"], 1]], hidden_size=32, num_heads=2,
                 vocab_size=512, max_position_embeddings=128).save_pretrained(tmp / "neo")
    rc = to_config(compose(["experiment=masformer_lm", "backbone=tiny_gpt2_reader", f"backbone.pretrained={tmp}/neo",
                            "method.max_length=256"]))
    return prepare(rc.backbone, rc.method)


def lm_experiment_with_sled(tmp: Path, _: Path | None) -> Any:
    from unittest import mock

    from scaleformer.cli import train

    argv = ["train.py", "experiment=masformer_lm", "method=sled", f"paths.root={tmp}/r"]
    with mock.patch.object(sys, "argv", argv):
        return train.main()


def hf_trainer_nothing_to_score(tmp: Path, _: Path | None) -> Any:
    from transformers import AutoTokenizer, EvalPrediction

    from scaleformer.resources import resolve_asset

    sys.path.insert(0, str(ROOT / "scripts"))
    import hf_trainer

    tok = AutoTokenizer.from_pretrained(resolve_asset("asset:readers/tiny_bart_reader"))
    ids = tok(["a prediction"], return_tensors="np").input_ids
    refs = np.full_like(ids, -100)  # no reference at all
    return hf_trainer.rouge_metrics(tok)(EvalPrediction(predictions=ids, label_ids=refs))


DOC = "a document " * 40
CASES = [
    # security
    Case("config-dir-callback-writes-a-file", config_dir_entry("callbacks"), None),
    Case("config-dir-logger-writes-a-file", config_dir_entry("logger"), None),
    Case("config-dir-allows-its-own-writer", config_dir_entry("callbacks", allow=True), None),
    Case("checkpoint-folder-outside-the-results", checkpoint_dir_outside_root,
         r"^callbacks\.ck\.dirpath='.*/elsewhere': must be a folder under paths\.root \(.*/results\)", ConfigError),
    Case("hydra-logging-file-handler", hydra_logging_file,
         r"^hydra\.job_logging\.handlers\.f\.class='logging\.FileHandler': not instantiated: Hydra's logging may use "
         r"logging\.StreamHandler"),
    Case("corpus-url-password-never-shown", corpus_password, None),
    # the corpus
    Case("corpus-zstandard-shard-cut-in-half", truncated_shard("cut"),
         r"train/01\.jsonl\.zst: the zstandard stream ends before its frame does \(the file is truncated", DataError),
    Case("corpus-zstandard-shard-corrupt", truncated_shard("noise"),
         r"train/01\.jsonl\.zst: not a readable zstandard file", DataError),
    Case("corpus-token-shard-shorter-than-recorded", _pile_first(shard_shorter_than_recorded),
         r"tokens-00000\.bin: holds \d+ tokens \(\d+ bytes\), meta\.json records \d+: the shard is damaged", DataError),
    Case("corpus-rewritten-in-place", rewritten_corpus_is_tokenized_again, None),
    Case("corpus-line-not-utf8", corpus_line(b'{"text": "caf\xe9"}'),
         r"train/00\.jsonl:2: not UTF-8 text \(byte 0xe9 at column 14\)", DataError),
    Case("corpus-line-a-json-array", corpus_line(b'[{"text": "a"}, {"text": "b"}]'),
         r"train/00\.jsonl:2: is a JSON list, not an object", DataError),
    Case("corpus-line-without-its-field", corpus_line(b'{"body": "x"}'),
         r"train/00\.jsonl:2: field 'text' \(data\.corpus_field\) is missing, not text", DataError),
    Case("corpus-meta-not-json", meta_damaged("json"), r"meta\.json: not a readable corpus state", DataError),
    Case("corpus-stray-token-file-left-alone", meta_damaged("stray"), None),
    # language-model runs
    Case("lm-empty-training-split", lambda tmp, _: _lm_data(tmp, "data.synthetic_docs.train=0"),
         r"^data=synthetic_lm: the train split has no document to train on", DataError),
    Case("lm-corpus-shorter-than-one-sequence", corpus_shorter_than_a_sequence,
         r"data\.corpus='.*pile': holds \d+ tokens, fewer than one sequence of method\.max_length=256", DataError),
    Case("lm-duplicate-ids", lm_local([{"id": "a", "input": DOC}, {"id": "a", "input": DOC + "more"}]),
         r"test\.jsonl.* and .*: id 'a' names two documents; perplexity is scored per document", DataError),
    Case("lm-deps-as-strings", lm_local([{"id": "a", "input": DOC, "deps": ["3-9", "12-20"]}]),
         r"field 'deps' is \['3-9', '12-20'\]: must be a list of \[value start, value end, antecedent\]", DataError),
    Case("lm-documents-without-output", lm_without_output, None),
    Case("world-size-of-a-device-list", world_size_of_a_device_list, None),
    Case("perplexity-negative-nll", perplexity_of(-7.0),
         r"^perplexity: document 0 has nll=-7 over 10 tokens: a negative log-likelihood", ValueError),
    Case("perplexity-a-thousand-nats-a-token", perplexity_of(20000.0),
         r"^perplexity: 1000 nats a token, above 710 \(its exp overflows a float\)", ValueError),
    # tracebacks before
    Case("gpt-neo-backbone-under-sdpa", gpt_neo_backbone,
         r"^method\.name='masformer': per-layer causal spans support the decoder-only families .*got model_type "
         r"'gpt_neo' \(GPT-Neo runs its own attention code", ConfigError),
    Case("lm-experiment-with-an-encoder-method", lm_experiment_with_sled,
         r"^experiment=masformer_lm sets method\.max_length, which method=sled has no key for: the experiment needs a "
         r"span method on a decoder-only backbone: method=block_attention, full_attention, masformer, sliding_window",
         SystemExit),
    Case("hf-trainer-nothing-to-score", hf_trainer_nothing_to_score,
         r"^compute_metrics: nothing to score: 1 prediction\(s\), 1 without a reference", ValueError),
]


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_hostile_round7(case: Case, request, tmp_path: Path) -> None:
    run_case(case, tmp_path, request)


def test_the_table_has_one_row_per_case_and_both_outcomes() -> None:
    check_table(CASES)
