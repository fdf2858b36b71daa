"""The method travels with the model: a Hugging Face config and model class for every method.

Why: a long-context method that lives only inside this framework's training loop is lost the moment
the model leaves it (plain ``AutoModelForSeq2SeqLM`` code gets the bare backbone: BART fails past its
positions, T5 silently attends over everything). :class:`ScaleformerForConditionalGeneration` holds
the backbone and the method together, so ``forward`` (teacher forcing, ``labels``) and ``generate``
run the method wherever the model goes: this framework's Lightning module and ``Summarizer``, the
benchmark, Hugging Face's ``Seq2SeqTrainer``, or ``AutoModelForSeq2SeqLM.from_pretrained`` after
``import scaleformer`` (the Auto registration is :mod:`scaleformer.model.autoreg`).

Like SLED's ``py-sled`` (Mivg/SLED ``sled/configuration_sled.py``, ``modeling_sled.py``), the config
holds the backbone's config; unlike it, the backbone's weights live under one ``backbone.`` prefix
with nothing renamed, and the parameters a method adds (Memorizing's gate) are ordinary weights of
the same file, so loading reports no missing or unexpected keys.

- :class:`ScaleformerConfig` (``model_type="scaleformer"``): ``backbone`` (the backbone's config),
  ``method`` (the method's validated config, e.g. ``{"name": "scaleformer", "middle_tokens": 64}``)
  and ``spec`` (the :class:`~scaleformer.methods.base.BackboneSpec` facts: positions, special ids);
- :func:`wrap`: any loaded seq2seq model (+ its tokenizer) to that class, sharing its weights.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoModelForSeq2SeqLM, GenerationMixin, PretrainedConfig, PreTrainedModel

from scaleformer.errors import ConfigError
from scaleformer.model.hf_config import ScaleformerConfig

# The methods and ops are imported where used: this module is imported by the Auto registration,
# which can run while transformers is first imported from inside those very packages.
if TYPE_CHECKING:
    from scaleformer.methods.base import BackboneSpec, Encoded, Method


class ScaleformerForConditionalGeneration(PreTrainedModel, GenerationMixin):
    """A seq2seq backbone whose encoder side is a long-context method (``self.method``).

    ``forward(input_ids, attention_mask, labels)`` encodes the long input with the method (chunks,
    fusion, kept positions, datastores) and runs the backbone's decoder on the result;
    ``generate(input_ids, attention_mask)`` does the same, then decodes with beam-shared
    cross-attention (:mod:`scaleformer.ops.decoding`). A query (QA tasks) rides along as
    ``prefix_ids`` / ``prefix_mask``, which both accept, so Seq2SeqTrainer's predict loop keeps it.
    """

    config_class = ScaleformerConfig
    base_model_prefix = "scaleformer"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True

    def __init__(self, config: ScaleformerConfig, backbone: PreTrainedModel | None = None,
                 method: Method | None = None) -> None:
        from scaleformer.methods import build_method, method_config

        super().__init__(config)
        check_window(config)
        if backbone is None:
            backbone = AutoModelForSeq2SeqLM.from_config(config.backbone)
        self.backbone = backbone
        self.method: Method = method or build_method(method_config(config.method), config.backbone_spec)
        self.post_init()
        # After post_init, which initialises every module not yet initialised: a method's new modules
        # (MASFormer's tiled position table) carry copied weights that must survive it.
        if self.method.wrap(backbone) is not backbone:
            raise TypeError(f"method {config.method.get('name')!r}: wrap() must patch the model in place")

    @classmethod
    def from_parts(cls, backbone: PreTrainedModel, method: Method) -> ScaleformerForConditionalGeneration:
        """A backbone (weights shared) read through a built method: how runs and :func:`wrap` make one."""
        config = ScaleformerConfig(backbone=backbone.config, method=dataclasses.asdict(method.cfg),
                                   spec=dataclasses.asdict(method.spec))
        model = cls(config, backbone=backbone, method=method)
        model.generation_config = copy.deepcopy(backbone.generation_config)  # the backbone's decoding settings
        return model.train(backbone.training)

    def _init_weights(self, module: torch.nn.Module) -> None:
        self.backbone._init_weights(module)

    def get_encoder(self) -> torch.nn.Module:
        return self.backbone.get_encoder()

    def get_decoder(self) -> torch.nn.Module:
        return self.backbone.get_decoder()

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value: torch.nn.Module) -> None:
        self.backbone.set_input_embeddings(value)

    def get_output_embeddings(self) -> torch.nn.Module | None:
        return self.backbone.get_output_embeddings()

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
               prefix_ids: torch.Tensor | None = None, prefix_mask: torch.Tensor | None = None,
               training: bool | None = None) -> Encoded:
        """What the decoder cross-attends to: the method's states ``[batch, T, d]`` and mask ``[batch, T]``."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        return self.method.encode(self.backbone.get_encoder(), input_ids, attention_mask,
                                  training=self.training if training is None else training,
                                  prefix_ids=prefix_ids, prefix_mask=prefix_mask)

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                decoder_input_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                encoder_outputs: Any = None, prefix_ids: torch.Tensor | None = None,
                prefix_mask: torch.Tensor | None = None, **kwargs: Any) -> Any:
        """The backbone's seq2seq forward on the method's encoding (``labels`` give the loss)."""
        if encoder_outputs is None:
            if input_ids is None:
                raise ValueError("forward needs input_ids (or encoder_outputs from encode())")
            enc = self.encode(input_ids, attention_mask, prefix_ids=prefix_ids, prefix_mask=prefix_mask)
            encoder_outputs, attention_mask = (enc.hidden,), enc.mask
        return self.backbone(encoder_outputs=encoder_outputs, attention_mask=attention_mask,
                             decoder_input_ids=decoder_input_ids, labels=labels, **kwargs)

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 prefix_ids: torch.Tensor | None = None, prefix_mask: torch.Tensor | None = None,
                 generation_config: Any = None, **kwargs: Any) -> Any:
        """Token ids of the method's summaries; decoding settings from ``generation_config`` (default:
        this model's ``generation_config.json``), keywords override them as in ``model.generate``."""
        if input_ids is None:
            raise ValueError("generate needs input_ids: the long documents, tokenized")
        from scaleformer.ops import decoding

        gen = copy.deepcopy(generation_config or self.generation_config)
        kwargs = gen.update(**kwargs)  # decoding keywords into the copy; the rest are model inputs
        enc = self.encode(input_ids, attention_mask, prefix_ids=prefix_ids, prefix_mask=prefix_mask, training=False)
        return decoding.generate(self.backbone, enc.hidden, enc.mask, generation_config=gen, **kwargs)


