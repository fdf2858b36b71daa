"""What a run is, and where its files go.

Two identities, so that a trained model is reused instead of retrained:

- the **training identity** (backbone, with a shipped reader's recipe fingerprint, data, method,
  optimisation, seed, and the trainer settings that change the numbers, ``trainer.validation`` among them
  when it is not the paper's protocol: it changes what validation measures) names the run folder and so
  its checkpoints. The training length is not part of it: raising ``trainer.max_steps`` continues the
  same run from its newest checkpoint, and the checkpoints carry their step;
- the **evaluation identity** (generation, metrics, the evaluated splits, a method's evaluation-only
  keys) plus the step of the weights evaluated names one evaluation inside the run folder, so a new
  generation or metrics setting re-scores the trained checkpoint without retraining.

Neither contains where or how loudly a run happens (paths, loggers, callbacks, devices, progress
bars, micro-batch sizes)::

    <paths.runs>/<data>-<method option>-<backbone>-<training hash>/
        config.yaml  train.log  checkpoints/  logs/  model/
        eval/step_<N>-<evaluation hash>/  config.yaml  metrics.json  predictions_<split>.jsonl  scores_<split>.jsonl
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf, open_dict

from scaleformer.config import (
    BackboneConfig,
    DataConfig,
    GenerationConfig,
    OptimConfig,
    PathsConfig,
    TrainerConfig,
    runtime_fields,
)
from scaleformer.errors import ConfigError
from scaleformer.model.readers import recipe_fingerprint

if TYPE_CHECKING:
    from scaleformer.runs.run_config import RunConfig

TRAINING_GROUPS = ("backbone", "data", "method", "optim", "trainer", "seed")
# Settings added after runs existed: at their default they stay out of the identity, so the folders of
# earlier runs keep their names (and resume) until a run sets them.
# trainer.validation: what validation during fit measures (and so which checkpoint a monitor keeps); the
# paper's protocol stays out, another joins, with its token cap when it is "greedy".
ADDED_LATER: dict[str, dict[str, Any]] = {"backbone": {"config_file": None},
                                          "data": {"synthetic_split_seeds": {}, "synthetic_words_spread": 0.0,
                                                   "max_train_input_tokens": None, "max_prefix_tokens": None,
                                                   "bucket": False, "micro_batch_size": None, "corpus": None,
                                                   "corpus_files": None, "corpus_field": "text",
                                                   "corpus_revision": None},
                                          "optim": {"warmup_ratio": None, "schedule": "linear"},
                                          # the span methods' budget and MASFormer's placement
                                          "method": {"cost": None, "placement": "bottom"},
                                          "trainer": {"validation": TrainerConfig.validation}}


def not_training() -> dict[str, tuple[str, ...]]:
    """Keys of the training groups that change neither the trained weights nor their name: the schema
    fields marked ``runtime`` (:func:`scaleformer.config.runtime`), and the Lightning arguments the
    trainer group passes through unnamed (``TrainerConfig.RUNTIME_EXTRA``)."""
    return {"backbone": runtime_fields(BackboneConfig), "optim": runtime_fields(OptimConfig),
            "data": runtime_fields(DataConfig),
            "trainer": runtime_fields(TrainerConfig) + TrainerConfig.RUNTIME_EXTRA}


# Where a run's name may not lead: path separators, parent references, hidden names.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]{0,199}$")


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def _container(raw: DictConfig | dict[str, Any]) -> dict[str, Any]:
    return OmegaConf.to_container(raw, resolve=True) if isinstance(raw, DictConfig) else raw


def training_identity(rc: RunConfig) -> dict[str, Any]:
    """The settings that determine the trained weights (whatever the training length)."""
    d = _container(rc.raw)
    ident = {g: d.get(g) for g in TRAINING_GROUPS}
    for group, keys in not_training().items():
        ident[group] = {k: v for k, v in (ident[group] or {}).items() if k not in keys}
    for group, defaults in ADDED_LATER.items():
        ident[group] = {k: v for k, v in (ident[group] or {}).items() if k not in defaults or v != defaults[k]}
    if ident["trainer"].get("validation") != "greedy":  # the cap of greedy validation, read by it alone
        ident["trainer"].pop("validation_max_new_tokens", None)
    method_cfg = type(rc.method)
    drop = set(method_cfg.EVAL_KEYS) | set(method_cfg.RUNTIME_KEYS)
    ident["method"] = {k: v for k, v in ident["method"].items() if k not in drop}
    weights = recipe_fingerprint((ident["backbone"] or {}).get("pretrained"))
    if weights is not None:  # only when known, so runs from a hub or plain folder keep their names
        ident["backbone"] = {**ident["backbone"], "weights": weights}
    return ident


def evaluation_identity(rc: RunConfig) -> dict[str, Any]:
    """The settings that determine predictions and scores given the weights."""
    d = _container(rc.raw)
    return {
        # Options that change the speed, not the tokens (tested): out, so evaluations keep their folders.
        "generation": {k: v for k, v in (d.get("generation") or {}).items() if k not in runtime_fields(GenerationConfig)},
        "metrics": _metrics_identity(d.get("metrics")),
        "splits": list(rc.trainer.eval_splits),
        # A document's tokens do not depend on the batch it is decoded in (tested), so the batch size is
        # recorded as 1, the value every evaluation had before batching: their folders keep their names.
        "data": {"max_eval_examples": d["data"].get("max_eval_examples"), "eval_batch_size": 1},
        "method": {k: d["method"].get(k) for k in type(rc.method).EVAL_KEYS},
        # the weights evaluated: the best checkpoint joins the identity, the last (every earlier run's) stays out
        **({"select": rc.trainer.select} if rc.trainer.select != TrainerConfig.select else {}),
    }


def _metrics_identity(metrics: dict[str, Any] | None) -> dict[str, Any] | None:
    """The metrics settings that change scores: a disabled BERTScore's model changes none, so it is recorded at
    the default it had before the default became ``offline`` (evaluations made then keep their names)."""
    if metrics is not None:  # perplexity's settings, added later: at their defaults out (folders keep their names)
        metrics = {k: v for k, v in metrics.items() if k not in METRICS_ADDED_LATER or v != METRICS_ADDED_LATER[k]}
    bs = (metrics or {}).get("bertscore") or {}
    if metrics is None or bs.get("enabled", True) or bs.get("model_type") != "offline":
        return metrics
    return {**metrics, "bertscore": {**bs, "model_type": "auto"}}


METRICS_ADDED_LATER = {"perplexity_bucket": 1024, "dependency_block": 1024}


def training_hash(rc: RunConfig) -> str:
    return _digest(rc.training_identity if rc.training_identity is not None else training_identity(rc))


def evaluation_hash(rc: RunConfig) -> str:
    return _digest(evaluation_identity(rc))


def check_name(key: str, value: str) -> str:
    """A name that becomes a path component: letters, digits and ``._+=-``, never leaving its folder."""
    if not _SAFE_NAME.match(value) or value in (".", ".."):
        raise ConfigError(f"{key}={value!r}: must be 1-200 characters of letters, digits and ._+=- "
                          "starting with a letter or digit (it names a folder)")
    return value


def run_id(rc: RunConfig) -> str:
    """The run folder's name: ``run_name``, or data-method option-backbone-training hash."""
    if rc.run_name:
        return check_name("run_name", rc.run_name)
    parts = [("data.name", rc.data.name), ("method", rc.method_option), ("backbone.name", rc.backbone.name)]
    for key, value in parts:
        check_name(key, str(value))
    return "-".join([*(str(v) for _, v in parts), training_hash(rc)])


