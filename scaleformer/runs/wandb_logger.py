"""wandb that shows the work: Lightning's ``WandbLogger`` plus what a summarization run's page needs.

``logger=wandb`` (offline by default) logs the resolved config and every metric as Lightning's logger does,
and also, as transformers' and Lightning's own integrations give users of wandb:

- a predictions table (id, prediction, reference, the row's ROUGE-L) at each validation during fit, its
  first ``prediction_rows`` documents, and at the final evaluation of each split, every document;
- the final metrics in the run's summary (``test/rougeL`` ...), where wandb's run table shows them;
- the exported model as an artifact (type ``model``) when ``log_model`` is true. Lightning's ``log_model``
  would upload every checkpoint (optimiser states included) instead: it is not passed on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import WandbLogger as _LightningWandb

from scaleformer.errors import ConfigError
from scaleformer.io import read_jsonl

COLUMNS = ["id", "prediction", "reference", "rougeL"]


class WandbLogger(_LightningWandb):
    """Lightning's WandbLogger with predictions tables, the final summary and the exported model."""

    def __init__(self, *args: Any, prediction_rows: int = 20, log_model: bool = False, **kwargs: Any) -> None:
        if not isinstance(prediction_rows, int) or isinstance(prediction_rows, bool) or prediction_rows < 0:
            raise ConfigError(f"logger.wandb.prediction_rows={prediction_rows!r}: must be an integer >= 0 (0: no table)")
        super().__init__(*args, log_model=False, **kwargs)
        self.prediction_rows = prediction_rows
        self.export_model = bool(log_model)

    def log_predictions(self, key: str, rows: list[dict[str, Any]], step: int | None = None,
                        limit: int | None = None) -> None:
        """A table of ``rows`` (id, prediction, reference(s), rougeL) under ``key``; ``limit``: its first rows."""
        import wandb

        rows = rows[:limit] if limit is not None else rows
        if not rows:
            return
        table = wandb.Table(columns=COLUMNS)
        for r in rows:
            ref = r.get("reference")
            table.add_data(str(r.get("id")), r.get("prediction", ""), "\n---\n".join(ref) if isinstance(ref, list)
                           else str(ref or ""), r.get("rougeL"))
        self.experiment.log({key: table}, **({"step": step} if step is not None else {}))

    def log_final(self, split: str, metrics: dict[str, Any], out_dir: Path) -> None:
        """The final evaluation of ``split``: its numbers in the run's summary, its predictions as a table."""
        for k, v in metrics.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                self.experiment.summary[f"{split}/{k}"] = v
        scores = _by_id(out_dir / f"scores_{split}.jsonl")
        rows = [{**r, "rougeL": scores.get(str(r["id"]), {}).get("rougeL")}
                for r in _read(out_dir / f"predictions_{split}.jsonl")]
        self.log_predictions(f"{split}/predictions", rows)

    def log_export(self, folder: Path, name: str) -> None:
        """The exported model folder as a ``model`` artifact (``log_model``)."""
        if not self.export_model or not Path(folder).is_dir():
            return
        import wandb

        art = wandb.Artifact(name=f"model-{name}", type="model")
        art.add_dir(str(folder))
        self.experiment.log_artifact(art)


def _read(path: Path) -> list[dict[str, Any]]:
    return read_jsonl(path) if path.is_file() else []


def _by_id(path: Path) -> dict[str, dict[str, Any]]:
    return {str(r.get("id")): r for r in _read(path)}


def ours(loggers: list[Any]) -> list[WandbLogger]:
    """The run's loggers that take tables (this project's WandbLogger)."""
    return [lg for lg in loggers if isinstance(lg, WandbLogger)]


def close(loggers: list[Any], model_dir: Path | None, run_id: str) -> None:
    """At a run's end: the exported model as an artifact (``log_model``; ``model_dir`` None when nothing was
    exported), then the run's page finished, so a grid's next run in this process starts its own."""
    for lg in ours(loggers):
        if model_dir is not None:
            lg.log_export(model_dir, run_id)
        lg.experiment.finish()
