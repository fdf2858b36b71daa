"""A static self-attention cache for :func:`scaleformer.ops.decoding.generate` (``generation.static_cache``).

Why: the dynamic cache grows every layer's self-attention keys/values by one position per step
(``torch.cat``: a new allocation and a copy of the whole past, per layer and step); a ``StaticCache``
allocates ``[batch x beams, heads, L, head_dim]`` once, for the whole decode, and writes each step in
place. The shapes of a decoding step are then the same at every step, which is what a CUDA graph needs.

How: a request is ``cache_implementation="static"`` (transformers' own flag, in the keywords or the
``generation_config``; :func:`generation_kwargs` makes it from a :class:`scaleformer.config.GenerationConfig`).
:func:`take_request` removes it (transformers refuses a cache together with ``cache_implementation``),
and :func:`self_cache` builds the ``StaticCache`` (``L`` = decoder prompt + ``max_new_tokens``, or
``max_length``) that :func:`~scaleformer.ops.decoding.cross_cache` puts beside the per-document
:class:`~scaleformer.ops.decoding.SharedCrossCache` in the ``EncoderDecoderCache``. The cross-attention
part stays per document, shared by the beams, as without the option.

Compilation. transformers compiles the decoding step (``torch.compile(mode="reduce-overhead")``: a CUDA
graph) on its own when the self-attention cache is static and the model is on a GPU, unless
``disable_compile``; 5.24 does so in greedy search and sampling only (its beam search calls the model
eagerly). That is a separate decision here (``generation.compile``, off by default): the graph's inputs
include the per-document cross-attention keys/values, new tensors for every batch (copied into the
graph's buffers, or a new capture), and it is unmeasured. So :func:`generation_kwargs` sets
``disable_compile`` unless asked (a direct ``generate(..., cache_implementation="static")`` keeps
transformers' default), and a CPU never compiles (transformers compiles on accelerators only;
:func:`take_request` also sets ``disable_compile`` there). The token sequences equal the dynamic cache's (tested: BART and T5, every method, greedy and
beam search, ragged batches; the gpu tier checks the compiled path on CUDA).

Fallbacks (said once): a decoder without beam-shared cross-attention (another architecture, flex
attention, ``use_cache=False``) and a release without a ``StaticCache`` of that shape run the dynamic
cache: the same tokens.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from torch import nn

from scaleformer.ops import compat

log = logging.getLogger("scaleformer")
_SAID: set[str] = set()


def generation_kwargs(g: Any) -> dict[str, Any]:
    """``model.generate`` keywords (of :class:`scaleformer.model.hf.ScaleformerForConditionalGeneration`) for a
    :class:`scaleformer.config.GenerationConfig`'s runtime options: ``step_decoding`` (scaleformer's static
    step, compiled by inductor with ``compile``), else ``static_cache`` (transformers' loop over a static cache,
    which transformers compiles on a GPU with ``compile``); none at their defaults."""
    if getattr(g, "step_decoding", False):
        return {"step_decoding": True, "compile_step": "inductor" if getattr(g, "compile", False) else None}
    if not getattr(g, "static_cache", False):
        return {}
    return {"cache_implementation": "static", "disable_compile": not getattr(g, "compile", False)}


def say_once(key: str, message: str, *args: Any) -> None:
    if key not in _SAID:
        _SAID.add(key)
        log.warning(message, *args)


def take_request(model: nn.Module, kwargs: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Whether ``kwargs`` (or their ``generation_config``) ask for a static cache, and the keywords without
    the request (the generation config copied, never changed in place). A request on a model on the CPU
    runs eager: its compile flag is dropped (transformers would compile there only if told to everywhere)."""
    gen = kwargs.get("generation_config")
    asked = kwargs.get("cache_implementation", getattr(gen, "cache_implementation", None))
    if asked != "static":
        return False, kwargs
    kwargs = {k: v for k, v in kwargs.items() if k != "cache_implementation"}
    cpu = _device_type(model) == "cpu"
    if gen is not None:  # the changes on a copy of the given config (transformers warns at keywords beside one)
        gen = kwargs["generation_config"] = copy.deepcopy(gen)
        gen.cache_implementation = None
        if cpu:
            gen.disable_compile = True
    elif cpu:
        kwargs["disable_compile"] = True
    return True, kwargs


def _device_type(model: nn.Module) -> str:
    p = next(model.parameters(), None)
    return "cpu" if p is None else p.device.type


def _setting(name: str, kwargs: dict[str, Any], model: nn.Module) -> Any:
    """A decoding setting as ``generate`` reads it: the keyword, the given generation config, the model's."""
    if kwargs.get(name) is not None:
        return kwargs[name]
    for c in (kwargs.get("generation_config"), getattr(model, "generation_config", None)):
        if getattr(c, name, None) is not None:
            return getattr(c, name)
    return None


def cache_length(model: nn.Module, kwargs: dict[str, Any]) -> int:
    """Positions the decode writes: the decoder prompt (``decoder_input_ids``, else the start token) plus
    ``max_new_tokens``, or ``max_length`` where no ``max_new_tokens`` is set (transformers' rule)."""
    prompt = kwargs.get("decoder_input_ids")
    prompt_len = 1 if prompt is None else int(prompt.shape[-1])
    if (new := _setting("max_new_tokens", kwargs, model)) is not None:
        return prompt_len + int(new)
    return max(int(_setting("max_length", kwargs, model) or 20), prompt_len + 1)


def self_cache(model: nn.Module, kwargs: dict[str, Any]) -> Any:
    """A static self-attention cache for this decode, or None (said once) where the release has none."""
    cache = compat.static_cache(model.config.get_text_config(decoder=True), cache_length(model, kwargs))
    if cache is None:
        say_once("release", "transformers %s has no StaticCache sized by max_cache_len: generation.static_cache "
                 "runs the dynamic cache instead (the same tokens)", compat.installed("transformers"))
    return cache


def fallback(why: str) -> None:
    """Say once that a static-cache request runs the dynamic cache, and why."""
    say_once(why, "generation.static_cache: %s; the dynamic cache runs instead (the same tokens)", why)
