"""Hostile inputs on exports, commands, text and queries: one table, one row per case.

Each row either stops with one clear line (``message``: a regex searched in it, never a traceback) or,
where the right outcome is to work, runs a check of what must happen (``message=None``): the marker
file a config tried to create does not exist, special-token literals come back as text, the Hub client
is never called. Rows that need an exported model get a fresh copy of a Memorizing export (a method
with weights of its own). ``test_hostile_inputs`` holds the earlier table and its whole-run cases.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from test_bad_inputs import Bad, assert_one_clear_line, jsonl, start

from scaleformer.errors import ConfigError

Trigger = Callable[[Path, "Path | None"], Any]  # (tmp folder, export folder or None)


@dataclass(frozen=True)
class Case:
    what: str
    trigger: Trigger
    message: str | None  # regex of the one line it stops with; None: the trigger checks the outcome itself
    error: type[BaseException] | tuple[type[BaseException], ...] = SystemExit
    export: bool = False  # the trigger gets a copy of the Memorizing export


def one_line(main: Callable[[], Any]) -> None:
    """Run a command's ``main``; a refusal (exit code != 0) is re-raised as SystemExit of its last stderr line
    from "error:", after checking it printed no traceback."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main()
        except SystemExit as e:
            code = e.code
    text = err.getvalue()
    assert "Traceback" not in text, text
    if code not in (0, None):
        last = text.strip().splitlines()[-1] if text.strip() else str(code)
        raise SystemExit(last[last.find("error: "):] if "error: " in last else last)


@pytest.fixture(scope="module")
def memorizing_export(tmp_path_factory) -> Path:
    """An exported Memorizing model (the tiny reader, untrained): a method that adds its own weights."""
    from conftest import compose

    from scaleformer.export.folder import export_model
    from scaleformer.model.backbone import build_model, prepare
    from scaleformer.runs.context import to_config
    from scaleformer.runs.module import SummarizationModule

    rc = to_config(compose(["backbone=tiny_bart_reader", "method=memorizing", "generation.max_new_tokens=4"]))
    ready = prepare(rc.backbone, rc.method)
    module = SummarizationModule(build_model(rc.backbone, ready.conf), ready.method, ready.tokenizer, rc.optim,
                                 rc.generation)
    return export_model(module, tmp_path_factory.mktemp("export") / "model",
                        {"method": {"option": "memorizing"}, "backbone": {"name": "tiny_bart_reader"}, "step": 0})


def _tampered(export: Path, tmp: Path, edit: Callable[[Path], None]) -> Path:
    folder = tmp / "model"
    shutil.copytree(export, folder)
    edit(folder)
    return folder


def _edit_json(name: str, change: Callable[[dict], None]) -> Callable[[Path], None]:
    def go(folder: Path) -> None:
        data = json.loads((folder / name).read_text())
        change(data)
        (folder / name).write_text(json.dumps(data))
    return go


def _drop_gate(folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(str(folder / "model.safetensors"))
    save_file({k: v for k, v in state.items() if not k.endswith("retrieval_gate")}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})


