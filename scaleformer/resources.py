"""Where the package's own files are: Hydra configs, experiment specs and assets (tokenizer, readers).

They ship inside the package (``scaleformer/conf``, ``scaleformer/experiments``,
``scaleformer/assets``; the repository's top-level ``conf/`` and ``experiments/`` point there), so an
installed wheel finds them from any working directory. Every module asks here instead of walking up
from its own file. A config value ``asset:<path>`` names a file under ``assets/`` (:func:`resolve_asset`):
it stays the same string on every machine, so run identities do not depend on where the package is.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

ASSET_PREFIX = "asset:"


def package_dir() -> Path:
    return Path(str(files("scaleformer")))


@cache
def package_commit() -> str:
    """The commit of the checkout this package runs from, with '-dirty' for uncommitted changes; 'unknown'
    for an installed copy. Asked of the package's own folder, never of the working directory: a run
    started inside another repository must not record that repository's commit. Asked once per process
    (runs ask as they start): the code a process runs is the code it loaded, whatever is committed later."""
    import subprocess

    source = package_dir().parent

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, timeout=5,
                              check=True).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != source.resolve():
            return "unknown"  # e.g. site-packages inside someone else's repository
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return git("rev-parse", "HEAD") + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@cache
def package_changes() -> dict[str, Any] | None:
    """What '-dirty' stands for: the files changed from the commit and the SHA-256 of ``git diff HEAD``
    (None when clean or not a checkout). A table built from a dirty tree names its changes, so a reader
    can tell a config tweak from a code change. Asked once per process, like :func:`package_commit`."""
    import hashlib
    import subprocess

    if not package_commit().endswith("-dirty"):
        return None
    source = str(package_dir().parent)
    try:
        diff = subprocess.run(["git", "-C", source, "diff", "HEAD"], capture_output=True, timeout=10, check=True).stdout
        names = subprocess.run(["git", "-C", source, "diff", "HEAD", "--name-only"], capture_output=True, text=True,
                               timeout=10, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return {"diff_sha256": hashlib.sha256(diff).hexdigest(), "files": names}


def conf_dir() -> Path:
    """The Hydra config root (``config.yaml`` and one folder per group)."""
    return package_dir() / "conf"


def experiments_dir() -> Path:
    """The artifact specs (``table1.yaml``, ...)."""
    return package_dir() / "experiments"


def assets_dir() -> Path:
    return package_dir() / "assets"


def group_options(group: str) -> list[str]:
    """The options of a config group (``method`` -> truncation, sled, ...), without ``_``-prefixed bases."""
    return sorted(p.stem for p in (conf_dir() / group).glob("*.yaml") if not p.stem.startswith("_"))


def resolve_asset(value: str) -> str:
    """``asset:readers/x`` -> the absolute path of ``assets/readers/x``; other values unchanged."""
    if isinstance(value, str) and value.startswith(ASSET_PREFIX):
        return str(assets_dir() / value[len(ASSET_PREFIX):])
    return value


def installed(dist: str) -> str:
    """A distribution's installed version, or "not installed" (results and reports name what ran)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"
