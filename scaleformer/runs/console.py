"""What a run prints: each line once, no library chatter, a short results table at the end.

Lightning, transformers, rouge-score and torch print tips, device banners, deprecation notes and
warnings about settings this framework makes on purpose (no validation loader when validation is
off, a logging interval longer than a tiny run). They hide the lines that matter, so they are
filtered here, in one place; real warnings still come through.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scaleformer.errors import redact
from scaleformer.progress import quiet_libraries

# Warnings about choices this framework makes deliberately (message regexes).
_EXPECTED_WARNINGS = (
    r"You defined a `validation_step` but have no `val_dataloader`",
    r"The number of training batches \(\d+\) is smaller than the logging interval",
    r".*does not have many workers which may be a bottleneck",
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
    r"Checkpoint directory .* exists and is not empty",
    r"Experiment logs directory .* exists and is not empty",
    r"The `srun` command is available on your system but is not used",
    r".*`max_epochs` was not set\. Setting it to",
    r"GPU available but not used",
)


class Redact(logging.Filter):
    """Credentials in URLs never reach a console or a log file (see :func:`scaleformer.errors.redact`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        safe = redact(msg)
        if safe != msg:
            record.msg, record.args = safe, ()
        return True


def protect(handler: logging.Handler) -> None:
    if not any(isinstance(f, Redact) for f in handler.filters):
        handler.addFilter(Redact())


def quiet(verbose: bool | None = None) -> None:
    """Silence library chatter and redact credentials in every console line; idempotent (every run calls it).
    ``verbose`` (None: ``SCALEFORMER_VERBOSE`` or the scaleformer logger's level) keeps the libraries' bars."""
    for h in logging.getLogger().handlers:
        protect(h)
    for pattern in _EXPECTED_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    # Device banners and tips ("GPU available: False", "💡 Tip: ...") come from rank_zero_info.
    logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)
    logging.getLogger("lightning.fabric.utilities.rank_zero").setLevel(logging.WARNING)
    # Lightning adds its own console handler and also propagates to the root one: lines came out twice.
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        lg = logging.getLogger(name)
        for h in list(lg.handlers):
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                lg.removeHandler(h)
        lg.propagate = True
    quiet_libraries(verbose)  # "Loading weights: 100%" of every small model, rouge-score's "Using default tokenizer."


@contextlib.contextmanager
def log_to_file(path: Path, enabled: bool = True) -> Iterator[None]:
    """Copy every log line of the run (ours and the libraries') into ``path`` while it runs."""
    if not enabled:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] %(message)s"))
    protect(handler)
    root = logging.getLogger()
    root.addHandler(handler)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()


def count_parameters(model: Any) -> str:
    n = sum(p.numel() for p in model.parameters())
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


_SHOWN = (("rouge1", "R-1"), ("rouge2", "R-2"), ("rougeL", "R-L"), ("rougeLsum", "R-Lsum"),
          ("bertscore_f1", "BERTScore"))
# Question answering (data.task_metric f1 or exact_match): SCROLLS' answer scores.
_ANSWERS = (("f1", "F1"), ("exact_match", "EM"))
# Synthetic ledgers only (scaleformer.data.ledger_facts): events stated exactly, and their parts.
_FACTS = (("fact_recall", "Facts"), ("fact_field_recall", "Fact parts"), ("town_accuracy", "Town"))
# Language modeling (data.task_metric=perplexity): perplexity and its interval, and of the marked dependencies
# (all, and those beyond a block) where the data has them.
_PERPLEXITY = (("ppl", "PPL"), ("ppl_low", "low"), ("ppl_high", "high"), ("dependency.ppl", "dep PPL"),
               ("dependency_beyond_block.ppl", "far PPL"))


def _value(scores: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        scores = scores.get(part) if isinstance(scores, dict) else None
    return scores


def summary_table(result: dict[str, Any], out_dir: Path) -> str:
    """A short table of the headline numbers, then where the files are."""
    m = result["method"]
    splits = result["splits"].values()
    shown = list(_PERPLEXITY) if any("ppl" in s for s in splits) else \
        [*_SHOWN, *(_ANSWERS if any("f1" in s for s in splits) else ()),
         *(_FACTS if any("fact_recall" in s for s in splits) else ())]
    header = f"{'split':<12}{'n':>6}" + "".join(f"{label:>11}" for _, label in shown)
    lines = ["", f"run {result['run_id']}  ({m['option']}, {result['backbone']['name']}, {result['data']['name']}; "
             f"step {result['step']}, {result['wall_time_s']:.0f} s)", header]
    for split, s in result["splits"].items():
        vals = "".join(f"{_value(s, k):>11.2f}" if isinstance(_value(s, k), int | float) else f"{'-':>11}"
                       for k, _ in shown)
        lines.append(f"{split:<12}{s['n_examples']:>6}{vals}")
    lines.append(f"results: {out_dir}")
    return "\n".join(lines)
