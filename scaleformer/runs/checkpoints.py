"""Checkpoints: written atomically, read as weights only, checked against the run that loads them.

- Every save goes to a temp file in the same folder, then is renamed: a killed run never leaves a
  half-written checkpoint (Lightning writes in place).
- Every load uses ``torch.load(weights_only=True)``: a checkpoint is data, never code. Remote URLs
  are refused (Lightning would fetch them and unpickle with ``weights_only=False``).
- Each checkpoint records the backbone and method it was trained with (``scaleformer`` entry); loading
  it into another backbone or method is an error naming both, before any weights move.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from scaleformer.errors import ConfigError
from scaleformer.io import atomic_file

log = logging.getLogger("scaleformer")
META_KEY = "scaleformer"


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch checkpoint IO, with temp-then-rename saves and weights-only loads."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        with atomic_file(path) as tmp:  # temp files of a run killed mid-save are swept by the writer
            super().save_checkpoint(checkpoint, tmp, storage_options)

    def load_checkpoint(self, path: Any, map_location: Any = None, **_: Any) -> dict:  # always weights only
        return load(path, map_location=map_location)


def load(path: str | Path, map_location: Any = "cpu", mmap: bool = False) -> dict[str, Any]:
    """A local checkpoint's contents, unpickled as data only (``mmap``: tensors read lazily)."""
    import pickle

    from scaleformer.model.backbone import unpickling_reason

    refuse_remote(str(path))
    try:
        return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        raise ConfigError(f"trainer.ckpt_path={str(path)!r}: holds more than weights ({unpickling_reason(e)}); "
                          "it is not loaded") from None


def refuse_remote(path: str) -> None:
    if "://" in path:
        raise ConfigError(f"trainer.ckpt_path={path!r}: remote checkpoints are not loaded (a checkpoint "
                          "file can carry code); download it and pass the local path")


def resolve(ckpt_path: str | None, ckpt_dir: Path | None, run_dir: Path | None = None) -> Path | None:
    """The checkpoint to start from: ``last`` = this run's newest (None when it has none), a path
    (which must exist), or None. Checked at start-up, before any model is built.

    "Newest" also considers the ``hpc_ckpt_<n>.ckpt`` Lightning saves in the run folder when SLURM
    preempts a job (before requeueing it): the one with the highest step wins.
    """
    if ckpt_path is None:
        return None
    if ckpt_path == "last":
        found = [p for p in [ckpt_dir / "last.ckpt" if ckpt_dir is not None else None] if p and p.exists()]
        if run_dir is not None and run_dir.is_dir():
            found += sorted(run_dir.glob("hpc_ckpt_*.ckpt"))
        return max(found, key=lambda p: peek(p)["step"]) if found else None
    refuse_remote(ckpt_path)
    path = Path(ckpt_path).expanduser()
    if not path.is_file():
        raise ConfigError(f"trainer.ckpt_path={ckpt_path!r}: no such checkpoint file")
    return path


def metadata(backbone: str, method: dict[str, Any], identity: str) -> dict[str, Any]:
    """What a checkpoint records about the run that wrote it."""
    return {"backbone": backbone, "method": method, "training_hash": identity}


def check_compatible(meta: dict[str, Any] | None, backbone: str, method: dict[str, Any], path: Path) -> None:
    """Refuse weights trained with another backbone or method (their shapes or meaning differ)."""
    if not meta:
        log.warning("checkpoint %s carries no scaleformer metadata: cannot check its backbone and method", path)
        return
    theirs = (meta.get("backbone"), meta.get("method", {}).get("name"))
    ours = (backbone, method.get("name"))
    if theirs != ours:
        raise ConfigError(f"trainer.ckpt_path={str(path)!r}: trained with backbone {theirs[0]!r} and method "
                          f"{theirs[1]!r}, but this run uses backbone {ours[0]!r} and method {ours[1]!r}")


def load_weights(module: torch.nn.Module, path: Path, backbone: str, method: dict[str, Any]) -> int:
    """Load a checkpoint's weights into ``module`` (after the compatibility check); returns its step."""
    ckpt = load(path)
    check_compatible(ckpt.get(META_KEY), backbone, method, path)
    module.load_state_dict(ckpt["state_dict"])
    return int(ckpt.get("global_step", 0))


def peek(path: Path) -> dict[str, Any]:
    """Step and metadata of a checkpoint, for start-up checks."""
    ckpt = load(path, mmap=True)
    return {"step": int(ckpt.get("global_step", 0)), "meta": ckpt.get(META_KEY)}
