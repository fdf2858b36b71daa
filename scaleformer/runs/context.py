"""The typed config of one run and its context: what a run computes once and every step reads.

:func:`to_config` validates every group (types, unknown keys, ranges; the method against its own
dataclass) and fills the run paths. :class:`RunContext` holds the result with the run's identities
and folders, computed once at start-up: the training and evaluation hashes
(:mod:`scaleformer.runs.identity`), the run folder and the checkpoint folder (the folder of the
checkpoint callback, found by its class).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from scaleformer.config import Config, GenerationConfig, TrainerConfig
from scaleformer.errors import ConfigError, check
from scaleformer.export.folder import selection_kind
from scaleformer.methods import method_config
from scaleformer.resources import package_commit
from scaleformer.runs import identity, runtime
from scaleformer.runs.cost_schedule import schedule_steps
from scaleformer.runs.run_config import RunConfig
from scaleformer.runs.targets import check_paths, check_targets


def describe_method(rc: RunConfig, method: Any) -> dict[str, Any]:
    """The option the user chose, the class behind it and its parameters (as metrics.json records them)."""
    return {"option": rc.method_option, "class": type(method).__name__, **method.describe()}


def _key_hint(e: Exception) -> str:
    """The key an OmegaConf error names, as a suffix of its one line."""
    key = getattr(e, "full_key", None)
    return f" (key: {key})" if key else ""


def trainer_config(raw: DictConfig | dict[str, Any]) -> TrainerConfig:
    """Type the keys :class:`TrainerConfig` names; check the others are ``lightning.Trainer`` arguments."""
    import inspect

    from lightning.pytorch import Trainer

    raw = OmegaConf.to_container(raw, resolve=True) if isinstance(raw, DictConfig) else dict(raw)
    known = {f.name for f in fields(TrainerConfig)} - {"extra"}
    extra = {k: v for k, v in raw.items() if k not in known}
    accepted = set(inspect.signature(Trainer.__init__).parameters) - {"self"}
    ours = {"logger", "callbacks", "enable_checkpointing", "default_root_dir"}  # built by the run itself
    for k in extra:
        check(k in accepted and k not in ours, f"trainer.{k}", extra[k],
              "is not an argument of lightning.pytorch.Trainer" if k not in accepted else
              "is set by the run (use the logger/callbacks groups and paths.*)")
    schema = OmegaConf.structured(TrainerConfig)
    try:
        merged = OmegaConf.merge(schema, {k: v for k, v in raw.items() if k in known})
    except Exception as e:
        raise ConfigError(f"trainer: {str(e).splitlines()[0]}{_key_hint(e)}") from None
    obj: TrainerConfig = OmegaConf.to_object(merged)
    obj.extra = extra
    return obj


def to_config(cfg: DictConfig, checked: tuple[Config, DictConfig] | None = None) -> RunConfig:
    """Validate every group (types, unknown keys, ranges), fill the run paths, return typed objects
    (``checked``: :func:`check_groups`'s result for this ``cfg``, when the command already ran it)."""
    obj, resolved = checked if checked is not None else check_groups(cfg)
    rc = RunConfig(**{f.name: getattr(obj, f.name) for f in fields(Config)}, raw=resolved)
    rc.method, rc.trainer = method_config(resolved.method), trainer_config(resolved.trainer)
    rc.choices = dict(rc.choices)
    check_monitors(rc.trainer.validation, rc.callbacks)
    step_docs = rc.data.batch_size * rc.trainer.accumulate_grad_batches
    check(rc.data.micro_batch_size is None or step_docs % rc.data.micro_batch_size == 0, "data.micro_batch_size",
          rc.data.micro_batch_size, f"must divide the documents of an optimizer step (data.batch_size x "
          f"trainer.accumulate_grad_batches = {step_docs})")
    t = rc.trainer
    if rc.data.bucket and t.measure_cost and t.max_steps != -1:  # the fewest micro-batches the steps may take
        most = rc.data.micro_batch_size or step_docs
        check(t.max_steps * step_docs // most >= t.cost_schedule, "trainer.max_steps", t.max_steps,
              f"must cover trainer.measure_cost's schedule of {t.cost_schedule} micro-batches: with data.bucket's "
              f"micro-batches of up to {most} documents it may take only {t.max_steps * step_docs // most}")
    check_selection(rc.trainer, rc.callbacks, rc.data.splits.validation)
    rc = identity.fill_run_paths(rc, cfg)
    for group in ("logger", "callbacks"):  # the folders they write into, now that the run's own is known
        check_paths(group, getattr(rc, group), rc.paths.root)
    return rc


def check_groups(cfg: DictConfig) -> tuple[Config, DictConfig]:
    """Every check that needs no model, data or trainer (types, ranges, callback targets, path lengths):
    what the command runs before building anything, so a typo stops in the seconds composing takes."""
    try:
        resolved = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True))
    except Exception as e:
        raise ConfigError(str(e).splitlines()[0] + _key_hint(e)) from None
    try:
        merged = OmegaConf.merge(OmegaConf.structured(Config), resolved)
    except Exception as e:  # omegaconf's errors name the key; keep them, drop the traceback noise
        raise ConfigError(str(e).splitlines()[0] + _key_hint(e)) from None
    obj: Config = OmegaConf.to_object(merged)  # runs __post_init__ range checks
    method_config(resolved.method)  # the method's own keys and ranges: no Lightning import needed for them
    for group in ("logger", "callbacks"):
        for name, node in getattr(obj, group).items():
            check(node is None or (isinstance(node, dict) and isinstance(node.get("_target_"), str)),
                  f"{group}.{name}", node, "must be null or a mapping with a _target_ class path")
        check_targets(group, getattr(obj, group), obj.allowed_targets)  # before anything is instantiated
    for key, value in (("paths.root", obj.paths.root), ("paths.cache", obj.data.cache_dir)):
        check_path_length(key, str(value))
    return obj, resolved


