"""Bad inputs a new user makes, one row each: what, how to trigger it, the one-line message expected.

Every message must be a single line that names what is wrong (the config key, or the file and
line, or the field) and the limit it broke; the regex of each row checks both. Triggers are the
cheapest real entry point: config validation (``to_config``), the model config read, the data
module's read-and-validate pass (``prepare_data``, before any tokenization), the checkpoint
resolution at the start of ``run``, and ``scripts/score.py``'s ``main``. The README's "Bad input"
section is this table in prose.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import compose

from scaleformer.config import DataConfig, SplitNames
from scaleformer.data import DataError
from scaleformer.errors import ConfigError
from scaleformer.runs.context import to_config
from scaleformer.runs.runtime import RunInUseError


@dataclass(frozen=True)
class Bad:
    what: str  # the test id
    trigger: Callable[[Path], Any]  # given a fresh tmp_path
    message: str  # regex searched in the one-line message
    error: type[BaseException] | tuple[type[BaseException], ...] = ConfigError


# ---- triggers ---------------------------------------------------------------------------------------


def config(*overrides: str) -> Callable[[Path], Any]:
    return lambda tmp: to_config(compose(list(overrides)))


def model_config(*overrides: str) -> Callable[[Path], Any]:
    """Read the backbone's model config (no weights), as a run does right after validation."""
    def go(tmp: Path) -> Any:
        from scaleformer.model.backbone import load_tokenizer, model_config

        rc = to_config(compose(list(overrides)))
        return model_config(rc.backbone, load_tokenizer(rc.backbone))
    return go


@cache
def _tokenizer() -> Any:
    from scaleformer.model.tokenizer import load_offline_tokenizer

    return load_offline_tokenizer("bart")


def jsonl(*rows: Any) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def data(name: str, content: bytes, **cfg: Any) -> Callable[[Path], Any]:
    """Read and validate one local file as the data module does (the split named by the file's stem)."""
    def go(tmp: Path) -> Any:
        from scaleformer.data import SummarizationDataModule

        f = tmp / name
        f.write_bytes(content)
        role = f.name.split(".")[0]
        splits = SplitNames(**{r: (r if r == role else None) for r in ("train", "validation", "test")})
        dc = DataConfig(name="mine", source="local", path=str(cfg.pop("path", f)), cache_dir=str(tmp / "cache"),
                        splits=splits, **cfg)
        SummarizationDataModule(dc, _tokenizer()).prepare_data()
    return go


def start(*overrides: str) -> Callable[[Path], Any]:
    """``run`` on the debug config: the start-up checks come before any model is built."""
    def go(tmp: Path) -> Any:
        from scaleformer.runs.run import run

        ovs = [o.replace("{tmp}", str(tmp)) for o in overrides]
        return run(compose(["debug=default", f"paths.root={tmp}/results", f"paths.cache={tmp}/cache",
                            "trainer.enable_progress_bar=false", *ovs]))
    return go


def with_checkpoint(meta: dict[str, Any], *overrides: str) -> Callable[[Path], Any]:
    def go(tmp: Path) -> Any:
        torch.save({"state_dict": {}, "global_step": 7, "scaleformer": meta}, tmp / "other.ckpt")
        return start("trainer.ckpt_path={tmp}/other.ckpt", *overrides)(tmp)
    return go


def while_running(*overrides: str) -> Callable[[Path], Any]:
    """``run`` while another process holds the run folder (its lock taken here, as that process would)."""
    def go(tmp: Path) -> Any:
        from scaleformer.runs import runtime

        rc = to_config(compose(["debug=default", f"paths.root={tmp}/results", *overrides]))
        with runtime.run_lock(Path(rc.paths.run_dir)):
            return start(*overrides)(tmp)
    return go


def unwritable_root(tmp: Path) -> Any:
    from scaleformer.runs.run import run

    (tmp / "f").write_text("a file where the results folder should be")
    return run(compose(["debug=default", f"paths.root={tmp}/f", f"paths.cache={tmp}/cache"]))


def score(content: bytes, *args: str) -> Callable[[Path], Any]:
    def go(tmp: Path) -> Any:
        from scaleformer.cli import score as score_py
        f = tmp / "p.jsonl"
        f.write_bytes(content)
        return score_py.main([str(f), "--no-bertscore", "--sentence-splitter", "regex",
                              *(a.replace("{tmp}", str(tmp)) for a in args)])
    return go


OK = {"id": "a", "input": "a document", "output": "a summary"}
PRED = {"id": "a", "prediction": "x", "reference": "y"}

# ---- the table --------------------------------------------------------------------------------------

