"""The project's base error: a setting out of range or inconsistent (imports nothing of the project).

Entry points print a :class:`ConfigError` as one line, ``error: <key>=<value>: <what to do>``, never
a traceback; :func:`check` builds that message from the key, the value and the limit it broke.
"""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A config value is out of range or inconsistent; the message names the key."""


def check(ok: bool, key: str, value: Any, limit: str) -> None:
    """Raise a ConfigError naming the key, the value and the limit it broke."""
    if not ok:
        raise ConfigError(f"{key}={value!r}: {limit}")
