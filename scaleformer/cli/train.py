"""``scaleformer train`` (and ``python train.py``): one run, or a Hydra multirun, from the config groups.

    scaleformer train                                  # the embedded default (CPU, no network)
    scaleformer train method=sled data=govreport backbone=bart_base trainer=paper optim=paper
    scaleformer train -m method=sled,scaleformer_middle
    scaleformer train --config-dir ./my_conf method=my_method   # your own groups join the search path

A mistake in the settings is one line (``error: <key>=<value>: ...``) and exit status 1, before any
heavy work; so is a config file that is not YAML (``error: <file>:<line>:<column>: ...``). In a
multirun a failed cell is recorded and the sweep goes on (exit 1 at its end).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import hydra
from omegaconf import DictConfig, open_dict

from scaleformer.artifacts.sweeps import record_job_failure
from scaleformer.compose import check_overrides as compose_checks
from scaleformer.compose import group_choices, register_configs
from scaleformer.errors import ConfigError, UserError, redact, storage_error
from scaleformer.methods import REGISTRY, load_plugins
from scaleformer.ops.host_memory import keep_freed_memory
from scaleformer.progress import VERBOSE_ENV
from scaleformer.resources import conf_dir
from scaleformer.runs.context import check_groups
from scaleformer.runs.targets import check_all_targets

register_configs()
log = logging.getLogger("scaleformer")


def main() -> None:
    """The command: Hydra's, with its override and composition errors as one line (never a traceback)."""
    import sys

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # composition errors come back here as exceptions
    keep_freed_memory()
    if any(a in ("-v", "--verbose") for a in sys.argv[1:]):  # ours, not Hydra's: the libraries' bars and INFO lines
        sys.argv = [a for a in sys.argv if a not in ("-v", "--verbose")]
        os.environ[VERBOSE_ENV] = "1"
    check_overrides(sys.argv[1:])
    check_composed_targets(sys.argv[1:])
    try:
        hydra_main()
    except Exception as e:
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        if (line := config_file_error(e)) is not None:  # a YAML file Hydra read: checked above, here as a fallback
            raise SystemExit(f"error: {line}") from None
        if not isinstance(e, HydraException | OmegaConfBaseException):
            raise
        raise SystemExit(f"error: {composition_error(e)}") from None


def check_overrides(args: list[str]) -> None:
    """Each override parses and suits its key (:func:`scaleformer.compose.check_overrides`), else one line and
    exit status 1; before anything is composed."""
    try:
        compose_checks(args)
    except ConfigError as e:
        raise SystemExit(f"error: {redact(str(e))}") from None


