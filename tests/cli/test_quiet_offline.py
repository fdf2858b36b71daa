"""The embedded default needs no network and never tries one (its BERTScore is the shipped MiniLM from the start),
and the commands are quiet unless asked: no weight-loading bar, no absl INFO line; ``-v`` brings them back.

The run goes in a subprocess whose sockets are watched (a ``sitecustomize`` that records and refuses every
lookup and connection off this machine), without ``HF_HUB_OFFLINE``, as a user's ``make run`` is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

WATCH = '''import os, socket
_log = os.environ["NETWATCH_LOG"]
def _record(what, target):
    with open(_log, "a") as f:
        f.write(f"{what} {target!r}\\n")
    raise OSError(101, "Network is unreachable (watched)")
_gai = socket.getaddrinfo
def getaddrinfo(host, *a, **k):
    if host in (None, "localhost", "127.0.0.1", "::1"):
        return _gai(host, *a, **k)
    _record("getaddrinfo", host)
socket.getaddrinfo = getaddrinfo
_connect = socket.socket.connect
def connect(self, addr):
    if isinstance(addr, tuple) and addr[0] not in ("127.0.0.1", "::1", "localhost"):
        _record("connect", addr)
    return _connect(self, addr)
socket.socket.connect = connect
'''
NOISE = ("Loading weights", "absl", "Using default tokenizer")


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    folder = tmp_path_factory.mktemp("watch")
    (folder / "sitecustomize.py").write_text(WATCH)
    log = folder / "lookups.log"

    def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
                                                                 "TRANSFORMERS_OFFLINE", "SCALEFORMER_VERBOSE")}
        env.update(PYTHONPATH=f"{folder}{os.pathsep}{ROOT}", NETWATCH_LOG=str(log))
        return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)

    return run, log


@pytest.fixture(scope="module")
def default_run(watched, tmp_path_factory):
    run, log = watched
    work = tmp_path_factory.mktemp("default")
    # the embedded default's config (train.py with no group chosen), on a sliver of its data
    proc = run([str(ROOT / "train.py"), "trainer.max_steps=2", "data.synthetic_docs={train:2,validation:1,test:1}",
                "data.synthetic_words=300", "generation.num_beams=1", "generation.max_new_tokens=8",
                f"paths.root={work}/results", f"paths.cache={work}/cache", "trainer.enable_progress_bar=false"], work)
    return proc, log, work


def test_the_default_run_makes_no_network_lookup(default_run):
    proc, log, _ = default_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "BERTScore" in proc.stdout  # scored, with the shipped model
    assert not log.exists(), log.read_text()


def test_the_default_run_and_the_commands_print_no_bar_and_no_absl_line(default_run, watched):
    proc, log, work = default_run
    assert not any(n in proc.stdout + proc.stderr for n in NOISE), proc.stderr[-2000:]
    run, _ = watched
    model = next((work / "results" / "runs").glob("*/model"))
    preds = next((work / "results" / "runs").rglob("predictions_test.jsonl"))
    summarize = ["-m", "scaleformer.cli", "summarize", "--model", str(model),
                 "--input", str(ROOT / "examples" / "report.txt")]
    score = ["-m", "scaleformer.cli", "score", str(preds), "--sentence-splitter", "regex"]
    for args in (summarize, score):
        quiet = run(args, work)
        assert quiet.returncode == 0, quiet.stderr[-2000:]
        assert not any(n in quiet.stdout + quiet.stderr for n in NOISE), (args, quiet.stderr[-2000:])
    loud = run([*summarize, "-v"], work)
    assert loud.returncode == 0 and "Loading weights" in loud.stderr  # --verbose brings the bar back
    assert not log.exists(), log.read_text()
