"""What the model class checks of its inputs and output flags before any work: one line naming the value,
never a failure deep inside chunking or a silently partial read.

Its own module so :mod:`scaleformer.model.hf` holds the class alone; the class calls these first in
``forward`` and ``generate``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from scaleformer.errors import ConfigError

# Output flags a plain model reads from its own config when a call does not pass them.
OUTPUT_FLAGS = ("output_attentions", "output_hidden_states", "return_dict")


def output_flags(config: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with each of :data:`OUTPUT_FLAGS` it leaves unset (absent or None) taken from ``config``, the
    model's: the backbone would otherwise read its own config, so ``model.config.output_hidden_states = True``
    or ``from_pretrained(..., output_hidden_states=True)`` gave nothing."""
    return {**kwargs, **{k: getattr(config, k, None) for k in OUTPUT_FLAGS if kwargs.get(k) is None}}


def check_inputs(call: str, input_ids: Any, attention_mask: Any = None, prefix_ids: Any = None,
                 prefix_mask: Any = None, inputs_embeds: Any = None) -> None:
    """Token ids (2-D integers), each mask of its ids' shape, a prefix per document: else one line naming the
    value. A mask shorter than the ids would read a few tokens of the document, silently; a 1-D tensor would
    fail deep inside chunking. Embeddings instead of ids are refused: a method cuts the ids into chunks and
    frames each with the backbone's special tokens, which have no place among given embeddings."""
    if input_ids is None:
        given = "inputs_embeds=<tensor>" if inputs_embeds is not None else "input_ids=None"
        raise ConfigError(f"{call}({given}): a scaleformer model reads token ids (its method chunks them and frames "
                          "each chunk with the backbone's special tokens); pass input_ids, the whole document "
                          "tokenized")
    if inputs_embeds is not None:
        raise ConfigError(f"{call}(inputs_embeds=<tensor>): a scaleformer model reads token ids only; pass "
                          "input_ids alone")
    _check_ids(call, "input_ids", input_ids)
    _check_mask(call, "attention_mask", attention_mask, "input_ids", input_ids)
    if prefix_ids is not None:
        _check_ids(call, "prefix_ids", prefix_ids)
        if prefix_ids.shape[0] != input_ids.shape[0]:
            raise ConfigError(f"{call}(prefix_ids.shape={list(prefix_ids.shape)}): needs one query per document "
                              f"of input_ids.shape={list(input_ids.shape)}")
        _check_mask(call, "prefix_mask", prefix_mask, "prefix_ids", prefix_ids)


def check_generation_numbers(gen: Any) -> None:
    """Every number of the decoding settings ``generate`` reads is finite, else one line naming it: transformers
    takes a NaN ``length_penalty`` and cuts 4-beam outputs short, with no word."""
    for key, value in gen.to_dict().items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"generate({key}={value}): must be a finite number")


def check_generate_keywords(kwargs: dict[str, Any]) -> None:
    """Decoding modes a scaleformer model cannot serve, refused in one line: transformers gives an assistant
    model the main model's input ids (or its encoder states), and the backbone's ``generate`` here gets
    neither, only the method's encoding; the assistant would read nothing of the document."""
    assistant = kwargs.get("assistant_model")
    if assistant is not None:
        raise ConfigError(f"generate(assistant_model={type(assistant).__name__}): assisted decoding is not "
                          "supported (the assistant would not see the document the method reads); decode without "
                          "it, or use prompt_lookup_num_tokens")


def check_outputs(call: str, model: Any, output_attentions: Any) -> None:
    """Attention weights only where they mean what transformers says, else one line: the decoder's under
    eager attention (sdpa returns None silently), and not under a retrieval method, whose cross-attention
    reads the keys it retrieves per query rather than the encoded positions. (Hidden states need no check:
    the decoder's come back, the method's encoding is ``encoder_last_hidden_state``; it has no per-layer
    encoder states to give.)"""
    if not output_attentions:
        return
    # deferred: ops can be half-built when the Auto registration imports this module (scaleformer.model.hf)
    from scaleformer.ops import compat

    impl = compat.attn_impl(model.backbone) or "eager"
    if impl != "eager":
        raise ConfigError(f"{call}(output_attentions=True): the backbone runs {impl!r} attention, which gives no "
                          "attention weights; load it with attn_implementation=\"eager\" to get them")
    if "retrieval_layers" in getattr(model.method, "requires", ()):
        raise ConfigError(f"{call}(output_attentions=True): method {model.method.cfg.name!r} cross-attends to the "
                          "keys it retrieves for each query, not to the encoded positions: it has no cross-attention "
                          "map over the input to return")


def _check_ids(call: str, name: str, ids: Any) -> None:
    if not isinstance(ids, torch.Tensor):
        raise ConfigError(f"{call}({name}={type(ids).__name__}): must be a torch.Tensor of token ids [batch, tokens] "
                          '(tokenizer(texts, return_tensors="pt"))')
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ConfigError(f"{call}({name}.dtype={ids.dtype}): token ids are integers (torch.long)")
    if ids.dim() != 2:
        raise ConfigError(f"{call}({name}.shape={list(ids.shape)}): must be 2-D [batch, tokens]; one document is "
                          f'{name}[None] (or tokenizer(text, return_tensors="pt"))')


def _check_mask(call: str, name: str, mask: Any, of: str, ids: torch.Tensor) -> None:
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor):
        raise ConfigError(f"{call}({name}={type(mask).__name__}): must be a torch.Tensor of {of}'s shape")
    if mask.shape != ids.shape:
        raise ConfigError(f"{call}({name}.shape={list(mask.shape)}): must equal {of}.shape={list(ids.shape)} "
                          "(one mask value per token)")

