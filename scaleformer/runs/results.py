"""``metrics.json``: one evaluation's results, as a typed schema its writer and every reader share.

The run writes :class:`Results` (``eval/step_<N>-<evaluation hash>/metrics.json``); tables, the
grid runner, ``skip_existing`` and the scripts read it back with :meth:`Results.read`, so a field is
named in one place. ``splits`` maps a split to its scores (``rouge1`` ... ``n_examples``, as
:func:`scaleformer.metrics.compute_metrics` returns them, plus generation timings).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from scaleformer.errors import redact_all
from scaleformer.io import atomic_write_json

FILE = "metrics.json"


@dataclass
class Results:
    # Every field has a default: a reader takes what a file has (older files, hand-made ones in tests)
    # and :meth:`read` requires only ``splits``.
    run_id: str = ""
    training_hash: str = ""
    evaluation_hash: str = ""
    step: int = 0
    method: dict[str, Any] = field(default_factory=dict)  # option, class, parameters (and what it measured)
    backbone: dict[str, Any] = field(default_factory=dict)  # name, pretrained, arch
    data: dict[str, Any] = field(default_factory=dict)  # name, summary of the splits
    splits: dict[str, dict[str, Any]] = field(default_factory=dict)  # split -> scores
    commit: str = "unknown"
    changes: dict[str, Any] | None = None  # a '-dirty' commit's changed files and diff hash
    tag: str | None = None
    device: str = "cpu"
    machine: str = ""  # the device's model name, cores, torch threads and CPU heap (runtime.machine)
    world_size: int = 1
    seed: int = 0
    train_steps: int = 0
    train_time_s: float = 0.0
    wall_time_s: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)
    patches: dict[str, str] = field(default_factory=dict)  # transformers patches: "on" or "off: why"
    cost: dict[str, Any] = field(default_factory=dict)  # trainer.measure_cost: per-step time and memory
    # validation during fit: its mode, whether it is the paper's protocol, what it logs; and the documents
    # decoded together at evaluation
    validation: dict[str, Any] = field(default_factory=dict)
    eval_batch_size: int | None = None
    # data.bucket: documents per training micro-batch, the accumulation, an optimizer step's documents, and
    # who chose (data.micro_batch_size, the memory model, the continued run, or data.batch_size where the
    # memory is unknown)
    micro_batch: dict[str, Any] = field(default_factory=dict)
    # which weights were evaluated (scaleformer.runs.selection): "last", or "best" with its step, validation
    # score and every validation during fit; ``step`` above is the evaluated weights', ``train_steps`` the last
    selection: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, folder: Path) -> Path:
        return atomic_write_json(Path(folder) / FILE, redact_all(self.to_dict()))

    def score(self, split: str, metric: str) -> Any:
        """One number of one split (None when the split or the metric is absent)."""
        return (self.splits.get(split) or {}).get(metric)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Results:
        """A results record; keys this version does not know are ignored, missing ones take defaults."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def read(cls, folder: Path) -> Results | None:
        """The results in ``folder`` (an evaluation folder), or None when missing or unreadable."""
        try:
            d = json.loads((Path(folder) / FILE).read_text(encoding="utf-8"))
            return cls.from_dict(d) if isinstance(d, dict) and "splits" in d else None
        except (OSError, ValueError, TypeError):
            return None


def leaderboard_file(leaderboard: str, split: str, rows: list[dict[str, Any]], out_dir: Path) -> dict[str, Any]:
    """A split whose references are hidden, written as its leaderboard takes it (``data.leaderboard``:
    ``scrolls:<task>``, SCROLLS' ``{id: prediction}``, tau-nlp/scrolls evaluator/README.md "Predictions Format";
    ``scripts/scrolls_submission.py`` joins the seven tasks into the leaderboard's CSV). What tables read."""
    name, task = leaderboard.split(":", 1)
    path = atomic_write_json(Path(out_dir) / f"{name}_{task}_{split}.json", {r["id"]: r["prediction"] for r in rows})
    return {"name": name, "task": task, "file": path.name, "n_predictions": len(rows)}
