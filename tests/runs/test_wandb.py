"""logger=wandb, offline: the run's files hold its config, the predictions tables (at each validation, capped, and
at the final evaluation, every document), the final metrics in the run's summary, and the exported model as an
artifact on request. The tables are JSON files in the run's folder; the summary, the config and the artifact are
records of wandb's transaction log (``run-*.wandb``: the LevelDB log format, read by :func:`records`)."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conftest import compose

from scaleformer.runs.run import run

BLOCK = 32768  # the log's block; records carry a 7-byte header (crc, length, type) and never straddle one


def records(path: Path) -> Iterator[bytes]:
    """The records of a ``.wandb`` file: after its 7-byte file header, LevelDB log records (types 1 full,
    2 first, 3 middle, 4 last; a block's tail under 7 bytes is padding)."""
    b, off, parts = path.read_bytes(), 7, b""
    while off + 7 <= len(b):
        left = BLOCK - off % BLOCK
        if left < 7:
            off += left
            continue
        _, n, kind = struct.unpack("<IHB", b[off:off + 7])
        if n == 0 and kind == 0:
            off += left
            continue
        if off + 7 + n > len(b):
            return  # a record still being written
        data, off = b[off + 7:off + 7 + n], off + 7 + n
        parts = data if kind in (1, 2) else parts + data
        if kind in (1, 4):
            yield parts


def closed_log(path: Path, wait_s: float = 60.0) -> list[Any]:
    """The log's records once its ``exit`` record is on disk: wandb's service writes the log in its own process
    and, on a loaded machine, can still be writing the last records (the model artifact among them) when
    ``finish()`` has returned."""
    from wandb.proto import wandb_internal_pb2 as pb

    deadline = time.monotonic() + wait_s
    while True:
        recs = []
        for data in records(path):
            r = pb.Record()
            r.ParseFromString(data)
            recs.append(r)
        if any(r.WhichOneof("record_type") == "exit" for r in recs) or time.monotonic() > deadline:
            return recs
        time.sleep(0.2)


def test_an_offline_wandb_run_holds_the_tables_the_summary_and_the_model(tmp_path):
    out = run(compose([f"paths.root={tmp_path}/results", f"paths.cache={tmp_path}/cache", "logger=wandb",
                       "method=truncation", "data.synthetic_docs.train=4", "data.synthetic_docs.validation=3",
                       "data.synthetic_docs.test=2", "data.synthetic_words=150", "trainer.max_steps=4",
                       "trainer.val_check_interval=2", "trainer.limit_val_batches=3", "trainer.enable_progress_bar=false",
                       "generation.num_beams=1", "generation.max_new_tokens=8", "metrics.bertscore.enabled=false",
                       "logger.wandb.prediction_rows=2", "logger.wandb.log_model=true"]))
    (folder,) = (tmp_path / "results" / "runs" / out["run_id"] / "logs" / "wandb").glob("offline-run-*")
    tables = folder / "files" / "media" / "table"
    val = [json.loads(p.read_text()) for p in sorted((tables / "val").glob("predictions_*.table.json"))]
    assert len(val) == 2 and all(len(t["data"]) == 2 for t in val)  # two validations, capped at 2 rows each
    assert val[0]["columns"] == ["id", "prediction", "reference", "rougeL"]
    final = {s: json.loads(next((tables / s).glob("predictions_*.table.json")).read_text()) for s in ("validation", "test")}
    assert [len(final[s]["data"]) for s in ("validation", "test")] == [3, 2]  # every document of the evaluation
    summary, config, artifacts, kinds = {}, [], [], []
    for r in closed_log(next(folder.glob("run-*.wandb"))):
        kind = r.WhichOneof("record_type")
        kinds.append(kind)
        if kind == "summary":
            summary.update({u.key: json.loads(u.value_json) for u in r.summary.update if u.key})
        elif kind == "config":
            config += [u.value_json for u in r.config.update]
        elif kind == "artifact":
            artifacts.append((r.artifact.name, r.artifact.type))
    assert summary["test/rougeL"] == out["splits"]["test"]["rougeL"]
    assert summary["validation/n_examples"] == 3
    assert any('"truncation"' in c and "max_new_tokens" in c for c in config)  # the resolved config
    assert (f"model-{out['run_id']}", "model") in artifacts, (artifacts, kinds[-6:])  # the exported model, logged
