"""The tokenization cache: one folder per split of flat int32 arrays, memory-mapped on load.

An entry is keyed by the source identity, fields, lengths, caps, split and a tokenizer fingerprint,
so a second run reads it without touching the source (a hub dataset tokenized once also works
offline afterwards). Entries are written to a temp folder and renamed into place, so a killed run
never leaves a half-written one.

Why not `datasets`' fingerprinted ``map`` cache: its key is the fingerprint of the loaded source
dataset, so a hit still needs the source (the hub, or its download cache) to be loaded first.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from scaleformer.config import DataConfig
from scaleformer.io import atomic_dir

# 2: special-token literals in text are tokenized as text (split_special_tokens)
CACHE_VERSION = 2

_OFFSETS = {"input_ids": "input_offsets", "labels": "label_offsets", "prefix_ids": "prefix_offsets"}


class TokenizedSplit(Dataset):
    """One split as flat token arrays + offsets (memory-mapped from the cache) and per-example lists."""

    def __init__(self, arrays: dict[str, np.ndarray], ids: list[str], references: list[list[str]]):
        self.arrays = arrays
        self.ids = ids
        self.references = references
        self.has_prefix = "prefix_ids" in arrays

    def __len__(self) -> int:
        return len(self.ids)

    def _seq(self, name: str, i: int) -> np.ndarray:
        off = self.arrays[_OFFSETS[name]]
        return np.asarray(self.arrays[name][off[i]: off[i + 1]])

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = {"id": self.ids[i], "input_ids": self._seq("input_ids", i), "labels": self._seq("labels", i),
                "references": self.references[i]}
        if self.has_prefix:
            item["prefix_ids"] = self._seq("prefix_ids", i)
        return item


def entry_path(cfg: DataConfig, role: str, split: str, source: dict[str, Any], tokenizer_fp: str) -> Path:
    """The cache folder of one split: `<cache_dir>/tokenized/<name>-<role>-<key>`."""
    payload = {
        "v": CACHE_VERSION, "source": source, "split": split, "role": role,
        "fields": [cfg.input_field, cfg.target_field, cfg.id_field, cfg.prefix_field, cfg.query_split],
        "max_input_tokens": cfg.max_input_tokens, "max_target_tokens": cfg.max_target_tokens,
        "cap": cfg.max_train_examples if role == "train" else cfg.max_eval_examples,
        "tokenizer": tokenizer_fp,
    }
    key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in cfg.name)
    return Path(cfg.cache_dir) / "tokenized" / f"{safe}-{role}-{key}"


def is_cached(path: Path) -> bool:
    return (path / "meta.json").exists()


def write(path: Path, arrays: dict[str, np.ndarray], ids: list[str], references: list[list[str]],
          summary: dict[str, Any]) -> None:
    """Write one entry into a temp folder beside `path`, then rename it into place."""
    meta = {"ids": ids, "references": references, "summary": summary}
    with atomic_dir(path, replace=False) as tmp:  # another process (a DDP rank) may finish it first
        for name, arr in arrays.items():
            np.save(tmp / f"{name}.npy", arr)
        (tmp / "meta.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")


def load(path: Path) -> tuple[TokenizedSplit, dict[str, Any]]:
    """The split (arrays memory-mapped) and its summary."""
    meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    arrays = {p.stem: np.load(p, mmap_mode="r") for p in path.glob("*.npy")}
    return TokenizedSplit(arrays, meta["ids"], meta["references"]), meta["summary"]
