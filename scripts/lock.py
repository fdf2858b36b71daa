"""The dependency lock: write it from a virtual environment, or check an environment against it.

    python scripts/lock.py write VENV [--out requirements.lock]   # what `make lock` calls
    python scripts/lock.py check [--lock requirements.lock]       # what `make setup` ends with

Why a lock: the patches behind the fastest paths reach into transformers internals that move
between releases, so a fresh machine must get exactly what was tested. ``requirements.lock`` pins
every distribution (direct and transitive, pip/setuptools/wheel included) with ``==``. torch is
pinned by version without its build label (``+cpu``, ``+cu128``): the CPU build here and a GPU
user's CUDA build are the same release, and ``torch==X`` accepts both (PEP 440). ``check`` treats
that label as the build, not a difference, and fails on any other mismatch, missing or extra
distribution.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
PROJECT = "scaleformer"
HEADER = """\
# Every distribution `make setup` installs, pinned exactly: the versions the test suite passed on.
# Regenerate with `make lock` (resolves the pyproject's ranges to the newest releases, keeps torch's
# pin unless TORCH=torch==X is given, then runs the tests). Check an environment: `make check-lock`.
# torch is pinned without its build label: the CPU build (this project's CI) and a CUDA build of the
# same release both satisfy it.
"""


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read(lock: Path) -> dict[str, str]:
    """name -> pinned version."""
    pins: dict[str, str] = {}
    for n, line in enumerate(lock.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, ver = line.partition("==")
        if not sep or not ver.strip():
            raise SystemExit(f"error: {lock}:{n}: {line!r} is not an exact pin (name==version)")
        pins[normalize(name.strip())] = ver.strip()
    return pins


def installed(python: str | None = None) -> dict[str, str]:
    """The distributions of an interpreter's environment (this one by default)."""
    if python is None:
        return {normalize(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}
    code = ("import json; from importlib import metadata as m; "
            "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}))")
    import json

    out = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout
    return {normalize(k): v for k, v in json.loads(out).items()}


def base_version(v: str) -> str:
    return v.split("+", 1)[0]


def write(venv: Path, out: Path) -> None:
    python = str(venv / "bin" / "python")
    dists = installed(python)
    dists.pop(PROJECT, None)
    lines = [f"{name}=={base_version(v) if name == 'torch' else v}" for name, v in sorted(dists.items())]
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(HEADER + "\n".join(lines) + "\n")
    tmp.replace(out)
    print(f"wrote {out} ({len(lines)} distributions)")


def check(lock: Path) -> int:
    pins = read(lock)
    have = installed()
    have.pop(PROJECT, None)
    problems = []
    for name, want in sorted(pins.items()):
        got = have.get(name)
        if got is None:
            problems.append(f"missing  {name}=={want}")
        elif got != want and not (name == "torch" and base_version(got) == want):
            problems.append(f"differs  {name}: installed {got}, lock {want}")
    problems += [f"extra    {name}=={v} (not in the lock)" for name, v in sorted(have.items()) if name not in pins]
    if problems:
        print(f"error: this environment differs from {lock.name} ({len(problems)}):", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        print("  fix: rm -rf .venv && make setup", file=sys.stderr)
        return 1
    torch = have.get("torch", "")
    build = f"; torch build: {torch.split('+', 1)[1]}" if "+" in torch else ""
    print(f"installed == {lock.name}: {len(pins)} distributions{build}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write the lock from a virtual environment's distributions")
    w.add_argument("venv", type=Path)
    w.add_argument("--out", type=Path, default=LOCK)
    c = sub.add_parser("check", help="compare this environment with the lock")
    c.add_argument("--lock", type=Path, default=LOCK)
    args = ap.parse_args(argv)
    if args.cmd == "write":
        write(args.venv, args.out)
        return 0
    return check(args.lock)


if __name__ == "__main__":
    sys.exit(main())
