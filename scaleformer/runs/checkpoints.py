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
from scaleformer.model.backbone import unpickling_reason

log = logging.getLogger("scaleformer")
META_KEY = "scaleformer"


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch checkpoint IO, with temp-then-rename saves and weights-only loads."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        with atomic_file(path) as tmp:  # temp files of a run killed mid-save are swept by the writer
            super().save_checkpoint(checkpoint, tmp, storage_options)

    def load_checkpoint(self, path: Any, map_location: Any = None, **_: Any) -> dict:  # always weights only
        return load(path, map_location=map_location)


def load(path: str | Path, map_location: Any = "cpu", mmap: bool = False,
         key: str = "trainer.ckpt_path", where: str | None = None) -> dict[str, Any]:
    """A local checkpoint's contents, unpickled as data only (``mmap``: tensors read lazily), checked to
    be a Lightning checkpoint: a truncated, empty or foreign file is one line naming it (``where``; default
    ``<key>=<path>``), never a traceback."""
    import pickle

    refuse_remote(str(path))
    where = where or f"{key}={str(path)!r}"
    if not Path(path).is_file():
        raise ConfigError(f"{where}: not a file ({'a folder' if Path(path).is_dir() else 'missing or a broken link'})")
    if Path(path).stat().st_size == 0:
        raise ConfigError(f"{where}: the file is empty (a save that never completed); remove it or pass another")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        reason = unpickling_reason(e)
        if reason.startswith("Unsupported operand") or not reason:  # not a pickle at all: random bytes
            raise ConfigError(f"{where}: not a readable checkpoint (not written by torch.save: {reason})") from None
        if "weights_only" in str(e) or "WeightsUnpickler" in str(e):
            raise ConfigError(f"{where}: holds more than weights ({unpickling_reason(e)}); it is not loaded") from None
        raise ConfigError(f"{where}: not a readable checkpoint ({_first_line(e)})") from None
    except RuntimeError as e:
        if mmap and "mmap" in str(e):  # a legacy (pre-zip) file: readable, just not memory-mapped
            return load(path, map_location, mmap=False, key=key, where=where)
        raise ConfigError(f"{where}: not a readable checkpoint ({_first_line(e)}; truncated or not written by "
                          "torch.save)") from None
    except Exception as e:  # arbitrary bytes make the unpickler fail in arbitrary ways (IndexError, ...)
        raise ConfigError(f"{where}: not a readable checkpoint ({type(e).__name__}: {_first_line(e)})") from None
    if not isinstance(ckpt, dict):
        raise ConfigError(f"{where}: holds a {type(ckpt).__name__}, not a Lightning checkpoint (a dict with a "
                          "state_dict)")
    state = ckpt.get("state_dict")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(f"{where}: has no state_dict of tensors (keys: {sorted(map(str, ckpt))[:8]})")
    ckpt["state_dict"] = upgrade_state(state)
    step = ckpt.get("global_step", 0)
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ConfigError(f"{where}: global_step={step!r} is not a step count (an integer >= 0)")
    return ckpt


def upgrade_state(state: dict[str, Any]) -> dict[str, Any]:
    """Weights saved before the backbone moved under the model class's ``backbone.`` (``model.X`` ->
    ``model.backbone.X``), so earlier runs still resume and load; newer states pass through (a decoder-only run's
    too: its model class holds the backbone under the same prefix)."""
    if any(k.startswith(_BACKBONE) for k in state) or not any(k.startswith("model.") for k in state):
        return state
    return {(_BACKBONE + k[len("model."):] if k.startswith("model.") else k): v for k, v in state.items()}


_BACKBONE = "model.backbone."


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def refuse_remote(path: str) -> None:
    if "://" in path:
        raise ConfigError(f"trainer.ckpt_path={path!r}: remote checkpoints are not loaded (a checkpoint "
                          "file can carry code); download it and pass the local path")


def resolve(ckpt_path: str | None, ckpt_dir: Path | None, run_dir: Path | None = None) -> Path | None:
    """The checkpoint to start from: ``last`` = this run's newest readable one (None when it has none), a
    path (which must exist), or None. Checked at start-up, before any model is built.

    "Newest" is the highest step among ``last.ckpt``, the ``step_<N>.ckpt`` beside it and the
    ``hpc_ckpt_<n>.ckpt`` Lightning saves in the run folder when SLURM preempts a job: a broken
    ``last.ckpt`` link or an unreadable file is passed over (with a warning), never a reason to start over.
    """
    if ckpt_path is None:
        return None
    if ckpt_path == "last":
        found = []
        if ckpt_dir is not None and ckpt_dir.is_dir():
            found += [ckpt_dir / "last.ckpt", *sorted(ckpt_dir.glob("step_*.ckpt"))]
        if run_dir is not None and run_dir.is_dir():
            found += sorted(run_dir.glob("hpc_ckpt_*.ckpt"))
        steps = {}
        for p in dict.fromkeys(found):
            if not p.is_file():
                if p.is_symlink() or p.exists():
                    log.warning("checkpoint %s is %s: passed over", p, "a broken link" if p.is_symlink() else
                                "not a file")
                continue
            try:
                steps[p] = peek(p)["step"]
            except ConfigError as e:
                log.warning("passed over an unreadable checkpoint: %s", e)
        return max(steps, key=lambda p: (steps[p], p.name == "last.ckpt")) if steps else None
    refuse_remote(ckpt_path)
    path = Path(ckpt_path).expanduser()
    if not path.is_file():
        raise ConfigError(f"trainer.ckpt_path={ckpt_path!r}: no such checkpoint file")
    return path


