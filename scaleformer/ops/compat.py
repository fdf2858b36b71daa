"""The one seam between this project and the internals of transformers, Lightning and torch.

Why: the fastest and most distinctive paths subclass or call private parts of transformers, which
move between releases (5.24 renamed the attention modules' ``past_key_values`` argument to ``cache``).
So: stock names are looked up, never imported at module level (:func:`stock`; a removed class becomes
a :class:`Missing` placeholder, not an ImportError); arguments are bound by name against the installed
signature (:func:`bind`, :func:`call`) under the names they had across releases (:data:`ALIASES`);
:mod:`scaleformer.ops.patches` registers every patch with a check of the installed release against the tested
range: where a check fails, a speed-only patch gives way to the stock path (the same tokens, slower) and says so
once; a method that cannot exist without its patch stops at start-up with one line naming the installed version.

Every place the project touches a dependency's internals (all behind this module):

- transformers: ``BartAttention`` / ``T5Attention`` forward, subclassed by the beam-shared classes (``decoding``,
  speed-only) and the retrieval layers (``retrieval``, required by unlimiformer and memorizing), calls bound by name,
  classes swapped in place; the ``EncoderDecoderCache`` / ``DynamicCache`` layout and ``crop`` (:func:`crop_cache`),
  ``generate``'s cache keyword (:func:`cache_kwarg`, :func:`dynamic_cache`), ``StaticCache`` (:func:`static_cache`);
  ``ALL_ATTENTION_FUNCTIONS``, ``AttentionInterface``, BART/T5 ``eager_attention_forward`` (:func:`attention_function`,
  :func:`register_attention`), ``config._attn_implementation`` (:func:`attn_impl`); ``BartEncoderLayer`` / ``T5Block``
  calls: the kept-positions last layer (``kept_layer``, speed-only) and MASFormer's per-layer encoder (required by
  the span methods) with ``create_bidirectional_mask``, ``T5Attention.compute_bias`` (:func:`t5_bias`),
  ``BartLearnedPositionalEmbedding``; ``activation_checkpointing_enable`` (``gradient_checkpointing_enable`` < 5.23).
- Lightning: ``tqdm_progress._update_n`` (:func:`set_progress`), ``Trainer.fit(weights_only=...)`` (:func:`fit_kwargs`),
  ``TorchCheckpointIO`` hooks (``checkpoints.py``), ``MisconfigurationException``. torch: public API (``torch.load``,
  ``checkpoint``, forward pre-hooks, ``scaled_dot_product_attention``, ``untyped_storage``, ``FlopCounterMode``) and
  the CPU attention kernels' op names (:func:`flop_counter`).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

from scaleformer.ops.binding import (  # noqa: F401
    ALIASES,
    bind,
    call,
    call_names,
    first_output,
    parameters,
    takes_var_kwargs,
)
from scaleformer.resources import installed  # noqa: F401 (compat.installed: the one version helper)

log = logging.getLogger("scaleformer")

# ------------------------------------------------------------------------------------ stock names
class Missing(nn.Module):
    """A class the installed release lacks: nothing is an instance of it, and subclasses still define."""

    missing_from: str = ""


def stock(module: str, name: str) -> Any:
    """``module.name`` from the installed release, or None when it has no such name."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def stock_class(module: str, name: str) -> type:
    """A stock class, or a :class:`Missing` placeholder of the same name."""
    if isinstance(found := stock(module, name), type):
        return found
    return type(name, (Missing,), {"missing_from": f"{module}.{name}", "__module__": __name__})


_BART = "transformers.models.bart.modeling_bart"
_T5 = "transformers.models.t5.modeling_t5"
BartAttention = stock_class(_BART, "BartAttention")
BartEncoder = stock_class(_BART, "BartEncoder")
BartEncoderLayer = stock_class(_BART, "BartEncoderLayer")
BartLearnedPositionalEmbedding = stock_class(_BART, "BartLearnedPositionalEmbedding")
T5Attention = stock_class(_T5, "T5Attention")
T5Block = stock_class(_T5, "T5Block")
T5Stack = stock_class(_T5, "T5Stack")
DynamicCache = stock_class("transformers.cache_utils", "DynamicCache")
EncoderDecoderCache = stock_class("transformers.cache_utils", "EncoderDecoderCache")
StaticCache = stock_class("transformers.cache_utils", "StaticCache")
BART_EAGER = stock(_BART, "eager_attention_forward")
T5_EAGER = stock(_T5, "eager_attention_forward")


