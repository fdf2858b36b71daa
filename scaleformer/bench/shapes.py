"""Backbone shapes: an architecture without weights, and the random-weight model built from it.

Why random weights: speed and memory do not depend on weight values, and configs kept in the repo
(``scaleformer/assets/*-config.json``, ``conf/backbone``) need no hub download.
"""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from scaleformer.config import BackboneConfig
from scaleformer.errors import ConfigError
from scaleformer.model.backbone import architecture_file, prepare
from scaleformer.model.spec import BackboneSpec
from scaleformer.resources import assets_dir, conf_dir


@dataclass(frozen=True, eq=False)
class Shape:
    """A backbone's architecture without weights: its HF config and what methods need to know."""

    name: str
    arch: str  # "bart" or "t5"
    config: Any  # transformers PretrainedConfig
    spec: BackboneSpec

    def model_config(self, positions: int | None = None) -> Any:
        """The config, with BART's learned positions extended to ``positions`` when that is longer."""
        conf = copy.deepcopy(self.config)
        if self.arch == "bart" and positions and positions > conf.max_position_embeddings:
            conf.max_position_embeddings = positions
        return conf

    def dims(self) -> dict[str, int]:
        """d_model, layers, heads and FFN width, whatever the family calls them (for peers shaped alike)."""
        c = self.config
        if self.arch == "t5":
            return {"d_model": c.d_model, "encoder_layers": c.num_layers,
                    "decoder_layers": c.num_decoder_layers or c.num_layers, "heads": c.num_heads, "ffn": c.d_ff}
        return {"d_model": c.d_model, "encoder_layers": c.encoder_layers, "decoder_layers": c.decoder_layers,
                "heads": c.encoder_attention_heads, "ffn": c.encoder_ffn_dim}


ASSET_SHAPES = {
    "bart_base": ("bart", "bart-base-config.json",
                  BackboneSpec(max_positions=1024, pad_id=1, prefix_ids=(0,), suffix_ids=(2,), d_model=768)),
    # 1024-token chunks for T5 too, as conf/backbone/t5_base.yaml (relative positions: no hard limit).
    "t5_base": ("t5", "t5-base-config.json",
                BackboneSpec(max_positions=1024, pad_id=0, prefix_ids=(), suffix_ids=(1,), d_model=768)),
}


def config_from_json(arch: str, path: Path) -> Any:
    """A BartConfig/T5Config from a hand-kept config file (keys starting with '_' are comments)."""
    from transformers import BartConfig, T5Config

    return (BartConfig if arch == "bart" else T5Config)(**architecture_file(str(path)))


def load_shape(name: str) -> Shape:
    """bart_base / t5_base from the config files in scaleformer/assets; others from conf/backbone."""
    if name in ASSET_SHAPES:
        arch, file, spec = ASSET_SHAPES[name]
        return Shape(name, arch, config_from_json(arch, assets_dir() / file), spec)

    path = conf_dir() / "backbone" / f"{name}.yaml"
    if not path.exists():
        raise ConfigError(f"backbone {name!r}: no {path} and not one of {sorted(ASSET_SHAPES)}")
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(BackboneConfig), OmegaConf.load(path)))
    if cfg.pretrained is not None:
        raise ConfigError(f"backbone {name!r} is pretrained; the benchmark builds random weights from "
                          f"a config: use one of {sorted(ASSET_SHAPES)} or a random-init backbone")
    ready = prepare(cfg)
    return Shape(name, cfg.arch, ready.conf, ready.spec)


def attention_impl(attn: str, dtype: str, shape: Shape, device: torch.device) -> str:
    """sdpa everywhere; with ``auto``, flash_attention_2 for BART on CUDA in bf16/fp16 when flash_attn imports."""
    if attn != "auto":
        return attn
    if device.type == "cuda" and shape.arch == "bart" and dtype in ("bfloat16", "float16"):
        try:
            importlib.import_module("flash_attn")
            return "flash_attention_2"
        except Exception:
            pass
    return "sdpa"


def random_model(config: Any, attn: str, device: torch.device, dtype: torch.dtype, seed: int,
                 model_cls: Any = None) -> tuple[Any, str | None]:
    """A seeded random-weight model on ``device`` (every method gets the same weights), and a note when
    the requested attention implementation was refused and sdpa used instead."""
    if model_cls is None:
        from transformers import AutoModelForSeq2SeqLM as model_cls
    torch.manual_seed(seed)
    fallback = None
    with torch.device(device):
        try:
            model = model_cls.from_config(config, attn_implementation=attn) if attn else model_cls(config)
        except (ImportError, ValueError) as e:  # e.g. flash_attn imports but transformers rejects it
            if attn in ("sdpa", None):
                raise
            fallback = f"{attn} unavailable ({str(e).splitlines()[0][:200]}); sdpa used"
            model = model_cls.from_config(config, attn_implementation="sdpa")
    return model.to(dtype=dtype).eval(), fallback
