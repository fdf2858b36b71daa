"""Hostile and edge-case inputs, as a careful user or an attacker would try them: one row each.

The same contract as ``test_bad_inputs`` (whose triggers this table reuses): one line naming the file,
line, key or field and what to do; never a traceback. Cases that must *work* rather than stop (a hub
loader pointed at local files, a directory where ``last.ckpt`` should be) and those that need a whole
run (identity conflicts, the broken-link resume, SIGTERM, disk full) follow the table as tests of
their own. The README's "Bad input" section lists these cases in prose.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT
from test_bad_inputs import OK, PRED, Bad, assert_one_clear_line, config, data, jsonl, score, start

from scaleformer.data import DataError
from scaleformer.errors import ConfigError, redact, storage_error
from scaleformer.resources import assets_dir, experiments_dir

# ---- triggers ---------------------------------------------------------------------------------------


def checkpoint(write: Callable[[Path], None], *overrides: str) -> Callable[[Path], Any]:
    """``run`` told to start from a checkpoint file that ``write`` makes (training, so the weights load)."""
    def go(tmp: Path) -> Any:
        write(tmp / "x.ckpt")
        return start("trainer.ckpt_path={tmp}/x.ckpt", *overrides)(tmp)
    return go


def raw(content: bytes) -> Callable[[Path], None]:
    return lambda p: p.write_bytes(content)


def saved(obj: Any, **kwargs: Any) -> Callable[[Path], None]:
    return lambda p: torch.save(obj, p, **kwargs)


def truncated(p: Path) -> None:
    torch.save({"state_dict": {"w": torch.zeros(1000)}, "global_step": 1}, p)
    p.write_bytes(p.read_bytes()[:300])


def corrupt_backbone(damage: bytes) -> Callable[[Path], Any]:
    def go(tmp: Path) -> Any:
        folder = tmp / "reader"
        shutil.copytree(assets_dir() / "readers" / "tiny_bart_reader", folder)
        (folder / "model.safetensors").write_bytes(damage)
        return start("backbone=tiny_bart_reader", f"backbone.pretrained={folder}")(tmp)
    return go


def summarize(*args: str, files: dict[str, bytes] | None = None) -> Callable[[Path], Any]:
    """``scaleformer summarize`` on files written here; every check named here runs before the model loads."""
    def go(tmp: Path) -> Any:
        from scaleformer.cli import summarize as cli

        for name, content in (files or {}).items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(content)
        return cli.main([a.replace("{tmp}", str(tmp)) for a in args])
    return go


def overrides(*args: str) -> Callable[[Path], Any]:
    """The train command's override check (Hydra's grammar), before anything is composed."""
    def go(tmp: Path) -> Any:
        from scaleformer.cli.train import check_overrides

        return check_overrides(list(args))
    return go


def fifo(tmp: Path) -> Any:
    os.mkfifo(tmp / "pipe.jsonl")
    return data("train.jsonl", b"", path=str(tmp / "pipe.jsonl"))(tmp)


LONG = "x" * 300
DEEP = ("[" * 100_000 + "]" * 100_000).encode() + b"\n"
HUGE = ("9" * 5000).encode()
MODEL = ("--model", "{tmp}/model")

# ---- the table --------------------------------------------------------------------------------------

CASES = [
    # checkpoints: what a crash, a full disk or a stray file leaves behind
    Bad("ckpt-empty", checkpoint(raw(b"")), r"^trainer\.ckpt_path='.*x\.ckpt': .*empty"),
    Bad("ckpt-truncated", checkpoint(truncated), r"^trainer\.ckpt_path='.*x\.ckpt': not a readable checkpoint"),
    Bad("ckpt-random-bytes", checkpoint(raw(os.urandom(4096))), r"^trainer\.ckpt_path='.*x\.ckpt': not a readable"),
    Bad("ckpt-text", checkpoint(raw(b"epoch=3 step=100\n")), r"^trainer\.ckpt_path='.*x\.ckpt': not a readable"),
    Bad("ckpt-legacy-format", checkpoint(saved({"state_dict": {}, "global_step": 1},
                                               _use_new_zipfile_serialization=False)),
        r"^trainer\.ckpt_path='.*x\.ckpt': its weights do not fit this model: \d+ missing"),  # read, then checked
    Bad("ckpt-a-list", checkpoint(saved([1, 2, 3])), r"^trainer\.ckpt_path='.*x\.ckpt': .*a list, not a Lightning"),
    Bad("ckpt-a-string", checkpoint(saved("weights")), r"^trainer\.ckpt_path='.*x\.ckpt': .*a str, not a Lightning"),
    Bad("ckpt-no-state-dict", checkpoint(saved({"global_step": 3})), r"^trainer\.ckpt_path='.*x\.ckpt': .*state_dict"),
    Bad("ckpt-step-not-int", checkpoint(saved({"state_dict": {}, "global_step": "three"})),
        r"^trainer\.ckpt_path='.*x\.ckpt': .*global_step"),
    Bad("ckpt-empty-state-dict", checkpoint(saved({"state_dict": {}, "global_step": 3})),
        r"^trainer\.ckpt_path='.*x\.ckpt': its weights do not fit this model: \d+ missing"),
    Bad("ckpt-mismatched-state-dict", checkpoint(saved({"state_dict": {"model.model.shared.weight": torch.zeros(3, 4)},
                                                        "global_step": 3})),
        r"^trainer\.ckpt_path='.*x\.ckpt': its weights do not fit this model: .*shape"),
    Bad("ckpt-evaluate-empty-state-dict", checkpoint(saved({"state_dict": {}, "global_step": 3}),
                                                     "trainer.do_train=false"),
        r"^trainer\.ckpt_path='.*x\.ckpt': its weights do not fit this model"),
    Bad("backbone-corrupt-safetensors", corrupt_backbone(b"garbage"),
        r"^backbone\.pretrained='.*reader': its weights cannot be read .*download or copy the model again$"),
    Bad("backbone-truncated-safetensors",
        corrupt_backbone((assets_dir() / "readers/tiny_bart_reader/model.safetensors").read_bytes()[:5000]),
        r"^backbone\.pretrained='.*reader': its weights cannot be read"),
    # summarize: the document, the output format, the device and the method, before the model loads
    Bad("summarize-empty-txt", summarize(*MODEL, "--input", "{tmp}/d.txt", files={"d.txt": b" \n"}),
        r"--input .*d\.txt: the document is empty$", SystemExit),
    Bad("summarize-empty-field", summarize(*MODEL, "--input", "{tmp}/d.jsonl", files={"d.jsonl": b'{"input": ""}\n'}),
        r"d\.jsonl:1: field 'input' is empty", SystemExit),
    Bad("summarize-latin1", summarize(*MODEL, "--input", "{tmp}/d.txt", files={"d.txt": "café".encode("latin-1")}),
        r"--input .*d\.txt: not UTF-8 text \(byte 0xe9 at offset 3\); convert it first", SystemExit),
    Bad("summarize-line-is-a-list", summarize(*MODEL, "--input", "{tmp}/d.jsonl", files={"d.jsonl": b"[1, 2]\n"}),
        r"d\.jsonl:1: each line must be a JSON object .*got a list$", SystemExit),
    Bad("summarize-malformed-jsonl", summarize(*MODEL, "--input", "{tmp}/d.jsonl", files={"d.jsonl": b'{"input": "a"\n'}),
        r"d\.jsonl:1: malformed JSON line", SystemExit),
    Bad("summarize-no-documents", summarize(*MODEL, "--input", "{tmp}/d.jsonl", files={"d.jsonl": b"\n\n"}),
        r"--input .*d\.jsonl: no documents", SystemExit),
    Bad("summarize-device-gpu9", summarize(*MODEL, "--input", "{tmp}/d.txt", "--device", "gpu9",
                                           files={"d.txt": b"text"}),
        r"--device 'gpu9': expected cpu, cuda or cuda:N$", SystemExit),
    Bad("summarize-device-missing-cuda", summarize(*MODEL, "--input", "{tmp}/d.txt", "--device", "cuda:9",
                                                   files={"d.txt": b"text"}),
        r"--device 'cuda:9': this machine has \d+ CUDA device", SystemExit),
    Bad("summarize-method-path", summarize(*MODEL, "--input", "{tmp}/d.txt", "--method", "../method/sled",
                                           files={"d.txt": b"text"}),
        r"--method '\.\./method/sled': not a method option; choose one of .*scaleformer_middle", SystemExit),
    Bad("summarize-malformed-record", summarize(*MODEL, "--input", "{tmp}/d.txt",
                                                files={"d.txt": b"text", "model/scaleformer.json": b"{bad"}),
        r"model/scaleformer\.json: not a readable method record", SystemExit),
    # config: seeds, paths, targets, credentials, shell text in an override
    Bad("seed-negative", config("seed=-1"), r"^seed=-1: must be in \[0, 2\*\*32 - 1\]"),
    Bad("seed-too-large", config(f"seed={2**40}"), r"^seed=1099511627776: must be in \[0, 2\*\*32 - 1\]"),
    Bad("root-longer-than-path-max", config("paths.root=/tmp/" + "/".join(["y" * 200] * 25)),
        r"^paths\.root='/tmp/y+\.\.\.': is \d+ characters long; the limit is 4096"),
    Bad("root-name-too-long", config(f"paths.root=/tmp/{LONG}"),
        r"^paths\.root='/tmp/x+\.\.\.': has a 300-character folder name; the limit is 255"),
    Bad("callback-target-open", config("+callbacks.evil._target_=builtins.open", "+callbacks.evil._args_=[x,w]"),
        r"^callbacks\.evil\._target_='builtins\.open': not instantiated: a callbacks entry must be one of the "
        r"classes for it \(.*EarlyStopping.*\); name your own class by its full path in allowed_targets"),
    Bad("logger-target-os", config("+logger.evil._target_=os.remove", "+logger.evil.path=x"),
        r"^logger\.evil\._target_='os\.remove': not instantiated"),
    Bad("override-shell-text", overrides("run_name=$(touch X)"),
        r"^'run_name=\$\(touch X\)': not a valid override of run_name .*quote a value", SystemExit),
    Bad("credentials-in-data-url", start("data.source=hub", "data.hub_id=json",
                                         "+data.data_files.validation=https://user:PASSWORD@127.0.0.1:9/v.jsonl"),
        r"user:\*\*\*@127\.0\.0\.1", (ConfigError, DataError, Exception)),
    # data: ids, text, CSV structure, numbers and nesting that parsers choke on
    Bad("int-and-string-id", data("validation.jsonl", jsonl({**OK, "id": 1}, {**OK, "id": "1"})),
        r"validation\.jsonl:1 and .*validation\.jsonl:2: ids 1 and '1' .*are an integer and a string with the same "
        r"text: they would merge into one document", DataError),
    Bad("lone-surrogate-input", data("train.jsonl", b'{"id": "a", "input": "bad \\ud800 text", "output": "s"}\n'),
        r"train\.jsonl:1: field 'input' .*lone surrogate", DataError),
    Bad("lone-surrogate-id", data("train.jsonl", b'{"id": "\\udfff", "input": "doc", "output": "s"}\n'),
        r"train\.jsonl:1: field 'id' .*lone surrogate", DataError),
    Bad("5000-digit-id", data("train.jsonl", b'{"id": ' + HUGE + b', "input": "doc", "output": "s"}\n'),
        r"train\.jsonl:1: a number of more than 4300 digits; write long ids as strings", DataError),
    Bad("nested-100000-deep", data("train.jsonl", DEEP), r"train\.jsonl:1: malformed JSON line \(nested too deeply",
        DataError),
    Bad("csv-extra-comma", data("train.csv", b"id,input,output\na,doc, with comma,s\n"),
        r"train\.csv:2: 4 fields where the header has 3 \(an unquoted comma inside a field\?", DataError),
    Bad("csv-missing-column", data("train.csv", b"id,input,output\na,doc\n"),
        r"train\.csv:2: 2 fields where the header has 3 \(a missing column\)", DataError),
    Bad("csv-unterminated-quote", data("train.csv", b'id,input,output\na,"doc,s\nb,doc,s\n'),
        r"train\.csv:2: malformed CSV .*a quoted field is never closed", DataError),
    Bad("csv-duplicate-header", data("train.csv", b"id,input,input,output\na,x,y,s\n"),
        r"train\.csv:1: column 'input' appears twice in the header", DataError),
    Bad("data-path-fifo", fifo, r"data\.path=.*pipe\.jsonl: not a regular file or folder \(a FIFO", DataError),
    Bad("data-path-dev-zero", data("train.jsonl", b"", path="/dev/zero"),
        r"data\.path=/dev/zero: not a regular file or folder \(a character device", DataError),
    Bad("score-5000-digit-id", score(b'{"id": ' + HUGE + b', "prediction": "a", "reference": "a"}\n'),
        r"p\.jsonl:1: a number of more than 4300 digits", SystemExit),
    Bad("score-nested-100000-deep", score(jsonl(PRED) + DEEP), r"p\.jsonl:2: malformed JSON line \(nested too deeply",
        SystemExit),
]


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_hostile_input_gives_one_clear_line(case: Bad, tmp_path: Path) -> None:
    msg = assert_one_clear_line(case, tmp_path)
    assert "Traceback" not in msg and "PASSWORD" not in msg


def test_the_hostile_table_covers_each_layer() -> None:
    ids = [c.what for c in CASES]
    assert len(ids) == len(set(ids)) and len(CASES) >= 40
    kinds = {c.trigger.__qualname__.split(".")[0] for c in CASES}
    assert {"checkpoint", "corrupt_backbone", "summarize", "config", "overrides", "data", "score"} <= kinds


# ---- cases that need a whole run, or must work --------------------------------------------------------


def _train(tmp: Path, *overrides: str) -> dict[str, Any]:
    return start(f"paths.root={tmp}/results", *overrides)(tmp)


def test_another_identity_cannot_continue_a_run_folder(tmp_path: Path) -> None:
    """Same run_name, other seed and lr: refused with both hashes and the keys that differ; the first run's
    files are untouched. Starting afresh (ckpt_path=null) moves its checkpoints aside, never deletes them."""
    first = _train(tmp_path, "run_name=shared", "seed=1")
    run_dir = tmp_path / "results" / "runs" / "shared"
    before = {p.name: p.read_bytes() for p in (run_dir / "checkpoints").glob("step_*.ckpt")}
    with pytest.raises(ConfigError) as e:
        _train(tmp_path, "run_name=shared", "seed=2", "optim.lr=0.01")
    msg = str(e.value)
    assert first["training_hash"] in msg and re.search(r"this config's is [0-9a-f]{10}", msg), msg
    assert re.search(r"optim\.lr: [\d.]+ -> 0\.01; seed: 1 -> 2", msg) and "\n" not in msg
    assert {p.name: p.read_bytes() for p in (run_dir / "checkpoints").glob("step_*.ckpt")} == before
    assert "seed: 1\n" in (run_dir / "config.yaml").read_text()  # not relabelled
    second = _train(tmp_path, "run_name=shared", "seed=2", "optim.lr=0.01", "trainer.ckpt_path=null")
    assert second["training_hash"] != first["training_hash"]
    kept = list((run_dir / "checkpoints" / "replaced").glob("*/step_*.ckpt"))
    assert {p.name: p.read_bytes() for p in kept} == before


def test_broken_last_link_resumes_from_the_valid_checkpoint(tmp_path: Path) -> None:
    """``last.ckpt`` a broken link beside a valid ``step_2.ckpt``: the run continues from step 2 (nothing
    deleted, no restart from scratch)."""
    _train(tmp_path, "run_name=r")
    ckpts = tmp_path / "results" / "runs" / "r" / "checkpoints"
    step2 = (ckpts / "step_2.ckpt").read_bytes()
    (ckpts / "last.ckpt").unlink()
    (ckpts / "last.ckpt").symlink_to(tmp_path / "gone.ckpt")
    result = _train(tmp_path, "run_name=r", "trainer.max_steps=4")
    assert result["step"] == 4 and (ckpts / "step_2.ckpt").read_bytes() == step2
    log = (tmp_path / "results" / "runs" / "r" / "train.log").read_text()
    assert f"continuing from {ckpts / 'step_2.ckpt'} (step 2)" in log


def test_a_directory_named_last_ckpt_is_passed_over(tmp_path: Path) -> None:
    (tmp_path / "results" / "runs" / "d" / "checkpoints" / "last.ckpt").mkdir(parents=True)
    assert _train(tmp_path, "run_name=d")["step"] == 2


def test_hub_loader_with_local_files_reads_them(tmp_path: Path) -> None:
    """``data.source=hub data.hub_id=json data.data_files=...`` (datasets' json loader on local files)."""
    f = tmp_path / "v.jsonl"
    f.write_bytes(jsonl({"input": "a b c d", "output": "a b"}, {"input": "e f g h", "output": "e f"}))
    result = _train(tmp_path, "data.source=hub", "data.hub_id=json", f"+data.data_files.validation={f}",
                    "+data.data_files.train=" + str(f), "data.id_field=null")
    assert result["splits"]["validation"]["n_examples"] == 1  # debug=default evaluates one example
    preds = next((tmp_path / "results").rglob("predictions_validation.jsonl"))
    assert json.loads(preds.read_text().splitlines()[0])["reference"] in ("a b", ["a b"])


def test_credentials_never_reach_a_file(tmp_path: Path) -> None:
    with pytest.raises(Exception) as e:
        _train(tmp_path, "run_name=cred", "data.source=hub", "data.hub_id=json",
               "+data.data_files.validation=https://user:PASSWORD@127.0.0.1:9/v.jsonl")
    assert "PASSWORD" not in str(e.value)
    assert not (tmp_path / "results" / "runs" / "cred").exists(), "stopped before training: no run folder"
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not [p for p in written if b"PASSWORD" in p.read_bytes()]


def test_cache_is_keyed_by_content_not_mtime(tmp_path: Path) -> None:
    """The same size and modification time with other bytes (``cp -p``, ``rsync -a``): re-tokenized."""
    f = tmp_path / "validation.jsonl"
    f.write_bytes(jsonl({"id": "a", "input": "one two three", "output": "alpha"}))
    stat = f.stat()
    args = ("data=local", f"data.path={f}", "trainer.do_train=false")
    _train(tmp_path, *args)
    f.write_bytes(jsonl({"id": "a", "input": "one two three", "output": "gamma"}))
    os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert f.stat().st_size == stat.st_size and f.stat().st_mtime_ns == stat.st_mtime_ns
    _train(tmp_path, *args, "run_name=again")
    preds = next((tmp_path / "results" / "runs" / "again" / "eval").glob("*/predictions_validation.jsonl"))
    assert json.loads(preds.read_text().splitlines()[0])["reference"] in ("gamma", ["gamma"])


def test_storage_errors_are_one_line() -> None:
    """Disk full, quota, ``ulimit -f``, a too-long name: the user's storage, not a bug."""
    cases = {errno.ENOSPC: "No space left on device", errno.EFBIG: "ulimit -f", errno.ENAMETOOLONG: "shorter",
             errno.EDQUOT: "quota"}
    for code, words in cases.items():
        line = storage_error(OSError(code, os.strerror(code), "/r/runs/x/checkpoints/step_2.ckpt"))
        assert line is not None and words in line and "\n" not in line and "step_2.ckpt" in line
    assert storage_error(OSError(errno.ENOENT, "gone")) is None and storage_error(ValueError("x")) is None
    long = storage_error(OSError(errno.ENAMETOOLONG, "File name too long", "/x" * 3000))
    assert long is not None and len(long) < 400


def test_disk_full_while_checkpointing_stops_with_one_line(tmp_path: Path) -> None:
    """ENOSPC raised by the checkpoint write (as a full disk would): exit 1, one line, no traceback."""
    code = ("import errno, sys, torch\n"
            "real = torch.save\n"
            "def full(obj, f, *a, **k):\n"
            "    if 'state_dict' in obj: raise OSError(errno.ENOSPC, 'No space left on device')\n"
            "    return real(obj, f, *a, **k)\n"
            "torch.save = full\n"
            "from scaleformer.cli.train import main\n"
            f"sys.argv = ['train.py', 'debug=default', 'paths.root={tmp_path}/r', 'paths.cache={tmp_path}/c']\n"
            "main()\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 1, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert re.search(r"^error: No space left on device.*free space", out.stderr, re.M), out.stderr[-2000:]


@pytest.mark.slow
def test_file_size_limit_stops_with_one_line(tmp_path: Path) -> None:
    """``ulimit -f`` below a checkpoint's size: EFBIG (Python ignores SIGXFSZ), one line, exit 1."""
    out = subprocess.run(["bash", "-c", f"ulimit -f 10000; {sys.executable} train.py debug=default "
                          f"paths.root={tmp_path}/r paths.cache={tmp_path}/c"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert re.search(r"^error: File too large: .*ulimit -f", out.stderr, re.M), out.stderr[-2000:]


@pytest.mark.slow
def test_sigterm_exits_143(tmp_path: Path) -> None:
    """A scheduler's SIGTERM: failed.json written, exit status 143 (scripts and SLURM see the failure)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")} | {"HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "train.py", "debug=default", f"paths.root={tmp_path}/r",
                             f"paths.cache={tmp_path}/c", "trainer.max_steps=100000", "run_name=t"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None
    lines = []
    deadline = time.time() + 240
    for line in proc.stdout:  # training has started once the run names its model
        lines.append(line)
        if "parameters" in line or time.time() > deadline:
            break
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, "".join(lines) + rest
    assert "stopped by SIGTERM" in rest
    assert json.loads((tmp_path / "r" / "runs" / "t" / "failed.json").read_text())["error"].startswith("SIGTERM")


def test_fallback_notice_is_one_short_line() -> None:
    from scaleformer.metrics.bertscore import FALLBACK_NOTICE

    line = FALLBACK_NOTICE % ("facebook/bart-large-mnli", "all-MiniLM-L6-v2")
    assert "\n" not in line and len(line) < 240


def test_redaction_covers_user_password_and_bare_tokens() -> None:
    assert redact("https://user:PASSWORD@host/v.jsonl") == "https://user:***@host/v.jsonl"
    assert "TOKEN" not in redact("see s3://TOKEN@bucket/x and hf://a:TOKEN@b")


def test_artifacts_name_their_stand_ins(tmp_path: Path) -> None:
    """A smoke grid's "missing:" lines use the table's column labels; Figure 2's tiny title its data."""
    from scaleformer.artifacts.grid import expand_grid, load_spec, resolve_run_ids, title
    from scaleformer.artifacts.tables import collect

    spec = load_spec(experiments_dir() / "table1.yaml")
    cells = expand_grid(spec, "smoke")
    resolve_run_ids(cells, tmp_path)
    from scaleformer.artifacts.grid import column_label

    got = collect(cells, lambda key: column_label(spec, "smoke", key))
    assert got.problems and all("synthetic" in p for p in got.problems)
    assert not any("on govreport" in p for p in got.problems)
    fig = load_spec(experiments_dir() / "figure2.yaml")
    assert "SummScreen" in title(fig, "paper") and "ledgers" in title(fig, "tiny")
    assert "SummScreen" not in title(fig, "tiny") and "SummScreen" not in title(fig, "smoke")
    text = (ROOT / "scripts" / "input_blind.py").read_text()
    assert '"fact_field_recall": "Fact parts"' in text
