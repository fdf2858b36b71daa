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
from scaleformer.resources import conf_dir

register_configs()
log = logging.getLogger("scaleformer")


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from scaleformer.artifacts.sweeps import record_job_failure
    from scaleformer.config import group_choices
    from scaleformer.data import DataError
    from scaleformer.errors import ConfigError
    from scaleformer.metrics import BertScoreModelError
    from scaleformer.model.hub import HubUnreachableError
    from scaleformer.runs.run import run
    from scaleformer.runs.runtime import RunInUseError

    hc = HydraConfig.get()
    with open_dict(cfg):
        cfg.choices = group_choices(hc.runtime.choices)
    sweep = hc.mode == RunMode.MULTIRUN
    user_errors = (ConfigError, DataError, HubUnreachableError, BertScoreModelError, RunInUseError)
    try:
        result = run(cfg)
    except user_errors as e:  # one clear line, no traceback
        if not sweep:
            raise SystemExit(f"error: {e}") from None
        log.error("error: %s", e)
        record_job_failure(e)
        return None
    except Exception as e:
        if not sweep:
            raise
        log.exception("error: this cell failed; the sweep goes on")
        record_job_failure(e)
        return None
    split = next(iter(result.get("splits", {}).values()), {})
    return split.get("rougeL")  # what Hydra sweepers optimise


if __name__ == "__main__":
    main()
