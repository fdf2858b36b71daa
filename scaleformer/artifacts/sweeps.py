"""Multiruns where one bad cell fails alone: its error is recorded and the sweep goes on.

Each failed job writes ``failed.json`` (the overrides and the one-line error) into its Hydra job
folder (``<paths.root>/sweeps/<time>/<job>/``) and, when the run got that far, into its run folder.
At the end of the sweep :class:`FailedCells` lists the failed cells and exits non-zero, so a
shell, a Makefile or ``reproduce.py`` sees the failure without losing the cells that succeeded.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from scaleformer.errors import redact_all
from scaleformer.io import atomic_write_json

log = logging.getLogger("scaleformer")


def record_job_failure(error: BaseException) -> None:
    """Write this multirun job's ``failed.json`` into its Hydra job folder."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    atomic_write_json(Path(hc.runtime.output_dir) / "failed.json", redact_all({
        "job": hc.job.num, "overrides": list(hc.overrides.task), "error": first,
        "time": time.strftime("%Y-%m-%d %H:%M:%S")}))


class FailedCells(Callback):
    """Hydra callback: after a multirun, name every failed cell and exit with status 1."""

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        failed = sorted(Path(str(config.hydra.sweep.dir)).glob("*/failed.json"))
        if not failed:
            return
        lines = []
        for f in failed:
            rec = json.loads(f.read_text(encoding="utf-8"))
            lines.append(f"  job {rec['job']} ({' '.join(rec['overrides'])}): {rec['error']}")
        print(f"{len(failed)} cell(s) of the sweep failed (the others finished):\n" + "\n".join(lines), flush=True)
        raise SystemExit(1)
