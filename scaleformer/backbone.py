"""The model wrapper: any AutoModelForSeq2SeqLM, from the hub, a local copy, or built randomly.

Tiny random backbones (tiny_bart, tiny_t5) with the offline tokenizer make the whole pipeline run
with no hub and no GPU; `pretrained` loads exactly what a GPU user would get.
"""

from __future__ import annotations

from typing import Any

from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    BartConfig,
    PretrainedConfig,
    PreTrainedModel,
    T5Config,
)

from scaleformer.config import BackboneConfig, ConfigError
from scaleformer.hub import HubUnreachableError, is_local, unreachable_message, unreachable_reason
from scaleformer.methods.base import BackboneSpec

_LOCAL_HINT = ("Download it on a connected machine (`hf download {id} --local-dir DIR`) and set "
               "backbone.pretrained=DIR (and backbone.tokenizer=DIR), or use backbone=tiny_bart / tiny_t5.")


def _from_hub(loader: Any, ident: str, what: str, **kwargs: Any) -> Any:
    """Load from a local path, the hub, or (offline) the local HF cache; fail fast with a clear message."""
    if is_local(ident):
        return loader(ident, **kwargs)
    why = unreachable_reason()
    if why is None:
        return loader(ident, **kwargs)
    try:
        return loader(ident, local_files_only=True, **kwargs)
    except OSError:
        raise HubUnreachableError(unreachable_message(what, ident, why, _LOCAL_HINT.format(id=ident))) from None


def load_tokenizer(cfg: BackboneConfig) -> Any:
    name = cfg.tokenizer or cfg.pretrained
    if name is None or name == "offline":
        from scaleformer.tokenizer import load_offline_tokenizer

        return load_offline_tokenizer(cfg.arch or "bart")
    return _from_hub(AutoTokenizer.from_pretrained, name, "tokenizer")


def model_config(cfg: BackboneConfig, tokenizer: Any) -> PretrainedConfig:
    """The model's config without its weights, so methods can be checked before the heavy load."""
    if cfg.pretrained is not None:
        conf = _from_hub(AutoConfig.from_pretrained, cfg.pretrained, "model config")
        for k, v in cfg.model_kwargs.items():
            setattr(conf, k, v)
        return conf
    ids = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    if cfg.arch == "bart":
        ids |= {"bos_token_id": tokenizer.bos_token_id, "decoder_start_token_id": tokenizer.eos_token_id,
                "forced_eos_token_id": tokenizer.eos_token_id}
        return BartConfig(**(ids | dict(cfg.model_kwargs)))
    ids |= {"decoder_start_token_id": tokenizer.pad_token_id}
    return T5Config(**(ids | dict(cfg.model_kwargs)))


def max_positions(cfg: BackboneConfig, conf: PretrainedConfig) -> int:
    if cfg.max_positions is not None:
        return cfg.max_positions
    for key in ("max_position_embeddings", "n_positions"):
        if getattr(conf, key, None):
            return int(getattr(conf, key))
    raise ConfigError(f"backbone.max_positions=None: the model config of {cfg.name!r} has no "
                      "max_position_embeddings; set backbone.max_positions")


def backbone_spec(cfg: BackboneConfig, tokenizer: Any, conf: PretrainedConfig) -> BackboneSpec:
    from scaleformer.tokenizer import special_token_ids

    prefix, suffix = special_token_ids(tokenizer)
    return BackboneSpec(
        max_positions=max_positions(cfg, conf), pad_id=tokenizer.pad_token_id, prefix_ids=tuple(prefix),
        suffix_ids=tuple(suffix), d_model=int(getattr(conf, "d_model", 0) or getattr(conf, "hidden_size", 0)),
        n_encoder_layers=int(getattr(conf, "encoder_layers", 0) or getattr(conf, "num_layers", 0)),
        n_decoder_layers=int(getattr(conf, "decoder_layers", 0) or getattr(conf, "num_decoder_layers", 0)
                             or getattr(conf, "num_layers", 0)),
    )


def build_model(cfg: BackboneConfig, conf: PretrainedConfig) -> PreTrainedModel:
    kwargs: dict[str, Any] = {}
    if cfg.attn_implementation:
        kwargs["attn_implementation"] = cfg.attn_implementation
    if cfg.pretrained is not None:
        model = _from_hub(AutoModelForSeq2SeqLM.from_pretrained, cfg.pretrained, "model", config=conf, **kwargs)
    else:
        model = AutoModelForSeq2SeqLM.from_config(conf, **kwargs)
    if cfg.gradient_checkpointing:
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    return model
