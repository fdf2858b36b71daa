"""Entry point: `python train.py method=scaleformer_middle data=govreport backbone=bart_base`.

With no arguments it trains and evaluates tiny_bart on the bundled synthetic set, on the CPU.
"""

import hydra
from omegaconf import DictConfig, open_dict

from scaleformer.config import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from scaleformer.config import ConfigError, group_choices
    from scaleformer.data import DataError
    from scaleformer.hub import HubUnreachableError
    from scaleformer.run import run

    with open_dict(cfg):
        cfg.choices = group_choices(HydraConfig.get().runtime.choices)
    try:
        result = run(cfg)
    except (ConfigError, DataError, HubUnreachableError) as e:  # user errors: one clear line, no traceback
        raise SystemExit(f"error: {e}") from None
    split = next(iter(result["splits"].values()), {})
    return split.get("rougeL")  # what Hydra sweepers optimise


if __name__ == "__main__":
    main()
