"""``scaleformer train`` (and ``python train.py``): one run, or a Hydra multirun, from the config groups.

    scaleformer train                                  # the embedded default (CPU, no network)
    scaleformer train method=sled data=govreport backbone=bart_base trainer=paper optim=paper
    scaleformer train -m method=sled,scaleformer_middle
    scaleformer train --config-dir ./my_conf method=my_method   # your own groups join the search path

A mistake in the settings is one line (``error: <key>=<value>: ...``) and exit status 1, before any
heavy work. In a multirun a failed cell is recorded and the sweep goes on (exit 1 at its end).
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig, open_dict

from scaleformer.config import register_configs
from scaleformer.errors import redact
from scaleformer.resources import conf_dir

register_configs()
log = logging.getLogger("scaleformer")


def main() -> None:
    """The command: Hydra's, with its override and composition errors as one line (never a traceback)."""
    import os
    import sys

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # composition errors come back here as exceptions
    check_overrides(sys.argv[1:])
    try:
        hydra_main()
    except Exception as e:
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        if not isinstance(e, HydraException | OmegaConfBaseException):
            raise
        raise SystemExit(f"error: {composition_error(e)}") from None


def check_overrides(args: list[str]) -> None:
    """Each override parses (Hydra's grammar), else one line naming it; before anything is composed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        try:
            parser.parse_override(arg)
        except HydraException as e:
            key = arg.split("=", 1)[0]
            why = str(e).strip().splitlines()[0]
            raise SystemExit(f"error: {redact(arg)!r}: not a valid override of {key} ({why}); quote a value with "
                             f"special characters: {key}='...'") from None


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
    return redact(" ".join(dict.fromkeys(parts)) or type(e).__name__)


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def hydra_main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from scaleformer.config import group_choices
    from scaleformer.errors import ConfigError
    from scaleformer.runs.context import check_groups

    hc = HydraConfig.get()
    sweep = hc.mode == RunMode.MULTIRUN
    if not sweep:  # a mistake in the settings stops before torch, transformers and Lightning are imported
        try:
            check_groups(cfg)
        except ConfigError as e:
            raise SystemExit(f"error: {redact(str(e))}") from None

    from scaleformer.artifacts.sweeps import record_job_failure
    from scaleformer.data import DataError
    from scaleformer.errors import storage_error
    from scaleformer.metrics import BertScoreModelError
    from scaleformer.model.hub import HubUnreachableError
    from scaleformer.runs.run import run
    from scaleformer.runs.runtime import RunInUseError

    with open_dict(cfg):
        cfg.choices = group_choices(hc.runtime.choices)
    user_errors = (ConfigError, DataError, HubUnreachableError, BertScoreModelError, RunInUseError)
    try:
        result = run(cfg)
    except user_errors as e:  # one clear line, no traceback
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
