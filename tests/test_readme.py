"""The README's commands work as written (in the style of litgpt's test_readme.py).

Every ``python train.py ...`` line of the README's bash blocks runs in a fresh process in fast mode
(``debug=default``: two steps on a sliver of data) under a temporary ``paths.root``. Commands that
need the Hugging Face hub (real backbones and data sets) cannot succeed here, so they must fail the
way the README's "Offline" section promises: fast, with one ``error:`` line naming what is missing.
The score command runs on the predictions a README run wrote.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
HUB_ONLY = ("backbone=bart_base", "backbone=t5_base", "data=govreport", "data=summscreen", "data=booksum")
# Commands for hardware this machine lacks (several GPUs, nodes, a SLURM cluster): composed, not run.
CLUSTER = re.compile(r"trainer\.devices=([2-9]|\d\d)|trainer\.num_nodes=|hydra/launcher=slurm")


def _bash_lines() -> list[str]:
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line:
                lines.append(line)
    return lines


def _train_commands() -> list[str]:
    return [line for line in _bash_lines() if re.match(r"^(\.venv/bin/)?python train\.py", line)]


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}


def _run_train(args: list[str], root: Path, cache: Path) -> subprocess.CompletedProcess:
    # Command-line values win over the debug group: keep a README's training length, but tiny.
    args = ["trainer.max_steps=4" if a.startswith("trainer.max_steps=") else a for a in args]
    fast = ["debug=default", f"paths.root={root}", f"paths.cache={cache}"]
    return subprocess.run([sys.executable, "train.py", *args, *fast], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=600)


def test_the_readme_has_train_commands():
    assert len(_train_commands()) >= 5


@pytest.mark.parametrize("command", _train_commands())
def test_readme_train_command(command, tmp_path, tmp_path_factory):
    args = shlex.split(command)[2:]
    cache = tmp_path_factory.getbasetemp() / "readme_cache"
    if CLUSTER.search(command):  # compose the command's config as Hydra would, without running it
        args = [a.split(",")[0] for a in args if a != "-m"]
        proc = subprocess.run([sys.executable, "train.py", *args, "--cfg", "job"], cwd=ROOT, env=_env(),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "trainer:" in proc.stdout, (proc.stdout + proc.stderr)[-3000:]
        return
    proc = _run_train(args, tmp_path, cache)
    out = proc.stdout + proc.stderr
    if any(a in HUB_ONLY for a in args):
        errors = [line for line in out.splitlines() if line.startswith("error:")]
        assert proc.returncode != 0 and len(errors) == 1, out[-3000:]
        assert "hub" in errors[0] and "Traceback" not in out
        return
    assert proc.returncode == 0, out[-3000:]
    assert "results: " in proc.stdout
    assert "Traceback" not in out


def test_readme_summarize_commands(tmp_path, tmp_path_factory):
    proc = _run_train([], tmp_path, tmp_path_factory.getbasetemp() / "readme_cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    model = next(tmp_path.rglob("scaleformer.json")).parent
    text = "The ledger of Ash Crossing records 2 events. " * 200
    (tmp_path / "report.txt").write_text(text)
    (tmp_path / "book.txt").write_text(text * 3)
    (tmp_path / "docs.jsonl").write_text(json.dumps({"id": "a", "document": text}) + "\n")
    lines = [line for line in _bash_lines() if line.startswith(".venv/bin/scaleformer summarize")]
    assert len(lines) >= 2
    for line in lines:
        args = [str(model) if a in ("DIR", "results/runs/<run>/model") else
                str(tmp_path / a) if a.endswith((".txt", ".jsonl")) else a for a in shlex.split(line)[2:]]
        proc = subprocess.run([sys.executable, "-m", "scaleformer.cli", "summarize", *args], cwd=ROOT,
                              env=_env(), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (line, proc.stderr[-3000:])
        out = args[args.index("--output") + 1] if "--output" in args else None
        if out:
            assert Path(out).read_text().strip(), line
        elif "docs.jsonl" in line:
            assert (tmp_path / "docs.summaries.jsonl").read_text().strip(), line
        else:
            assert proc.stdout.strip(), (line, "no summary printed")


def test_readme_score_command(tmp_path, tmp_path_factory):
    proc = _run_train([], tmp_path, tmp_path_factory.getbasetemp() / "readme_cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    preds = next(tmp_path.rglob("predictions_validation.jsonl"))
    line = next(line for line in _bash_lines() if line.startswith(".venv/bin/scaleformer score"))
    args = [preds if "<run>" in a else a for a in shlex.split(line)[2:]]
    score = subprocess.run([sys.executable, "-m", "scaleformer.cli", "score", *map(str, args)], cwd=ROOT,
                           env=_env(), capture_output=True, text=True, timeout=300)
    assert score.returncode == 0, score.stderr[-3000:]
    assert "rouge1" in score.stdout
