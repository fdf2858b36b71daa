"""The config of :class:`scaleformer.model.hf.ScaleformerForConditionalGeneration`: a backbone's config
plus the long-context method that reads its inputs.

Its own module so that registering it with ``AutoConfig`` (:mod:`scaleformer.model.autoreg`) needs no
model code. :func:`learned_positions` (the input positions a backbone's config has embeddings for) lives
here too, so the model class checks its window without importing the backbone loader, and so does
:func:`check_config`: config.json's parts present and typed, which the model class runs before it builds
anything (a missing method section must not load as truncation, a mistyped spec fail deep in chunking).

The config holds the backbone's config rather than being it, yet transformers asks the model's config the
text questions (``vocab_size``, ``get_text_config()``, special ids: ``compute_transition_scores``,
``resize_token_embeddings``, the Trainer's token alignment). Each is answered from ``backbone``, the one
copy (:data:`BACKBONE_KEYS`, :data:`DECODER_SIZES`): nothing is mirrored into config.json, so nothing drifts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from transformers import AutoConfig, PretrainedConfig

from scaleformer.errors import ConfigError, check
from scaleformer.model.spec import BackboneSpec

# Where a loaded config comes from: every message about it names the file.
CONFIG_FILE = "config.json"
# What transformers reads (and writes: resize_token_embeddings sets vocab_size) on the model's config,
# kept on the backbone's: reading or setting one here reads or sets the backbone's.
BACKBONE_KEYS = ("vocab_size", "pad_token_id", "eos_token_id", "bos_token_id", "decoder_start_token_id", "use_cache")
# The decoder's sizes (transformers' generic names), read from the backbone's decoder text config.
DECODER_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads")
# The context a client may give the model (lm-evaluation-harness, pipelines read these names): a decoder-only
# method's sequence (``method.max_length``, its positions duplicated up to it), else the backbone's own.
CONTEXT_KEYS = ("max_position_embeddings", "n_positions")


class ScaleformerConfig(PretrainedConfig):
    """A backbone's config plus the long-context method that reads its inputs (each part as config.json
    has it; :func:`check_config` refuses a missing or mistyped one when the model class is built)."""

    model_type = "scaleformer"

    def __init__(self, backbone: PretrainedConfig | dict[str, Any] | None = None,
                 method: dict[str, Any] | None = None, spec: dict[str, Any] | None = None, **kwargs: Any) -> None:
        # Kept as read, whatever it is: check_config (the model class, on load) refuses a missing or
        # mistyped part in one line; defaulting or converting here would load the wrong model silently.
        self.backbone = _backbone_config(backbone)
        self.method = dict(method) if isinstance(method, dict) else method
        self.spec = dict(spec) if isinstance(spec, dict) else spec
        # Top-level copies (config.json files written before these keys were delegated mirror the
        # backbone's; a caller's own value sets the backbone's); sizes belong to the backbone alone.
        given = {k: kwargs.pop(k) for k in (*BACKBONE_KEYS, *DECODER_SIZES, *CONTEXT_KEYS) if k in kwargs}
        # what the backbone is: a decoder-only one makes a causal LM (generation asks for no decoder_input_ids)
        kwargs["is_encoder_decoder"] = not isinstance(self.backbone, PretrainedConfig) or bool(
            getattr(self.backbone, "is_encoder_decoder", False))
        if isinstance(self.backbone, PretrainedConfig):
            # transformers sets these on every sub-config as it builds this one (None when not asked): a
            # backbone that runs eager attention keeps it unless the caller asks for another
            for key in ("attn_implementation", "experts_implementation"):
                if kwargs.get(key) is None:
                    kwargs[key] = getattr(self.backbone, f"_{key}", None)
        super().__init__(**kwargs)
        if isinstance(self.backbone, PretrainedConfig):
            for key, value in given.items():
                if key in BACKBONE_KEYS and value is not None:
                    setattr(self.backbone, key, value)

    @property
    def sub_configs(self) -> dict[str, Any]:
        """The backbone's config as a sub-config, so that what transformers sets on a model's configs reaches
        it: ``attn_implementation`` (``from_pretrained(..., attn_implementation="eager")``,
        ``set_attn_implementation``) and ``dtype``. Empty while the backbone section is not a config yet
        (check_config names what is wrong with it)."""
        return {"backbone": AutoConfig} if isinstance(self.__dict__.get("backbone"), PretrainedConfig) else {}

    def get_text_config(self, decoder: bool | None = None, encoder: bool | None = None) -> PretrainedConfig:
        """The backbone's text config (its decoder's with ``decoder=True``): what transformers' generation,
        resizing and caches read."""
        if isinstance(self.backbone, PretrainedConfig):
            return self.backbone.get_text_config(decoder=decoder, encoder=encoder)
        return super().get_text_config(decoder=decoder, encoder=encoder)

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


def _backbone_key(key: str) -> property:
    """``config.<key>`` is ``config.backbone.<key>``, read and set (None without a backbone config)."""
    def get(self: ScaleformerConfig) -> Any:
        return getattr(self.backbone, key, None) if isinstance(self.backbone, PretrainedConfig) else None

    def put(self: ScaleformerConfig, value: Any) -> None:
        if not isinstance(self.backbone, PretrainedConfig):
            raise ConfigError(f"config.{key}={value!r}: the config has no backbone config to set it on")
        setattr(self.backbone, key, value)
    return property(get, put, doc=f"The backbone's {key} (config.backbone.{key}).")


def _decoder_size(key: str) -> property:
    """``config.<key>``: the backbone decoder's, read only (its config says which field holds it)."""
    def get(self: ScaleformerConfig) -> Any:
        if not isinstance(self.backbone, PretrainedConfig):
            return None
        return getattr(self.backbone.get_text_config(decoder=True), key, None)

    def put(self: ScaleformerConfig, value: Any) -> None:
        raise ConfigError(f"config.{key}={value!r}: a size of the backbone; set it on config.backbone (before the "
                          "model is built)")
    return property(get, put, doc=f"The backbone decoder's {key}, read only.")