CASES = [
    # config: key=value and the limit, before anything is built
    Bad("negative-lr", config("optim.lr=-1"), r"^optim\.lr=-1\.0: must be > 0$"),
    Bad("negative-weight-decay", config("optim.weight_decay=-0.1"), r"^optim\.weight_decay=-0\.1: must be >= 0$"),
    Bad("negative-warmup", config("optim.warmup_steps=-1"), r"^optim\.warmup_steps=-1: must be >= 0$"),
    Bad("zero-steps", config("trainer.max_steps=0"), r"^trainer\.max_steps=0: must be > 0 \(or -1"),
    Bad("cost-schedule-beyond-steps", config("++trainer.measure_cost=true", "trainer.max_steps=3"),
        r"^trainer\.max_steps=3: must cover trainer\.measure_cost's schedule: 52 micro-batches \(2 settings x 2 "),
    Bad("cost-length-zero", config("++trainer.cost_lengths=[1.0,0.0]"),
        r"^trainer\.cost_lengths=\[1\.0, 0\.0\]: must be fractions in \(0, 1\]"),
    Bad("bad-precision", config("trainer.precision=fp8"), r"^trainer\.precision='fp8': must be one of auto, "),
    Bad("eval-train-split", config("trainer.eval_splits=[train]"),
        r"^trainer\.eval_splits='train': entries must be validation or test$"),
    Bad("unknown-trainer-arg", config("+trainer.no_such_argument=1"),
        r"^trainer\.no_such_argument=1: is not an argument of lightning\.pytorch\.Trainer$"),
    Bad("target-tokens-zero", config("data.max_target_tokens=0"), r"^data\.max_target_tokens=0: must be > 0$"),
    Bad("min-above-max-new-tokens", config("generation.min_new_tokens=999"),
        r"^generation\.min_new_tokens=999: must be in \[0, generation\.max_new_tokens=\d+\]$"),
    Bad("zero-beams", config("generation.num_beams=0"), r"^generation\.num_beams=0: must be > 0$"),
    Bad("rouge-tokenizer", config("metrics.rouge_tokenizer=words"),
        r"^metrics\.rouge_tokenizer='words': must be scrolls .* or unicode"),
    Bad("sentence-splitter", config("metrics.sentence_splitter=spacy"),
        r"^metrics\.sentence_splitter='spacy': must be auto, nltk or regex$"),
    Bad("bertscore-batch", config("metrics.bertscore.batch_size=0"), r"^metrics\.bertscore\.batch_size=0: must be > 0$"),
    Bad("data-source", config("data.source=ftp"), r"^data\.source='ftp': must be one of hub, local, synthetic$"),
    Bad("local-without-path", config("data=local"), r"^data\.path=None: required when data\.source=local$"),
    Bad("workers", config("data.num_workers=-1"), r"^data\.num_workers=-1: must be >= 0$"),
    Bad("random-arch", config("backbone.arch=gpt"), r"^backbone\.arch='gpt': must be 'bart', 't5' or 'gpt2'"),
    Bad("positions-zero", config("backbone.max_positions=0"), r"^backbone\.max_positions=0: must be > 0$"),
    Bad("positions-above-learned", model_config("backbone.max_positions=2048"),
        r"^backbone\.max_positions=2048: above the 1024 positions .*\(max_position_embeddings=1024\); "
        r"set backbone\.max_positions <= 1024"),
    Bad("pretrained-missing-folder", model_config("backbone=bart_base", "backbone.pretrained=./no/such/model",
                                                  "backbone.tokenizer=offline", "backbone.arch=bart"),
        r"^backbone\.pretrained='\./no/such/model': no such folder"),
    Bad("tokenizer-missing-folder", model_config("backbone.tokenizer=/no/such/tokenizer"),
        r"^backbone\.tokenizer='/no/such/tokenizer': no such folder"),
    # names that become paths: letters, digits and ._+=- only, never leaving their folder
    Bad("run-name-traversal", config("run_name=../../../tmp/x"), r"^run_name='\.\./\.\./\.\./tmp/x': must be 1-200 "
        r"characters of letters, digits and \._\+=- starting with a letter or digit"),
    Bad("run-name-absolute", config("run_name=/tmp/x"), r"^run_name='/tmp/x': must be 1-200 characters"),
    Bad("run-name-hidden", config("run_name=.x"), r"^run_name='\.x': must be 1-200 characters .*starting with a letter"),
    Bad("data-name-traversal", config("data.name=../../x"), r"^data\.name='\.\./\.\./x': must be 1-200 characters"),
    Bad("data-name-dotdot", config("data.name=.."), r"^data\.name='\.\.': must be 1-200 characters"),
    Bad("backbone-name-traversal", config("backbone.name=a/../../b"),
        r"^backbone\.name='a/\.\./\.\./b': must be 1-200 characters"),
    Bad("method-option-traversal", config("method=../method/truncation"),
        r"^method='\.\./method/truncation': must be 1-200 characters"),
    # data: file:line (or hub row) and the field
    Bad("same-id-other-document", data("validation.jsonl", jsonl(OK, {**OK, "id": "b"}, {**OK, "input": "other"})),
        r"validation\.jsonl:1 and .*validation\.jsonl:3: id 'a' has two different 'input' texts \(data\.input_field\)",
        DataError),
    Bad("same-id-other-document-csv", data("validation.csv", b"id,input,output\na,doc,s\na,other doc,s\n"),
        r"validation\.csv:2 and .*validation\.csv:3: id 'a' has two different 'input' texts", DataError),
    Bad("dict-input", data("train.jsonl", jsonl(OK, {**OK, "input": {"text": "doc"}})),
        r"train\.jsonl:2: field 'input' \(data\.input_field\) must be a string \(or null\), got a dict$", DataError),
    Bad("number-target", data("train.jsonl", jsonl({**OK, "output": 3})),
        r"train\.jsonl:1: field 'output' \(data\.target_field\) must be a string, null or a list of strings "
        r"\(several references\), got an int$", DataError),
    Bad("dict-in-target-list", data("validation.jsonl", jsonl({**OK, "output": ["ok", {"t": 1}]})),
        r"validation\.jsonl:1: field 'output\[1\]' \(data\.target_field\) must be a string \(one reference\), "
        r"got a dict$", DataError),
    Bad("float-id", data("validation.jsonl", jsonl({**OK, "id": 1.5})),
        r"validation\.jsonl:1: field 'id' \(data\.id_field\) must be a non-empty string or an integer .*got a float$",
        DataError),
    Bad("null-id", data("validation.jsonl", jsonl({**OK, "id": None})),
        r"validation\.jsonl:1: field 'id' \(data\.id_field\) .*data\.id_field=null to number the rows\), got null$",
        DataError),
    Bad("list-prefix", data("validation.jsonl", jsonl({**OK, "q": ["who", "when"]}), prefix_field="q"),
        r"validation\.jsonl:1: field 'q' \(data\.prefix_field\) must be a string \(or null\), got a list$", DataError),
    Bad("json-item-dict-input", data("test.json", json.dumps([OK, {**OK, "id": "b", "input": {"x": 1}}]).encode()),
        r"test\.json \(row 1\): field 'input' \(data\.input_field\) must be a string", DataError),
    Bad("missing-field", data("test.jsonl", jsonl({"id": "a", "document": "d", "output": "s"})),
        r"test\.jsonl: missing field 'input'; it has fields \['document', 'id', 'output'\]\. Set "
        r"data\.input_field=<field>$", DataError),
    Bad("malformed-jsonl", data("train.jsonl", jsonl(OK, OK) + b'{"id": "c", "input": }\n'),
        r"train\.jsonl:3: malformed JSON line \(Expecting value, column 22\)$", DataError),
    Bad("non-utf8-jsonl", data("train.jsonl", jsonl(OK) + b'{"id": "b", "input": "caf\xe9", "output": "s"}\n'),
        r"train\.jsonl:2: line is not valid UTF-8", DataError),
    Bad("non-utf8-csv", data("test.csv", b"id,input,output\na,doc,s\nb,\"bad \xff\",s\n"),
        r"test\.csv:3: file is not valid UTF-8", DataError),
    Bad("jsonl-line-not-object", data("train.jsonl", jsonl(OK, ["a", "b"])),
        r"train\.jsonl:2: expected a JSON object per line, got list$", DataError),
    Bad("malformed-json", data("test.json", b'[{"id": "a",\n "input": }]'),
        r"test\.json:2: malformed JSON \(Expecting value, column 11\)$", DataError),
    Bad("unsupported-extension", data("train.txt", b"some text"),
        r"train\.txt: unsupported extension '\.txt'; use one of \.jsonl, \.json, \.parquet, \.csv$", DataError),
    Bad("missing-path", data("train.jsonl", jsonl(OK), path="/no/such/data"),
        r"^data\.path=/no/such/data: no such file or directory$", DataError),
    Bad("input-tokens-below-specials", data("train.jsonl", jsonl(OK), max_input_tokens=2),
        r"^data\.max_input_tokens=2: must be > 2, the special tokens", DataError),
    # checkpoints: refused before any model is built
    Bad("remote-checkpoint", start("trainer.ckpt_path=http://127.0.0.1:9/x.ckpt"),
        r"^trainer\.ckpt_path='http://127\.0\.0\.1:9/x\.ckpt': remote checkpoints are not loaded .*local path$"),
    Bad("s3-checkpoint", start("trainer.ckpt_path=s3://bucket/x.ckpt"),
        r"^trainer\.ckpt_path='s3://bucket/x\.ckpt': remote checkpoints are not loaded"),
    Bad("missing-checkpoint", start("trainer.ckpt_path={tmp}/none.ckpt"),
        r"^trainer\.ckpt_path='.*/none\.ckpt': no such checkpoint file$"),
    Bad("folder-as-checkpoint", start("trainer.ckpt_path={tmp}"), r"^trainer\.ckpt_path='.*': no such checkpoint file$"),
    Bad("checkpoint-of-another-backbone", with_checkpoint({"backbone": "tiny_t5", "method": {"name": "sled"}},
                                                         "trainer.do_train=false"),
        r"^trainer\.ckpt_path='.*/other\.ckpt': trained with backbone 'tiny_t5' and method 'sled', but this run "
        r"uses backbone 'tiny_bart' and method 'scaleformer'$"),
    # scoring: scripts/score.py exits with one line naming the file and line
    Bad("score-empty-file", score(b""), r"p\.jsonl: no prediction rows \(the file is empty or blank\)", SystemExit),
    Bad("score-non-utf8", score(jsonl(PRED) + b'{"id": "b", "prediction": "\xff"}\n'),
        r"p\.jsonl:2: line is not valid UTF-8", SystemExit),
    Bad("score-malformed-json", score(jsonl(PRED) + b"{oops\n"), r"p\.jsonl:2: malformed JSON line", SystemExit),
    Bad("score-no-prediction", score(jsonl({"id": "a", "reference": "y"})), r"p\.jsonl:1: row has no 'prediction'",
        SystemExit),
    Bad("score-no-reference", score(jsonl({"id": "a", "prediction": "x"})), r"p\.jsonl:1: row has no 'reference'",
        SystemExit),
    Bad("score-dict-reference", score(jsonl({**PRED, "reference": {"a": 1}})),
        r"p\.jsonl:1: 'reference' must be a string or a list of strings, got a dict", SystemExit),
    Bad("score-conflicting-ids", score(jsonl(PRED, {**PRED, "prediction": "z"})),
        r"p\.jsonl:2: id 'a' appears again \(first at line 1\) with a different prediction", SystemExit),
    Bad("score-not-an-object", score(b"[1, 2]\n"), r"p\.jsonl:1: expected a JSON object", SystemExit),
    Bad("score-unwritable-out", score(jsonl(PRED), "--out", "{tmp}/p.jsonl/m.json"),
        r"--out .*p\.jsonl/m\.json: cannot write", SystemExit),
    Bad("score-batch-size", score(jsonl(PRED), "--batch-size", "0"), r"metrics\.bertscore\.batch_size=0: must be > 0",
        SystemExit),
    # the run folder: one process at a time; folders that must take files
    Bad("run-already-running", while_running(),
        r"^run folder .*/results/runs/synthetic-scaleformer_middle-tiny_bart-\w+ is in use \(pid \d+ on .*\): "
        r"wait for that run to finish, or set run_name=", RunInUseError),
    Bad("results-root-is-a-file", unwritable_root,
        r"^paths\.run_dir='.*/f/runs/.*': not writable", ConfigError),
]


