"""The model wrapper: any AutoModelForSeq2SeqLM (or, for MASFormer as its paper runs it, an AutoModelForCausalLM),
from the hub, a local copy, or built randomly.

Tiny random backbones (tiny_bart, tiny_t5) with the offline tokenizer make the whole pipeline run
with no hub and no GPU; `pretrained` loads exactly what a GPU user would get.
"""

from __future__ import annotations

import json
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    BartConfig,
    GPT2Config,
    PretrainedConfig,
    PreTrainedModel,
    T5Config,
)

from scaleformer.config import BackboneConfig
from scaleformer.errors import ConfigError
from scaleformer.io import read_json_record
from scaleformer.methods import build_method
from scaleformer.methods.base import Method, MethodConfig
from scaleformer.model.hf_config import learned_positions
from scaleformer.model.hub import HubUnreachableError, is_local, unreachable_message, unreachable_reason
from scaleformer.model.readers import RECIPES
from scaleformer.model.spec import BackboneSpec
from scaleformer.model.tokenizer import load_offline_tokenizer, special_token_ids
from scaleformer.ops import compat
from scaleformer.ops.causal_spans import causal_family, decoder_layers
from scaleformer.ops.spans import encoder_layers
from scaleformer.resources import ASSET_PREFIX, assets_dir, resolve_asset

_LOCAL_HINT = ("Download it on a connected machine (`hf download {id} --local-dir DIR`) and set "
               "backbone.pretrained=DIR (and backbone.tokenizer=DIR), or use backbone=tiny_bart / tiny_t5.")


def _looks_like_path(ident: str) -> bool:
    """Hub ids are ``name`` or ``org/name``; anything else is meant as a local folder."""
    return ident.startswith((".", "/", "~")) or ident.count("/") > 1 or (os.sep != "/" and os.sep in ident)


def _from_hub(loader: Any, ident: str, what: str, key: str, **kwargs: Any) -> Any:
    """Load from a local path (``asset:`` names a shipped one), the hub, or (offline) the local HF cache;
    fail fast with a clear message."""
    shipped = ident.startswith(ASSET_PREFIX)
    ident = resolve_asset(ident)
    if is_local(ident):
        return loader(ident, **kwargs)
    if _looks_like_path(ident):
        name = Path(ident).name
        build = next((f"; build it with `python -m scaleformer.runs.pretrain_reader {arch}`" for arch, r in RECIPES.items()
                      if r.name == name and shipped), "")
        raise ConfigError(f"{key}={ident!r}: no such folder (a local {what} is a folder from save_pretrained; "
                          f"a hub id looks like org/name){build}")
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
        return load_offline_tokenizer(cfg.arch or "bart")
    return _from_hub(AutoTokenizer.from_pretrained, name, "tokenizer",
                     "backbone.tokenizer" if cfg.tokenizer else "backbone.pretrained")


def model_config(cfg: BackboneConfig, tokenizer: Any) -> PretrainedConfig:
    """The model's config without its weights, so methods and limits are checked before the heavy load."""
    conf = _read_config(cfg, tokenizer)
    check_positions(cfg, conf)
    return conf


def check_positions(cfg: BackboneConfig, conf: PretrainedConfig) -> None:
    """``backbone.max_positions`` must fit the learned position table (checked before any weights exist)."""
    learned = learned_positions(conf)
    if cfg.max_positions is None or learned is None or cfg.max_positions <= learned[1]:
        return
    key, limit = learned
    raise ConfigError(f"backbone.max_positions={cfg.max_positions}: above the {limit} positions the "
                      f"{getattr(conf, 'model_type', None) or 'model'} backbone {cfg.name!r} has learned "
                      f"({key}={limit}); set backbone.max_positions <= {limit} (chunked methods such as sled "
                      "and scaleformer read longer documents in windows of that size)")