def _compositions(argv: list[str]) -> tuple[Any, list[list[str]]]:
    """Hydra's reading of the command line, and one override list per value of every sweep (a multirun's
    cells between them use every config file the sweep can choose)."""
    # Hydra's own parser: the flags as @hydra.main reads them.
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args, _ = get_args_parser().parse_known_args(argv)
    overrides = list(args.overrides or [])
    parser = OverridesParser.create()
    base, sweeps = [], []
    for arg in overrides:
        o = parser.parse_override(arg)
        if o.is_sweep_override():
            values = [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
            base.append(values[0])
            sweeps.append((len(base) - 1, values[1:]))
        else:
            base.append(arg)
    runs = [base] + [[*base[:i], v, *base[i + 1:]] for i, values in sweeps for v in values]
    return args, runs


def check_composed_targets(argv: list[str]) -> None:
    """Every ``_target_`` of the composed config (Hydra's own section included, where a shared experiment
    file could name a callback) is allowed, before Hydra instantiates anything; else one line naming it.

    Hydra builds its callbacks and launcher before the app runs, so the check composes the config here
    first, with the same search path (``--config-dir``) and overrides. A config that does not compose is
    left to Hydra, which reports it.
    """
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    try:
        args, runs = _compositions(argv)
    except Exception:
        return
    if args.help or args.hydra_help or args.shell_completion:
        return
    extra = [f"hydra.searchpath=[file://{os.path.abspath(args.config_dir)}]"] if args.config_dir else []
    for overrides in runs:
        try:
            with initialize_config_dir(str(conf_dir()), version_base="1.3"):
                cfg = compose(args.config_name or "config", [*overrides, *extra], return_hydra_config=True)
        except Exception as e:
            if (line := config_file_error(e, args.config_dir)) is not None:
                raise SystemExit(f"error: {line}") from None
            return
        try:
            check_all_targets(OmegaConf.to_container(cfg, resolve=False))
        except ConfigError as e:
            raise SystemExit(f"error: {redact(str(e))}") from None


def config_file_error(e: BaseException, config_dir: str | None = None) -> str | None:
    """One line for a config file that is not YAML (PyYAML's reason, the file and line), None for any
    other error. Why: Hydra passes PyYAML's errors on as they are, a traceback of its internals. A file
    that is not UTF-8 is found under ``config_dir`` (Python's decode error does not name it)."""
    import yaml

    seen: list[BaseException] = []
    link: BaseException | None = e
    while link is not None and link not in seen and len(seen) < 8:  # Hydra may wrap it
        seen.append(link)
        link = link.__cause__ or link.__context__
    for err in seen:
        if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
            mark, ctx = err.problem_mark, err.context_mark
            where = f" at line {ctx.line + 1}, column {ctx.column + 1}" if ctx is not None else ""
            context = f" ({err.context}{where})" if err.context else ""
            return redact(f"{mark.name}:{mark.line + 1}:{mark.column + 1}: not readable YAML: {err.problem}{context}")
        if isinstance(err, yaml.YAMLError):  # PyYAML's reader names the file and the position itself
            return redact(f"not readable YAML: {' '.join(str(err).split())}")
    if config_dir and any(isinstance(err, UnicodeDecodeError) for err in seen):
        from pathlib import Path

        for path in sorted(Path(config_dir).rglob("*.y*ml")):
            data = path.read_bytes()
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as u:
                return redact(f"{path}: not UTF-8 text (byte 0x{data[u.start]:02x} at offset {u.start}); "
                              "config files are read as UTF-8")
    if config_dir and "is not a subclass of" in " ".join(map(str, seen)):  # a file that is YAML but no mapping
        from pathlib import Path

        for path in sorted(Path(config_dir).rglob("*.y*ml")):
            try:
                doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (yaml.YAMLError, UnicodeDecodeError, OSError):
                continue
            if doc is not None and not isinstance(doc, dict):
                return redact(f"{path}: holds a YAML {type(doc).__name__}, not a mapping of keys: a config file is "
                              "`key: value` lines")
    return None


def composition_error(e: BaseException) -> str:
    """Hydra's/OmegaConf's composition error in one line (its first lines, the key it names, redacted)."""
    lines = [line.strip() for line in str(e).split("Config search path")[0].splitlines() if line.strip()]
    if any(line.startswith("Available options") for line in lines):  # Hydra lists them one per line
        i = next(i for i, line in enumerate(lines) if line.startswith("Available options"))
        lines = [*lines[:i], f"{lines[i]} {', '.join(lines[i + 1:])}"]
    parts = lines[:3]
    cause = e.__cause__
    if cause is not None and str(cause).strip():
        parts.append(str(cause).strip().splitlines()[0])
    text = " ".join(dict.fromkeys(parts)) or type(e).__name__
    return redact(experiment_method_hint(text) or text)


def experiment_method_hint(text: str) -> str | None:
    """An experiment that sets a method key the chosen method lacks (``experiment=masformer_lm method=sled``: its
    ``method.max_length``), said as what it is: the experiment needs a method with that key, and which those are."""
    import re

    m = re.search(r"In '(?:\w+/)?experiment/([\w.-]+)'.*Key '(\w+)' not in '(\w+)'.*full_key: method\.\2\b", text)
    if m is None:
        return None
    load_plugins()
    experiment, key, schema = m.groups()
    fit = sorted(n for n, c in REGISTRY.items() if key in {f.name for f in dataclasses.fields(c.Config)})
    chosen = next((n for n, c in REGISTRY.items() if c.Config.__name__ == schema), schema)
    causal = fit and all(REGISTRY[n].runs_decoder_only for n in fit)
    what = "a span method on a decoder-only backbone" if causal else "a method with that key"
    return (f"experiment={experiment} sets method.{key}, which method={chosen} has no key for: the experiment needs "
            f"{what}: method={', '.join(fit) or '(none registered)'}")


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def hydra_main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    sweep = hc.mode == RunMode.MULTIRUN
    with open_dict(cfg):
        cfg.choices = group_choices(hc.runtime.choices)
    checked = None
    if not sweep:  # a mistake in the settings stops before a model, data or trainer is built
        try:
            checked = check_groups(cfg)
        except ConfigError as e:
            raise SystemExit(f"error: {redact(str(e))}") from None

    # deferred: a mistake in the settings (checked above) stops before Lightning, the data and the model load
    from scaleformer.runs.run import run

    try:
        result = run(cfg, checked)
    except UserError as e:  # a setting, a file, the network, a busy folder: one clear line, no traceback
        if not sweep:
            raise SystemExit(f"error: {redact(str(e))}") from None
        log.error("error: %s", redact(str(e)))
        record_job_failure(e)
        return None
    except Exception as e:
        if (line := storage_error(e)) is not None:  # disk full, ulimit -f, path too long: not a bug
            if not sweep:
                raise SystemExit(f"error: {line}") from None
            log.error("error: %s", line)
            record_job_failure(e)
            return None
        if not sweep:
            raise
        log.exception("error: this cell failed; the sweep goes on")
        record_job_failure(e)
        return None
    split = next(iter(result.get("splits", {}).values()), {})
    return split.get("rougeL")  # what Hydra sweepers optimise


if __name__ == "__main__":
    main()
