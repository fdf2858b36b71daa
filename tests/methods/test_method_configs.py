"""One source per default: a method's YAML holds its name and only what differs from what it builds on
(its dataclass, registered as ``<name>_schema`` beside the groups, or another method's YAML)."""

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
    if parent.endswith("_schema@_here_"):  # /<name>_schema@_here_: the dataclass, beside the groups
        return OmegaConf.to_container(OmegaConf.structured(REGISTRY[parent[1:].removesuffix("_schema@_here_")].Config))
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


def test_a_method_from_another_package_registers_through_its_entry_point(tmp_path, monkeypatch, caplog):
    """A researcher's own package: the method module named in the ``scaleformer.methods`` entry-point group,
    its YAML in their own config folder holding only what differs from their dataclass."""
    from importlib.metadata import EntryPoint

    import scaleformer.methods as methods
    from scaleformer.compose import compose_config

    (tmp_path / "my_methods.py").write_text(
        "from dataclasses import dataclass\n"
        "from scaleformer.methods.sled import Sled, SledConfig\n\n\n"
        "@dataclass\nclass StridedConfig(SledConfig):\n    name: str = 'strided_test'\n    stride: int = 3\n\n\n"
        "class Strided(Sled):\n    name = 'strided_test'\n    Config = StridedConfig\n"
        "    small_settings = {'chunk_size': 48, 'overlap': 12}\n", encoding="utf-8")
    conf = tmp_path / "conf" / "method"
    conf.mkdir(parents=True)
    (conf / "strided_test.yaml").write_text("defaults:\n  - /strided_test_schema@_here_\n  - _self_\n\nname: strided_test\n"
                                            "overlap: 100\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [EntryPoint("strided", "my_methods", methods.PLUGIN_GROUP),
           EntryPoint("broken", "no_such_module_here", methods.PLUGIN_GROUP)]
    monkeypatch.setattr(methods, "entry_points", lambda group: [e for e in eps if e.group == group])
    try:
        assert methods.load_plugins() == ["strided_test"]
        assert "no_such_module_here" in caplog.text  # the broken one is named, the others still load
        cfg = compose_config(["method=strided_test", f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
                              "method.stride=5"]).method
        assert (cfg.overlap, cfg.stride, cfg.chunk_size) == (100, 5, 1024)
        assert type(methods.method_config(cfg)).__name__ == "StridedConfig"
    finally:
        methods.REGISTRY.pop("strided_test", None)
