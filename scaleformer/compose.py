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

import dataclasses
import math
from typing import Any

from omegaconf import DictConfig, open_dict

from scaleformer.config import (
    BackboneConfig,
    Config,
    DataConfig,
    GenerationConfig,
    OptimConfig,
    TrainerConfig,
)
from scaleformer.errors import ConfigError, redact
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
    """Compose conf/config.yaml with overrides exactly as `python train.py ...` would (for tools and tests); an
    override that does not suit its key is one line (:func:`check_overrides`)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    check_overrides(list(overrides or []))
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


def check_overrides(args: list[str]) -> None:
    """Each override parses (Hydra's grammar) and suits its key (:func:`key_problem`), else ConfigError in one
    line naming it; before anything is composed. The train command and :func:`compose_config` (grids, scripts,
    the bench) run it, so no path composes ``method.checkpoint_chunks=2`` as true."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        try:
            override = parser.parse_override(arg)
        except HydraException as e:
            key = arg.split("=", 1)[0]
            why = str(e).strip().splitlines()[0]
            raise ConfigError(f"{redact(arg)!r}: not a valid override of {key} ({why}); quote a value with "
                              f"special characters: {key}='...'") from None
        if (line := key_problem(override)) is not None:
            raise ConfigError(redact(line))


def _group_fields() -> dict[str, dict[str, list[str]]]:
    """Per config group with a schema: each key and its type as the dataclasses declare it (a method's: any
    registered method's)."""
    schemas = {"data": [DataConfig], "trainer": [TrainerConfig], "optim": [OptimConfig],
               "generation": [GenerationConfig], "backbone": [BackboneConfig], "method": [m.Config for m in REGISTRY.values()]}
    out: dict[str, dict[str, list[str]]] = {}
    for group, classes in schemas.items():
        for cls in classes:
            for f in dataclasses.fields(cls):
                out.setdefault(group, {}).setdefault(f.name, []).append(str(f.type).replace(" ", ""))
    return out


def key_problem(override: Any) -> str | None:
    """A key no schema of its group has (with the closest that exists: Hydra's own message names none), or a value
    its declared type does not take (:func:`_type_problem`; each value of a sweep); None when fine. The trainer group
    passes unknown keys to Lightning, so only its named keys are checked."""
    import difflib

    key = override.key_or_group.lstrip("+~")
    group, _, rest = key.partition(".")
    fields = _group_fields().get(group)
    if not rest or fields is None or override.is_delete():
        return None
    leaf = rest.split(".", 1)[0]
    if leaf not in fields:
        if group == "trainer" or override.is_add():
            return None
        near = difflib.get_close_matches(leaf, list(fields), n=1)
        return (f"{key}: the {group} group has no key {leaf!r}" + (f"; did you mean {group}.{near[0]}?" if near else
                f"; its keys: {', '.join(sorted(fields))}"))
    if "." in rest:
        return None
    values = list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
    for value in values:  # each value of a sweep, as each cell would read it
        if (why := _type_problem(fields[leaf], value)) is not None:
            return f"{key}={value!r}: {why}"
    return None


def _type_problem(types: list[str], value: Any) -> str | None:
    """What a value is not, for a key every schema declares one scalar type of (``int``, ``float``, ``bool``, each
    maybe ``|None``): Hydra's own message names no key for ``abc`` where an int goes ("Error merging override"),
    OmegaConf reads 2 as true, and NaN passes a range check; None when fine or not a plain scalar key."""
    kinds = {t.removesuffix("|None") for t in types}
    null = " (or null)" if all(t.endswith("|None") for t in types) else ""
    if len(kinds) != 1 or isinstance(value, list | dict) or value is None and any(t.endswith("|None") for t in types):
        return None
    if isinstance(value, str) and "${" in value:  # an interpolation: its target's value is checked where it is set
        return None
    kind = kinds.pop()
    is_num = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "bool" and not isinstance(value, bool):
        return f"must be true or false{null}"
    if kind == "int" and not (is_num and isinstance(value, int)):
        return f"must be an integer{null}"
    if kind == "float" and not (is_num and math.isfinite(value)):
        return f"must be a finite number{null}"
    return None
