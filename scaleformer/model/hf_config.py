"""The config of :class:`scaleformer.model.hf.ScaleformerForConditionalGeneration`: a backbone's config
plus the long-context method that reads its inputs.

Its own module so that registering it with ``AutoConfig`` (:mod:`scaleformer.model.autoreg`) needs no
model code. :func:`learned_positions` (the input positions a backbone's config has embeddings for) lives
here too, so the model class checks its window without importing the backbone loader.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from transformers import AutoConfig, PretrainedConfig

from scaleformer.model.spec import BackboneSpec

# Backbone token ids the top-level config mirrors, so generation and Trainer read them where they look.
_TOKEN_KEYS = ("pad_token_id", "eos_token_id", "bos_token_id", "decoder_start_token_id")


class ScaleformerConfig(PretrainedConfig):
    """A backbone's config plus the long-context method that reads its inputs."""

    model_type = "scaleformer"

    def __init__(self, backbone: PretrainedConfig | dict[str, Any] | None = None,
                 method: dict[str, Any] | None = None, spec: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if isinstance(backbone, dict):
            backbone = AutoConfig.for_model(**backbone)
        self.backbone = backbone
        self.method = dict(method or {"name": "truncation"})
        self.spec = dict(spec or {})
        for key in _TOKEN_KEYS:
            if kwargs.get(key) is None and backbone is not None:
                kwargs[key] = getattr(backbone, key, None)
        kwargs["is_encoder_decoder"] = True
        super().__init__(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if isinstance(self.backbone, PretrainedConfig):
            out["backbone"] = self.backbone.to_dict()
        return out

    @property
    def backbone_spec(self) -> BackboneSpec:
        fields = {f.name for f in dataclasses.fields(BackboneSpec)}
        spec = {k: (tuple(v) if isinstance(v, list) else v) for k, v in self.spec.items() if k in fields}
        return BackboneSpec(**spec)


def learned_positions(conf: PretrainedConfig) -> tuple[str, int] | None:
    """The config key and number of input positions the encoder has embeddings for; None for relative
    positions (the T5 family), which have no hard limit.

    BART-like models index a table of ``max_position_embeddings`` (LED: ``max_encoder_position_embeddings``)
    rows, so a longer input fails with an IndexError deep inside the first forward pass.
    """
    if getattr(conf, "relative_attention_num_buckets", None):
        return None
    for key in ("max_encoder_position_embeddings", "max_position_embeddings", "n_positions"):
        value = getattr(conf, key, None)
        if value:
            return key, int(value)
    return None


# Registered on import (see scaleformer.model.autoreg): AutoConfig reads model_type "scaleformer".
AutoConfig.register(ScaleformerConfig.model_type, ScaleformerConfig, exist_ok=True)
