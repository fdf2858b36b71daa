"""One command on a lent GPU machine: prepare from the lock, run the gpu tier and the gpu-base benchmark.

    make gpu-check DIR=/path/to/out                  # = python scripts/gpu_check.py /path/to/out
    make wheels                                      # beforehand, on a connected machine: wheels/

A bare GPU machine may have torch (a CUDA build), transformers and Lightning but not hydra, datasets,
rouge-score, bert-score or wandb, and no network. The environment is ``.venv-gpu``, made with the
system's site-packages visible (so the machine's CUDA torch is used as is), and every other
distribution of ``requirements.lock`` is installed at its locked version, from ``wheels/`` when that
folder exists (``--no-index``: no network needed), else from the package index. Then:

- ``pytest -m gpu`` (tests/test_gpu.py), its JUnit report and log,
- ``scripts/bench.py --profile gpu-base`` (results/bench/gpu-base.{json,md,png}),
- ``nvidia-smi``, ``pip freeze`` and a ``summary.md`` naming the device and what passed,

all written under DIR. The exit status is the tier's (0 when every gpu test passed).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
WHEELS = ROOT / "wheels"
VENV = ROOT / ".venv-gpu"
# Kept from the machine: the CUDA torch build (the lock's torch pin is the CPU wheel's version).
FROM_MACHINE = ("torch", "nvidia-", "triton")


def lock_without_machine_packages() -> Path:
    """The lock minus torch and CUDA's own wheels, as a requirements file for the GPU environment."""
    keep = [line for line in LOCK.read_text().splitlines()
            if line.strip() and not line.startswith("#") and not line.lower().startswith(FROM_MACHINE)]
    out = VENV / "requirements-gpu.txt"
    out.write_text("\n".join(keep) + "\n")
    return out


def run(cmd: list[str], log: Path | None = None, check: bool = True, timeout: float | None = None) -> int:
    print("+", " ".join(cmd), flush=True)
    with open(log, "w") if log else open("/dev/null", "w") as out:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=out if log else None, stderr=subprocess.STDOUT if log else None,
                              timeout=timeout)
    if check and proc.returncode != 0:
        tail = log.read_text()[-3000:] if log else ""
        raise SystemExit(f"error: {' '.join(cmd[:4])} ... failed (exit {proc.returncode})\n{tail}")
    return proc.returncode


def prepare() -> Path:
    """``.venv-gpu`` over the machine's site-packages, with the lock's other pins installed."""
    py = VENV / "bin" / "python"
    if not py.exists():
        venv.EnvBuilder(system_site_packages=True, with_pip=True).create(VENV)
    reqs = lock_without_machine_packages()
    source = ["--no-index", "--find-links", str(WHEELS)] if WHEELS.is_dir() else []
    run([str(py), "-m", "pip", "install", "-q", *source, "-r", str(reqs)])
    run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(ROOT)])
    check = [str(py), "-c", "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'; "
             "print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"]
    run(check)
    return py


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="folder for every result of the check")
    ap.add_argument("--skip-bench", action="store_true", help="the gpu tier only")
    ap.add_argument("--bench-timeout", type=float, default=3 * 3600, help="seconds for the benchmark")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if shutil.which("nvidia-smi") is None:
        raise SystemExit("error: nvidia-smi not found: this machine has no NVIDIA driver (run this on the GPU "
                         "machine; the tier itself skips cleanly on a CPU with `pytest -m gpu`)")
    run(["nvidia-smi"], log=out / "nvidia-smi.txt")
    t0 = time.time()
    py = prepare()
    run([str(py), "-m", "pip", "freeze"], log=out / "pip-freeze.txt")
    tier = run([str(py), "-m", "pytest", "-m", "gpu", "-q", "-rs", f"--junitxml={out / 'gpu-tier.xml'}"],
               log=out / "gpu-tier.log", check=False)
    bench = None
    if not args.skip_bench:
        bench = run([str(py), "scripts/bench.py", "--profile", "gpu-base"], log=out / "bench.log", check=False,
                    timeout=args.bench_timeout)
        for f in (ROOT / "results" / "bench").glob("gpu-base.*"):
            shutil.copy2(f, out / f.name)
    last = (out / "gpu-tier.log").read_text().strip().splitlines()[-1:]
    lines = [f"# gpu-check {time.strftime('%Y-%m-%d %H:%M')}", "",
             f"- device: {(out / 'nvidia-smi.txt').read_text().splitlines()[:12][-1].strip()}",
             f"- gpu tier (`pytest -m gpu`): exit {tier}; {last[0] if last else 'no output'}",
             f"- gpu-base benchmark: {'skipped' if bench is None else f'exit {bench}'}",
             f"- minutes: {(time.time() - t0) / 60:.1f}", ""]
    (out / "summary.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return tier


if __name__ == "__main__":
    sys.exit(main())
