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
another shape and ``num_beams < 1`` in one line (:mod:`~scaleformer.model.hf_inputs`), and read any mask,
left padding included, as the unpadded document (:mod:`scaleformer.ops.padding`).

Where transformers' own suites look, it behaves as a plain model (tests/model/test_hf_standard_api.py): the
backbone's config is its sub-config (``attn_implementation`` and ``dtype`` reach it), the output flags and
generation settings are the model's own and read as a plain model reads them, ``base_model`` is the
backbone. What differs by design is refused in one line and tabled in docs/using.md.

- :class:`ScaleformerConfig` (``model_type="scaleformer"``): ``backbone`` (the backbone's config),
  ``method`` (the method's validated config, e.g. ``{"name": "scaleformer", "middle_tokens": 64}``)
  and ``spec`` (the :class:`~scaleformer.model.spec.BackboneSpec` facts: positions, special ids);
- ``scaleformer.wrap`` (:mod:`scaleformer.model.wrapping`): any loaded seq2seq model (+ its tokenizer)
  to that class, sharing its weights.
"""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError
from transformers import AutoModelForSeq2SeqLM, GenerationMixin, PreTrainedModel

from scaleformer.errors import ConfigError
from scaleformer.model.hf_config import CONFIG_FILE, ScaleformerConfig, check_config, check_window
from scaleformer.model.hf_embeddings import BackboneEmbeddings
from scaleformer.model.hf_inputs import (
    check_generate_keywords,
    check_generation_numbers,
    check_inputs,
    check_outputs,
    output_flags,
)
from scaleformer.model.hf_loading import (
    RECORD_FILE,
    check_model_type,
    check_record,
    check_weights,
    local_folder,
    quiet_loading,
    recorded_family,
    unreadable_weights,
    weights_name,
)
from scaleformer.ops.padding import right_aligned  # torch alone: safe while ops is half-built (note below)

__all__ = ["RECORD_FILE", "ScaleformerConfig", "ScaleformerForConditionalGeneration", "check_inputs", "check_outputs",
           "check_window"]

# The methods and ops are imported where used (the imports marked "deferred" below): this module is
# imported by the Auto registration, which can run while transformers is first imported from inside
# those very packages, half-built then (a top-level import of them fails, and the Auto classes would
# not learn model_type "scaleformer"). Code that builds methods lives in scaleformer.model.wrapping.
# hf_inputs and hf_loading defer theirs alike.
if TYPE_CHECKING:
    from scaleformer.methods.base import Encoded, Method


class CheckedLoading:
    """What both model classes share: loading checked as one record, the backbone's tied weights named on the
    model, ``from_parts`` (a built backbone and method), weights initialised as the backbone's."""

    @classmethod
    def from_parts(cls, backbone: PreTrainedModel, method: Method) -> Any:
        """A backbone (weights shared) read through a built method: how runs and
        :func:`~scaleformer.model.wrapping.wrap` make one."""
        config = ScaleformerConfig(backbone=backbone.config, method=dataclasses.asdict(method.cfg),
                                   spec=dataclasses.asdict(method.spec))
        model = cls(config, backbone=backbone, method=method)
        model.generation_config = copy.deepcopy(backbone.generation_config)  # the backbone's decoding settings
        return model.train(backbone.training)

    @property
    def _tied_weights_keys(self) -> dict[str, str]:
        """The backbone's tied weights (``backbone.lm_head.weight`` -> ``backbone.model.shared.weight``), which
        save_pretrained leaves out: what peft (LoRA beside tied embeddings), accelerate (re-tying under FSDP)
        and a strict=False load of a saved state read on the model itself."""
        backbone = self.__dict__.get("_modules", {}).get("backbone")
        tied = getattr(backbone, "all_tied_weights_keys", None) or {}
        return {f"{self.base_model_prefix}.{k}": f"{self.base_model_prefix}.{v}" for k, v in tied.items()}

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: Any, *model_args: Any, **kwargs: Any) -> Any:
        """transformers' loading, the export checked as one record: config.json's sections (``__init__``),
        its method against scaleformer.json's, and the weights against the backbone's config (a missing,
        unused or reshaped weight is an error, never a random init noted only in transformers' report).
        The Auto classes and the ``Summarizer`` load through here."""
        folder = local_folder(pretrained_model_name_or_path, kwargs.get("subfolder"))
        config = kwargs.get("config")
        early = isinstance(config, ScaleformerConfig)
        if early:  # the Auto classes read config.json first: refuse before any weight loads
            check_config(config)
            config_method(config)
            check_record(config, folder)
        else:
            check_model_type(folder)
        want_info = kwargs.pop("output_loading_info", False)
        strict_shapes = not kwargs.get("ignore_mismatched_sizes", False)
        kwargs["ignore_mismatched_sizes"] = True  # reported in the loading info, refused below in one line
        # What transformers' loading report would list (missing, unused, reshaped weights) is refused below
        # in one line, so its warnings (a table of every key) stay out of the way; the user's own choice to
        # accept reshaped weights keeps them.
        try:
            with quiet_loading(strict_shapes):
                model, info = super().from_pretrained(pretrained_model_name_or_path, *model_args,
                                                      output_loading_info=True, **kwargs)
        except (OSError, SafetensorError, EOFError) as e:  # a weights file cut short, corrupt or missing
            if folder is None:
                raise
            raise ConfigError(unreadable_weights(folder, e)) from None
        if not early:
            check_record(model.config, folder)
        check_weights(model.config, info, weights_name(pretrained_model_name_or_path, folder),
                      recorded_family(folder), strict_shapes)
        return (model, info) if want_info else model

    def _init_weights(self, module: torch.nn.Module) -> None:
        self.backbone._init_weights(module)

    @staticmethod
    def checked(config: ScaleformerConfig, method: Method | None, causal: bool) -> Method:
        """config.json checked before any module is built (every way of making a model refuses a bad file
        alike); its method, built unless given."""
        check_config(config)
        check_kind(config, causal)
        return config_method(config) if method is None else method

    def hold(self, config: ScaleformerConfig, backbone: PreTrainedModel, method: Method) -> None:
        """Take the backbone and the method (after ``PreTrainedModel.__init__``) and let the method patch it."""
        self.backbone = backbone
        # One config object: what the backbone's modules read (and a resize sets) is what config.json writes.
        config.backbone = backbone.config
        self.method = method
        self.post_init()
        # After post_init, which initialises every module not yet initialised: a method's new modules
        # (MASFormer's tiled position table) carry copied weights that must survive it.
        if self.method.wrap(backbone) is not backbone:
            raise TypeError(f"method {config.method.get('name')!r}: wrap() must patch the model in place")


def check_kind(config: ScaleformerConfig, causal: bool) -> None:
    """The model class fits the backbone: a seq2seq backbone under ``AutoModelForSeq2SeqLM``, a decoder-only one
    under ``AutoModelForCausalLM`` (one line naming the other, not a failure deep inside ``from_config``)."""
    backbone = config.backbone
    is_causal = not (backbone.get("is_encoder_decoder", False) if isinstance(backbone, dict) else
                     getattr(backbone, "is_encoder_decoder", False))
    if is_causal != causal:
        kind = backbone.get("model_type") if isinstance(backbone, dict) else getattr(backbone, "model_type", "?")
        what, auto, cls = ("decoder-only", "AutoModelForCausalLM", "hf_causal.ScaleformerForCausalLM") if is_causal \
            else ("an encoder-decoder", "AutoModelForSeq2SeqLM", "hf.ScaleformerForConditionalGeneration")
        raise ConfigError(f"{CONFIG_FILE}: the backbone ({kind}) is {what}: load it with {auto} "
                          f"(scaleformer.model.{cls})")


class ScaleformerForConditionalGeneration(BackboneEmbeddings, CheckedLoading, PreTrainedModel, GenerationMixin):
    """A seq2seq backbone whose encoder side is a long-context method (``self.method``).

    ``forward(input_ids, attention_mask, labels)`` encodes the long input with the method (chunks,
    fusion, kept positions, datastores) and runs the backbone's decoder on the result;
    ``generate(input_ids, attention_mask)`` does the same, then decodes with beam-shared
    cross-attention (:mod:`scaleformer.ops.decoding`). A query (QA tasks) rides along as
    ``prefix_ids`` / ``prefix_mask``, which both accept, so Seq2SeqTrainer's predict loop keeps it.
    The embedding API (``resize_token_embeddings``, ...) is the backbone's (:mod:`.hf_embeddings`).
    """

    config_class = ScaleformerConfig
    # The attribute that holds the backbone: ``model.base_model`` (transformers' name for the body under a
    # model's head) is the backbone, and its weights are saved under this prefix.
    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True

    def __init__(self, config: ScaleformerConfig, backbone: PreTrainedModel | None = None,
                 method: Method | None = None) -> None:
        method = self.checked(config, method, causal=False)
        super().__init__(config)
        self.hold(config, backbone if backbone is not None else AutoModelForSeq2SeqLM.from_config(config.backbone),
                  method)

    def get_encoder(self) -> torch.nn.Module:
        return self.backbone.get_encoder()

    def get_decoder(self) -> torch.nn.Module:
        return self.backbone.get_decoder()

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
               prefix_ids: torch.Tensor | None = None, prefix_mask: torch.Tensor | None = None,
               training: bool | None = None) -> Encoded:
        """What the decoder cross-attends to: the method's states ``[batch, T, d]`` and mask ``[batch, T]``.
        Each row is read where its mask is 1, wherever the padding is (:mod:`scaleformer.ops.padding`):
        left-padded, right-padded and unpadded documents give the same output."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        pad = self.method.spec.pad_id
        input_ids, attention_mask = right_aligned(input_ids, attention_mask, pad)
        if prefix_ids is not None and prefix_mask is not None:
            prefix_ids, prefix_mask = right_aligned(prefix_ids, prefix_mask, pad)
        return self.method.encode(self.backbone.get_encoder(), input_ids, attention_mask,
                                  training=self.training if training is None else training,
                                  prefix_ids=prefix_ids, prefix_mask=prefix_mask)

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                decoder_input_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                encoder_outputs: Any = None, prefix_ids: torch.Tensor | None = None,
                prefix_mask: torch.Tensor | None = None, **kwargs: Any) -> Any:
        """The backbone's seq2seq forward on the method's encoding (``labels`` give the loss). The output
        flags not passed are this model's config's (``output_hidden_states``, ``output_attentions``,
        ``return_dict``), as a plain model reads its own."""
        kwargs = output_flags(self.config, kwargs)
        if encoder_outputs is None:
            check_inputs("forward", input_ids, attention_mask, prefix_ids, prefix_mask, kwargs.get("inputs_embeds"))
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
        check_inputs("generate", input_ids, attention_mask, prefix_ids, prefix_mask, kwargs.get("inputs_embeds"))
        check_generate_keywords(kwargs)
        decoding, step_decoding = deferred_ops().decoding, deferred_ops().step_decoding

        step, compile_step = bool(kwargs.pop("step_decoding", False)), kwargs.pop("compile_step", None)
        beams_given = "num_beams" in kwargs
        # transformers' rule: a given config's unset (None) fields come from this model's, then the keywords
        # (None included: forced_eos_token_id=None turns BART's forced end off); decode reads the result whole,
        # not filled again from the backbone's own
        gen = copy.deepcopy(self.generation_config) if generation_config is None else decoding.filled(
            generation_config, self.generation_config)
        kwargs = gen.update(**kwargs)  # decoding keywords into the copy; the rest are model inputs
        beams = gen.num_beams  # None: transformers' default, 1
        if beams is not None and not (isinstance(beams, int) and not isinstance(beams, bool) and beams >= 1):
            where = "generate(num_beams" if beams_given else "generation_config.num_beams"
            raise ConfigError(f"{where}={beams!r}{')' if beams_given else ''}: must be >= 1 (1: greedy search)")
        check_generation_numbers(gen)
        check_outputs("generate", self, gen.output_attentions)
        enc = self.encode(input_ids, attention_mask, prefix_ids=prefix_ids, prefix_mask=prefix_mask, training=False)
        return step_decoding.decode(self.backbone, enc.hidden, enc.mask, step=step, compile=compile_step,
                                    generation_config=gen, **kwargs)


def deferred_ops() -> Any:
    """The ops modules both model classes call (decoding, causal spans, the transformers seam), imported when a
    model runs: ops can be half-built when the Auto registration imports these classes (note above)."""
    # deferred: ops can be half-built when the Auto registration imports this module (note above)
    from scaleformer.ops import causal_spans, compat, decoding, step_decoding

    return SimpleNamespace(causal_spans=causal_spans, compat=compat, decoding=decoding, step_decoding=step_decoding)


def config_method(config: ScaleformerConfig) -> Method:
    """config.json's method, built; a setting its method refuses is named as that file's."""
    # deferred: the methods import ops, which the Auto registration can find half-built (note above)
    from scaleformer.methods import build_method, method_config

    try:
        return build_method(method_config(config.method), config.backbone_spec)
    except ConfigError as e:
        raise ConfigError(f"{CONFIG_FILE}: {e}") from None



# Registered on import (see scaleformer.model.autoreg): AutoModelForSeq2SeqLM builds this class for
# model_type "scaleformer".
AutoModelForSeq2SeqLM.register(ScaleformerConfig, ScaleformerForConditionalGeneration, exist_ok=True)

