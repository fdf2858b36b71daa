"""The field helpers every config dataclass uses: what a ``runtime`` field is, and the one range check."""

from __future__ import annotations

from dataclasses import field, fields
from typing import Any

from omegaconf import MISSING

from scaleformer.errors import check


def runtime(default: Any = MISSING, *, factory: Any = None) -> Any:
    """A field that changes neither the trained weights nor the run's name (where or how a run happens):
    the training identity leaves it out (:func:`scaleformer.runs.identity.training_identity`)."""
    if factory is not None:
        return field(default_factory=factory, metadata={"runtime": True})
    return field(default=default, metadata={"runtime": True})


def runtime_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if f.metadata.get("runtime"))


def _positive(key: str, value: int | float | None, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    check(value is not None and value > 0, key, value, "must be > 0")
