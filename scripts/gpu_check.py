"""One command on a lent GPU machine: prepare from the lock, run the gpu tier and the gpu-base benchmark.

    make gpu-check DIR=/path/to/out                  # = python scripts/gpu_check.py /path/to/out
    make wheels [GPU_PYTHON=3.12]                    # beforehand, on a connected machine: wheels/

A bare GPU machine may have torch (a CUDA build), transformers and Lightning but not hydra, datasets,
rouge-score, bert-score or wandb, and no network. The environment is ``.venv-gpu``, made with the
system's site-packages visible (so the machine's CUDA torch is used as is). Every other distribution
of ``requirements.lock`` is installed at its locked version (``--no-deps``: the lock is closed), from
the package index when there is no ``wheels/`` folder. With ``wheels/`` (an offline machine) a locked
distribution without a wheel there keeps the machine's own version, or stays absent when the machine
has none; both are listed in ``summary.md`` and ``pip check`` is logged, so a result obtained off the
lock says so. Then:

- ``pytest -m gpu`` (tests/ops/test_gpu.py), its JUnit report and log,
- ``scripts/bench.py --profile gpu-base`` (results/bench/gpu-base.{json,md,png}); ``--bench-args`` and
  ``--bench-timeout`` run the grid in pieces (``--resume``): a run stopped at its timeout keeps every
  cell it measured and its table is rendered from them,
- ``nvidia-smi``, ``pip freeze`` and a ``summary.md`` naming the device and what passed,

all written under DIR. The exit status is the tier's (0 when every gpu test passed).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
WHEELS = ROOT / "wheels"
VENV = ROOT / ".venv-gpu"
BENCH_JSON = ROOT / "results" / "bench" / "gpu-base.json"
# Kept from the machine: the CUDA torch build (the lock's torch pin is the CPU wheel's version).
FROM_MACHINE = ("torch", "nvidia-", "triton")


def norm(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_requirements(lock: Path = LOCK) -> dict[str, str]:
    """``{name: version}`` of the lock minus torch and CUDA's own wheels."""
    pins = {}
    for line in lock.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.lower().startswith(FROM_MACHINE):
            name, version = line.split("==")
            pins[norm(name)] = version.strip()
    return pins


def wheel_versions(folder: Path) -> set[tuple[str, str]]:
    """``(name, version)`` of every wheel in ``folder`` (from the file names)."""
    return {(norm(w.name.split("-")[0]), w.name.split("-")[1]) for w in folder.glob("*.whl")}


@dataclass
class Plan:
    install: list[str] = field(default_factory=list)                    # name==version
    kept: list[tuple[str, str, str]] = field(default_factory=list)      # name, machine's, lock's
    absent: list[tuple[str, str]] = field(default_factory=list)         # name, lock's

    def describe(self) -> list[str]:
        out = [f"- installed at the lock's version: {len(self.install)} distributions"]
        if self.kept:
            out.append("- kept the machine's version (no wheel): "
                       + ", ".join(f"{n} {m} (lock {v})" for n, m, v in self.kept))
        if self.absent:
            out.append("- absent (no wheel, not on the machine): " + ", ".join(f"{n} {v}" for n, v in self.absent))
        return out


def plan(pins: dict[str, str], wheels: set[tuple[str, str]] | None, machine: dict[str, str]) -> Plan:
    """What to install: everything from the index (``wheels`` None), else what wheels/ or the machine has."""
    p = Plan()
    for name, version in sorted(pins.items()):
        if wheels is None or (name, version) in wheels:
            p.install.append(f"{name}=={version}")
        elif machine.get(name) == version:
            continue
        elif name in machine:
            p.kept.append((name, machine[name], version))
        else:
            p.absent.append((name, version))
    return p


def run(cmd: list[str], log: Path | None = None, check: bool = True, timeout: float | None = None) -> int:
    print("+", " ".join(cmd), flush=True)
    with open(log, "w") if log else open("/dev/null", "w") as out:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=out if log else None, stderr=subprocess.STDOUT if log else None,
                              timeout=timeout)
    if check and proc.returncode != 0:
        tail = log.read_text()[-3000:] if log else ""
        raise SystemExit(f"error: {' '.join(cmd[:4])} ... failed (exit {proc.returncode})\n{tail}")
    return proc.returncode


def machine_versions(py: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, json; "
            "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}))")
    found = json.loads(subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True).stdout)
    return {norm(k): v for k, v in found.items()}