# What validation during fit logs under each trainer.validation, and which way is better: a monitored checkpoint
# or early stopping (``monitor: val/...``) must name one of these, in the right ``mode``.
VAL_SCORES = ("rouge1", "rouge2", "rougeL", "rougeLsum", "rouge_geomean", "task_score", "f1", "exact_match",
              "fact_recall", "fact_field_recall")  # ValidationRouge's, higher is better


def validation_monitor(validation: str) -> tuple[str, str]:
    """The metric (and Lightning ``mode``) to choose checkpoints or stop early by under ``trainer.validation``."""
    return ("val/loss", "min") if validation == "loss" else ("val/rougeL", "max")


def check_monitors(validation: str, callbacks: dict[str, Any]) -> None:
    """Every callback that monitors a ``val/`` metric names one this validation logs, in the right direction:
    ``loss`` logs only ``val/loss`` (lower is better), ``paper`` and ``greedy`` ROUGE through ValidationRouge
    (higher is better), never ``val/loss``."""
    rouge = any(isinstance(n, dict) and str(n.get("_target_", "")).endswith(".ValidationRouge")
                for n in callbacks.values())
    for name, node in callbacks.items():
        monitor = node.get("monitor") if isinstance(node, dict) else None
        if not isinstance(monitor, str) or not monitor.startswith("val/"):
            continue
        metric, mode = monitor[len("val/"):], node.get("mode", "min")  # ModelCheckpoint's and EarlyStopping's default
        if validation == "loss":
            why = "" if metric == "loss" else (f"trainer.validation=loss logs only val/loss; {monitor} needs "
                                               "trainer.validation=paper or greedy")
        elif metric == "loss":
            why = f"trainer.validation={validation} logs ROUGE (val/rougeL ...); val/loss needs trainer.validation=loss"
        elif metric not in VAL_SCORES:
            why = f"validation logs no such metric (ROUGE: {', '.join('val/' + k for k in VAL_SCORES)})"
        else:
            why = "" if rouge else "it is logged by callbacks.validation_rouge (ValidationRouge), which is null"
        check(not why, f"callbacks.{name}.monitor", monitor, why)
        want = "min" if metric == "loss" else "max"
        check(mode == want, f"callbacks.{name}.mode", mode, f"must be {want} for {monitor} ("
              + ("lower" if want == "min" else "higher") + " is better)")


def check_selection(t: TrainerConfig, callbacks: dict[str, Any], validation_split: str | None = "validation") -> None:
    """``trainer.select=best`` and early stopping read validation during fit: a run configured without one (no
    validation split, nothing validated, no schedule), or whose validation logs no score to choose by, stops at
    start-up (not after training, choosing nothing)."""
    key = "trainer.select" if t.select == "best" else "trainer.early_stopping_patience"
    if t.select != "best" and not t.early_stopping_patience or not t.do_train:
        return
    value = t.select if t.select == "best" else t.early_stopping_patience
    check(validation_split is not None, key, value, "needs validation during fit, and data.splits.validation is null: "
          "name the split to validate on, or set trainer.select=last")
    none = t.limit_val_batches in (0, 0.0) or (t.val_check_interval is None and t.check_val_every_n_epoch is None)
    check(not none, key, value, "needs validation during fit: trainer.limit_val_batches > 0 and trainer.val_check_interval "
          "(or trainer.check_val_every_n_epoch)")
    rouge = any(isinstance(n, dict) and str(n.get("_target_", "")).endswith(".ValidationRouge") for n in callbacks.values())
    check(t.validation == "loss" or rouge, key, value, "chooses by val/task_score, which callbacks.validation_rouge "
          "(ValidationRouge) logs: it is null")


def validation_record(t: TrainerConfig) -> dict[str, Any]:
    """What a run's record says of its validation during fit: the mode, whether it is the paper's protocol, what
    it logs for a monitor, and greedy's token cap."""
    monitor, mode = validation_monitor(t.validation)
    return {"mode": t.validation, "paper_protocol": t.validation == TrainerConfig.validation, "monitor": monitor,
            "monitor_mode": mode, "max_new_tokens": t.validation_max_new_tokens if t.validation == "greedy" else None}


