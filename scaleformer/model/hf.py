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
the same file, so loading reports no missing or unexpected keys; and one that does is refused.

Whichever way the class is built (the Auto classes, the ``Summarizer``, ``wrap``), the export is checked
as one record before it runs (:func:`~scaleformer.model.hf_config.check_config`,
``from_pretrained``): config.json's method and spec, the backbone's config against the weights' keys
and shapes, config.json's method against ``scaleformer.json``'s. The loaded method is what runs;
``scaleformer.json`` records it. ``generate`` and ``forward`` refuse ids that are not 2-D, masks of
another shape and ``num_beams < 1`` in one line (:func:`check_inputs`).

- :class:`ScaleformerConfig` (``model_type="scaleformer"``): ``backbone`` (the backbone's config),
  ``method`` (the method's validated config, e.g. ``{"name": "scaleformer", "middle_tokens": 64}``)
  and ``spec`` (the :class:`~scaleformer.model.spec.BackboneSpec` facts: positions, special ids);
- ``scaleformer.wrap`` (:mod:`scaleformer.model.wrapping`): any loaded seq2seq model (+ its tokenizer)
  to that class, sharing its weights.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoModelForSeq2SeqLM, GenerationMixin, PreTrainedModel

from scaleformer.errors import ConfigError
from scaleformer.model.hf_config import CONFIG_FILE, ScaleformerConfig, check_config, check_window
from scaleformer.model.hf_embeddings import BackboneEmbeddings

__all__ = ["RECORD_FILE", "ScaleformerConfig", "ScaleformerForConditionalGeneration", "check_inputs", "check_outputs",
           "check_window"]
# The export's method record (scaleformer.export.folder.META_FILE), read here only to compare methods.
RECORD_FILE = "scaleformer.json"

# The methods and ops are imported where used (the imports marked "deferred" below): this module is
# imported by the Auto registration, which can run while transformers is first imported from inside
# those very packages, half-built then (a top-level import of them fails, and the Auto classes would
# not learn model_type "scaleformer"). Code that builds methods lives in scaleformer.model.wrapping.
if TYPE_CHECKING:
    from scaleformer.methods.base import Encoded, Method


class ScaleformerForConditionalGeneration(BackboneEmbeddings, PreTrainedModel, GenerationMixin):
    """A seq2seq backbone whose encoder side is a long-context method (``self.method``).

    ``forward(input_ids, attention_mask, labels)`` encodes the long input with the method (chunks,
    fusion, kept positions, datastores) and runs the backbone's decoder on the result;
    ``generate(input_ids, attention_mask)`` does the same, then decodes with beam-shared
    cross-attention (:mod:`scaleformer.ops.decoding`). A query (QA tasks) rides along as
    ``prefix_ids`` / ``prefix_mask``, which both accept, so Seq2SeqTrainer's predict loop keeps it.
    The embedding API (``resize_token_embeddings``, ...) is the backbone's (:mod:`.hf_embeddings`).
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
        check_config(config)  # before any module is built: every way of making one refuses a bad file alike
        if method is None:
            method = config_method(config)
        super().__init__(config)
        if backbone is None:
            backbone = AutoModelForSeq2SeqLM.from_config(config.backbone)
        self.backbone = backbone
        # One config object: what the backbone's modules read (and a resize sets) is what config.json writes.
        config.backbone = backbone.config
        self.method: Method = method
        self.post_init()
        # After post_init, which initialises every module not yet initialised: a method's new modules
        # (MASFormer's tiled position table) carry copied weights that must survive it.
        if self.method.wrap(backbone) is not backbone:
            raise TypeError(f"method {config.method.get('name')!r}: wrap() must patch the model in place")

    @classmethod
    def from_parts(cls, backbone: PreTrainedModel, method: Method) -> ScaleformerForConditionalGeneration:
        """A backbone (weights shared) read through a built method: how runs and
        :func:`~scaleformer.model.wrapping.wrap` make one."""
        config = ScaleformerConfig(backbone=backbone.config, method=dataclasses.asdict(method.cfg),
                                   spec=dataclasses.asdict(method.spec))
        model = cls(config, backbone=backbone, method=method)
        model.generation_config = copy.deepcopy(backbone.generation_config)  # the backbone's decoding settings
        return model.train(backbone.training)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: Any, *model_args: Any, **kwargs: Any) -> Any:
        """transformers' loading, the export checked as one record: config.json's sections (``__init__``),
        its method against scaleformer.json's, and the weights against the backbone's config (a missing,
        unused or reshaped weight is an error, never a random init noted only in transformers' report).
        ``AutoModelForSeq2SeqLM`` and the ``Summarizer`` load through here."""
        folder = _local_folder(pretrained_model_name_or_path, kwargs.get("subfolder"))
        config = kwargs.get("config")
        early = isinstance(config, ScaleformerConfig)
        if early:  # the Auto classes read config.json first: refuse before any weight loads
            check_config(config)
            config_method(config)
            check_record(config, folder)
        want_info = kwargs.pop("output_loading_info", False)
        strict_shapes = not kwargs.get("ignore_mismatched_sizes", False)
        kwargs["ignore_mismatched_sizes"] = True  # reported in the loading info, refused below in one line
        # What transformers' loading report would list (missing, unused, reshaped weights) is refused below
        # in one line, so its warnings (a table of every key) stay out of the way; the user's own choice to
        # accept reshaped weights keeps them.
        with _quiet_loading(strict_shapes):
            model, info = super().from_pretrained(pretrained_model_name_or_path, *model_args,
                                                  output_loading_info=True, **kwargs)
        if not early:
            check_record(model.config, folder)
        check_weights(model.config, info, _weights_name(pretrained_model_name_or_path, folder),
                      _recorded_family(folder), strict_shapes)
        return (model, info) if want_info else model

    def _init_weights(self, module: torch.nn.Module) -> None:
        self.backbone._init_weights(module)

    def get_encoder(self) -> torch.nn.Module:
        return self.backbone.get_encoder()

    def get_decoder(self) -> torch.nn.Module:
        return self.backbone.get_decoder()

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
            check_inputs("forward", input_ids, attention_mask, prefix_ids, prefix_mask)
            check_outputs("forward", self, kwargs.get("output_attentions"))
            enc = self.encode(input_ids, attention_mask, prefix_ids=prefix_ids, prefix_mask=prefix_mask)
            encoder_outputs, attention_mask = (enc.hidden,), enc.mask
        return self.backbone(encoder_outputs=encoder_outputs, attention_mask=attention_mask,
                             decoder_input_ids=decoder_input_ids, labels=labels, **kwargs)

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 prefix_ids: torch.Tensor | None = None, prefix_mask: torch.Tensor | None = None,
                 generation_config: Any = None, **kwargs: Any) -> Any:
        """Token ids of the method's summaries; decoding settings from ``generation_config`` (default:
        this model's ``generation_config.json``), keywords override them as in ``model.generate``.
        ``step_decoding=True``: scaleformer's static decoding step (:mod:`scaleformer.ops.step_decoding`, the same
        tokens; ``compile_step="inductor"`` compiles it) instead of transformers' loop, where it applies."""
        if input_ids is None:
            raise ValueError("generate needs input_ids: the long documents, tokenized")
        # deferred: ops can be half-built when the Auto registration imports this module (note above)
        from scaleformer.ops import step_decoding

        step, compile_step = bool(kwargs.pop("step_decoding", False)), kwargs.pop("compile_step", None)

        check_inputs("generate", input_ids, attention_mask, prefix_ids, prefix_mask)
        beams_given = "num_beams" in kwargs
        gen = copy.deepcopy(generation_config or self.generation_config)
        kwargs = gen.update(**kwargs)  # decoding keywords into the copy; the rest are model inputs
        beams = gen.num_beams  # None: transformers' default, 1
        if beams is not None and not (isinstance(beams, int) and not isinstance(beams, bool) and beams >= 1):
            where = "generate(num_beams" if beams_given else "generation_config.num_beams"
            raise ConfigError(f"{where}={beams!r}{')' if beams_given else ''}: must be >= 1 (1: greedy search)")
        check_outputs("generate", self, gen.output_attentions)
        enc = self.encode(input_ids, attention_mask, prefix_ids=prefix_ids, prefix_mask=prefix_mask, training=False)
        return step_decoding.decode(self.backbone, enc.hidden, enc.mask, step=step, compile=compile_step,
                                    generation_config=gen, **kwargs)


def config_method(config: ScaleformerConfig) -> Method:
    """config.json's method, built; a setting its method refuses is named as that file's."""
    # deferred: the methods import ops, which the Auto registration can find half-built (note above)
    from scaleformer.methods import build_method, method_config

    try:
        return build_method(method_config(config.method), config.backbone_spec)
    except ConfigError as e:
        raise ConfigError(f"{CONFIG_FILE}: {e}") from None


def check_inputs(call: str, input_ids: Any, attention_mask: Any = None, prefix_ids: Any = None,
                 prefix_mask: Any = None) -> None:
    """2-D integer ids, each mask of its ids' shape, a prefix per document: else one line naming the value.
    The method reads each document's length off its mask, so a mask shorter than the ids would read a
    few tokens of the document, silently; a 1-D tensor would fail deep inside chunking."""
    _check_ids(call, "input_ids", input_ids)
    _check_mask(call, "attention_mask", attention_mask, "input_ids", input_ids)
    if prefix_ids is not None:
        _check_ids(call, "prefix_ids", prefix_ids)
        if prefix_ids.shape[0] != input_ids.shape[0]:
            raise ConfigError(f"{call}(prefix_ids.shape={list(prefix_ids.shape)}): needs one query per document "
                              f"of input_ids.shape={list(input_ids.shape)}")
        _check_mask(call, "prefix_mask", prefix_mask, "prefix_ids", prefix_ids)


def check_outputs(call: str, model: ScaleformerForConditionalGeneration, output_attentions: Any) -> None:
    """Attention weights only where they mean what transformers says, else one line: the decoder's under
    eager attention (sdpa returns None silently), and not under a retrieval method, whose cross-attention
    reads the keys it retrieves per query rather than the encoded positions. (Hidden states need no check:
    the decoder's come back, the method's encoding is ``encoder_last_hidden_state``; it has no per-layer
    encoder states to give.)"""
    if not output_attentions:
        return
    # deferred: ops can be half-built when the Auto registration imports this module (note above)
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


@contextlib.contextmanager
def _quiet_loading(quiet: bool) -> Iterator[None]:
    """transformers' warnings held back (errors still shown) while ``quiet``, restored after."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    if quiet and before < hf_logging.ERROR:
        hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


def _local_folder(path: Any, subfolder: str | None) -> Path | None:
    """The folder ``from_pretrained`` reads, when it is one on disk (a Hub id: None)."""
    if not isinstance(path, str | os.PathLike):
        return None
    folder = Path(path) / (subfolder or "")
    return folder if folder.is_dir() else None


def _weights_name(path: Any, folder: Path | None) -> str:
    """What messages call the weights: the file in a local folder, else the id they came from."""
    for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"):
        if folder is not None and (folder / name).is_file():
            return str(folder / name)
    return f"the weights of {path}"


def _record(folder: Path | None) -> dict[str, Any]:
    """scaleformer.json when the folder has a readable one, else {} (the Summarizer reads it first and
    names what is wrong with it; a model saved with save_pretrained has none)."""
    f = None if folder is None else folder / RECORD_FILE
    if f is None or not f.is_file():
        return {}
    try:
        record = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _recorded_family(folder: Path | None) -> str | None:
    backbone = _record(folder).get("backbone")
    family = backbone.get("model_type") if isinstance(backbone, dict) else None
    return family if isinstance(family, str) else None


def check_record(config: ScaleformerConfig, folder: Path | None) -> None:
    """config.json's method (what loads and runs) and scaleformer.json's (the record of how the model was
    trained and scored) are one method, or one line names their first difference. Runtime settings
    (``RUNTIME_KEYS``: batching, recomputation), which a run may decide after the model is built, may differ."""
    method = _record(folder).get("method")
    recorded = method.get("config") if isinstance(method, dict) else None
    if not isinstance(recorded, dict) or not isinstance(config.method, dict):
        return
    diff = method_difference(config.method, recorded)
    if diff is not None:
        raise ConfigError(f"{CONFIG_FILE} and {RECORD_FILE} disagree on the method: {diff}; {CONFIG_FILE} is what "
                          f"loads and {RECORD_FILE} says what was trained and scored: export the model again (or "
                          "make the two agree)")


def method_difference(loaded: dict[str, Any], recorded: dict[str, Any]) -> str | None:
    """The first setting (the name first) whose value differs, as ``method.<key> is <a> in config.json, <b>
    in scaleformer.json``; None when they agree on every setting but the runtime ones."""
    # deferred: the methods import ops, which the Auto registration can find half-built (note above)
    from scaleformer.methods import REGISTRY

    def shown(d: dict[str, Any], key: str) -> str:
        return repr(d[key]) if key in d else "absent"

    name = loaded.get("name")
    if name != recorded.get("name"):  # two methods: their other settings need not be compared
        return f"method.name is {shown(loaded, 'name')} in {CONFIG_FILE}, {shown(recorded, 'name')} in {RECORD_FILE}"
    runtime = set(getattr(getattr(REGISTRY.get(name), "Config", None), "RUNTIME_KEYS", ()))
    keys = sorted((set(loaded) | set(recorded)) - runtime)
    differ = [k for k in keys if (k in loaded, loaded.get(k)) != (k in recorded, recorded.get(k))]
    if not differ:
        return None
    more = f" (and {len(differ) - 1} more)" if len(differ) > 1 else ""
    return (f"method.{differ[0]} is {shown(loaded, differ[0])} in {CONFIG_FILE}, {shown(recorded, differ[0])} in "
            f"{RECORD_FILE}{more}")


def check_weights(config: ScaleformerConfig, info: dict[str, Any], weights: str, recorded_family: str | None,
                  strict_shapes: bool = True) -> None:
    """The weights fill the model config.json describes, exactly: what transformers would otherwise
    initialise at random and name only in its loading report is refused in one line."""
    missing = sorted(info.get("missing_keys") or [])
    unexpected = sorted(info.get("unexpected_keys") or [])
    mismatched = sorted(info.get("mismatched_keys") or []) if strict_shapes else []
    family = getattr(config.backbone, "model_type", None)
    if missing and unexpected:  # another architecture's names: the backbone config is another family's
        noted = f"; {RECORD_FILE} records a {recorded_family!r} backbone" \
            if recorded_family and recorded_family != family else ""
        raise ConfigError(f"{CONFIG_FILE}: backbone.model_type={family!r} does not fit {weights}: {len(missing)} of "
                          f"its weights are not there (e.g. {missing[0]}) and {len(unexpected)} there have no place "
                          f"in it (e.g. {unexpected[0]}){noted}; the config does not belong to these weights")
    if missing:
        raise ConfigError(f"{weights}: {len(missing)} weights missing (e.g. {missing[0]}); the export is incomplete: "
                          "export or download it again")
    if unexpected:
        name = config.method.get("name") if isinstance(config.method, dict) else None
        raise ConfigError(f"{weights}: {len(unexpected)} weights have no place in the model {CONFIG_FILE} describes "
                          f"(e.g. {unexpected[0]}; its method is {name!r}): the config does not belong to these "
                          "weights")
    if mismatched:
        key, *shapes = mismatched[0] if isinstance(mismatched[0], tuple) else (mismatched[0],)
        sizes = f": {list(shapes[0])} there, {list(shapes[1])} in the config" if len(shapes) == 2 else ""
        raise ConfigError(f"{weights}: {len(mismatched)} weights have other shapes than {CONFIG_FILE}'s backbone "
                          f"gives them (e.g. {key}{sizes}); the config does not belong to these weights")

# Registered on import (see scaleformer.model.autoreg): AutoModelForSeq2SeqLM builds this class for
# model_type "scaleformer".
AutoModelForSeq2SeqLM.register(ScaleformerConfig, ScaleformerForConditionalGeneration, exist_ok=True)