def assert_one_clear_line(case: Bad, tmp_path: Path) -> str:
    """The case's trigger raises its error with one line matching its message (and returns it)."""
    with pytest.raises(case.error) as e:
        case.trigger(tmp_path)
    msg = str(e.value.code) if isinstance(e.value, SystemExit) else str(e.value)
    assert "\n" not in msg.strip(), f"more than one line:\n{msg}"
    assert re.search(case.message, msg.removeprefix("error: ")), msg
    if isinstance(e.value, SystemExit):
        assert msg.startswith("error: ")
    return msg


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_bad_input_gives_one_clear_line(case: Bad, tmp_path: Path) -> None:
    assert_one_clear_line(case, tmp_path)


def test_the_table_covers_every_kind_of_mistake() -> None:
    ids = [c.what for c in CASES]
    assert len(ids) == len(set(ids)) and len(CASES) >= 40
    kinds = {c.trigger.__qualname__.split(".")[0] for c in CASES}
    assert {"config", "model_config", "data", "start", "with_checkpoint", "score"} <= kinds


def test_traversal_names_write_nothing_anywhere(tmp_path: Path) -> None:
    """A refused name stops the run before any folder or file is made, inside or outside the root."""
    from scaleformer.runs.run import run

    root = tmp_path / "root"
    root.mkdir()
    for override in ("run_name=../../escape", "data.name=../escape", "backbone.name=../../escape"):
        with pytest.raises(ConfigError, match="must be 1-200 characters"):
            run(compose(["debug=default", f"paths.root={root}/results", f"paths.cache={root}/cache", override]))
    assert list(root.iterdir()) == [] and not (tmp_path / "escape").exists()