def check_window(config: ScaleformerConfig) -> None:
    """The method's window fits the backbone's learned positions (a tampered or mistyped config would
    otherwise fail deep inside the embedding with an IndexError)."""
    from scaleformer.model.backbone import learned_positions

    window = config.spec.get("max_positions")
    learned = learned_positions(config.backbone) if config.backbone is not None else None
    if not isinstance(window, int) or window < 1:
        raise ConfigError(f"config.json: spec.max_positions={window!r}: must be a positive integer")
    if learned is not None and window > learned[1]:
        raise ConfigError(f"config.json: spec.max_positions={window} is above the {learned[1]} positions the "
                          f"backbone's weights have ({learned[0]}); the config does not belong to these weights")


def summaries(model: ScaleformerForConditionalGeneration, tokenizer: Any, g: Any, input_ids: torch.Tensor,
              attention_mask: torch.Tensor | None = None, prefix_ids: torch.Tensor | None = None,
              prefix_mask: torch.Tensor | None = None) -> list[str]:
    """Decoded summaries of a batch under a :class:`scaleformer.config.GenerationConfig`: the one place
    training runs, evaluation and the Summarizer decode, so they decode alike."""
    from scaleformer.ops import decoding

    out = model.generate(input_ids, attention_mask, prefix_ids=prefix_ids, prefix_mask=prefix_mask,
                         **decoding.generation_kwargs(g))
    return tokenizer.batch_decode(out, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def spec_for(model: PreTrainedModel, tokenizer: Any = None, max_positions: int | None = None) -> BackboneSpec:
    """The facts a method needs about a loaded backbone; the tokenizer gives its special ids (else the
    config's: ``<bos> ... <eos>`` when it has a BOS id, ``... <eos>`` otherwise, as BART and T5 do)."""
    from scaleformer.config import BackboneConfig
    from scaleformer.model.backbone import backbone_spec, check_positions, learned_positions

    conf = model.config
    bcfg = BackboneConfig(name=getattr(conf, "name_or_path", None) or conf.model_type, pretrained="wrapped",
                          max_positions=max_positions)
    check_positions(bcfg, conf)
    if max_positions is None and learned_positions(conf) is None:
        raise ConfigError(f"wrap(max_positions=None): {conf.model_type} uses relative positions, so its window "
                          "is a choice: pass max_positions (the paper's chunks are 1024 tokens)")
    if tokenizer is None:
        tokenizer = _ConfigTokens(conf)
    return backbone_spec(bcfg, tokenizer, conf)


class _ConfigTokens:
    """Stands in for a tokenizer when :func:`wrap` gets none: special ids from the model config."""

    def __init__(self, conf: PretrainedConfig) -> None:
        self.pad_token_id = conf.pad_token_id
        bos = getattr(conf, "bos_token_id", None)
        self._prefix = [] if bos is None or bos == conf.pad_token_id else [bos]
        self._suffix = [] if conf.eos_token_id is None else [conf.eos_token_id]

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        body = [7] * max(1, len(text.split()))  # any ids: only where the special ids sit matters
        return {"input_ids": (self._prefix + body + self._suffix) if add_special_tokens else body}


def wrap(model: PreTrainedModel, method: str | dict[str, Any] = "scaleformer_middle", tokenizer: Any = None,
         max_positions: int | None = None, **method_params: Any) -> ScaleformerForConditionalGeneration:
    """Any loaded seq2seq model, reading long inputs through ``method``; its weights are shared, not copied.

    ``method`` names an option of ``conf/method/`` (``sled``, ``scaleformer_middle``, ...) or is a
    method config dict; ``method_params`` change its parameters (``middle_tokens=100``).
    ``max_positions`` is the encoder's window (default: the model's learned positions; T5 needs it).
    """
    from scaleformer.methods import build_method, method_config

    if not isinstance(model, PreTrainedModel) or not getattr(model.config, "is_encoder_decoder", False):
        raise ConfigError(f"wrap(model={type(model).__name__}): needs a loaded Hugging Face encoder-decoder "
                          "(e.g. AutoModelForSeq2SeqLM.from_pretrained(...))")
    mcfg = method_config(_method_dict(method, method_params))
    return ScaleformerForConditionalGeneration.from_parts(model, build_method(mcfg, spec_for(model, tokenizer,
                                                                                             max_positions)))


def _method_dict(method: str | dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    if isinstance(method, dict):
        return {**method, **params}
    from omegaconf import OmegaConf

    from scaleformer.compose import compose_config

    option = OmegaConf.to_container(compose_config([f"method={method}"]).method, resolve=True)
    return {**option, **params}


# Registered on import (see scaleformer.model.autoreg): AutoModelForSeq2SeqLM builds this class for
# model_type "scaleformer".
AutoModelForSeq2SeqLM.register(ScaleformerConfig, ScaleformerForConditionalGeneration, exist_ok=True)
