"""The ``data`` group's config: where examples come from, how they are read and tokenized."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from scaleformer.config.fields import _positive, runtime
from scaleformer.errors import check


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
    # exact_match (QuALITY, ContractNLI); tables and metrics.json report it as task_score. perplexity: the
    # documents alone, for language modeling on a decoder-only backbone (MASFormer's continual training).
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
    # summary: the ledger's events as the reference; qa: a question about one event (its count); lm: documents
    # whose facts are recalled far from where they are set (scaleformer.data.synthetic_lm), for perplexity.
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
    # Language modeling: continual training on this corpus instead of the train split (MASFormer continues on the
    # Pile and evaluates on ArXiv and PubMed): a hub dataset or local folder, its training files (data_files
    # patterns; null: its own train split), the text field, a revision. Streamed and tokenized ahead into the
    # cache, only the tokens the run reads (scaleformer.data.corpus).
    corpus: str | None = None
    corpus_files: Any = None
    corpus_field: str = "text"
    corpus_revision: str | None = None
    batch_size: int = 1
    # Training micro-batches of documents of similar length (scaleformer.data.sampler.bucketed; HF Trainer's
    # group_by_length), each document's loss its own token mean (scaleformer.ops.loss): several documents
    # per launch with little padding. Off: the seeded random order, as the lineage trains (one per micro-batch).
    bucket: bool = False
    # With bucket: documents per training micro-batch. The documents of an optimizer step (batch_size x
    # trainer.accumulate_grad_batches) are grouped by length, then go through this many at a time, gradient
    # accumulation making up the rest: the same documents per optimizer step at any value (each document's loss
    # weighs alike); it changes launches, memory and dropout's draws. null: as many as the memory model says
    # fit the device (scaleformer.runs.memory; unknown memory: batch_size). Must divide the step's documents.
    micro_batch_size: int | None = None
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
        _positive("data.micro_batch_size", self.micro_batch_size, allow_none=True)
        check(self.micro_batch_size is None or self.bucket, "data.micro_batch_size", self.micro_batch_size,
              "needs data.bucket=true (without it, data.batch_size is the micro-batch)")
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
        check(self.task_metric in ("rouge", "f1", "exact_match", "perplexity"), "data.task_metric", self.task_metric,
              "must be rouge, f1, exact_match or perplexity")
        check(self.synthetic_task in ("summary", "qa", "lm"), "data.synthetic_task", self.synthetic_task,
              "must be summary, qa or lm")
        if self.source == "synthetic":
            check((self.synthetic_task == "lm") == (self.task_metric == "perplexity"), "data.synthetic_task",
                  self.synthetic_task, "lm goes with data.task_metric=perplexity (documents without references), "
                  "summary and qa with another metric")
        for split, n in self.expected_docs.items():
            check(split in ("train", "validation", "test"), "data.expected_docs", split,
                  "keys must be train, validation or test")
            check(isinstance(n, int) and n > 0, f"data.expected_docs.{split}", n, "must be an integer > 0")
        lb = self.leaderboard
        check(lb is None or (lb.startswith("scrolls:") and len(lb) > len("scrolls:")), "data.leaderboard", lb,
              "must be null or scrolls:<task> (e.g. scrolls:gov_report)")
        # the task names the file written beside the predictions: a plain name, never a path out of the run
        check(lb is None or re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", lb.split(":", 1)[1]) is not None,
              "data.leaderboard", lb, "the task must be a plain name of letters, digits, _ and - (e.g. "
              "scrolls:gov_report): it names the file written in the run's folder")
        check(self.corpus is None or self.task_metric == "perplexity", "data.corpus", self.corpus,
              "is continual training's corpus: only with data.task_metric=perplexity (language modeling)")
        ev = self.synthetic_events
        check(len(ev) == 2 and 1 <= ev[0] <= ev[1], "data.synthetic_events", ev, "must be [min, max], 1 <= min <= max")
