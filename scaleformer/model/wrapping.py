"""``wrap``: any loaded Hugging Face seq2seq model as a
:class:`~scaleformer.model.hf.ScaleformerForConditionalGeneration` reading long inputs through a method (a
decoder-only causal LM, as a :class:`~scaleformer.model.hf_causal.ScaleformerForCausalLM` through a span method).

Apart from :mod:`scaleformer.model.hf` because it composes method options and builds methods: the
model class itself must import without the methods (see the note there), this module need not.
"""

from __future__ import annotations

from os import PathLike
from typing import Any

from omegaconf import OmegaConf
from transformers import PretrainedConfig, PreTrainedModel

from scaleformer.compose import compose_config
from scaleformer.config import BackboneConfig
from scaleformer.errors import ConfigError
from scaleformer.methods import build_method, method_config
from scaleformer.model.backbone import backbone_spec, check_positions
from scaleformer.model.hf import ScaleformerForConditionalGeneration
from scaleformer.model.hf_causal import ScaleformerForCausalLM
from scaleformer.model.hf_config import learned_positions
from scaleformer.model.spec import BackboneSpec
from scaleformer.model.tokenizer import NO_LIMIT
from scaleformer.resources import group_options


def spec_for(model: PreTrainedModel, tokenizer: Any = None, max_positions: int | None = None) -> BackboneSpec:
    """The facts a method needs about a loaded backbone; the tokenizer gives its special ids (else the
    config's: ``<bos> ... <eos>`` when it has a BOS id, ``... <eos>`` otherwise, as BART and T5 do)."""
    conf = model.config
    bcfg = BackboneConfig(name=getattr(conf, "name_or_path", None) or conf.model_type, pretrained="wrapped",
                          max_positions=max_positions)
    check_positions(bcfg, conf)
    if max_positions is None and learned_positions(conf) is None:
        raise ConfigError(f"wrap(max_positions=None): {conf.model_type} uses relative positions, so its window "
                          "is a choice: pass max_positions (the paper's chunks are 1024 tokens)")
    if tokenizer is None:
        tokenizer = _ConfigTokens(conf)
    pad = tokenizer.pad_token_id
    if not isinstance(pad, int) or isinstance(pad, bool):  # chunks are padded with it
        source = f"tokenizer={type(tokenizer).__name__}" if not isinstance(tokenizer, _ConfigTokens) else "tokenizer=None"
        raise ConfigError(f"wrap({source}): no padding token (pad_token_id={pad!r}); set one "
                          "(tokenizer.pad_token = tokenizer.eos_token), or pass a tokenizer that has one")
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
         max_positions: int | None = None, **method_params: Any) -> ScaleformerForConditionalGeneration | ScaleformerForCausalLM:
    """Any loaded seq2seq model, reading long inputs through ``method``; its weights are shared, not copied.

    ``method`` names an option of ``conf/method/`` (``sled``, ``scaleformer_middle``, ...) or is a
    method config dict; ``method_params`` change its parameters (``middle_tokens=100``).
    ``max_positions`` is the encoder's window (default: the model's learned positions; T5 needs it).
    A ``tokenizer`` given here stops claiming the window as its ``model_max_length`` (the wrapped model
    reads whole documents; the claim only warned on each long one): cut with ``max_length=N`` when wanted.
    """
    check_arguments(model, method, tokenizer, max_positions)
    mcfg = method_config(_method_dict(method, method_params))
    cls = ScaleformerForConditionalGeneration if model.config.is_encoder_decoder else ScaleformerForCausalLM
    wrapped = cls.from_parts(model, build_method(mcfg, spec_for(model, tokenizer, max_positions)))
    if isinstance(getattr(tokenizer, "model_max_length", None), int):
        tokenizer.model_max_length = NO_LIMIT
    return wrapped


def check_arguments(model: Any, method: Any, tokenizer: Any, max_positions: Any) -> None:
    """``wrap``'s arguments, each refused in one line naming the value (before any config is composed):
    a wrong type would otherwise fail deep inside the config checks or the special-token probe."""
    if isinstance(model, ScaleformerForConditionalGeneration | ScaleformerForCausalLM):
        name = model.config.method.get("name") if isinstance(model.config.method, dict) else None
        raise ConfigError(f"wrap(model={type(model).__name__}): already wrapped (method {name!r}), and its backbone is "
                          "patched for that method: wrap a freshly loaded backbone "
                          "(AutoModelForSeq2SeqLM.from_pretrained(...)) to read it through another method")
    if not isinstance(model, PreTrainedModel):
        raise ConfigError(f"wrap(model={type(model).__name__}): needs a loaded Hugging Face encoder-decoder "
                          "(e.g. AutoModelForSeq2SeqLM.from_pretrained(...)) or causal LM")
    if isinstance(method, str):
        if method not in (options := group_options("method")):
            raise ConfigError(f"wrap(method={method!r}): not an option of conf/method/; choose one of "
                              f"{', '.join(options)} (or pass a method config dict)")
    elif not isinstance(method, dict):
        raise ConfigError(f"wrap(method={method!r}): names an option of conf/method/ ('sled', 'scaleformer_middle', "
                          "...) or is a method config dict ({'name': 'sled', ...})")
    if max_positions is not None and (not isinstance(max_positions, int) or isinstance(max_positions, bool)
                                      or max_positions < 1):
        raise ConfigError(f"wrap(max_positions={max_positions!r}): must be a positive integer (the encoder's window "
                          "in tokens, e.g. 1024) or None")
    if isinstance(tokenizer, str | PathLike):
        raise ConfigError(f"wrap(tokenizer={str(tokenizer)!r}): a tokenizer object is expected, not its name: pass "
                          f"tokenizer=AutoTokenizer.from_pretrained({str(tokenizer)!r})")
    if tokenizer is not None and not callable(tokenizer):
        raise ConfigError(f"wrap(tokenizer={type(tokenizer).__name__}): a tokenizer object is expected: pass "
                          "tokenizer=AutoTokenizer.from_pretrained(...) (or none: the model config's special ids)")


def _method_dict(method: str | dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    if isinstance(method, dict):
        return {**method, **params}
    option = OmegaConf.to_container(compose_config([f"method={method}"]).method, resolve=True)
    return {**option, **params}