# The roles the patched attention classes' forward is bound by (names across releases: binding.ALIASES).
BART_ROLES = ("hidden_states", "key_value_states", "cache", "attention_mask")
T5_ROLES = ("hidden_states", "attention_mask", "key_value_states", "position_bias", "cache")


def cache_kwarg(model: nn.Module) -> str:
    """The keyword ``model.generate``/``forward`` takes its cache by (``cache`` from 5.24)."""
    names = call_names(type(model).forward, ("cache",))
    return names["cache"] if names else "past_key_values"


# ------------------------------------------------------------------------------ other internals
def attn_impl(model_or_config: Any) -> str:
    """The attention implementation a model (or config) runs ("" when it says none)."""
    conf = getattr(model_or_config, "config", model_or_config)
    return str(getattr(conf, "_attn_implementation", "") or "")


def set_attn_impl(config: Any, impl: str) -> None:  # on a module's own copy of the config
    config._attn_implementation = impl


def crop_cache(cache: Any, length: int) -> None:  # 5.17's crop takes the length; 5.24 refuses it (-tokens to remove)
    if (have := cache.get_seq_length()) > length:
        try:
            cache.crop(length)
        except ValueError:
            cache.crop(length - have)


def dynamic_cache(config: Any = None) -> Any:
    """An empty ``DynamicCache`` (for ``config``'s layer types where the release takes a config)."""
    if config is not None and "config" in (parameters(DynamicCache.__init__) or {}):
        return DynamicCache(config=config)
    return DynamicCache()


def static_cache(config: Any, max_cache_len: int) -> Any:
    """An empty ``StaticCache`` of ``max_cache_len`` positions a layer (allocated at its first update), or None."""
    if isinstance(StaticCache, type) and issubclass(StaticCache, Missing):
        return None
    names = call_names(StaticCache.__init__, ("config", "max_cache_len"))
    return None if names is None else StaticCache(**{names["config"]: config, names["max_cache_len"]: max_cache_len})


# transformers' registry, looked up once: an import inside a decoding step would break its compiled graph
_ATTENTION_FUNCTIONS = stock("transformers.modeling_utils", "ALL_ATTENTION_FUNCTIONS")


def attention_function(impl: str | None, eager: Callable | None) -> Callable:
    """The attention implementation ``impl`` as transformers registered it (``eager`` for eager/None)."""
    funcs = _ATTENTION_FUNCTIONS
    if hasattr(funcs, "get_interface"):
        return funcs.get_interface(impl, eager)
    return funcs[impl] if funcs is not None and impl not in (None, "eager") and impl in funcs else eager


def register_attention(name: str, fn: Callable) -> None:  # with transformers, where it can (see PATCHES)
    if hasattr(iface := stock("transformers", "AttentionInterface"), "register"):
        iface.register(name, fn)


def bidirectional_mask(config: Any, embeds: torch.Tensor, mask: torch.Tensor) -> Any:
    """transformers' encoder mask for ``config``'s attention implementation."""
    fn = stock("transformers.masking_utils", "create_bidirectional_mask")
    return call(fn, config=config, inputs_embeds=embeds, attention_mask=mask)


def t5_bias(attn: nn.Module, queries: int, keys: int, *, past: int = 0, device: Any = None) -> torch.Tensor:
    """T5's relative-position bias ``[1, H, queries, keys]`` for queries starting at position ``past``."""
    names = call_names(type(attn).compute_bias, ("past_seen_tokens",))
    if names is None or names["past_seen_tokens"] == "past_seen_tokens":
        return attn.compute_bias(queries, keys, device=device, **({"past_seen_tokens": past} if past else {}))
    pos = torch.arange(past, past + queries, device=device or attn.relative_attention_bias.weight.device)
    return attn.compute_bias(queries, keys, device=device, cache_position=pos)


