"""Once-per-run notices: a fallback or a caveat is said once, not once per split or call.

Runs call :func:`reset_notices` at their start, so each run of a multirun (several runs in one
process under Hydra's basic launcher) says it again.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("scaleformer.metrics")
_SHOWN: set[str] = set()


def notice_once(key: str, msg: str, *args: Any) -> None:
    """Log a warning the first time `key` is noticed in this run, at debug level afterwards."""
    if key in _SHOWN:
        log.debug(msg, *args)
    else:
        _SHOWN.add(key)
        log.warning(msg, *args)


def reset_notices() -> None:
    """Let once-per-run notices show again (called at the start of every run)."""
    _SHOWN.clear()
