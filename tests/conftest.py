"""Shared fixtures: Hydra composition of the repo's conf/ and an offline environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# The papers' text is optional: it sits beside this project's own checkouts, never in a user's clone.
# Every figure a test needs is in experiments/*.yaml; the text only cross-checks those figures, through
# `optional_paper` (the one place a test may look outside the repository; tests/test_repository_paths.py).
PAPERS_ENV = "SCALEFORMER_PAPERS"             # a folder holding the papers' text, if not the default
PAPERS_REQUIRED_ENV = "SCALEFORMER_PAPERS_REQUIRED"  # "1": a missing paper fails instead of skipping (CI)
_optional_papers_default = ROOT.parent / "shared" / "papers"

# Under pytest-xdist (`make test` runs a worker per core) the workers share the cores: each, and every command it
# starts, gets its share of threads, or OpenMP's threads oversubscribe the machine and every worker slows down.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
if _WORKERS > 1:
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, str(max(1, (os.cpu_count() or 1) // _WORKERS)))

# Tests never reach the hub; make the libraries fail fast instead of retrying a dead network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

# The heap as the console commands set it (scaleformer.ops.host_memory): tests run what users run, from the
# first test on, whatever order the tests come in.
from scaleformer.ops.host_memory import keep_freed_memory  # noqa: E402

keep_freed_memory()


# The fast tier trains the smallest random backbone unless a test names another: the embedded
# default's pretrained reader is exercised by the README, reader and slow tests.
TEST_DEFAULTS = ["backbone=tiny_bart", "optim=tiny"]


def compose(overrides: list[str] | None = None):
    """Compose conf/config.yaml with overrides as `python train.py ...` would, on tiny_bart and its
    optimiser unless the overrides choose another backbone or optimiser."""
    from scaleformer.compose import compose_config

    return compose_config([*TEST_DEFAULTS, *(overrides or [])], str(CONF))


def train_py(*args: str, timeout: int = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python train.py`` with the fast tier's defaults in a child process (Hydra's flags, e.g. ``-m``, first)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    flags = [a for a in args if a.startswith("-")]
    rest = [a for a in args if not a.startswith("-")]
    return subprocess.run([sys.executable, "train.py", *flags, *TEST_DEFAULTS, *rest], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def train_py_gloo(*args: str) -> subprocess.CompletedProcess:
    """``train_py`` for a run of several CPU processes over gloo, every rank on loopback (one machine)."""
    proc = train_py(*args, env={"GLOO_SOCKET_IFNAME": "lo"})
    if proc.returncode < 0 and "terminate called" in proc.stderr:
        # gloo's C++ side once aborted rank 1 right after joining, on a loaded CI machine (SIGABRT, no
        # Python error): the launch is retried once; a second crash, or any Python error, still fails
        proc = train_py(*args, env={"GLOO_SOCKET_IFNAME": "lo"})
    return proc


@pytest.fixture
def compose_cfg():
    return compose


def _optional_paper(name: str) -> Path:
    folder = Path(os.environ.get(PAPERS_ENV) or _optional_papers_default)
    path = folder / name
    if path.is_file():
        return path
    why = f"optional paper text {name!r} not found in {folder} (set {PAPERS_ENV} to the folder that holds it)"
    if os.environ.get(PAPERS_REQUIRED_ENV) == "1":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture
def optional_paper():
    """`optional_paper("scaleformer.md")`: the path of a paper's text, or a skip saying where it was sought.

    A test that uses it is marked `paper`: CI runs the fast tier in a clone with nothing beside it, then
    `pytest -m paper` against the shared folder with PAPERS_REQUIRED_ENV set, so the cross-check cannot skip there."""
    return _optional_paper


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if "optional_paper" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.paper)


def pytest_report_header(config) -> str:
    """Which torch CPU kernels ran: golden values are checked under several (make test-kernels)."""
    import torch

    return f"torch {torch.__version__}, CPU kernels {torch.backends.cpu.get_cpu_capability()} " \
           f"(ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', 'unset')})"


@pytest.fixture
def network_attempts(monkeypatch) -> list[str]:
    """Every connection the code under test tries, refused at once: "fails fast offline" means it tried
    none (no retry loop of a library against a dead network), checked without timing anything."""
    import socket

    attempts: list[str] = []

    def refuse(what: str):
        def call(*args, **kwargs):
            attempts.append(f"{what}{args[1:] if what.startswith('socket.') else args}"[:200])
            raise OSError("network disabled in this test")
        return call

    monkeypatch.setattr(socket, "create_connection", refuse("create_connection"))
    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    monkeypatch.setattr(socket.socket, "connect", refuse("socket.connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("socket.connect_ex"))
    return attempts