def _read_config(cfg: BackboneConfig, tokenizer: Any) -> PretrainedConfig:
    if cfg.pretrained is not None:
        conf = _from_hub(AutoConfig.from_pretrained, cfg.pretrained, "model config", "backbone.pretrained")
        kwargs = dict(cfg.model_kwargs)
        if is_export(conf):  # a scaleformer export: its backbone as that run trained it, its position table kept
            spec = conf.spec if isinstance(conf.spec, dict) else {}
            conf = conf.backbone  # (duplicated to that run's length: the backbone option's own count is smaller)
            kwargs = {k: v for k, v in kwargs.items() if k not in ("n_positions", "max_position_embeddings")}
            # the positions the backbone was pretrained with, which the spans' defaults read (blocks of them): a
            # table duplicated to n is no pretraining, so the chain keeps the count its first run had
            if isinstance(spec.get("max_positions"), int) and getattr(conf, PRETRAINED_POSITIONS, None) is None:
                setattr(conf, PRETRAINED_POSITIONS, spec["max_positions"])
        for k, v in kwargs.items():
            setattr(conf, k, v)
        check_family(cfg, conf)
        return conf
    base = architecture_file(cfg.config_file) if cfg.config_file else {}
    ids = {
        # A shape keeps its published vocabulary (its embedding table's size) when the tokenizer is smaller.
        "vocab_size": max(len(tokenizer), int(base.get("vocab_size", 0))),
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    if cfg.arch == "bart":
        ids |= {"bos_token_id": tokenizer.bos_token_id, "decoder_start_token_id": tokenizer.eos_token_id,
                "forced_eos_token_id": tokenizer.eos_token_id}
        return BartConfig(**(base | ids | dict(cfg.model_kwargs)))
    if cfg.arch == "gpt2":
        ids |= {"bos_token_id": tokenizer.bos_token_id}
        return GPT2Config(**(base | ids | dict(cfg.model_kwargs)))
    ids |= {"decoder_start_token_id": tokenizer.pad_token_id}
    return T5Config(**(base | ids | dict(cfg.model_kwargs)))


def check_family(cfg: BackboneConfig, conf: PretrainedConfig) -> None:
    """A backbone option that names its family (``arch``) loads a model of that kind: the model's identity is
    what the folder holds, and a run recorded under a decoder-only option must not have run an encoder-decoder
    (a BART export given to MASFormer's decoder-only experiment ran, and was recorded, as tiny_gpt2)."""
    if cfg.arch is None:
        return
    want, got = cfg.arch == "gpt2", decoder_only(conf)
    if want != got:
        kind = {True: "a decoder-only causal LM", False: "an encoder-decoder"}
        raise ConfigError(f"backbone.pretrained={cfg.pretrained!r}: holds {kind[got]} "
                          f"({getattr(conf, 'model_type', None) or 'unknown type'}), but backbone={cfg.name} "
                          f"(backbone.arch={cfg.arch}) is {kind[want]}; give a {'decoder-only' if want else 'seq2seq'} "
                          "model, or choose a backbone option of its kind")


def architecture_file(path: str) -> dict[str, Any]:
    """The architecture fields of a hand-kept config.json (keys starting with "_" are comments); a relative
    path names a file in scaleformer/assets/."""
    file = Path(path).expanduser()
    file = file if file.is_absolute() else assets_dir() / file
    raw = read_json_record(file, "config.json", where=f"backbone.config_file={path!r}", error=ConfigError)
    return {k: v for k, v in raw.items() if not k.startswith("_") and k != "model_type"}


# Set on an export's backbone config (and so written into the next export's): the positions it was pretrained
# with, before a run duplicated its table.
PRETRAINED_POSITIONS = "scaleformer_pretrained_positions"


def max_positions(cfg: BackboneConfig, conf: PretrainedConfig) -> int:
    if cfg.max_positions is not None:
        return cfg.max_positions
    for key in (PRETRAINED_POSITIONS, "max_position_embeddings", "n_positions"):
        if getattr(conf, key, None):
            return int(getattr(conf, key))
    raise ConfigError(f"backbone.max_positions=None: the model config of {cfg.name!r} has no "
                      "max_position_embeddings; set backbone.max_positions")


def decoder_only(conf: PretrainedConfig) -> bool:
    """A causal LM (GPT-2, Llama, ...): no encoder, the method's spans go on its own self-attention."""
    return not getattr(conf, "is_encoder_decoder", False)


def backbone_spec(cfg: BackboneConfig, tokenizer: Any, conf: PretrainedConfig) -> BackboneSpec:
    prefix, suffix = special_token_ids(tokenizer)
    if decoder_only(conf):
        return BackboneSpec(
            max_positions=max_positions(cfg, conf), pad_id=_pad_id(tokenizer), prefix_ids=tuple(prefix),
            suffix_ids=tuple(suffix), d_model=int(getattr(conf, "hidden_size", 0) or 0),
            n_decoder_layers=int(getattr(conf, "num_hidden_layers", 0) or 0), decoder_only=True)
    return BackboneSpec(
        max_positions=max_positions(cfg, conf), pad_id=tokenizer.pad_token_id, prefix_ids=tuple(prefix),
        suffix_ids=tuple(suffix), d_model=int(getattr(conf, "d_model", 0) or getattr(conf, "hidden_size", 0)),
        n_encoder_layers=int(getattr(conf, "encoder_layers", 0) or getattr(conf, "num_layers", 0)),
        n_decoder_layers=int(getattr(conf, "decoder_layers", 0) or getattr(conf, "num_decoder_layers", 0)
                             or getattr(conf, "num_layers", 0)),
    )


def _pad_id(tokenizer: Any) -> int:
    """A causal LM's tokenizer often has no pad token (GPT-2, Pythia): batches pad with EOS, masked out."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


@dataclass(frozen=True)
class Prepared:
    """A backbone before its weights, and the method built for it: what every entry point (runs, the
    Lightning module from a checkpoint, scripts, tests) starts from."""

    tokenizer: Any
    conf: PretrainedConfig  # the model's config: the weights come later (build_model)
    spec: BackboneSpec
    method: Method | None = None


def prepare(backbone: BackboneConfig, method: MethodConfig | None = None) -> Prepared:
    """Tokenizer -> model config -> the spec methods read -> the method (checked against the backbone):
    the one chain, so its checks run alike wherever a method is built."""
    for key in ("compile_encoder", "compile_decoder"):
        if getattr(backbone, key):
            check_compile_backend(f"backbone.{key}", getattr(backbone, key))
    tokenizer = load_tokenizer(backbone)
    conf = model_config(backbone, tokenizer)
    spec = backbone_spec(backbone, tokenizer, conf)
    built = None if method is None else build_method(method, spec)
    if built is not None and spec.decoder_only:  # the family is routed before any weights (GPT-Neo's own
        try:  # attention refuses sdpa while it is built, before the method could say why it cannot run)
            causal_family(conf)
        except TypeError as e:
            raise ConfigError(f"method.name={method.name!r}: {e}") from None
    return Prepared(tokenizer, conf, spec, built)


def unpickling_reason(e: Exception) -> str:
    """The one useful line of torch's weights-only refusal (e.g. "Unsupported global: GLOBAL io.open")."""
    m = re.search(r"WeightsUnpickler error:\s*(.*?)(?: was not an allowed global|\.\s|\n|$)", str(e))
    return m.group(1).strip() if m else (str(e).strip().splitlines() or [type(e).__name__])[0]


_BACKENDS_TRIED: dict[str, str | None] = {}


def check_compile_backend(key: str, backend: str) -> None:
    """A torch.compile backend that can compile here: torch lists backends (tvm, onnxrt) whose packages may
    be missing, and those fail at the first step of a run, after the model and data loaded. A two-operator
    function is compiled and run once per process and backend (seconds for inductor's C++ on a CPU)."""
    if backend not in _BACKENDS_TRIED:
        import torch

        try:
            torch.compile(lambda x: x * 2 + 1, backend=backend, fullgraph=True)(torch.ones(2))
            _BACKENDS_TRIED[backend] = None
        except Exception as e:  # a missing package, a compiler that does not run: the backend's own words
            lines = str(e).strip().splitlines() or [type(e).__name__]
            cause = next((ln for ln in lines if re.match(r"^\w+(Error|Exception): ", ln.strip())), lines[0])
            _BACKENDS_TRIED[backend] = cause.strip()[:200]
    if _BACKENDS_TRIED[backend] is not None:
        raise ConfigError(f"{key}={backend!r}: torch lists it but cannot compile with it here "
                          f"({_BACKENDS_TRIED[backend]}); use inductor (or aot_eager, cudagraphs) or null")


def compile_encoder(model: PreTrainedModel, backend: str) -> None:
    """Compile each encoder layer in place (``nn.Module.compile``): the encoder runs its layers on chunk
    micro-batches of one width, where launch overhead, not arithmetic, bounds a small model on a GPU.
    Dynamic shapes after the first recompilation (the last micro-batch has fewer rows)."""
    for layer in encoder_layers(model.get_encoder()):
        layer.compile(backend=backend)


def compile_decoder(model: PreTrainedModel, backend: str) -> None:
    """Compile each decoder layer in place, for training: a teacher-forced step launches as many small
    kernels in the decoder as in the encoder. Generation calls them eagerly
    (:func:`scaleformer.ops.decoding.generate`)."""
    if decoder_only(model.config):
        layers = decoder_layers(model)
    else:
        decoder = model.get_decoder()
        layers = getattr(decoder, "layers", None) or decoder.block  # BART's layers, T5's blocks
    for layer in layers:
        layer.compile(backend=backend)


def is_export(conf: PretrainedConfig | None) -> bool:
    """A model config this project exported (``model_type: scaleformer``): a backbone and the method it ran."""
    return getattr(conf, "model_type", None) == "scaleformer"


def export_folder(pretrained: str) -> bool:
    """``backbone.pretrained`` names a local folder this project exported (read before any weights)."""
    path = Path(pretrained).expanduser() / "config.json"
    try:
        return path.is_file() and json.loads(path.read_text(encoding="utf-8")).get("model_type") == "scaleformer"
    except (OSError, ValueError):
        return False  # the loader says what is wrong with it


def export_backbone(path: str, fresh: PreTrainedModel) -> PreTrainedModel:
    """``fresh`` (built from the export's backbone config) holding the export's backbone weights, without the
    method that ran on them: continual training's model, fine-tuned next with whatever method the new run names
    (MASFormer's chain: continue the LM at long length, then fine-tune it)."""
    try:
        wrapped = (AutoModelForCausalLM if decoder_only(fresh.config) else AutoModelForSeq2SeqLM).from_pretrained(path)
    except ConfigError as e:  # the export's own check (weights missing, damaged, of another shape): one line
        raise ConfigError(f"backbone.pretrained={path!r}: {e}") from None
    try:
        fresh.load_state_dict(wrapped.backbone.state_dict())
    except RuntimeError as e:  # a backbone.model_kwargs shape that is not the export's
        first = next((ln.strip() for ln in str(e).splitlines() if "size mismatch" in ln), str(e).splitlines()[0]).rstrip(".")
        raise ConfigError(f"backbone.pretrained={path!r}: the export's weights do not fit the backbone built from "
                          f"its config and backbone.model_kwargs ({first}); drop the model_kwargs that change its "
                          "shape") from None
    return fresh.train()  # from_pretrained's eval mode would fine-tune without dropout


def build_model(cfg: BackboneConfig, conf: PretrainedConfig, weights: bool = True) -> PreTrainedModel:
    """The backbone: pretrained weights when ``cfg.pretrained`` (and ``weights``), else random ones."""
    kwargs: dict[str, Any] = {}
    if cfg.attn_implementation:
        kwargs["attn_implementation"] = cfg.attn_implementation
    auto = AutoModelForCausalLM if decoder_only(conf) else AutoModelForSeq2SeqLM
    if decoder_only(conf) and cfg.compile_encoder:
        raise ConfigError(f"backbone.compile_encoder={cfg.compile_encoder!r}: the decoder-only backbone {cfg.name!r} "
                          "has no encoder; use backbone.compile_decoder")
    if cfg.pretrained is not None and weights and export_folder(cfg.pretrained):
        model = export_backbone(cfg.pretrained, auto.from_config(conf, **kwargs))
    elif cfg.pretrained is not None and weights:
        # Weights are data: safetensors, or a pickled .bin read with torch.load(weights_only=True).
        try:
            model = _from_hub(auto.from_pretrained, cfg.pretrained, "model", "backbone.pretrained",
                              config=conf, weights_only=True, **kwargs)
        except pickle.UnpicklingError as e:
            raise ConfigError(f"backbone.pretrained={cfg.pretrained!r}: its weights file holds more than tensors "
                              f"({unpickling_reason(e)}), so it was not loaded (unpickling it could run code); "
                              "use a safetensors copy of the model") from None
        except (SafetensorError, EOFError) as e:  # truncated or corrupt weights
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ConfigError(f"backbone.pretrained={cfg.pretrained!r}: its weights cannot be read ({first}); "
                              "the file is damaged or incomplete: download or copy the model again") from None
        # from_pretrained returns eval mode and Lightning keeps each module's mode at fit start: without
        # this, fine-tuning a pretrained backbone would run without dropout.
        model.train()
    else:
        model = auto.from_config(conf, **kwargs)
    if cfg.compile_encoder:
        compile_encoder(model, cfg.compile_encoder)
    if cfg.compile_decoder:
        compile_decoder(model, cfg.compile_decoder)
    if cfg.gradient_checkpointing and not compat.enable_checkpointing(model):
        raise ConfigError(f"backbone.gradient_checkpointing=true: {type(model).__name__} supports no activation "
                          "checkpointing; set it to false")
    return model