def _grow_tokenizer(folder: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    tok.add_tokens([f"newword{i}" for i in range(5000)])
    tok.save_pretrained(folder)



@pytest.fixture
def export(request, tmp_path) -> Path:
    """A fresh copy of the Memorizing export for a row that tampers with it."""
    folder = tmp_path / "model"
    shutil.copytree(request.getfixturevalue("memorizing_export"), folder)
    return folder


# ---- triggers ---------------------------------------------------------------------------------------


def hydra_callback(sweep: bool) -> Trigger:
    """An experiment file in --config-dir naming a Hydra callback (builtins.open on a marker path)."""
    def go(tmp: Path, _: Path | None) -> None:
        conf = tmp / "my_conf" / "experiment"
        conf.mkdir(parents=True)
        marker = tmp / "marker"
        (conf / "evil.yaml").write_text("# @package _global_\nhydra:\n  callbacks:\n    x:\n"
                                        f"      _target_: builtins.open\n      file: {marker}\n      mode: w\n")
        (conf / "fine.yaml").write_text("# @package _global_\nseed: 3\n")
        choice = ["-m", "experiment=fine,evil"] if sweep else ["experiment=evil"]
        done = subprocess.run([sys.executable, "train.py", "--config-dir", str(tmp / "my_conf"), *choice,
                               "debug=default", f"paths.root={tmp}/results"], cwd=ROOT, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode != 0 and not marker.exists()
        err = done.stderr.strip().splitlines()
        assert len(err) == 1 and re.search(r"^error: hydra\.callbacks\.x\._target_='builtins\.open': not "
                                           r"instantiated", err[0]), done.stderr
        assert not (tmp / "results").exists()
    return go


def push_with_link(inside: bool) -> Trigger:
    """`scaleformer push` of an export holding a link; the Hub client must never be asked anything."""
    def go(tmp: Path, export: Path | None) -> Any:
        from unittest import mock

        from scaleformer.cli import push

        secret = tmp / "id_rsa"
        secret.write_text("PRIVATE KEY")
        (export / "sub").mkdir()
        (export / "sub" / "notes.txt").symlink_to(export / "model.safetensors" if inside else secret)
        calls: list[str] = []

        class Hub:
            def __getattr__(self, name: str) -> Any:
                calls.append(name)
                raise AssertionError(f"the Hub was asked {name}")

        try:
            with mock.patch("huggingface_hub.HfApi", lambda token=None: Hub()):
                return push.main(["--model", str(export), "--repo", "me/x"])
        finally:
            assert calls == []
    return go


LITERALS = "see the tag </s> here <pad> and <s> there, <unk> and <mask> too"


def literals_in_data(arch: str) -> Trigger:
    """`</s>`, `<pad>`, `<s>`, `<unk>`, `<mask>` in a document, a query or a reference are characters, not
    control tokens: the only special ids are the ones around the sequence."""
    def go(tmp: Path, _: Path | None) -> None:
        from scaleformer.data.encode import encode
        from scaleformer.data.examples import Example
        from scaleformer.model.tokenizer import load_offline_tokenizer, special_token_ids

        tok = load_offline_tokenizer(arch)
        head, tail = special_token_ids(tok)
        ex = Example(id="a", input=f"Ledger. {LITERALS}.", target=LITERALS, prefix=f"Why {LITERALS}?",
                     references=[LITERALS])
        arrays, _ = encode([ex], tok, max_input_tokens=None, max_target_tokens=None, suffix_special=tail,
                           with_prefix=True)
        special = set(tok.all_special_ids)
        for key, text, ends in (("input_ids", ex.input, True), ("labels", ex.target, True),
                                ("prefix_ids", ex.prefix, False)):
            ids = arrays[key].tolist()
            inner = ids[len(head):len(ids) - len(tail)] if ends else ids
            assert not special & set(inner), (key, [i for i in inner if i in special])
            assert tok.decode(inner, clean_up_tokenization_spaces=False).strip() == text
    return go


def literals_in_summarize(tmp: Path, export: Path | None) -> None:
    from scaleformer.export.summarizer import Summarizer

    s = Summarizer.from_pretrained(export, device="cpu")
    ids = s.token_ids(LITERALS)
    inner = ids[len(s.method.spec.prefix_ids):len(ids) - len(s.method.spec.suffix_ids)]
    assert not set(s.tokenizer.all_special_ids) & set(inner)
    assert s.tokenizer.decode(inner, clean_up_tokenization_spaces=False).strip() == LITERALS
    assert isinstance(s(LITERALS), str)


def crowding_query(*overrides: str) -> Trigger:
    """A run on local data whose second validation query (~5.5k tokens) leaves no room in a 1,024 window."""
    def go(tmp: Path, _: Path | None) -> Any:
        long_query = " ".join(f"q{i % 97}" for i in range(2800))
        rows = [{"id": "a", "query": "Who paid?", "input": "Alder paid the toll.", "output": "Alder"},
                {"id": "b", "query": long_query, "input": "Birch paid the toll.", "output": "Birch"}]
        (tmp / "validation.jsonl").write_bytes(jsonl(*rows))
        return start("data=local", "data.path={tmp}/validation.jsonl", "data.prefix_field=query",
                     "data.splits.train=null", "data.max_eval_examples=null", "trainer.do_train=false",
                     *overrides)(tmp)
    return go


def quality_question_says_d(tmp: Path, _: Path | None) -> None:
    """A QuALITY question quoting "(D)" keeps its options in the query (SCROLLS reads after the question)."""
    from scaleformer.data.examples import split_query

    text = "Which of (A)-(D) fits best?\n\n (A) fear\n (B) money\n (C) love\n (D) duty\n\nThe story begins."
    query, doc = split_query(text, "options", "f:1")
    assert query.endswith("(D) duty") and doc == "The story begins."


def summarize(*args: str) -> Trigger:
    """`scaleformer summarize` on a one-line document; the refusals here come before any model loads."""
    def go(tmp: Path, export: Path | None) -> Any:
        from scaleformer.cli import summarize as cli

        (tmp / "d.txt").write_text("The ledger of Alder.")
        model = str(export) if export else str(tmp / "model")
        return cli.main(["--model", model, "--input", str(tmp / "d.txt"), *args])
    return go


def bench(*args: str) -> Trigger:
    """`scaleformer bench` into a folder holding an earlier results file, which must stay as it was."""
    def go(tmp: Path, _: Path | None) -> Any:
        from scaleformer.bench.cli import main

        out = tmp / "bench"
        out.mkdir()
        earlier = out / "cpu-tiny.json"
        earlier.write_text('{"earlier": true}')
        try:
            one_line(lambda: main(["--profile", "cpu-tiny", "--out", str(out), *args]))
        finally:
            assert earlier.read_text() == '{"earlier": true}'
    return go


def bench_profile(content: bytes) -> Trigger:
    def go(tmp: Path, _: Path | None) -> Any:
        from scaleformer.bench.cli import main

        (tmp / "p.yaml").write_bytes(content)
        try:
            one_line(lambda: main(["--profile", str(tmp / "p.yaml"), "--out", str(tmp / "out")]))
        finally:
            assert not (tmp / "out").exists()
    return go


def reproduce(*args: str) -> Trigger:
    def go(tmp: Path, _: Path | None) -> Any:
        from scaleformer.cli.reproduce import main

        one_line(lambda: main(list(args)))
    return go


def python_m_summarizer(tmp: Path, _: Path | None) -> None:
    """`python -m` of the library module says where the command is (exit 1) instead of exiting 0 doing
    nothing; the command's own module runs it."""
    done = subprocess.run([sys.executable, "-m", "scaleformer.export.summarizer"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "the command is `scaleformer summarize`" in done.stderr
    cmd = subprocess.run([sys.executable, "-m", "scaleformer.cli.summarize"], capture_output=True, text=True,
                         timeout=120)
    assert cmd.returncode == 2 and "usage: scaleformer summarize" in cmd.stderr


def tampered(edit: Callable[[Path], None]) -> Trigger:
    def go(tmp: Path, export: Path | None) -> Any:
        edit(export)
        return summarize()(tmp, export)
    return go


def _drop_tokenizer(folder: Path) -> None:
    for f in folder.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "merges", "special_tokens")):
            f.unlink()


def summarize_without_the_record(tmp: Path, export: Path | None) -> None:
    """scaleformer.json is a record, not a key: without it the folder loads through config.json alone and
    decodes with generation_config.json's settings."""
    from scaleformer.export.summarizer import Summarizer

    (export / "scaleformer.json").unlink()
    s = Summarizer.from_pretrained(export, device="cpu")
    assert type(s.model.method).__name__ == "Memorizing" and s.record == {}
    assert s.generation.max_new_tokens == 4
    assert summarize()(tmp, export) == 0


def two_split_queries(tmp: Path, _: Path | None) -> Any:
    from test_bad_inputs import data

    rows = jsonl({"id": "q", "input": "Who?\n\nDoc.", "output": "a"}, {"id": "q", "input": "Why?\n\nDoc.", "output": "b"})
    return data("validation.jsonl", rows, query_split="blank_line")(tmp)


# ---- the table --------------------------------------------------------------------------------------

CASES = [
    # security: a shared config file runs code; push follows a link out of the export
    Case("config-dir-hydra-callback", hydra_callback(sweep=False), None),
    Case("config-dir-hydra-callback-in-a-sweep", hydra_callback(sweep=True), None),
    Case("push-link-to-a-secret", push_with_link(inside=False),
         r"sub/notes\.txt is a link \(to .*id_rsa\); push uploads only", export=True),
    Case("push-link-inside-the-export", push_with_link(inside=True), r"sub/notes\.txt is a link", export=True),
    # silently wrong: text read as control tokens, a document crowded out, options lost, a state dropped
    Case("special-token-literals-bart", literals_in_data("bart"), None),
    Case("special-token-literals-t5", literals_in_data("t5"), None),
    Case("special-token-literals-summarize", literals_in_summarize, None, export=True),
    Case("truncation-query-crowds-out-document", crowding_query("method=truncation"),
         r"^a query prefix of \d+ tokens leaves the document 0 of the 1024-token window \(backbone\.max_positions\) "
         r"in 1 of 2 validation examples; at least 256 must remain", ConfigError),
    Case("masformer-query-crowds-out-document", crowding_query("method=masformer", "method.max_length=1024"),
         r"^a query prefix of \d+ tokens leaves the document 0 of the 1024-token window \(method\.max_length\) "
         r"in 1 of 2 validation examples", ConfigError),
    Case("quality-question-says-d", quality_question_says_d, None),
    Case("memorizing-export-without-its-gate", tampered(_drop_gate),
         r"model\.safetensors: 1 weights missing \(e\.g\. .*retrieval_gate\)", export=True),
    Case("summarize-zero-beams", summarize("--num-beams", "0"), r"^--num-beams=0: must be >= 1$"),
    Case("summarize-zero-new-tokens", summarize("--max-new-tokens", "0"), r"^--max-new-tokens=0: must be >= 1$"),
    Case("summarize-negative-new-tokens", summarize("--max-new-tokens", "-3"), r"^--max-new-tokens=-3: must be >= 1$"),
    Case("bench-zero-threads", bench("--threads", "0"), r"^--threads=0: must be >= 1$"),
    Case("bench-method-typo", bench("--methods", "nosuch"),
         r"^method 'nosuch': not a row this benchmark knows; rows are the options of conf/method/, 'all', "
         r"full_baseline, led$"),
    Case("bench-no-methods", bench("--methods", ","), r"^--methods: empty; give at least one"),
    Case("python-m-summarizer", python_m_summarizer, None),
    # tracebacks: a tampered export, a path where an artifact name goes, a bench profile that is not one
    Case("export-positions-4096", tampered(_edit_json("config.json", lambda d: d["spec"].update(max_positions=4096))),
         r"config\.json: spec\.max_positions=4096 is above the 1024 positions the backbone's weights have",
         export=True),
    Case("export-no-generation", tampered(_edit_json("scaleformer.json", lambda d: d.pop("generation"))),
         r"scaleformer\.json: generation must be a mapping", export=True),
    Case("export-method-config-list", tampered(_edit_json("scaleformer.json",
                                                          lambda d: d["method"].update(config=[1, 2]))),
         r"scaleformer\.json: method\.config must be a mapping", export=True),
    Case("export-tokenizer-outgrows-embeddings", tampered(_grow_tokenizer),
         r"the tokenizer has \d+ tokens but the model's embeddings \d+ rows", export=True),
    Case("export-without-tokenizer-files", tampered(_drop_tokenizer),
         r"/model: no tokenizer files \(tokenizer\.json, vocab\.json, \.\.\.\); save the tokenizer beside the "
         r"model: tokenizer\.save_pretrained\(DIR\)$", export=True),
    Case("export-without-its-record", summarize_without_the_record, None, export=True),
    Case("reproduce-relative-config-path", reproduce("../conf/config"),
         r"artifact '\.\./conf/config': not an artifact of experiments/; available: .*table1"),
    Case("reproduce-absolute-empty-file", reproduce("/abs/empty.yaml"),
         r"artifact '/abs/empty\.yaml': not an artifact of experiments/"),
    Case("reproduce-method-typo", reproduce("table1", "--profile", "smoke", "--methods", "nosuch"),
         r"--methods nosuch: no conf/method/ option nosuch"),
    Case("bench-profile-malformed-yaml", bench_profile(b"methods: [sled\nsizes: 1"), r"not readable YAML \("),
    Case("bench-profile-a-list", bench_profile(b"- sled\n- truncation\n"),
         r"a bench profile is a mapping of settings .*not a list"),
    # weak message: which setting the query came from
    Case("one-id-two-split-queries", two_split_queries,
         r"validation\.jsonl:1 and .*validation\.jsonl:2: id 'q' has two different queries \(the text before the "
         r"document in field 'input', data\.query_split=blank_line\)", Exception),
]


def run_case(case: Case, tmp_path: Path, request: Any = None) -> str | None:
    """One row of a hostile table: its one clear line (returned), or its own check of the outcome. Every
    hostile table runs its rows through this, so the rule for a row lives in one place."""
    folder = request.getfixturevalue("export") if case.export else None
    if case.message is None:
        case.trigger(tmp_path, folder)
        return None
    msg = assert_one_clear_line(Bad(case.what, lambda tmp: case.trigger(tmp, folder), case.message, case.error),
                                tmp_path)
    assert "Traceback" not in msg
    return msg


def check_table(cases: list[Case]) -> None:
    """A table names each case once and holds both outcomes (a refusal, and a check that it works)."""
    ids = [c.what for c in cases]
    assert len(ids) == len(set(ids))
    assert any(c.message is None for c in cases) and any(c.message for c in cases)


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_hostile_case(case: Case, request, tmp_path: Path) -> None:
    run_case(case, tmp_path, request)


def test_the_table_has_one_row_per_case_and_both_outcomes() -> None:
    check_table(CASES)


def test_the_data_summary_counts_queries_that_crowd_out_the_document(tmp_path: Path) -> None:
    """A run whose queries fit records 0 per split; the method counts crowded queries by its own window."""
    import numpy as np

    from scaleformer.model.backbone import prepare
    from scaleformer.runs.context import to_config

    rows = [{"id": "a", "query": "Who paid?", "input": "Alder paid the toll.", "output": "Alder"}]
    (tmp_path / "validation.jsonl").write_bytes(jsonl(*rows))
    result = start("data=local", "data.path={tmp}/validation.jsonl", "data.prefix_field=query",
                   "data.splits.train=null", "trainer.do_train=false", "method=truncation")(tmp_path)
    assert result["data"]["summary"]["validation"]["n_query_crowded"] == 0
    from conftest import compose

    for option, expected in (("truncation", 2), ("sled", 0)):
        rc = to_config(compose([f"method={option}"]))
        m = prepare(rc.backbone, rc.method).method
        # 1,024 positions, 2 specials: 256 must remain, so queries of 767+ tokens crowd the document out
        assert m.crowded(np.array([0, 10, 766, 767, 5490])) == expected


def test_every_user_error_has_the_one_base_the_commands_catch():
    """Settings, data, the hub, BERTScore's model and a busy run folder: one base (UserError), which
    redacts credentials and which `train` prints as one line."""
    from scaleformer.data import DataError
    from scaleformer.errors import UserError
    from scaleformer.metrics import BertScoreModelError
    from scaleformer.model.hub import HubUnreachableError
    from scaleformer.runs.runtime import RunInUseError

    for cls in (ConfigError, DataError, HubUnreachableError, BertScoreModelError, RunInUseError):
        assert issubclass(cls, UserError), cls
    assert "PASSWORD" not in str(RunInUseError("https://user:PASSWORD@host/x in use"))