def validation_generation(gen: GenerationConfig, validation: str, max_new_tokens: int) -> GenerationConfig:
    """The decoding of validation during fit: the test-time one under ``paper``; 1 beam and at most
    ``max_new_tokens`` new tokens under ``greedy`` (the other settings as the test's)."""
    if validation != "greedy":
        return gen
    cap = min(gen.max_new_tokens, max_new_tokens)
    return dataclasses.replace(gen, num_beams=1, max_new_tokens=cap, min_new_tokens=min(gen.min_new_tokens, cap))


def checkpoint_callback_dir(callbacks: dict[str, Any]) -> Path | None:
    """The folder of the checkpoint callback (a ``ModelCheckpoint`` subclass, found by its class)."""
    from hydra.utils import get_class
    from lightning.pytorch.callbacks import ModelCheckpoint

    for name, node in callbacks.items():
        if not node or not node.get("dirpath"):
            continue
        try:
            cls = get_class(node["_target_"])
        except Exception as e:
            raise ConfigError(f"callbacks.{name}._target_={node['_target_']!r}: cannot be imported "
                              f"({str(e).splitlines()[0]})") from None
        if isinstance(cls, type) and issubclass(cls, ModelCheckpoint):
            return Path(node["dirpath"])
    return None


PATH_MAX, NAME_MAX = 4096, 255  # Linux's limits; the run adds up to ~120 characters below its folder


def check_path_length(key: str, path: str) -> None:
    """A folder the run writes under fits the file system's limits, with room for the run's own names."""
    longest = max((len(part) for part in Path(path).parts), default=0)
    check(longest <= NAME_MAX, key, f"{path[:60]}...", f"has a {longest}-character folder name; "
          f"the limit is {NAME_MAX} per name")
    check(len(path) <= PATH_MAX - 120, key, f"{path[:60]}...", f"is {len(path)} characters long; "
          f"the limit is {PATH_MAX} for a whole path, and the run's files add about 120")


@dataclass(frozen=True)
class RunContext:
    """One run's config, identities and folders, computed once."""

    cfg: RunConfig
    run_id: str
    run_dir: Path
    checkpoint_dir: Path | None
    training_hash: str
    evaluation_hash: str
    training_identity: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)

    @classmethod
    def create(cls, rc: RunConfig, started: float | None = None) -> RunContext:
        """From :func:`to_config`'s result, which checked the root and cache paths and named the run."""
        check_path_length("paths.run_dir", str(identity.run_dir(rc)))
        if rc.training_identity is None:  # a RunConfig not made by to_config
            rc.training_identity = identity.training_identity(rc)
        return cls(cfg=rc, run_id=str(rc.paths.run_id), run_dir=identity.run_dir(rc),
                   checkpoint_dir=checkpoint_callback_dir(rc.callbacks),
                   training_hash=identity.training_hash(rc), evaluation_hash=identity.evaluation_hash(rc),
                   training_identity=rc.training_identity, started=started if started is not None else time.time())

    def eval_dir(self, step: int) -> Path:
        """Folder of one evaluation: the weights' step and the evaluation identity."""
        return self.run_dir / "eval" / f"step_{step}-{self.evaluation_hash}"

    @property
    def epoch_budget(self) -> int | None:
        """The epochs a run trains when its budget is in epochs (``trainer.max_steps=-1``), else None."""
        t = self.cfg.trainer
        return t.max_epochs if t.do_train and t.max_steps == -1 and t.max_epochs and not t.measure_cost else None

    def result_dir(self, last_step: int) -> Path:
        """The folder of a run's final evaluation: named by its budget, known before the run, where the budget
        is in epochs (the steps follow from the data, and early stopping may end sooner), else by the step
        training ended at (a selected best checkpoint is recorded inside, ``selection``)."""
        epochs = self.epoch_budget
        return self.run_dir / "eval" / f"epochs_{epochs}-{self.evaluation_hash}" if epochs else self.eval_dir(last_step)

    @property
    def expected_eval_dir(self) -> Path | None:
        """Where the results will be, when the budget is known before running (for skip_existing)."""
        t = self.cfg.trainer
        if t.do_train and t.measure_cost:  # the cost probe ends training with its schedule
            return self.eval_dir(schedule_steps(t, self.cfg.method))
        if self.epoch_budget:
            return self.result_dir(0)
        return self.eval_dir(t.max_steps) if t.do_train and t.max_steps > 0 else None

    @property
    def model_dir(self) -> Path:
        return self.run_dir / "model"


def export_record(ctx: RunContext, described: dict[str, Any], selection: dict[str, Any]) -> dict[str, Any]:
    """What an exported model records about the run that made it (see scaleformer.export.folder)."""
    rc = ctx.cfg
    return {"method": described, "backbone": {"name": rc.backbone.name, "pretrained": rc.backbone.pretrained},
            "generation": dataclasses.asdict(rc.generation), "max_input_tokens": rc.data.max_input_tokens,
            "data": rc.data.name, "metrics": dataclasses.asdict(rc.metrics), "run_id": ctx.run_id,
            "training_hash": ctx.training_hash, "step": selection["step"], "selection": selection_kind(selection),
            "seed": rc.seed, "commit": package_commit(),
            "command": runtime.command_line(), "config": OmegaConf.to_container(rc.raw, resolve=True)}
