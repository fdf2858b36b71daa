"""Installed, not checked out: `pip install .` into a fresh virtual environment, then the console
commands from an empty directory (no repository, no configs on disk beside it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow


def test_pip_install_then_train_and_summarize_from_an_empty_directory(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    # the wheel, not an editable install; every dependency at its locked version
    subprocess.run([str(py), "-m", "pip", "install", "-q", "-c", str(ROOT / "requirements.lock"), str(ROOT)],
                   check=True, timeout=1200)
    work = tmp_path / "empty"
    work.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONPATH": ""}
    train = subprocess.run([str(venv / "bin" / "scaleformer"), "train", "debug=default", "generation.num_beams=1"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert train.returncode == 0, (train.stdout + train.stderr)[-3000:]
    metrics = next((work / "results" / "debug" / "runs").rglob("metrics.json"))
    result = json.loads(metrics.read_text())
    assert result["splits"]["validation"]["n_examples"] == 1
    run_dir = work / "results" / "debug" / "runs" / result["run_id"]
    assert (run_dir / "model" / "README.md").exists() and (run_dir / "checkpoints" / "last.ckpt").exists()
    installed = subprocess.run([str(py), "-c", "import scaleformer, pathlib; print(pathlib.Path(scaleformer.__file__))"],
                               cwd=work, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert str(venv) in installed and str(ROOT) not in installed, "the installed package ran, not the checkout"
    readers = Path(installed).parent / "assets" / "readers"  # each shipped reader with its tokenizer files
    assert all((readers / r / f).is_file() for r in ("tiny_bart_reader", "tiny_t5_reader", "tiny_bart_qa_reader",
                                                                     "tiny_gpt2_reader")
               for f in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"))
    doc = work / "doc.txt"
    doc.write_text("On day 3, Mara Quill repaired 17 lanterns at Harbor Gate. " * 40)
    summ = subprocess.run([str(venv / "bin" / "scaleformer-summarize"), "--model", str(run_dir / "model"),
                           "--input", str(doc), "--num-beams", "1", "--max-new-tokens", "12"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert summ.returncode == 0, summ.stderr[-2000:]
    assert summ.stdout.strip(), "a summary is printed"
    version = subprocess.run([str(venv / "bin" / "scaleformer"), "--version"], cwd=work, env=env,
                             capture_output=True, text=True, check=True).stdout
    assert version.startswith("scaleformer ")
    assert not Path(work / "conf").exists(), "no configs were written beside the run"
