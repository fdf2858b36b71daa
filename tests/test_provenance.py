"""A run from a dirty checkout records what '-dirty' stands for, and a table's provenance names it."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from scaleformer import resources
from scaleformer.artifacts.tables import provenance
from scaleformer.runs.results import Results


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_a_dirty_checkout_records_its_changed_files_and_diff_hash(tmp_path, monkeypatch):
    pkg = tmp_path / "scaleformer"
    pkg.mkdir()
    (pkg / "conf.yaml").write_text("seeds: [42]\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    monkeypatch.setattr(resources, "package_dir", lambda: pkg)
    try:
        resources.package_commit.cache_clear()
        resources.package_changes.cache_clear()
        assert resources.package_changes() is None  # clean: nothing to name
        (pkg / "conf.yaml").write_text("seeds: [42, 43, 44]\n")
        resources.package_commit.cache_clear()
        resources.package_changes.cache_clear()
        got = resources.package_changes()
        assert resources.package_commit().endswith("-dirty")
        assert got["files"] == ["scaleformer/conf.yaml"] and len(got["diff_sha256"]) == 64
    finally:
        resources.package_commit.cache_clear()
        resources.package_changes.cache_clear()


def test_the_provenance_line_names_a_dirty_commit_s_changes():
    rec = Results(commit="a" * 40 + "-dirty", changes={"files": ["experiments/table1.yaml"], "diff_sha256": "f" * 64})
    old = Results(commit="b" * 40 + "-dirty")
    line = provenance(SimpleNamespace(results={1: rec, 2: old}))
    assert "aaaaaaaaaaaa-dirty changed experiments/table1.yaml (diff sha256 ffffffffffff)" in line
    assert "bbbbbbbbbbbb-dirty: its changes were not recorded" in line
