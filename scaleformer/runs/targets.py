"""What a config file may instantiate: one list of class names per group, never a package prefix.

A shared config (an experiment file under ``--config-dir``, a grid's overrides) is data, so the names it
can make Hydra build are fixed here: the callbacks of Lightning and this project for ``callbacks``, their
loggers for ``logger``, Hydra's launchers, sweeper and the project's sweep callback for the ``hydra``
section, and nothing else. A package prefix let any function of the package through (a callback entry of
``scaleformer.io.atomic_write_text`` wrote a file of its choosing). A researcher's own class is named by its
full path in ``allowed_targets`` (``+allowed_targets=[my_package.callbacks.MyCallback]``), and is still
checked to be a class of its group (a Lightning ``Callback`` or ``Logger``, a Hydra ``Launcher``...) before it
is called. The folders loggers and callbacks write into must lie under ``paths.root``, and Hydra's logging
sections may only build console handlers (``logging.config`` turns a ``()`` or ``class`` key into a call).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scaleformer.config import is_class_path
from scaleformer.errors import ConfigError

_LIGHTNING_CALLBACKS = ("BackboneFinetuning", "BatchSizeFinder", "DeviceStatsMonitor", "EarlyStopping",
                        "GradientAccumulationScheduler", "LearningRateFinder", "LearningRateMonitor",
                        "ModelCheckpoint", "ModelSummary", "OnExceptionCheckpoint", "RichModelSummary",
                        "RichProgressBar", "StochasticWeightAveraging", "ThroughputMonitor", "Timer",
                        "TQDMProgressBar")
_LIGHTNING_LOGGERS = ("CSVLogger", "CometLogger", "MLFlowLogger", "NeptuneLogger", "TensorBoardLogger",
                      "WandbLogger")


def _lightning(module: str, names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{root}.{module}.{n}" for root in ("lightning.pytorch", "pytorch_lightning") for n in names)


# group -> the classes a config may name there.
GROUP_CLASSES: dict[str, tuple[str, ...]] = {
    "callbacks": (*_lightning("callbacks", _LIGHTNING_CALLBACKS), "scaleformer.runs.callbacks.StepCheckpoint",
                  "scaleformer.runs.callbacks.ValidationRouge"),
    "logger": (*_lightning("loggers", _LIGHTNING_LOGGERS), "scaleformer.runs.wandb_logger.WandbLogger"),
    "hydra.callbacks": ("scaleformer.artifacts.sweeps.FailedCells",),
    "hydra.launcher": ("hydra._internal.core_plugins.basic_launcher.BasicLauncher",
                       "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher",
                       "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"),
    "hydra.sweeper": ("hydra._internal.core_plugins.basic_sweeper.BasicSweeper",),
}
# group -> the base class its entries must derive from (checked on the located class, before it is called).
GROUP_BASES = {"callbacks": "lightning.pytorch.callbacks.Callback", "logger": "lightning.pytorch.loggers.Logger",
               "hydra.callbacks": "hydra.experimental.callback.Callback",
               "hydra.launcher": "hydra.plugins.launcher.Launcher", "hydra.sweeper": "hydra.plugins.sweeper.Sweeper"}
# Arguments of loggers and callbacks that name a folder they write into: it must lie under paths.root.
PATH_ARGS = ("save_dir", "dirpath", "log_dir", "root_dir", "dir", "default_root_dir", "logdir")
# Hydra's logging sections (``logging.config.dictConfig``): the handlers and streams they may name.
LOG_HANDLERS = ("logging.StreamHandler", "logging.NullHandler")
LOG_STREAMS = ("ext://sys.stdout", "ext://sys.stderr")


def mappings(key: str, node: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every mapping in a config tree, with its dotted key, parents first."""
    if isinstance(node, dict):
        yield key, node
        for k, v in node.items():
            yield from mappings(f"{key}.{k}" if key else str(k), v)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from mappings(f"{key}[{i}]", v)


def check_allowed(allowed: Any) -> list[str]:
    """``allowed_targets``: full class paths (``my_package.callbacks.MyCallback``), one line otherwise."""
    if allowed is None:
        return []
    if not isinstance(allowed, list | tuple):
        raise ConfigError(f"allowed_targets={allowed!r}: must be a list of class paths (my_package.callbacks.MyCallback)")
    for entry in allowed:
        if not is_class_path(entry):
            raise ConfigError(f"allowed_targets entry {entry!r}: must be a class's full path such as "
                              "my_package.callbacks.MyCallback")
    return list(allowed)


def _refuse(key: str, target: Any, group: str, allowed: list[str]) -> ConfigError:
    old = [a for a in allowed if isinstance(target, str) and target.startswith(a.rstrip(".") + ".")]
    hint = (f"; allowed_targets names classes, not module prefixes: list {target} itself" if old else
            "; name your own class by its full path in allowed_targets (+allowed_targets=[my_package.MyClass])")
    names = sorted({n.rsplit(".", 1)[1] for n in GROUP_CLASSES[group]})
    return ConfigError(f"{key}._target_={target!r}: not instantiated: a {group} entry must be one of the classes "
                       f"for it ({', '.join(names)}){hint}")


