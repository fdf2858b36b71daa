"""What a benchmark row is: a method option of ``conf/method`` (through the registry) or a built-in peer.

Why the registry: a new method (one module in ``scaleformer/methods`` + one ``conf/method/<x>.yaml``)
must be benchmarked without touching this package. ``all`` in a profile expands to every method
option (composed by Hydra exactly as ``train.py method=<x>`` would, defaults lists included) and to
every registered method that has no option file (built from its Config defaults).

Peers are rows no method option describes: ``full_baseline`` (the whole input in one encoder pass,
BART positions extended to N, so it runs until out of memory) and ``led`` (Hugging Face LED built
from a random config shaped like the backbone: same d_model, layers, heads and FFN width).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from scaleformer.bench.profile import ALL, Profile
from scaleformer.bench.shapes import Shape, random_model
from scaleformer.compose import register_configs
from scaleformer.errors import ConfigError
from scaleformer.methods import (
    REGISTRY,
    Encoded,
    Method,
    MethodConfig,
    build_method,
    method_config,
)
from scaleformer.methods.truncation import Truncation, TruncationConfig
from scaleformer.model.spec import BackboneSpec

FULL = "full_baseline"
LED = "led"
PEERS = (FULL, LED)
LED_NOTE = ("transformers' LED encoder materialises N x N float masks (modeling_led."
            "_prepare_4d_attention_mask_inverted) before its banded attention: its time and memory grow "
            "quadratically where a real LED kernel's would not")


class SkipMethod(Exception):
    """A listed method cannot run here (no config, not registered, invalid on this backbone)."""


# ------------------------------------------------------------------------------------- options
def option_names(conf_root: str | Path) -> list[str]:
    """The ``method`` group's options (files starting with '_' are shared fragments, not options)."""
    return sorted(p.stem for p in (Path(conf_root) / "method").glob("*.yaml") if not p.stem.startswith("_"))


@contextlib.contextmanager
def _hydra(conf_root: str | Path) -> Iterator[None]:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()  # the method options build on their dataclasses (<name>_schema)

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(Path(conf_root).resolve()), version_base="1.3"):
        yield


