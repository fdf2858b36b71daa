"""The compatibility tier: the tests that touch transformers internals, on other transformers releases.

    python scripts/compat_check.py newest lowest      # what `make test-compat` and CI run
    python scripts/compat_check.py 5.20.0 --keep      # any release; --keep leaves the venv for a look

For each release it builds a throwaway virtual environment under ``.venv-compat/`` from the lock
with only transformers changed (pip may move transformers' own dependencies, e.g. tokenizers; what
moved is printed), then runs the ``compat`` marker there: beam-shared decoding token-identical to the
stock path for every method (beams 1, 3, 4), the kept-layer equality tests, the retrieval tests, the
seam's own tests and one smoke run per method. ``newest`` is the newest transformers the registry
serves (when that is the lock's own release, `make test` has run its compat tier and no venv is
built); ``lowest`` installs every direct dependency at the pyproject's lower bound (transformers,
lightning, hydra-core, datasets, ...), so each bound the pyproject states is one that was tested.
Exit status: 0 when every environment passed.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from lock import LOCK, read  # noqa: E402

BASE = ROOT / ".venv-compat"


def lower_bounds() -> dict[str, str]:
    """Each direct dependency's lower bound in the pyproject (every one must state one)."""
    out = {}
    for spec in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", spec).group(0)
        m = re.search(r">=\s*([0-9][0-9.]*)", spec)
        if not m:
            raise SystemExit(f"error: pyproject.toml: {spec!r} has no lower bound")
        out[name] = m.group(1)
    return out


def newest(python: str) -> str:
    """The newest transformers the registry serves (pip's resolver, nothing installed)."""
    out = subprocess.run([python, "-m", "pip", "install", "--dry-run", "--quiet", "--no-deps", "--ignore-installed",
                          "--report", "-", "transformers"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["install"][0]["metadata"]["version"]


def build(version: str, lowest: bool) -> Path:
    venv = BASE / ("lowest" if lowest else version)
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    pins = read(LOCK)
    locked = [f"{n}=={v}" for n, v in pins.items() if n not in ("transformers",)]
    req = venv / "requirements.txt"
    req.write_text("\n".join(locked) + "\n")
    pip = [py, "-m", "pip", "install", "-q"]
    subprocess.run([*pip, *(f"{n}=={pins[n]}" for n in ("pip", "setuptools", "wheel") if n in pins)], check=True)
    if lowest:  # the lock's torch and test runner, every direct dependency at its bound, pip resolves the rest
        subprocess.run([*pip, *(f"{n}=={pins[n]}" for n in ("torch", "pytest")),
                        *(f"{n}=={v}" for n, v in lower_bounds().items() if n != "torch")], check=True)
    else:  # the lock with transformers moved (pip may move tokenizers, huggingface-hub, ...: printed after)
        subprocess.run([*pip, "-r", str(req)], check=True)
        subprocess.run([*pip, f"transformers=={version}"], check=True)
    subprocess.run([*pip, "--no-deps", "--no-build-isolation", "-e", str(ROOT)], check=True, capture_output=True)
    return venv


def moved(venv: Path) -> list[str]:
    code = "import json; from importlib import metadata as m; print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))"
    have = json.loads(subprocess.run([str(venv / "bin" / "python"), "-c", code], check=True, capture_output=True,
                                     text=True).stdout)
    pins = read(LOCK)
    return [f"{n} {pins[n]} -> {have[n.lower()]}" for n in sorted(pins)
            if n.lower() in have and have[n.lower()].split("+")[0] != pins[n]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("versions", nargs="*", default=["newest", "lowest"],
                    help="transformers releases: newest, lowest, or a version number")
    ap.add_argument("--keep", action="store_true", help="keep the virtual environments")
    ap.add_argument("--pytest-args", default="", help="extra pytest arguments")
    ap.add_argument("--rebuild-locked", action="store_true",
                    help="build and test the lock's own transformers release too (make test covers it)")
    args = ap.parse_args(argv)
    resolved: list[tuple[str, bool]] = []
    for v in args.versions:
        lowest = v == "lowest"
        if v == "newest":
            v = newest(sys.executable)
        elif lowest:
            v = lower_bounds()["transformers"]
        if (v, lowest) not in resolved:
            resolved.append((v, lowest))
    results = {}
    locked = read(LOCK)["transformers"]
    for v, lowest in resolved:
        t0 = time.time()
        label = f"transformers {v}" + (" with every direct dependency at its lower bound" if lowest else "")
        if not lowest and v == locked and not args.rebuild_locked:
            # The lock's own release: this environment would be the lock exactly, and `make test` runs the
            # compat marker there already; building it again is minutes of CI for no new evidence.
            print(f"== {label}: the lock's release, whose compat tier `make test` runs (--rebuild-locked to repeat)")
            results[label] = "the lock's (make test)"
            continue
        print(f"== {label}: building .venv-compat/{'lowest' if lowest else v}", flush=True)
        try:
            venv = build(v, lowest)
        except subprocess.CalledProcessError as e:
            print(f"error: {label}: the environment could not be built ({e})", file=sys.stderr)
            results[label] = "could not install"
            continue
        for line in moved(venv):
            print(f"   moved with it: {line}")
        cmd = [str(venv / "bin" / "python"), "-m", "pytest", "-m", "compat and not slow", "-q", "-p",
               "no:cacheprovider", *args.pytest_args.split()]
        rc = subprocess.run(cmd, cwd=ROOT).returncode
        results[label] = "passed" if rc == 0 else f"failed (pytest exit {rc})"
        print(f"== {label}: {results[label]} in {time.time() - t0:.0f} s", flush=True)
        if not args.keep:
            shutil.rmtree(venv, ignore_errors=True)
    if not args.keep:
        shutil.rmtree(BASE, ignore_errors=True)
    print("compat: " + "; ".join(f"{v}: {r}" for v, r in results.items()))
    return 0 if all(r in ("passed", "the lock's (make test)") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
