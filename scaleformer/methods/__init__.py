"""Long-context methods behind one interface, and their registry.

- ``base``: the :class:`Method` interface, :class:`BackboneSpec`, the registry (subclassing registers);
- ``truncation``: the first window only (the paper's "Standard");
- ``chunked``: overlapping-chunk machinery shared by the four methods below;
- ``sled``, ``scaleformer`` (ScaleFormer and + Middle), ``unlimiformer``, ``memorizing``;
- ``datastore``: the local window + SLED datastore the two retrieval methods give the decoder;
- ``masformer``: MASFormer and its attention-span baselines (block, sliding window, full).

Adding a method = one module here + one file in conf/method/; the benchmark and the tables find it
through :data:`REGISTRY` and the config options.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from omegaconf import DictConfig, OmegaConf

from scaleformer.errors import ConfigError
from scaleformer.methods.base import REGISTRY, BackboneSpec, Encoded, Method, MethodConfig

for _mod in pkgutil.iter_modules(__path__):
    if _mod.name != "base":
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = ["REGISTRY", "BackboneSpec", "Encoded", "Method", "MethodConfig", "build_method", "method_config"]


def method_config(raw: DictConfig | dict[str, Any]) -> MethodConfig:
    """Validate a `method` config group against its method's dataclass (types, keys, ranges)."""
    raw = OmegaConf.create(raw) if isinstance(raw, dict) else raw
    name = raw.get("name")
    if name not in REGISTRY:
        raise ConfigError(f"method.name={name!r}: unknown method; available: {', '.join(sorted(REGISTRY))}")
    schema = OmegaConf.structured(REGISTRY[name].Config)
    try:
        merged = OmegaConf.merge(schema, raw)
    except Exception as e:
        key = getattr(e, "full_key", None)
        msg = str(e).splitlines()[0]
        raise ConfigError(f"method.{key}: {msg}" if key else f"method: {msg}") from None
    return OmegaConf.to_object(merged)


def build_method(cfg: MethodConfig, spec: BackboneSpec) -> Method:
    return REGISTRY[cfg.name](cfg, spec)
