"""The ``optim`` and ``trainer`` groups' configs: how a run trains, validates and chooses its weights."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from scaleformer.config.fields import _positive, runtime
from scaleformer.errors import check


@dataclass
class OptimConfig:
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup_steps: int = 0
    # The share of the optimiser steps spent warming up (the lineage's warmup_ratio 0.1); set, it takes the
    # place of warmup_steps (the steps follow from the data and the epochs).
    warmup_ratio: float | None = None
    # After warm-up: "linear" decay to 0 at the last step (the lineage's, BART/SLED fine-tuning) or "constant"
    # (MASFormer's continual training, section 4.1: constant lr 1e-4 after 2,000 warm-up steps).
    schedule: str = "linear"
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
        check(self.schedule in ("linear", "constant"), "optim.schedule", self.schedule, "must be linear or constant")


# A line of a step's cost over its input length needs lengths this far apart (longest / shortest): closer, a
# step's noise decides the slope (scaleformer.runs.cost_fit).
COST_MIN_SPREAD = 1.25

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

    @property
    def cost_schedule(self) -> int:
        """Micro-batches trainer.measure_cost's schedule takes (chunked methods: 2 settings)."""
        return 2 * len(self.cost_lengths) * (self.cost_warmup + self.cost_repeats)

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
        check(len(self.cost_lengths) < 2 or max(self.cost_lengths) >= COST_MIN_SPREAD * min(self.cost_lengths),
              "trainer.cost_lengths", self.cost_lengths, f"must be at least {COST_MIN_SPREAD}x apart (longest over "
              "shortest) to separate a step's fixed cost from its per-token cost, e.g. [1.0, 0.5]")
        schedule = self.cost_schedule
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
        _check_count_or_share("trainer.limit_val_batches", self.limit_val_batches, zero=True,
                              what="a count of documents (an integer >= 0) or a share of the split in [0, 1]")
        if self.val_check_interval is not None:
            _check_count_or_share("trainer.val_check_interval", self.val_check_interval, zero=False,
                                  what="a count of training micro-batches (an integer >= 1) or a share of an epoch "
                                       "in (0, 1]")


def _check_count_or_share(key: str, value: Any, *, zero: bool, what: str) -> None:
    """Lightning's two readings of a limit: an integer counts, a float is a share (above 1 it would silently
    count again, 1.5 as 1); anything else, a negative count, NaN or a share out of range is one line."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    is_float = isinstance(value, float) and math.isfinite(value)
    low = 0 if zero else 1
    ok = (is_int and value >= low) or (is_float and (0 <= value if zero else 0 < value) and value <= 1)
    check(ok, key, value, f"must be {what}")
