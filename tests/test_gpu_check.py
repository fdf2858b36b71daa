"""``make gpu-check`` on a machine without a GPU, and what it installs: checked on the CPU."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import gpu_check  # noqa: E402


def test_the_gpu_environment_keeps_the_machines_torch_and_pins_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "VENV", tmp_path)
    reqs = gpu_check.lock_without_machine_packages().read_text().splitlines()
    names = {r.split("==")[0].lower() for r in reqs}
    assert "torch" not in names and not any(n.startswith(("nvidia-", "triton")) for n in names)
    for needed in ("hydra-core", "datasets", "rouge-score", "bert-score", "wandb", "transformers", "lightning"):
        assert needed in names, needed
    assert all("==" in r for r in reqs), "every other distribution at its locked version"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA driver")
def test_gpu_check_without_a_driver_stops_with_one_line(tmp_path):
    out = subprocess.run([sys.executable, "scripts/gpu_check.py", str(tmp_path / "out")], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stderr.strip().startswith("error: nvidia-smi not found")
    assert "\n" not in out.stderr.strip()


def test_make_gpu_check_needs_a_folder():
    out = subprocess.run(["make", "-s", "gpu-check"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "DIR is required" in out.stdout + out.stderr
