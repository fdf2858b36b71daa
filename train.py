"""Entry point: `python train.py method=scaleformer_middle data=govreport backbone=bart_base`.

With no arguments it trains and evaluates tiny_bart on the bundled synthetic set, on the CPU.
"""

import logging

import hydra
from omegaconf import DictConfig, open_dict

from scaleformer.config import register_configs

register_configs()
log = logging.getLogger("scaleformer")


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from scaleformer.config import ConfigError, group_choices
    from scaleformer.data import DataError
    from scaleformer.hub import HubUnreachableError
    from scaleformer.metrics import BertScoreModelError
    from scaleformer.run import run
    from scaleformer.runtime import RunInUseError
    from scaleformer.sweeps import record_job_failure

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