def enable_checkpointing(model: nn.Module, **kwargs: Any) -> bool:
    """Turn on activation checkpointing under the installed name (renamed in 5.23); False if none."""
    for name in ("activation_checkpointing", "gradient_checkpointing"):
        if (fn := getattr(model, f"{name}_enable", None)) is not None:
            fn(**({f"{name}_kwargs": kwargs} if kwargs else {}))
            return True
    return False


def disable_checkpointing(model: nn.Module) -> None:
    (getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable)()


# Lightning
def __getattr__(name: str) -> Any:  # compat.MisconfigurationException, looked up late (Lightning: 1.5 s)
    if name != "MisconfigurationException":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return stock("lightning.fabric.utilities.exceptions", "MisconfigurationException") or RuntimeError


def set_progress(bar: Any, n: int) -> None:
    """Move a tqdm bar to ``n`` (Lightning's private helper where it exists: it skips redundant redraws)."""
    update = stock("lightning.pytorch.callbacks.progress.tqdm_progress", "_update_n")
    with contextlib.suppress(TypeError):
        if update is not None:
            return update(bar, n)
    bar.n = n
    bar.refresh()


def grad_scaler(trainer: Any) -> Any:  # the fp16 loss scaler of a Lightning trainer (None for bf16 and fp32)
    return getattr(getattr(trainer, "precision_plugin", None), "scaler", None)


def flop_counter() -> Any:
    """torch's ``FlopCounterMode``, also counting the CPU attention kernel (torch 2.13 leaves it out: a fifth)."""
    from torch.utils import flop_counter as fc

    mapping = {}
    cpu = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if cpu is not None and cpu not in fc.flop_registry:
        mapping[cpu] = lambda q, k, v, *a, out_shape=None, **kw: fc.sdpa_flop_count(q, k, v)
        back = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward
        mapping[back] = lambda g, q, k, v, *a, out_shape=None, **kw: fc.sdpa_backward_flop_count(g, q, k, v)
    return fc.FlopCounterMode(display=False, custom_mapping=mapping)


def stance(name: str = "force_eager", **options: Any) -> contextlib.AbstractContextManager:
    """``torch.compiler.set_stance`` inside where this torch has it (else nothing). ``force_eager``: compiled modules run
    eagerly (a dispatch mode at a compiled module's first call makes dynamo skip that code for good);
    ``skip_guard_eval_unsafe``: guards only tell cached graphs apart (a loop's later calls)."""
    set_stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    usable = set_stance is not None and all(k in (parameters(set_stance) or {}) for k in options)
    return set_stance(name, **options) if usable else contextlib.nullcontext()


@contextlib.contextmanager
def eager_calls(modules: Iterable[nn.Module]) -> Iterator[None]:
    """Modules ``nn.Module.compile`` compiled are called eagerly inside (the rest untouched): a decoder compiled for
    training decodes eagerly, where every step would bring a new cache length to compile for."""
    kept = [(m, m._compiled_call_impl) for m in modules if getattr(m, "_compiled_call_impl", None) is not None]
    for m, _ in kept:
        m._compiled_call_impl = None
    try:
        yield
    finally:
        for m, impl in kept:
            m._compiled_call_impl = impl


def compiled_modules(module: nn.Module) -> int:
    """Submodules of ``module`` (itself included) that ``nn.Module.compile`` compiled in place."""
    return sum(getattr(m, "_compiled_call_impl", None) is not None for m in module.modules())


def compiled_flex(recompiles: int = 64) -> tuple[Callable, Callable]:
    """torch's ``flex_attention`` compiled, and its ``create_block_mask``. Each block mask and shape compiles a graph
    of its own; past dynamo's recompile limit (8) it would run flex eagerly, scores materialised, without a word,
    so the limit is raised to ``recompiles``."""
    from torch._dynamo import config
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    config.recompile_limit = max(config.recompile_limit, recompiles)
    return torch.compile(flex_attention, dynamic=False), create_block_mask


def compiled_graphs() -> int:
    """Graphs torch.compile has captured in this process so far (a private counter: 0 where unknown)."""
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - moved or renamed in a later torch: unknown
        return 0


def fit_kwargs(fit: Callable, **wanted: Any) -> dict[str, Any]:
    """The keywords of ``wanted`` that the installed ``Trainer.fit`` takes."""
    params = parameters(fit) or {}
    return {k: v for k, v in wanted.items() if k in params}
