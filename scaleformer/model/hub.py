"""The one place that answers "can the Hugging Face hub be reached?" and "is this id cached locally?".

transformers, datasets and bert-score retry a dead network for ~25 s per file before a generic
OSError; users deserve a few-second answer that names the model or dataset and says how to use a
local copy. The backbone, the data and the metrics all ask here, so there is one probe (a TCP
connection with one timeout) and one reading of the local HF cache.
"""

from __future__ import annotations

import os
import socket
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from scaleformer.errors import UserError
from scaleformer.resources import resolve_asset

# The probe only decides "reachable or not"; a dead network must not stall a run or an evaluation.
PROBE_TIMEOUT_S = 3.0
# Any one of these next to config.json means a snapshot holds weights, not just a partial download.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


class HubUnreachableError(UserError, RuntimeError):
    """The hub is needed for this id and cannot be reached; the message says what to do instead."""


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def offline_mode() -> bool:
    """Whether the user told the HF libraries to stay off the network (env now, or as read at import)."""
    if any(_env_true(v) for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")):
        return True
    try:
        from huggingface_hub import constants
    except ImportError:
        return False
    return bool(constants.HF_HUB_OFFLINE)


def _hosts(urls: Sequence[str]) -> list[tuple[str, int]]:
    out = []
    for u in urls:
        p = urllib.parse.urlparse(u.split("::")[-1])  # fsspec chains: zip://inner::https://host/file.zip
        if p.scheme in ("http", "https") and p.hostname:
            out.append((p.hostname, p.port or (443 if p.scheme == "https" else 80)))
    return list(dict.fromkeys(out))


def _probe(host: str, port: int, timeout: float | None = None) -> str | None:
    """None if a TCP connection (through the https proxy, if one is set) opens; else the reason."""
    proxy = urllib.request.getproxies().get("https")
    if proxy:
        p = urllib.parse.urlparse(proxy if "://" in proxy else f"http://{proxy}")
        host, port = p.hostname or host, p.port or 8080
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S if timeout is None else timeout).close()
        return None
    except OSError as e:
        return f"{host}:{port}: {e}"


def unreachable_reason(urls: Sequence[str] | None = None) -> str | None:
    """Why the hub (or the hosts of `urls`) cannot be reached right now, or None if it can.

    Offline mode answers without touching the network; otherwise each host is probed once, with
    ``PROBE_TIMEOUT_S``.
    """
    if offline_mode():
        return "offline mode is enabled (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE / HF_DATASETS_OFFLINE)"
    for host, port in _hosts(urls or [os.environ.get("HF_ENDPOINT", "https://huggingface.co")]):
        reason = _probe(host, port)
        if reason:
            return reason
    return None


def is_local(path_or_id: str) -> bool:
    return os.path.exists(os.path.expanduser(path_or_id))


def hub_cache_dir() -> str:
    """The HF hub cache folder as the environment says now (huggingface_hub reads it once, at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def cached_snapshot(repo_id: str, *, weights: bool = True) -> Path | None:
    """The HF-cache snapshot folder of model `repo_id`, or None when it is not usable offline.

    A snapshot counts when it has config.json and (unless ``weights=False``, e.g. for a tokenizer or
    a config) one of ``WEIGHT_FILES``: an interrupted download must not pass for a cached model.
    """
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=hub_cache_dir())
    except Exception:  # a malformed id is simply "not cached"
        return None
    if not isinstance(found, str):
        return None
    snapshot = Path(found).parent
    if weights and not any((snapshot / w).exists() for w in WEIGHT_FILES):
        return None
    return snapshot


def unreachable_message(what: str, ident: str, why: str, local_hint: str) -> str:
    return (f"Cannot load {what} {ident!r}: the Hugging Face hub cannot be reached ({why}) and it is "
            f"not in the local cache. {local_hint}")


def check_available(ident: str | None, what: str, local_hint: str) -> None:
    """At start-up: fail when a hub id the run will load later is neither local, cached nor reachable."""
    ident = resolve_asset(ident) if ident is not None else None
    if ident is None or is_local(ident) or cached_snapshot(ident, weights=True) is not None:
        return
    why = unreachable_reason()
    if why is not None:
        raise HubUnreachableError(unreachable_message(what, ident, why, local_hint))