def fill_run_paths(rc: RunConfig, cfg: DictConfig) -> RunConfig:
    """Set ``paths.run_id``/``paths.run_dir`` and re-resolve what interpolates them (loggers, callbacks);
    the training identity is computed here, once (the paths it fills are not part of it)."""
    rc.training_identity = training_identity(rc)
    rid = run_id(rc)
    run_dir = rc.paths.run_dir or str(Path(rc.paths.runs) / rid)
    filled = cfg.copy()
    with open_dict(filled):
        filled.paths.run_id = rid
        filled.paths.run_dir = run_dir
    resolved = OmegaConf.to_container(filled, resolve=True)
    rc.paths = PathsConfig(**resolved["paths"])
    rc.logger = {k: v for k, v in (resolved.get("logger") or {}).items()}
    rc.callbacks = {k: v for k, v in (resolved.get("callbacks") or {}).items()}
    rc.raw = OmegaConf.create(resolved)
    return rc


def run_dir(rc: RunConfig) -> Path:
    return Path(str(rc.paths.run_dir))


# A run folder belongs to one training identity: recorded here on the first run, checked on every later one.
OWNER_FILE = "identity.json"


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def differing_keys(theirs: dict[str, Any], ours: dict[str, Any], limit: int = 6) -> list[str]:
    """``key: theirs -> ours`` for each setting that differs between two training identities."""
    a, b = _flat(theirs), _flat(ours)
    keys = [k for k in sorted({*a, *b}) if a.get(k) != b.get(k)]
    shown = [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys[:limit]]
    return shown + ([f"and {len(keys) - limit} more"] if len(keys) > limit else [])


def read_owner(run_dir: Path) -> dict[str, Any] | None:
    """The training identity recorded in a run folder (None for a new folder or an unreadable record)."""
    try:
        owner = json.loads((run_dir / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) and isinstance(owner.get("training_hash"), str) else None


def owner_conflict(run_dir: Path, ours_hash: str, ours: dict[str, Any], theirs_hash: str | None,
                   theirs: dict[str, Any] | None) -> str:
    """The one-line refusal when a run would continue another training identity's run folder."""
    diff = differing_keys(theirs, ours) if theirs is not None else []
    what = f" (differs in {'; '.join(diff)})" if diff else ""
    return (f"run folder {run_dir} belongs to training identity {theirs_hash}, this config's is {ours_hash}{what}: "
            "it would continue or evaluate the other training's weights. Use another run_name, or start this "
            "folder afresh with trainer.ckpt_path=null (its checkpoints are moved aside, not deleted), or "
            "fine-tune from them with trainer.ckpt_path=<checkpoint file>")
