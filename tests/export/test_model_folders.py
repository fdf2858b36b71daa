"""`scaleformer summarize` reads any folder the Auto class loads, not only exports; what it cannot read is
one line, before the weights load."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scaleformer.cli import summarize
from scaleformer.export.summarizer import Summarizer
from scaleformer.resources import resolve_asset

READER = "asset:readers/tiny_bart_reader"


def _run(tmp: Path, model: Path, *args: str) -> int:
    (tmp / "d.txt").write_text("The ledger of Alder records 3 events. Alder paid the toll.")
    return summarize.main(["--model", str(model), "--input", str(tmp / "d.txt"), "--device", "cpu", *args])


@pytest.fixture
def plain_bart(tmp_path) -> Path:
    """A plain BART folder with its tokenizer: a model saved or pushed outside this project."""
    from scaleformer.model.tokenizer import load_offline_tokenizer

    folder = tmp_path / "bart"
    shutil.copytree(resolve_asset(READER), folder)
    load_offline_tokenizer("bart").save_pretrained(folder)
    return folder


def test_a_plain_backbone_reads_through_the_method_it_is_given(plain_bart, tmp_path):
    s = Summarizer.from_pretrained(plain_bart, method="sled", overrides={"chunk_size": 256}, device="cpu",
                                   max_new_tokens=3)
    assert s.model.method.cfg.name == "sled" and s.model.method.cfg.chunk_size == 256
    assert s.generation.max_new_tokens == 3 and s.record == {}
    assert isinstance(s("The ledger of Alder."), str)
    assert _run(tmp_path, plain_bart, "--method", "sled", "--max-new-tokens", "3") == 0


def test_a_plain_backbone_without_a_method_is_one_line(plain_bart, tmp_path):
    with pytest.raises(SystemExit, match=r"^error: .*/bart: a plain bart model \(config\.json names no scaleformer "
                                         r"method and there is no scaleformer\.json\): name the method to read it "
                                         r"with, e.g\. --method sled$"):
        _run(tmp_path, plain_bart)


def test_a_folder_without_tokenizer_files_is_one_line(plain_bart, tmp_path):
    """transformers would build an empty tokenizer for it and summarize unknown tokens."""
    for f in plain_bart.glob("tokenizer*"):
        f.unlink()
    with pytest.raises(SystemExit, match=r"^error: .*/bart: no tokenizer files \(tokenizer\.json, "
                                         r"vocab\.json, \.\.\.\); save the tokenizer beside the model"):
        _run(tmp_path, plain_bart, "--method", "sled")


@pytest.mark.parametrize("make, message", [
    (lambda d: None, r"^error: .*/nothing: no such folder \(give a model folder or a Hub id"),
    (lambda d: d.mkdir(), r"^error: .*/nothing: not a model folder \(no config\.json\)"),
    (lambda d: (d.mkdir(), (d / "config.json").write_text("[1,")), r"^error: .*/config\.json: not a readable "
                                                                     r"model config \("),
])
def test_a_folder_that_is_no_model_is_one_line(tmp_path, make, message):
    make(tmp_path / "nothing")
    with pytest.raises(SystemExit, match=message):
        _run(tmp_path, tmp_path / "nothing")
