"""scripts/compat_check.py: the lock's own transformers release is not rebuilt (make test runs its compat tier),
any other release is."""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import compat_check  # noqa: E402
from lock import LOCK, read  # noqa: E402


def test_the_locked_release_is_not_rebuilt_and_counts_as_passed(monkeypatch, capsys):
    def build(version, lowest):
        raise AssertionError(f"built {version}")

    monkeypatch.setattr(compat_check, "build", build)
    assert compat_check.main([read(LOCK)["transformers"]]) == 0
    assert "the lock's release" in capsys.readouterr().out


def test_another_release_is_built_and_a_failed_build_fails_the_tier(monkeypatch, capsys):
    built = []

    def build(version, lowest):
        built.append((version, lowest))
        raise compat_check.subprocess.CalledProcessError(1, "pip")

    monkeypatch.setattr(compat_check, "build", build)
    assert compat_check.main(["5.20.0", read(LOCK)["transformers"], "--rebuild-locked"]) == 1
    assert built == [("5.20.0", False), (read(LOCK)["transformers"], False)]
    assert "could not install" in capsys.readouterr().out
