"""One source per default: a method's YAML holds its name and only what differs from what it builds on
(its dataclass, registered as ``method/<name>_schema``, or another method's YAML)."""

from __future__ import annotations

import pytest
import yaml
from conftest import CONF, compose
from omegaconf import OmegaConf

from scaleformer.methods import REGISTRY
from scaleformer.resources import group_options

OPTIONS = group_options("method")


def _own(option: str) -> dict:
    return yaml.safe_load((CONF / "method" / f"{option}.yaml").read_text(encoding="utf-8"))


def _base(option: str) -> dict:
    """What the option's defaults list gives before its own keys: the dataclass, or the parent option."""
    (parent,) = [d for d in _own(option)["defaults"] if d != "_self_"]
    if parent.endswith("_schema"):
        return OmegaConf.to_container(OmegaConf.structured(REGISTRY[parent.removesuffix("_schema")].Config))
    return OmegaConf.to_container(compose([f"method={parent}"]).method)


@pytest.mark.parametrize("option", OPTIONS)
def test_a_method_yaml_holds_only_what_differs_from_what_it_builds_on(option):
    own = _own(option)
    base = _base(option)
    same = {k: v for k, v in own.items() if k not in ("defaults", "name") and base.get(k) == v}
    assert not same, f"conf/method/{option}.yaml repeats {same}: the default lives in the dataclass"
    assert own.get("name", base.get("name")) in REGISTRY


@pytest.mark.parametrize("option", OPTIONS)
def test_every_dataclass_field_composes_typed_and_unknown_keys_stop_composition(option):
    cfg = compose([f"method={option}"]).method
    fields = set(OmegaConf.to_container(OmegaConf.structured(REGISTRY[cfg.name].Config)))
    assert set(cfg) == fields
    with pytest.raises(Exception, match="nosuch"):
        compose([f"method={option}", "method.nosuch=1"])


def test_a_wrong_type_stops_composition_naming_the_key():
    with pytest.raises(Exception, match="chunk_size"):
        compose(["method=sled", "method.chunk_size=big"])
