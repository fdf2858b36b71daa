"""Composing the Hydra config as ``python train.py ...`` would: the schemas registered, the project's
group choices recorded (for tools, tests and the train command).

Each registered method's config dataclass is stored as ``<name>_schema``, beside the groups (so it is no
option of ``method``, in ``--help`` or on the command line): a method's YAML names it first in its defaults
list (``- /<name>_schema@_here_``) and holds only what differs from the dataclass, so every default and its
reason live once, in the method's module (and keys or types a dataclass does not have stop composition).
This module sits above the methods for that reason, and composing costs the seconds their import
takes (torch, transformers). Methods of other packages (the ``scaleformer.methods`` entry points) are
registered alike.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, open_dict

from scaleformer.config import Config
from scaleformer.methods import REGISTRY
from scaleformer.resources import conf_dir


def register_configs() -> None:
    """Register the schemas so Hydra type-checks every group as it composes."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for name, method in REGISTRY.items():
        cs.store(name=f"{name}_schema", node=method.Config)  # beside the groups: no option of method


def compose_config(overrides: list[str] | None = None, config_dir: str | None = None) -> DictConfig:
    """Compose conf/config.yaml with overrides exactly as `python train.py ...` would (for tools and tests)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()

    conf = config_dir or str(conf_dir())
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides or [], return_hydra_config=True)
    with open_dict(cfg):
        cfg.choices = group_choices(cfg.hydra.runtime.choices)
        del cfg["hydra"]
    return cfg


def group_choices(choices: Any) -> dict[str, Any]:
    """Hydra's runtime choices (group -> option) of the project's own groups, without hydra/*."""
    return {k: v for k, v in dict(choices).items() if not str(k).startswith("hydra")}
