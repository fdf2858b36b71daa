"""The validated, typed config of one run (its own module: the identity and context modules both read it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scaleformer.config import Config


@dataclass
class RunConfig(Config):
    """The validated, typed config of one run: :class:`Config`'s fields with ``method`` and ``trainer``
    typed by their own schemas, and ``raw``, the resolved DictConfig saved with the results."""

    raw: Any = None
    # The settings that determine the weights (scaleformer.runs.identity): computed once, as the run's
    # name is made, and read from here by everything after (its hash, the run folder's owner record).
    training_identity: dict[str, Any] | None = None

    @property
    def method_option(self) -> str:
        """The `method` option the user chose (e.g. scaleformer_middle); the class name without one."""
        return str(self.choices.get("method") or self.method.name)
