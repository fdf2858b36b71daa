"""The project's user errors (one base, :class:`UserError`) and the line they print (imports nothing of the project).

Entry points print a :class:`ConfigError` as one line, ``error: <key>=<value>: <what to do>``, never
a traceback; :func:`check` builds that message from the key, the value and the limit it broke.
Credentials in URLs never reach a message, a log or a results file: :func:`redact`.
"""

from __future__ import annotations

import re
from typing import Any


class UserError(Exception):
    """A mistake or a condition the user can fix (a setting, a file, the network, a busy run folder): the
    one base every entry point prints as one line, never a traceback. Credentials in the message are
    hidden when the error is made, so no handler, log or ``failed.json`` can show them."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


class ConfigError(UserError, ValueError):
    """A config value is out of range or inconsistent; the message names the key."""


def check(ok: bool, key: str, value: Any, limit: str) -> None:
    """Raise a ConfigError naming the key, the value and the limit it broke."""
    if not ok:
        raise ConfigError(f"{key}={value!r}: {limit}")


# user:password@ (or a bare token@) in a URL: what must never reach a message, a log or a results file. Both
# ``scheme://`` and ``scheme:/``: libraries that join paths (fsspec, datasets) print ``https:/alice:pw@host``.
_CREDENTIALS = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]+:/{1,2})(?P<user>[^\s:/@?#]*)(?::(?P<pw>[^\s/@?#]*))?@")


def redact(text: str) -> str:
    """URLs with credentials as ``scheme://user:***@host`` (a bare token: ``scheme://***@host``)."""
    def hide(m: re.Match[str]) -> str:
        if m["pw"] is None:
            return f"{m['scheme']}***@"
        return f"{m['scheme']}{m['user']}:***@"

    return _CREDENTIALS.sub(hide, text) if isinstance(text, str) and "@" in text else text


def hide_secrets(text: str, *settings: str) -> str:
    """``text`` (a library's message about ``settings``) with every password or token those settings hold
    replaced by ``***`` wherever it appears (quoted, re-joined, percent-decoded), then :func:`redact`-ed: a
    library may print a URL in a form no pattern foresees."""
    from urllib.parse import quote, unquote

    for setting in settings:
        for m in _CREDENTIALS.finditer(setting or ""):
            for secret in {m["pw"], None if m["pw"] is not None else m["user"]} - {None, ""}:
                for form in {secret, unquote(secret), quote(secret, safe="")}:
                    text = text.replace(form, "***")
    return redact(text)


def redact_all(obj: Any) -> Any:
    """:func:`redact` through dicts, lists and tuples (configs and results before they are written)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: redact_all(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(redact_all(v) for v in obj)
    return obj


_WRITE_HINTS = {
    "ENOSPC": "the disk is full: free space (old checkpoints/replaced/, caches) or set paths.root elsewhere",
    "EDQUOT": "the disk quota is used up: free space or set paths.root elsewhere",
    "EFBIG": "the file exceeds the process's file-size limit (ulimit -f): raise it",
    "ENAMETOOLONG": "a path is too long: use a shorter paths.root or run_name",
    "EROFS": "the file system is read-only: set paths.root to a writable folder",
}


def storage_error(error: BaseException) -> str | None:
    """One line for a write the storage refused (disk full, quota, ulimit -f, path too long); None for
    any other error. A checkpoint is written to a temporary file first, so the last complete one stays."""
    import errno
    import os

    if not isinstance(error, OSError) or error.errno is None:
        return None
    name = errno.errorcode.get(error.errno, "")
    if name not in _WRITE_HINTS:
        return None
    target = error.filename if isinstance(error.filename, str) else ""
    if len(target) > 120:
        target = f"{target[:60]}...{target[-40:]} ({len(target)} characters)"
    where = f" writing {target}" if target else ""
    return redact(f"{os.strerror(error.errno)}{where}: {_WRITE_HINTS[name]}; the run's earlier complete "
                  "checkpoints are kept")