def check_targets(group: str, nodes: dict[str, Any], allowed: list[str]) -> None:
    """Each entry of ``group`` names one of its classes (or one listed in ``allowed_targets``); an argument
    holding a ``_target_`` of its own is allowed only when listed there."""
    allowed = check_allowed(allowed)
    names = set(GROUP_CLASSES[group]) | set(allowed)
    for name, node in nodes.items():
        if not isinstance(node, dict):
            continue
        target = node.get("_target_")
        if not (isinstance(target, str) and target in names):
            raise _refuse(f"{group}.{name}", target, group, allowed)
        for key, inner in mappings(f"{group}.{name}", {k: v for k, v in node.items() if k != "_target_"}):
            if inner.get("_target_") is not None and inner["_target_"] not in allowed:
                raise ConfigError(f"{key}._target_={inner['_target_']!r}: not instantiated: an argument of a {group} "
                                  "entry may name only a class listed in allowed_targets")


def check_paths(group: str, nodes: dict[str, Any], root: str | Path) -> None:
    """The folders a logger or callback writes into (``save_dir``, ``dirpath``...) lie under ``paths.root``."""
    top = Path(root).expanduser().resolve()
    for name, node in nodes.items():
        if not isinstance(node, dict):
            continue
        for k in PATH_ARGS:
            value = node.get(k)
            if value is None:
                continue
            where = Path(str(value)).expanduser().resolve()
            if not (isinstance(value, str | Path) and (where == top or top in where.parents)):
                raise ConfigError(f"{group}.{name}.{k}={value!r}: must be a folder under paths.root ({top}): a config "
                                  "writes only into the results it owns")
        filename = node.get("filename")
        if isinstance(filename, str) and (Path(filename).is_absolute() or ".." in Path(filename).parts):
            raise ConfigError(f"{group}.{name}.filename={filename!r}: must be a name inside its dirpath "
                              "(no '/' at the start, no '..')")


def _locate(path: str) -> Any:
    """The object a dotted path names: the longest importable module, then attributes."""
    import importlib

    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(f"no module of {path!r} can be imported")


def locate_class(group: str, target: str) -> Any:
    """The class ``target`` names, checked to be a class of ``group`` (before anything calls it)."""
    try:
        cls = _locate(target)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{group} entry {target!r}: cannot be imported ({str(e).splitlines()[0]})") from None
    base = _locate(GROUP_BASES[group])
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"{group} entry {target!r}: is not a {GROUP_BASES[group]} class "
                          f"(a {type(cls).__name__}): not instantiated")
    return cls


def _check_logging(key: str, section: Any) -> None:
    """Hydra's ``job_logging`` / ``hydra_logging``: console handlers only, no factories."""
    for k, node in mappings(key, section):
        if "()" in node:
            raise ConfigError(f"{k}.()={node['()']!r}: not instantiated: Hydra's logging sections may not name a "
                              "factory")
    if not isinstance(section, dict):
        return
    for name, h in (section.get("handlers") or {}).items():
        if not isinstance(h, dict):
            continue
        if h.get("class") not in LOG_HANDLERS:
            raise ConfigError(f"{key}.handlers.{name}.class={h.get('class')!r}: not instantiated: Hydra's logging may "
                              f"use {', '.join(LOG_HANDLERS)} (a run's own log is its train.log)")
        if "stream" in h and h["stream"] not in LOG_STREAMS:
            raise ConfigError(f"{key}.handlers.{name}.stream={h['stream']!r}: must be one of {', '.join(LOG_STREAMS)}")
    for name, f in (section.get("formatters") or {}).items():
        if isinstance(f, dict) and f.get("class", "logging.Formatter") != "logging.Formatter":
            raise ConfigError(f"{key}.formatters.{name}.class={f['class']!r}: not instantiated: logging.Formatter only")


def check_all_targets(cfg: dict[str, Any]) -> None:
    """Every ``_target_`` anywhere in a composed config (its ``hydra`` section included, which Hydra builds
    before the app runs) names a class of its group, before anything is instantiated; one line otherwise."""
    try:
        allowed = check_allowed(cfg.get("allowed_targets"))
    except ConfigError:
        allowed = []  # the run's own check says what is wrong with it; nothing of it is trusted here
    for group in ("callbacks", "logger"):
        nodes = cfg.get(group)
        if isinstance(nodes, dict):
            check_targets(group, nodes, allowed)
    hydra = cfg.get("hydra") or {}
    for part in ("launcher", "sweeper"):
        node = hydra.get(part)
        if isinstance(node, dict) and node.get("_target_") is not None:
            _one(f"hydra.{part}", node, allowed)
    callbacks = hydra.get("callbacks") or {}
    if isinstance(callbacks, dict):
        for name, node in callbacks.items():
            if isinstance(node, dict):
                _one("hydra.callbacks", node, allowed, f"hydra.callbacks.{name}")
    for part in ("job_logging", "hydra_logging"):
        _check_logging(f"hydra.{part}", hydra.get(part))
    known = {"launcher", "sweeper", "callbacks", "job_logging", "hydra_logging"}
    rest = [*((str(k), v) for k, v in cfg.items() if k not in ("callbacks", "logger", "hydra")),
            *((f"hydra.{k}", v) for k, v in hydra.items() if k not in known)]
    for top, value in rest:  # nothing else in the config may name a target
        for key, node in mappings(top, value):
            if node.get("_target_") is not None:
                raise ConfigError(f"{key}._target_={node['_target_']!r}: not instantiated: only the callbacks, logger "
                                  "and Hydra's launcher, sweeper and callbacks entries build objects")


def _one(group: str, node: dict[str, Any], allowed: list[str], key: str | None = None) -> None:
    target = node.get("_target_")
    if not (isinstance(target, str) and "${" not in target and target in (*GROUP_CLASSES[group], *allowed)):
        raise _refuse(key or group, target, group, allowed)
    if target in allowed and target not in GROUP_CLASSES[group]:
        locate_class(group, target)