def _compose(name: str, seed: int) -> dict[str, Any]:
    """One option as a plain dict; a key whose interpolation needs the training config keeps its default."""
    from hydra import compose

    cfg = compose(config_name=None, overrides=[f"+method={name}", f"+seed={seed}"])
    params: dict[str, Any] = {}
    for key in cfg.method:
        try:
            value = OmegaConf.select(cfg, f"method.{key}", throw_on_resolution_failure=True)
        except Exception:
            continue
        params[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return params


def method_params(name: str, profile: Profile) -> dict[str, Any]:
    """``conf/method/<name>.yaml`` composed, with the profile's overrides ("*" only where the key exists)."""
    if name not in option_names(profile.conf_root):
        if name in REGISTRY:  # registered, no option file: its Config defaults
            params: dict[str, Any] = {"name": name}
        else:
            raise SkipMethod(f"no conf/method/{name}.yaml (in {profile.conf_root}) and no registered method {name!r}")
    else:
        with _hydra(profile.conf_root):
            params = _compose(name, profile.seed)
    for key, value in profile.method_overrides.get("*", {}).items():
        if key in params:
            params[key] = value
    params.update(profile.method_overrides.get(name, {}))
    return params


def expand_methods(profile: Profile) -> list[str]:
    """The profile's rows in order: ``all`` becomes every option (then every registered method without
    one) not named elsewhere in the list."""
    if ALL not in profile.methods:
        return list(profile.methods)
    named = set(profile.methods) - {ALL}
    options = option_names(profile.conf_root)
    used = set()
    with _hydra(profile.conf_root):
        for o in options:
            with contextlib.suppress(Exception):  # a broken option is still listed; its row reports why
                used.add(_compose(o, profile.seed).get("name"))
    rest = [o for o in options if o not in named]
    rest += sorted(m for m in REGISTRY if m not in used and m not in named and m not in options)
    i = profile.methods.index(ALL)
    return [*profile.methods[:i], *rest, *profile.methods[i + 1:]]


def make_method(name: str, profile: Profile, spec: BackboneSpec) -> Method:
    """Validate and build a method from its option; SkipMethod if it cannot run on this backbone."""
    params = method_params(name, profile)
    if params.get("name") not in REGISTRY:
        raise SkipMethod(f"method {params.get('name')!r} (conf/method/{name}.yaml) is not registered")
    try:
        return build_method(method_config(params), spec)
    except ConfigError as e:
        raise SkipMethod(f"config rejected on this backbone: {e}") from None


# --------------------------------------------------------------------------------------- peers
@dataclass
class LedConfig(MethodConfig):
    name: str = LED
    attention_window: int = 1024
    global_tokens: int = 1  # global attention on the first token(s), as LED does for summarisation


class LedEncoding(Method):
    """LED's own encoder over the whole input (no ``name`` class attribute: not in the registry)."""

    cfg: LedConfig

    def encode(self, encoder, input_ids, attention_mask, *, training: bool, prefix_ids=None,
               prefix_mask=None) -> Encoded:
        if prefix_ids is not None:
            raise ConfigError("led: query prefixes are not supported by the benchmark peer")
        glob = torch.zeros_like(attention_mask)  # [batch, N]
        glob[:, : self.cfg.global_tokens] = 1
        hidden = encoder(input_ids=input_ids, attention_mask=attention_mask,
                         global_attention_mask=glob).last_hidden_state  # [batch, N, d]
        return Encoded(hidden, attention_mask)

    def decoder_length(self, n_tokens: int) -> int:
        return n_tokens


def led_config(shape: Shape, window: int, positions: int) -> Any:
    """An LEDConfig with the backbone's widths, depths, vocabulary and special ids."""
    from transformers import LEDConfig

    d, c = shape.dims(), shape.config
    positions = -(-positions // window) * window  # LED pads inputs to a multiple of the window
    return LEDConfig(
        vocab_size=c.vocab_size, d_model=d["d_model"], encoder_layers=d["encoder_layers"],
        decoder_layers=d["decoder_layers"], encoder_attention_heads=d["heads"], decoder_attention_heads=d["heads"],
        encoder_ffn_dim=d["ffn"], decoder_ffn_dim=d["ffn"], attention_window=window,
        max_encoder_position_embeddings=positions, max_decoder_position_embeddings=1024,
        pad_token_id=shape.spec.pad_id, bos_token_id=getattr(c, "bos_token_id", None),
        eos_token_id=c.eos_token_id, decoder_start_token_id=c.decoder_start_token_id,
        forced_eos_token_id=getattr(c, "forced_eos_token_id", None), dropout=0.0)


# ---------------------------------------------------------------------------------------- rows
@dataclass
class Row:
    """One benchmarked method on one backbone: how to get its method and model for a size N."""

    name: str
    source: str  # "option", "registered" or "peer"
    shape: Shape
    device: torch.device
    dtype: torch.dtype
    attn: str
    seed: int
    method: Method | None = None
    model: Any = None
    config: dict[str, Any] = field(default_factory=dict)
    attn_fallback: str | None = None
    flops: bool = True  # whether dense encoder FLOPs describe its encoder calls (not LED's banded ones)
    note: str | None = None

    def for_size(self, n: int) -> tuple[Method, Any]:
        """The method and model for N tokens (full_baseline rebuilds with positions extended to N)."""
        if self.name == FULL:
            self.model = None  # free the previous size's model before building the next
            self.method = Truncation(TruncationConfig(max_tokens=None),
                                     replace(self.shape.spec, max_positions=max(n, self.shape.spec.max_positions)))
            self.model, self.attn_fallback = random_model(self.shape.model_config(positions=n), self.attn,
                                                          self.device, self.dtype, self.seed)
        return self.method, self.model


def build_row(name: str, profile: Profile, shape: Shape, device: torch.device, dtype: torch.dtype,
              attn: str) -> Row:
    """Build a row's method and model (raises SkipMethod when it cannot run here)."""
    source = "peer" if name in PEERS else "option" if name in option_names(profile.conf_root) else "registered"
    row = Row(name, source, shape, device, dtype, attn, profile.seed)
    if name == FULL:
        row.config = {"name": FULL, "note": "whole input in one encoder pass; BART position embeddings extended "
                      "to N, T5 relative positions as they are"}
        return row
    if name == LED:
        from transformers import LEDForConditionalGeneration

        cfg = LedConfig(attention_window=profile.led_attention_window)
        conf = led_config(shape, cfg.attention_window, max(profile.sizes))
        row.method = LedEncoding(cfg, shape.spec)
        row.model, _ = random_model(conf, "", device, dtype, profile.seed, LEDForConditionalGeneration)
        row.config = asdict(cfg) | {"shaped_like": shape.name, **shape.dims(),
                                    "max_encoder_position_embeddings": conf.max_encoder_position_embeddings}
        row.flops, row.note = False, LED_NOTE
        return row
    row.method = make_method(name, profile, shape.spec)
    model, row.attn_fallback = random_model(shape.model_config(), attn, device, dtype, profile.seed)
    row.model = row.method.wrap(model)
    row.config = row.method.describe()
    return row
