"""Summarization data: a source's rows -> examples -> tokenized, cached arrays -> batches.

What lives where:

- ``sources.py``: where rows come from: ``LocalSource`` (a jsonl/json/parquet/csv file, or a folder
  of one file per split), ``SyntheticSource`` (the bundled set) and ``HubSource``
  (`datasets.load_dataset`, behind a fast reachability check). Each has a cheap ``check()`` (files
  exist, header fields present, hub reachable) and ``rows(role)``.
- ``files.py``: reading local files, with errors naming the file, line and field.
- ``examples.py``: the one loop that turns any source's rows into examples, and the reference rules
  (several references per id in evaluation splits, empty and hidden references).
- ``encode.py``: tokenization into flat int32 arrays, truncation keeping the closing special token.
- ``cache.py``: cache keys and the memory-mapped, atomically written tokenized splits.
- ``datamodule.py``: :class:`SummarizationDataModule` (Lightning) and the batch :class:`Collator`.
- ``synthetic.py``: the deterministic synthetic long-document generator.
- ``errors.py``: :class:`DataError`, :class:`HubUnavailableError`.

Errors come first: every uncached split is read and validated before any is tokenized, so a bad file
fails in seconds rather than after an hour of tokenization. A second run reads the cache without
touching the source.

The data module (and with it Lightning and torch) is imported on first use, so light importers such
as the tokenizer (which trains on ``synthetic``'s text) stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scaleformer.data.errors import DataError, HubUnavailableError

if TYPE_CHECKING:
    from scaleformer.data.datamodule import Collator, SummarizationDataModule

__all__ = ["Collator", "DataError", "HubUnavailableError", "SummarizationDataModule"]


def __getattr__(name: str) -> Any:
    if name in ("Collator", "SummarizationDataModule"):
        # deferred: the datamodule loads Lightning; `scaleformer score` and the metrics import this package
        from scaleformer.data import datamodule

        return getattr(datamodule, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
