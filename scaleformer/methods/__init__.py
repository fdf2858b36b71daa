"""Long-context methods behind one interface, and their registry.

- ``base``: the :class:`Method` interface (it reads a :class:`scaleformer.model.spec.BackboneSpec`), the registry (subclassing registers);
- ``truncation``: the first window only (the paper's "Standard");
- ``chunked``: overlapping-chunk machinery shared by the four methods below;
- ``sled``, ``scaleformer`` (ScaleFormer and + Middle), ``unlimiformer``, ``memorizing``;
- ``datastore``: the local window + SLED datastore the two retrieval methods give the decoder;
- ``masformer``: MASFormer and its attention-span baselines (block, sliding window, full).

Adding a method = one module here + one file in conf/method/; the benchmark and the tables find it
through :data:`REGISTRY` and the config options. A method in another package registers the same way:
its package names the module in the ``scaleformer.methods`` entry-point group, which is imported here
(:func:`load_plugins`), and its YAML joins the search path (``--config-dir``); see
docs/adding-a-method.md.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import pkgutil
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from scaleformer.errors import ConfigError
from scaleformer.methods.base import REGISTRY, Encoded, Method, MethodConfig

if TYPE_CHECKING:
    from scaleformer.model.spec import BackboneSpec

PLUGIN_GROUP = "scaleformer.methods"
log = logging.getLogger("scaleformer")


def load_plugins() -> list[str]:
    """Import every module the installed packages name in the ``scaleformer.methods`` entry-point group
    (subclassing :class:`Method` registers); returns the names of the methods they added. One that
    fails to import is named in a warning and left out: the other methods still work."""
    before = set(REGISTRY)
    for ep in entry_points(group=PLUGIN_GROUP):
        try:
            ep.load()
        except Exception as e:  # a broken third-party package must not take every command down
            log.warning("method plugin %r (%s) did not load: %s: %s", ep.name, ep.value, type(e).__name__, e)
    return sorted(set(REGISTRY) - before)


for _mod in pkgutil.iter_modules(__path__):
    if _mod.name != "base":
        importlib.import_module(f"{__name__}.{_mod.name}")
load_plugins()

__all__ = ["PLUGIN_GROUP", "REGISTRY", "Encoded", "Method", "MethodConfig", "build_method",
           "load_plugins", "method_config"]


def method_config(raw: DictConfig | dict[str, Any]) -> MethodConfig:
    """Validate a `method` config group against its method's dataclass (types, keys, ranges)."""
    raw = OmegaConf.create(raw) if isinstance(raw, dict) else raw
    name = raw.get("name")
    if name not in REGISTRY:
        raise ConfigError(f"method.name={name!r}: unknown method; available: {', '.join(sorted(REGISTRY))}")
    schema = OmegaConf.structured(REGISTRY[name].Config)
    for f in dataclasses.fields(REGISTRY[name].Config):  # OmegaConf reads 2 (and "yes") as true: a switch is a bool
        value = raw.get(f.name) if f.name in raw else None
        if str(f.type).replace(" ", "") in ("bool", "bool|None") and value is not None and not isinstance(value, bool):
            raise ConfigError(f"method.{f.name}={value!r}: must be true or false" + (" (or null)" if "None" in str(f.type)
                                                                                        else ""))
    try:
        merged = OmegaConf.merge(schema, raw)
    except Exception as e:
        key = getattr(e, "full_key", None)
        msg = str(e).splitlines()[0]
        raise ConfigError(f"method.{key}: {msg}" if key else f"method: {msg}") from None
    return OmegaConf.to_object(merged)


def build_method(cfg: MethodConfig, spec: BackboneSpec) -> Method:
    return REGISTRY[cfg.name](cfg, spec)