def _context_length(key: str) -> property:
    """``config.<key>``: the longest sequence the model reads, read only (a setting of the method or backbone)."""
    def get(self: ScaleformerConfig) -> Any:
        backbone = self.backbone if isinstance(self.backbone, PretrainedConfig) else None
        method = self.method if isinstance(self.method, dict) else {}
        if backbone is not None and not getattr(backbone, "is_encoder_decoder", False) and method.get("max_length"):
            return int(method["max_length"])
        return getattr(backbone, key, None) if backbone is not None else None

    def put(self: ScaleformerConfig, value: Any) -> None:
        raise ConfigError(f"config.{key}={value!r}: the model's context is its method's (method.max_length) or its "
                          "backbone's positions; set those before the model is built")
    return property(get, put, doc=f"The longest sequence the model reads ({key}).")


for _key in BACKBONE_KEYS:
    setattr(ScaleformerConfig, _key, _backbone_key(_key))
for _key in CONTEXT_KEYS:
    setattr(ScaleformerConfig, _key, _context_length(_key))
for _key in DECODER_SIZES:
    setattr(ScaleformerConfig, _key, _decoder_size(_key))


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


def _backbone_config(backbone: Any) -> Any:
    """The backbone's config object from config.json's mapping; anything else as it came (check_config
    names what is wrong with it)."""
    if not isinstance(backbone, dict) or not isinstance(backbone.get("model_type"), str):
        return backbone
    try:
        return AutoConfig.for_model(**backbone)
    except Exception:  # an unknown model type or a field its config refuses: check_config says which
        return backbone


def check_config(config: ScaleformerConfig) -> None:
    """config.json as one record: the backbone's config, the method section and the spec present and well
    typed, the window within the backbone's positions. Here, in what the model class builds from, so
    ``AutoModelForSeq2SeqLM``, the ``Summarizer`` and ``wrap`` refuse a file alike, before any weight loads
    (the method's own settings are checked where the method is built)."""
    _check_backbone(config.backbone)
    method = config.method
    if method is None:
        raise ConfigError(f'{CONFIG_FILE}: no "method" section, so nothing says how the model reads long inputs: '
                          'export the model again (a model that reads the first window only says "method": '
                          '{"name": "truncation"})')
    if not isinstance(method, dict):
        raise ConfigError(f"{CONFIG_FILE}: method={method!r}: must be a mapping of the method's settings with its "
                          'name, e.g. {"name": "sled", "chunk_size": 1024, ...}')
    check_spec(config.spec, config.backbone)
    check_window(config)


