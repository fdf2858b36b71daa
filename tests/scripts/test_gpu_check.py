"""``make gpu-check`` on a machine without a GPU, and what it installs: checked on the CPU."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import gpu_check  # noqa: E402


def test_the_gpu_environment_keeps_the_machines_torch_and_pins_the_rest():
    pins = gpu_check.lock_requirements()
    assert "torch" not in pins and not any(n.startswith(("nvidia-", "triton")) for n in pins)
    for needed in ("hydra-core", "datasets", "rouge-score", "bert-score", "wandb", "transformers", "lightning"):
        assert needed in pins, needed
    online = gpu_check.plan(pins, None, {"transformers": "0.0.1"})
    assert len(online.install) == len(pins) and not online.kept and not online.absent


def test_offline_wheels_install_the_lock_and_name_every_distribution_off_it(tmp_path):
    pins = {"hydra-core": "1.3.8", "transformers": "5.24.0", "numpy": "2.4.6", "safetensors": "0.8.0",
            "wandb": "0.31.0"}
    for f in ("hydra_core-1.3.8-py3-none-any.whl", "transformers-5.24.0-py3-none-any.whl",
              "numpy-2.3.0-cp312-cp312-manylinux_2_28_x86_64.whl"):  # a numpy wheel, but not the lock's
        (tmp_path / f).touch()
    wheels = gpu_check.wheel_versions(tmp_path)
    assert ("hydra-core", "1.3.8") in wheels
    todo = gpu_check.plan(pins, wheels, {"numpy": "2.5.2", "safetensors": "0.8.0", "transformers": "5.17.0"})
    assert todo.install == ["hydra-core==1.3.8", "transformers==5.24.0"]
    assert todo.kept == [("numpy", "2.5.2", "2.4.6")] and todo.absent == [("wandb", "0.31.0")]
    text = "\n".join(todo.describe())
    assert "numpy 2.5.2 (lock 2.4.6)" in text and "absent (no wheel, not on the machine): wandb 0.31.0" in text


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA driver")
def test_gpu_check_without_a_driver_stops_with_one_line(tmp_path):
    out = subprocess.run([sys.executable, "scripts/gpu_check.py", str(tmp_path / "out")], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stderr.strip().startswith("error: nvidia-smi not found")
    assert "\n" not in out.stderr.strip()


def test_make_gpu_check_needs_a_folder():
    out = subprocess.run(["make", "-s", "gpu-check"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "DIR is required" in out.stdout + out.stderr
