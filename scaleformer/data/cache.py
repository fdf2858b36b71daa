"""The tokenization cache: one folder per split of flat int32 token streams, memory-mapped on load.

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
from scaleformer.data.encode import OFFSETS

# 2: special-token literals in text are tokenized as text (split_special_tokens); 3: token streams written as
# they are made (raw .bin), a document stored once however many examples read it (input_index)
CACHE_VERSION = 3


class TokenizedSplit(Dataset):
    """One split as flat token arrays + offsets (memory-mapped from the cache) and per-example lists."""

    def __init__(self, arrays: dict[str, np.ndarray], ids: list[str], references: list[list[str]]):
        self.arrays = arrays
        self.ids = ids
        self.references = references
        self.has_prefix = "prefix_ids" in arrays
        # example -> its document's row in input_ids (documents are stored once); identity without the index
        self.input_index = arrays.get("input_index")

    def __len__(self) -> int:
        return len(self.ids)

    def _seq(self, name: str, i: int) -> np.ndarray:
        if name == "input_ids" and self.input_index is not None:
            i = int(self.input_index[i])
        off = self.arrays[OFFSETS[name]]
        return np.asarray(self.arrays[name][off[i]: off[i + 1]])

    def lengths(self, name: str = "input_ids") -> np.ndarray:
        """Tokens of each example's input (``input_ids``), labels or query (``prefix_ids``); empty when absent."""
        off = self.arrays.get(OFFSETS[name])
        if off is None:
            return np.zeros(0, dtype=np.int64)
        n = np.diff(off)
        return n[np.asarray(self.input_index)] if name == "input_ids" and self.input_index is not None else n

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
        "max_input_tokens": input_cap(cfg, role), "max_target_tokens": cfg.max_target_tokens,
        "max_prefix_tokens": cfg.max_prefix_tokens,
        "cap": cfg.max_train_examples if role == "train" else cfg.max_eval_examples,
        "tokenizer": tokenizer_fp,
    }
    key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in cfg.name)
    return Path(cfg.cache_dir) / "tokenized" / f"{safe}-{role}-{key}"


def is_cached(path: Path) -> bool:
    return (path / "meta.json").exists()


def input_cap(cfg: DataConfig, role: str) -> int | None:
    """The tokens a ``role``'s inputs are cut to: ``data.max_input_tokens``, and for training also
    ``data.max_train_input_tokens`` (the lineage trains very long inputs cut and evaluates them whole)."""
    caps = [c for c in (cfg.max_input_tokens, cfg.max_train_input_tokens if role == "train" else None) if c]
    return min(caps) if caps else None


def finish(tmp: Path, arrays: dict[str, np.ndarray], ids: list[str], references: list[list[str]],
           summary: dict[str, Any]) -> None:
    """Complete an entry being built in ``tmp`` (its token streams already there): offsets, index, meta."""
    for name, arr in arrays.items():
        np.save(tmp / f"{name}.npy", arr)
    meta = {"ids": ids, "references": references, "summary": summary}
    (tmp / "meta.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")


def load(path: Path) -> tuple[TokenizedSplit, dict[str, Any]]:
    """The split (arrays memory-mapped) and its summary."""
    meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    arrays = {p.stem: np.load(p, mmap_mode="r") for p in path.glob("*.npy")}
    for p in path.glob("*.bin"):  # an empty stream cannot be memory-mapped
        arrays[p.stem] = np.memmap(p, dtype=np.int32, mode="r") if p.stat().st_size else np.zeros(0, np.int32)
    return TokenizedSplit(arrays, meta["ids"], meta["references"]), meta["summary"]