def see_this_pythons_packages(py: Path) -> None:
    """Where this Python is itself a virtual environment (the machine's torch lives in one), a .pth file
    shows its site-packages to ``.venv-gpu`` too: ``system_site_packages`` reaches only the base Python's.
    They come after ``.venv-gpu``'s own, so the lock's pins win."""
    if sys.prefix == sys.base_prefix:
        return
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True).stdout.strip())
    mine = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "_machine_site.pth").write_text("\n".join(mine) + "\n")


def prepare(out: Path) -> tuple[Path, Plan]:
    """``.venv-gpu`` over the machine's site-packages, with the lock's other pins installed."""
    py = VENV / "bin" / "python"
    if not py.exists():
        venv.EnvBuilder(system_site_packages=True, with_pip=True).create(VENV)
    see_this_pythons_packages(py)
    wheels = wheel_versions(WHEELS) if WHEELS.is_dir() else None
    todo = plan(lock_requirements(), wheels, machine_versions(py))
    source = ["--no-index", "--find-links", str(WHEELS)] if wheels is not None else []
    if todo.install:
        run([str(py), "-m", "pip", "install", "-q", "--no-deps", *source, *todo.install], log=out / "pip-install.log")
    run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(ROOT)],
        log=out / "pip-install-project.log")
    run([str(py), "-m", "pip", "check"], log=out / "pip-check.txt", check=False)
    check = [str(py), "-c", "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'; "
             "print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"]
    run(check)
    return py, todo


def bench(py: Path, out: Path, extra: list[str], timeout: float) -> str:
    """The gpu-base grid (or the piece ``extra`` names); a timeout keeps and renders the measured cells."""
    cmd = [str(py), "scripts/bench.py", "--profile", "gpu-base", *extra]
    try:
        verdict = f"exit {run(cmd, log=out / 'bench.log', check=False, timeout=timeout)}"
    except subprocess.TimeoutExpired:
        verdict = f"stopped at its {timeout:.0f} s timeout (measured cells kept; `--resume` goes on)"
        if BENCH_JSON.exists():
            render = ("import json, sys; from pathlib import Path; from scaleformer.bench.report import write_outputs; "
                      "write_outputs(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[1]).parent)")
            run([str(py), "-c", render, str(BENCH_JSON)], log=out / "bench-render.log", check=False)
    if BENCH_JSON.exists():
        doc = json.loads(BENCH_JSON.read_text())
        states = [r.get("status") for r in doc.get("results", [])]
        verdict += f"; {len(states)} cells in gpu-base.json ({states.count('ok')} ok)"
    for f in BENCH_JSON.parent.glob("gpu-base.*"):
        shutil.copy2(f, out / f.name)
    return verdict


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="folder for every result of the check")
    ap.add_argument("--skip-bench", action="store_true", help="the gpu tier only")
    ap.add_argument("--skip-tier", action="store_true", help="the benchmark only (e.g. a later piece of its grid)")
    ap.add_argument("--bench-timeout", type=float, default=3 * 3600, help="seconds for the benchmark")
    ap.add_argument("--bench-args", default="", help="more arguments for scripts/bench.py, e.g. "
                    "\"--resume --backbones bart_base\"")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if shutil.which("nvidia-smi") is None:
        raise SystemExit("error: nvidia-smi not found: this machine has no NVIDIA driver (run this on the GPU "
                         "machine; the tier itself skips cleanly on a CPU with `pytest -m gpu`)")
    run(["nvidia-smi"], log=out / "nvidia-smi.txt")
    t0 = time.time()
    py, todo = prepare(out)
    run([str(py), "-m", "pip", "freeze"], log=out / "pip-freeze.txt")
    tier, last = None, ["skipped"]
    if not args.skip_tier:
        tier = run([str(py), "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider",
                    f"--junitxml={out / 'gpu-tier.xml'}"], log=out / "gpu-tier.log", check=False)
        last = (out / "gpu-tier.log").read_text().strip().splitlines()[-1:] or ["no output"]
    verdict = "skipped" if args.skip_bench else bench(py, out, shlex.split(args.bench_args), args.bench_timeout)
    smi = (out / "nvidia-smi.txt").read_text().splitlines()
    device = next((s.strip(" |") for s in smi if re.search(r"NVIDIA [A-Z]\d", s)), "unknown")
    lines = [f"# gpu-check {time.strftime('%Y-%m-%d %H:%M')}", "",
             f"- device: {device}",
             f"- gpu tier (`pytest -m gpu`): {'skipped' if tier is None else f'exit {tier}'}; {last[0]}",
             f"- gpu-base benchmark{f' ({args.bench_args})' if args.bench_args else ''}: {verdict}",
             *todo.describe(),
             f"- minutes: {(time.time() - t0) / 60:.1f}", ""]
    (out / "summary.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return tier or 0


if __name__ == "__main__":
    sys.exit(main())
