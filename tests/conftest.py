"""Shared fixtures: Hydra composition of the repo's conf/ and an offline environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# Tests never reach the hub; make the libraries fail fast instead of retrying a dead network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


# The fast tier trains the smallest random backbone unless a test names another: the embedded
# default's pretrained reader is exercised by the README, reader and slow tests.
TEST_DEFAULTS = ["backbone=tiny_bart", "optim=tiny"]


def compose(overrides: list[str] | None = None):
    """Compose conf/config.yaml with overrides as `python train.py ...` would, on tiny_bart and its
    optimiser unless the overrides choose another backbone or optimiser."""
    from scaleformer.compose import compose_config

    return compose_config([*TEST_DEFAULTS, *(overrides or [])], str(CONF))


@pytest.fixture
def compose_cfg():
    return compose


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
