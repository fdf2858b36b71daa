"""A newcomer's first hour: every command's help, a summary of a text file, an offline data set, and the
progress a log file gets. Each is what a new user meets first, so each behaves as the README says."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, compose

from scaleformer.cli import COMMANDS
from scaleformer.progress import Lines, duration


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}


def _cli(*args: str, cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scaleformer.cli", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_commands_help_names_the_command(command):
    proc = _cli(command, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.lstrip().startswith(f"usage: scaleformer {command}"), proc.stdout[:300]
    assert "python -m" not in proc.stdout.splitlines()[0]


def test_the_console_alias_names_the_command_too(monkeypatch, capsys):
    from scaleformer import cli

    monkeypatch.setattr(sys, "argv", ["scaleformer-score", "--help"])
    with pytest.raises(SystemExit) as e:
        cli.run_score()
    assert e.value.code == 0 and capsys.readouterr().out.startswith("usage: scaleformer score")


@pytest.fixture(scope="module")
def debug_model(tmp_path_factory) -> Path:
    """The quick-start's model: ``scaleformer train debug=default`` in an empty folder (two steps)."""
    work = tmp_path_factory.mktemp("quickstart")
    proc = _cli("train", "debug=default", cwd=work, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return next((work / "results" / "debug" / "runs").glob("*/model"))


def test_summarize_says_when_the_model_wrote_nothing(debug_model, tmp_path):
    doc = tmp_path / "report.txt"
    doc.write_text("The ledger of Ash Crossing records 2 events. " * 200)
    # One new token: BART's forced <s>, so the summary holds only special tokens, as a barely trained model's does.
    proc = _cli("summarize", "--model", str(debug_model), "--input", str(doc), "--max-new-tokens", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "", "no empty line pretending to be a summary"
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, proc.stderr
    assert "no text for 1 of 1 document(s) (" in warnings[0] and "trained for 2 steps" in warnings[0]
    assert "at most (--max-new-tokens)" in warnings[0]
    normal = _cli("summarize", "--model", str(debug_model), "--input", str(doc), "--max-new-tokens", "8")
    assert normal.returncode == 0 and "warning:" not in normal.stderr, normal.stderr[-2000:]


def test_summarize_progress_in_a_log_is_plain_lines(debug_model, tmp_path):
    rows = "".join(f'{{"id": "d{i}", "input": "On day {i}, Mara Quill repaired 3 lanterns at Harbor Gate."}}\n'
                   for i in range(20))
    (tmp_path / "docs.jsonl").write_text(rows)
    proc = _cli("summarize", "--model", str(debug_model), "--input", str(tmp_path / "docs.jsonl"),
                "--max-new-tokens", "4", "--num-beams", "1", "--batch-size", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("summarize: doc ")]
    # a line about every tenth of the documents, counted as batches finish (2 documents each here)
    assert len(lines) == 10 and lines[-1].startswith("summarize: doc 20/20 (100%)"), proc.stderr
    assert "\r" not in proc.stderr


def test_offline_data_set_stops_naming_it_and_leaves_no_run_folder(tmp_path):
    proc = subprocess.run([sys.executable, "train.py", "data=govreport", f"paths.root={tmp_path}/results",
                           f"paths.cache={tmp_path}/cache"], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: cannot load data=govreport: hub dataset 'tau/scrolls' "
                                                     "(file gov_report.zip)"), proc.stderr[-2000:]
    assert "'json'" not in errors[0] and "Traceback" not in proc.stderr
    runs = tmp_path / "results" / "runs"
    assert not runs.exists() or not list(runs.iterdir()), list(runs.iterdir())


def test_training_progress_in_a_log_is_about_ten_plain_lines(tmp_path, capsys):
    from scaleformer.runs.run import run

    run(compose([f"paths.root={tmp_path}/results", f"paths.cache={tmp_path}/cache", "debug=default",
                 "trainer.max_steps=20", "trainer.enable_progress_bar=true", "data.synthetic_words=300",
                 "data.synthetic_docs.train=4"]))
    out = capsys.readouterr().out  # not a terminal: plain lines, as in a log file
    assert "\r" not in out
    train = [line for line in out.splitlines() if line.startswith("train: step ")]
    assert [line.split(",")[0] for line in train] == [f"train: step {n}/20 ({5 * n}%)" for n in range(2, 21, 2)]
    assert all("loss " in line for line in train) and train[-1].endswith("s") and "took" in train[-1]
    assert [line for line in out.splitlines() if line.startswith("generate: batch 1/1 (100%)")]


def test_progress_lines_mark_every_tenth_and_resume_from_the_start():
    said: list[str] = []
    lines = Lines("train", 95, "step", start=40, write=said.append)
    for step in range(41, 96):
        lines.update(step, "loss 1")
    assert [s.split(",")[0] for s in said] == [f"train: step {n}/95 ({100 * n / 95:.0f}%)"
                                              for n in (50, 60, 70, 80, 90, 95)]
    assert all(", loss 1" in s for s in said)
    quiet = io.StringIO()
    Lines("x", None, "doc", write=quiet.write).update(3)  # no total: nothing to say
    assert quiet.getvalue() == ""
    assert [duration(s) for s in (4.4, 252, 7500)] == ["4s", "4m12s", "2h05m"]


def test_the_first_progress_line_comes_within_the_first_minute():
    """``make run``: 800 steps at ~0.8 s each (11 minutes on 2 cores), so a tenth is 80 steps, 4-8 minutes
    of silence. The first line comes once ``FIRST_LINE_S`` seconds have passed, with the rate and ETA; the
    tenths follow as before, each once."""
    from scaleformer.progress import FIRST_LINE_S

    now = [0.0]
    said: list[str] = []
    lines = Lines("train", 800, "step", write=said.append, clock=lambda: now[0])
    for step in range(1, 801):
        now[0] += 0.8
        lines.update(step, "loss 1")
    first = said[0].split(",")[0]
    step = int(first.split()[2].split("/")[0])
    assert FIRST_LINE_S <= step * 0.8 < 60 and step < 80, said[0]
    assert "ETA " in said[0] and ("step/s" in said[0] or "s/step" in said[0])
    assert [s.split(",")[0] for s in said[1:]] == [f"train: step {n}/800 ({n // 8}%)" for n in range(80, 801, 80)]
    quick: list[str] = []  # a fast run (the tests' 20 steps) says only its tenths, as before
    fast = Lines("train", 20, "step", write=quick.append, clock=lambda: now[0])
    for n in range(1, 21):
        now[0] += 0.01
        fast.update(n)
    assert len(quick) == 10
