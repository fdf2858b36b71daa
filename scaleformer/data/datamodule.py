"""The LightningDataModule: validate every uncached split, then tokenize into the cache, then batch."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, SequentialSampler

from scaleformer.config import DataConfig
from scaleformer.data import cache
from scaleformer.data.encode import encode_to
from scaleformer.data.errors import DataError
from scaleformer.data.examples import hidden_references, iter_examples, iter_rows
from scaleformer.data.sampler import LengthSortedSampler, ResumableSampler
from scaleformer.data.sources import ROLES, check_size, configured_roles, make_source, split_name
from scaleformer.io import atomic_dir
from scaleformer.model.tokenizer import special_token_ids, tokenizer_fingerprint

log = logging.getLogger(__name__)

STAGE_ROLES = {"fit": ("train", "validation"), "validate": ("validation",), "test": ("test",),
               "predict": ("test",)}


@dataclass
class Collator:
    """Right-pad a list of items into tensors (a class, not a closure, so workers can pickle it)."""

    pad_id: int
    with_prefix: bool = False

    @staticmethod
    def _pad(seqs: list[np.ndarray], value: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = max((len(s) for s in seqs), default=0)
        out = torch.full((len(seqs), n), value, dtype=torch.long)
        mask = torch.zeros((len(seqs), n), dtype=torch.long)
        for i, s in enumerate(seqs):
            out[i, : len(s)] = torch.from_numpy(np.asarray(s, dtype=np.int64))
            mask[i, : len(s)] = 1
        return out, mask

    def __call__(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        input_ids, attention_mask = self._pad([b["input_ids"] for b in batch], self.pad_id)
        labels, _ = self._pad([b["labels"] for b in batch], -100)
        out: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels,
                               "ids": [b["id"] for b in batch], "references": [b["references"] for b in batch]}
        if self.with_prefix:
            out["prefix_ids"], out["prefix_mask"] = self._pad([b["prefix_ids"] for b in batch], self.pad_id)
        return out


class SummarizationDataModule(pl.LightningDataModule):
    """Loads, validates, tokenizes (cached) and batches one summarization dataset.

    Splits are addressed by role ("train", "validation", "test"); `cfg.splits.<role>` gives the
    split's name in the source (null: that split is not used).
    """

    def __init__(self, cfg: DataConfig, tokenizer: Any, *, seed: int = 42) -> None:
        super().__init__()
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.seed = seed
        self.prefix_special, self.suffix_special = special_token_ids(tokenizer)
        pad = tokenizer.pad_token_id
        if pad is None:
            raise DataError(f"tokenizer {tokenizer.name_or_path!r} has no pad token; set one before "
                            "building the data module")
        self.pad_id = int(pad)
        # Documents per evaluation batch: data.eval_batch_size, or (null) 1 until the run sizes it from the
        # memory model (scaleformer.runs.memory.resolve_eval_batch).
        self.eval_batch_size: int = cfg.eval_batch_size or 1
        # Training documents per micro-batch, and per length group (an optimizer step's, with data.bucket): the
        # configured batch until the run sizes them (scaleformer.runs.memory.resolve_micro_batch).
        self.train_batch: int = cfg.batch_size
        self.train_group: int = cfg.batch_size
        n_special = len(self.prefix_special) + len(self.suffix_special)
        for key, value in (("data.max_input_tokens", cfg.max_input_tokens),
                           ("data.max_target_tokens", cfg.max_target_tokens)):
            if value is not None and value <= n_special:
                raise DataError(f"{key}={value}: must be > {n_special}, the special tokens "
                                f"{list(self.prefix_special)} + {list(self.suffix_special)} the tokenizer adds")
        self.source = make_source(cfg)
        self.datasets: dict[str, cache.TokenizedSplit] = {}
        self._summary: dict[str, dict[str, Any]] = {}
        self._fingerprint: str | None = None
        self._checked = False

    def roles(self) -> list[str]:
        """The configured roles (splits whose name is not null)."""
        return configured_roles(self.cfg)

    def _cache_path(self, role: str) -> Path:
        if self._fingerprint is None:
            self._fingerprint = tokenizer_fingerprint(self.tokenizer)
        return cache.entry_path(self.cfg, role, split_name(self.cfg, role), self.source.identity(role),
                                self._fingerprint)

    def _scan(self, role: str) -> bool:
        """Check every row of one role (fields, types, ids sharing one document), keeping nothing of their
        text; returns whether the role's references are hidden (an evaluation split with documents and no
        reference at all, as SCROLLS' test splits)."""
        rows = iter_rows(self.source.rows(role), self.cfg)
        return role != "train" and hidden_references(rows)

    def _write(self, role: str, path: Path, hidden: bool) -> None:
        """Read one role again and tokenize it as it streams into a new cache entry (the example caps apply
        while reading; memory stays bounded whatever the split's size)."""
        raw = self.source.rows(role)
        train = role == "train"
        cap = self.cfg.max_train_examples if train else self.cfg.max_eval_examples
        stats: dict[str, Any] = {}
        examples = iter_examples(iter_rows(raw, self.cfg), train=train, cap=cap, hidden=hidden, stats=stats)
        ids: list[str] = []
        references: list[list[str]] = []

        def kept() -> Any:
            for e in examples:
                ids.append(e.id)
                references.append(e.references)  # an evaluation example's list grows as its later rows come
                yield e

        with atomic_dir(path, replace=False) as tmp:  # another process (a DDP rank) may finish it first
            arrays, lengths = encode_to(tmp, kept(), self.tokenizer, max_input_tokens=cache.input_cap(self.cfg, role),
                                        max_target_tokens=self.cfg.max_target_tokens,
                                        suffix_special=self.suffix_special, with_prefix=self.cfg.has_query,
                                        max_prefix_tokens=self.cfg.max_prefix_tokens)
            stats.update(source=raw.where, split=split_name(self.cfg, role), **lengths)
            if train and not ids:
                raise DataError(f"{raw.where}: the train split has no example with a non-empty input and target "
                                f"({stats['n_rows']} rows, {stats['n_skipped_empty']} skipped as empty)")
            check_size(self.cfg, role, stats)
            cache.finish(tmp, arrays, ids, references, stats)

    def _ensure(self, roles: Sequence[str]) -> None:
        """Set up `roles`: check every uncached one first, then tokenize each into the cache as it streams."""
        todo = [r for r in roles if r not in self.datasets]
        if not todo:
            return
        uncached = [r for r in todo if not cache.is_cached(self._cache_path(r))]
        if uncached and not self._checked:  # cache hits need no source (a hub set tokenized once works offline)
            self.source.check()
            self._checked = True
        hidden = {role: self._scan(role) for role in uncached}  # every row checked before any tokenization
        for role in todo:
            path = self._cache_path(role)
            if role in hidden:
                t0 = time.perf_counter()
                self._write(role, path, hidden[role])
                log.info("tokenized %s split %r in %.1fs -> %s", self.cfg.name, role, time.perf_counter() - t0, path)
            else:
                log.info("loaded tokenized %s split %r from cache %s", self.cfg.name, role, path)
            self.datasets[role], self._summary[role] = cache.load(path)
            s = self._summary[role]
            if s["n_examples"] == 0:
                log.warning("%s split %r has no usable examples (%d rows, %d skipped as empty)",
                            self.cfg.name, role, s["n_rows"], s["n_skipped_empty"])

    # ---- Lightning hooks ---------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Generate/download, validate and tokenize every configured split into the cache.

        Lightning runs this on one process per node; the other ranks' setup() then read the cache.
        """
        self._ensure(self.roles())

    def setup(self, stage: str | None = None) -> None:
        """Load the splits `stage` needs (all configured ones for None) from the cache, building it if needed."""
        wanted = STAGE_ROLES.get(stage, ROLES) if stage else ROLES
        self._ensure([r for r in wanted if r in self.roles()])

    def prefix_lengths(self, split: str) -> np.ndarray:
        """Tokens of each example's query prefix in a loaded split (empty without prefixes)."""
        return self.datasets[split].lengths("prefix_ids")

    def longest(self, split: str, field: str = "input") -> int:
        """Tokens of the longest input (``field="input"``) or target (``"label"``) of a loaded split."""
        return int(self.datasets[split].lengths("labels" if field == "label" else "input_ids").max(initial=0))

    def longest_prefix(self) -> int:
        """Tokens of the longest query prefix in the loaded splits (0 without prefixes): for start-up checks."""
        return max((int(self.prefix_lengths(s).max(initial=0)) for s in self.datasets), default=0)

    def has_split(self, split: str) -> bool:
        """Whether `split` is configured and (once set up) has at least one example."""
        if split not in self.roles():
            return False
        return split not in self._summary or self._summary[split]["n_examples"] > 0

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per split: counts (rows, examples, ids, references, skipped empty), token lengths, truncation."""
        return {r: dict(self._summary[r]) for r in ROLES if r in self._summary}

    def dataloader(self, split: str, first: int | None = None) -> DataLoader:
        """Loader for one role; train is shuffled from the seed (resumably), evaluation batches
        :attr:`eval_batch_size` documents longest first (one at a time: file order); ``first``: evaluate
        only the split's first documents (validation during training)."""
        split_name(self.cfg, split)
        self._ensure([split])
        train = split == "train"
        if self.cfg.num_workers > 0:
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # quiet the fork warning
        size = self.train_batch if train else self.eval_batch_size
        if train:
            group = max(self.train_group, size)  # documents grouped by length: an optimizer step's (bucketing)
            lengths = self.datasets[split].lengths().tolist() if self.cfg.bucket and group > 1 else None
            sampler: Any = ResumableSampler(len(self.datasets[split]), self.seed, lengths, group, batch_size=size)
        else:  # several documents a batch: of similar lengths, longest first (rows go back in file order by id)
            lengths = self.datasets[split].lengths().tolist() or [0] * len(self.datasets[split])
            lengths = lengths if first is None else lengths[:first]  # ``first``: only the split's first documents
            sampler = LengthSortedSampler(lengths) if size > 1 else None if first is None else SequentialSampler(lengths)
        return DataLoader(
            self.datasets[split],
            batch_size=size,
            sampler=sampler,
            # Workers' base seeds come from this generator, not the global RNG that dropout uses.
            generator=torch.Generator() if train else None,
            collate_fn=Collator(self.pad_id, with_prefix=self.cfg.has_query),
            num_workers=self.cfg.num_workers,
            persistent_workers=self.cfg.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self.dataloader("train")

    def val_dataloader(self) -> DataLoader | list:
        return self.dataloader("validation") if self.cfg.splits.validation is not None else []

    def test_dataloader(self) -> DataLoader | list:
        return self.dataloader("test") if self.cfg.splits.test is not None else []
