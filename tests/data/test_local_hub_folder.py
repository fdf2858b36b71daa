"""A local dataset folder read through the hub loader (``data.hub_id=<folder>``, how a mirror or a user's own copy
is read): a rewritten file is read anew. datasets keys a folder whose dataset card declares ``configs`` by the card
alone, so without the folder's own fingerprint a second mirror, or an edited copy, would load the first's rows."""

from __future__ import annotations

import shutil
from pathlib import Path

from scaleformer.config.data import DataConfig
from scaleformer.data.mirrors import write_cohan
from scaleformer.data.sources import HubSource, local_fingerprint


def _source(folder: Path, cache: Path) -> HubSource:
    return HubSource(DataConfig(name="arxiv", source="hub", hub_id=str(folder), hub_config="document",
                                input_field="article", target_field="abstract", id_field=None, cache_dir=str(cache)))


def test_a_rewritten_local_folder_is_read_anew_and_changes_the_identity(tmp_path):
    folder, cache = tmp_path / "arxiv-summarization", tmp_path / "cache"
    seen = []
    for n in (2, 3):
        shutil.rmtree(folder, ignore_errors=True)
        write_cohan(folder, {"train": n, "validation": 1, "test": 1}, 0.02)
        source = _source(folder, cache)
        seen.append((len(list(source.rows("train").records)), source.identity("train")["files"]))
    assert [n for n, _ in seen] == [2, 3]
    assert seen[0][1] != seen[1][1]
    assert local_fingerprint("ccdv/arxiv-summarization") is None  # a hub id: the revision says which