def _check_backbone(backbone: Any) -> None:
    if isinstance(backbone, PretrainedConfig):
        return
    if backbone is None:
        raise ConfigError(f'{CONFIG_FILE}: no "backbone" section (the backbone\'s own config): export the model again')
    model_type = backbone.get("model_type") if isinstance(backbone, dict) else None
    if not isinstance(model_type, str):
        shown = f"a {type(backbone).__name__}" if not isinstance(backbone, dict) else "a mapping without model_type"
        raise ConfigError(f"{CONFIG_FILE}: backbone is {shown}: it must be the backbone's config, a mapping with "
                          'its model_type (e.g. "bart")')
    try:
        AutoConfig.for_model(**backbone)
    except Exception as e:
        why = (str(e).strip().splitlines() or [type(e).__name__])[0].split(". ")[0]  # not the list of every type
        why = why if len(why) <= 160 else f"{why[:157]}..."
        raise ConfigError(f"{CONFIG_FILE}: backbone.model_type={model_type!r}: transformers cannot build this "
                          f"config ({why})") from None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_spec(spec: Any, backbone: PretrainedConfig) -> None:
    """The :class:`BackboneSpec` facts have their types, and the special ids are token ids of the
    backbone's vocabulary (a wrong one would surface deep inside chunking or the embedding)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"{CONFIG_FILE}: spec={spec!r}: must be a mapping of the backbone's facts (max_positions, "
                          "pad_id, prefix_ids, suffix_ids, ...): export the model again")
    if "pad_id" not in spec:
        raise ConfigError(f"{CONFIG_FILE}: spec.pad_id: missing (the padding token's id): export the model again")
    vocab = getattr(backbone, "vocab_size", None)
    for field in dataclasses.fields(BackboneSpec):
        key, value = f"{CONFIG_FILE}: spec.{field.name}", spec.get(field.name)
        if field.name not in spec or field.name == "max_positions":  # the window: check_window
            continue
        if field.name in ("prefix_ids", "suffix_ids"):
            check(isinstance(value, list | tuple) and all(map(_is_int, value)), key, value,
                  "must be a list of token ids (e.g. [0])")
            ids = list(value)
        elif field.name == "pad_id":
            check(_is_int(value), key, value, "must be an integer token id")
            ids = [value]
        elif field.type in (bool, "bool"):
            check(isinstance(value, bool), key, value, "must be true or false")
            continue
        else:
            check(_is_int(value) and value >= 0, key, value, "must be a non-negative integer")
            continue
        check(all(i >= 0 for i in ids), key, value, "token ids are >= 0")
        outside = [i for i in ids if _is_int(vocab) and i >= vocab]
        check(not outside, key, value, f"{outside[0] if outside else ''} is not a token id of the backbone's "
                                       f"{vocab}-token vocabulary (backbone.vocab_size)")


def check_window(config: ScaleformerConfig) -> None:
    """The method's window fits the backbone's learned positions (a tampered or mistyped config would
    otherwise fail deep inside the embedding with an IndexError)."""
    window = config.spec.get("max_positions")
    learned = learned_positions(config.backbone) if config.backbone is not None else None
    if not _is_int(window) or window < 1:
        raise ConfigError(f"{CONFIG_FILE}: spec.max_positions={window!r}: must be a positive integer")
    if learned is not None and window > learned[1]:
        raise ConfigError(f"{CONFIG_FILE}: spec.max_positions={window} is above the {learned[1]} positions the "
                          f"backbone's weights have ({learned[0]}); the config does not belong to these weights")


# Registered on import (see scaleformer.model.autoreg): AutoConfig reads model_type "scaleformer".
AutoConfig.register(ScaleformerConfig.model_type, ScaleformerConfig, exist_ok=True)
