"""Exported models on the Hugging Face Hub: fetch one by id, or publish one (opt-in).

:func:`locate` turns a Hub id into a local snapshot (offline: one clear line naming the id, via
:mod:`scaleformer.model.hub`); :func:`push_to_hub` uploads an exported folder with
``huggingface_hub``'s API (``create_repo`` then ``upload_folder``). Nothing is pushed unless asked.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from scaleformer.export.folder import read_meta
from scaleformer.model.hub import (
    HubUnreachableError,
    cached_snapshot,
    is_local,
    unreachable_message,
    unreachable_reason,
)

_HINT = ("Download it on a connected machine (`hf download {id} --local-dir DIR`) and pass the folder "
         "instead of the id.")


def locate(path_or_id: str | Path, revision: str | None = None) -> Path:
    """A local model folder for a folder path or a Hub id (downloaded, or from the local HF cache)."""
    s = str(path_or_id)
    if is_local(s) or s.startswith((".", "/", "~")) or s.count("/") != 1:
        return Path(s).expanduser()
    cached = cached_snapshot(s, weights=True)
    why = unreachable_reason()
    if why is not None:
        if cached is not None:  # config.json and weights; scaleformer.json is an optional record
            return cached
        raise HubUnreachableError(unreachable_message("exported model", s, why, _HINT.format(id=s)))
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id=s, revision=revision))


def check_uploadable(folder: Path) -> None:
    """Only regular files inside the folder go up: the Hub client follows links, so a link (to
    ``~/.ssh/id_rsa``, say) would upload what it points to. One line naming it, before any network call."""
    root = folder.resolve()
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if path.is_symlink():
            raise ValueError(f"{folder}: {rel} is a link (to {os.readlink(path)}); push uploads only the export's "
                             "own regular files: replace it with a copy or remove it")
        if not (path.is_file() or path.is_dir()):
            raise ValueError(f"{folder}: {rel} is not a regular file; push uploads only regular files")
        if not path.resolve().is_relative_to(root):
            raise ValueError(f"{folder}: {rel} resolves outside the folder; push refuses it")


def push_to_hub(folder: str | Path, repo_id: str, *, private: bool = False, token: str | None = None,
                commit_message: str | None = None, api: Any = None) -> str:
    """Upload an exported folder (weights, tokenizer, method record, model card) to ``repo_id``.

    ``api``: an ``huggingface_hub.HfApi`` (default: a new one with ``token``); returns the repo's URL.
    """
    meta = read_meta(folder)  # refuses a folder that is not an export before anything is sent
    check_uploadable(Path(folder))
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
    url = api.create_repo(repo_id=repo_id, private=private, exist_ok=True, repo_type="model")
    run = meta.get("run") or {}
    api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model",
                      commit_message=commit_message or f"scaleformer export of {run.get('run_id')} "
                                                       f"(step {run.get('step')}, {meta['method']['option']})")
    return str(url)