def set_aside(ckpt_dir: Path | None, why: str) -> Path | None:
    """Move a run's checkpoints into ``checkpoints/replaced/<time>/`` (never deleted: a fresh start or
    another identity's training in this folder must not destroy the only copy of earlier weights)."""
    if ckpt_dir is None or not ckpt_dir.is_dir():
        return None
    old = [p for p in ckpt_dir.iterdir() if p.suffix == ".ckpt" and (p.is_file() or p.is_symlink())]
    if not old:
        return None
    import time

    dest = ckpt_dir / "replaced" / time.strftime("%Y%m%d-%H%M%S")
    dest.mkdir(parents=True, exist_ok=True)
    for p in old:
        if p.is_symlink():
            p.unlink()  # last.ckpt: a link to one of the files moved
        else:
            p.rename(dest / p.name)
    log.warning("%s: moved %d checkpoint(s) to %s (delete them yourself when no longer needed)", why,
                len(old), dest)
    return dest


def metadata(backbone: str, method: dict[str, Any], identity: str) -> dict[str, Any]:
    """What a checkpoint records about the run that wrote it."""
    return {"backbone": backbone, "method": method, "training_hash": identity}


def check_compatible(meta: dict[str, Any] | None, backbone: str, method: dict[str, Any], path: Path,
                     where: str | None = None) -> None:
    """Refuse weights trained with another backbone or method (their shapes or meaning differ)."""
    where = where or f"trainer.ckpt_path={str(path)!r}"
    if not meta:
        log.warning("checkpoint %s carries no scaleformer metadata: cannot check its backbone and method", path)
        return
    if not isinstance(meta, dict):
        raise ConfigError(f"{where}: its scaleformer metadata is a {type(meta).__name__}, not a mapping")
    theirs = (meta.get("backbone"), (meta.get("method") or {}).get("name"))
    ours = (backbone, method.get("name"))
    if theirs != ours:
        raise ConfigError(f"{where}: trained with backbone {theirs[0]!r} and method {theirs[1]!r}, but this run uses "
                          f"backbone {ours[0]!r} and method {ours[1]!r}")
    spans, mine = (meta.get("method") or {}).get("spans"), method.get("spans")
    if isinstance(spans, list) and isinstance(mine, list) and spans != mine:  # the same weights, another pattern
        layer = next((i for i, (a, b) in enumerate(zip(spans, mine)) if a != b), min(len(spans), len(mine)))
        raise ConfigError(f"{where}: trained with the spans {spans} (layer {layer}: "
                          f"{spans[layer] if layer < len(spans) else 'none'}), but this run's are {mine} "
                          f"({mine[layer] if layer < len(mine) else 'none'}): another attention pattern is another "
                          "run; start it without trainer.ckpt_path")


def check_state(module: torch.nn.Module, path: Path, state: dict[str, torch.Tensor] | None = None,
                where: str | None = None) -> None:
    """The checkpoint's weights fit this model exactly (names and shapes), before any of them is loaded."""
    state = load(path, mmap=True, where=where)["state_dict"] if state is None else state
    mine = module.state_dict()
    missing = [k for k in mine if k not in state]
    unexpected = [k for k in state if k not in mine]
    shapes = [k for k in mine if k in state and tuple(state[k].shape) != tuple(mine[k].shape)]
    if missing or unexpected or shapes:
        parts = [f"{len(missing)} missing (e.g. {missing[0]})" if missing else "",
                 f"{len(unexpected)} unexpected (e.g. {unexpected[0]})" if unexpected else "",
                 f"{len(shapes)} of another shape (e.g. {shapes[0]}: {tuple(state[shapes[0]].shape)} vs "
                 f"{tuple(mine[shapes[0]].shape)})" if shapes else ""]
        raise ConfigError(f"{where or f'trainer.ckpt_path={str(path)!r}'}: its weights do not fit this model: "
                          + ", ".join(p for p in parts if p))


def load_weights(module: torch.nn.Module, path: Path, backbone: str, method: dict[str, Any],
                 where: str | None = None, training_hash: str | None = None) -> int:
    """Load a checkpoint's weights into ``module`` (after the compatibility checks; with ``training_hash``, only
    the weights that training identity wrote); returns its step."""
    ckpt = load(path, where=where)
    check_compatible(ckpt.get(META_KEY), backbone, method, path, where)
    if training_hash is not None:
        check_identity(ckpt.get(META_KEY), training_hash, where or str(path))
    check_state(module, path, ckpt["state_dict"], where)
    module.load_state_dict(ckpt["state_dict"])
    return int(ckpt["global_step"]) if "global_step" in ckpt else 0


def check_identity(meta: Any, training_hash: str, where: str) -> None:
    """The checkpoint was written by training identity ``training_hash`` (its metadata says which), or one line:
    a file copied in from another run would otherwise be evaluated and exported as this run's."""
    theirs = meta.get("training_hash") if isinstance(meta, dict) else None
    if theirs != training_hash:
        raise ConfigError(f"{where}: written by {f'training identity {theirs}' if theirs else 'no recorded run'}, "
                          f"not this run's ({training_hash}): another run's weights are not evaluated as this run's; "
                          "move the file away")


def peek(path: Path) -> dict[str, Any]:
    """Step and metadata of a checkpoint, for start-up checks."""
    ckpt = load(path, mmap=True)
    return {"step": int(ckpt.get("global_step", 0)), "meta": ckpt.get(META_KEY),
            "micro_batch": (ckpt.get("scaleformer_resume") or {}).get("micro_batch")}  # callbacks.ExactResume's
