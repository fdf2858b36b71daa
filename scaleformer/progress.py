"""Progress fit for a log: a plain line about every tenth of the work, where a terminal gets a redrawn bar.

A redrawn bar is one line per update once it goes to a file, a CI log or a SLURM output (about 1,500
lines for the embedded default). Training (:class:`scaleformer.runs.callbacks.LogProgress`) and
generation (the run's and ``scaleformer summarize``'s) print these lines instead when the stream is
not a terminal: what, how far, how fast, and how long to go.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Callable
from typing import IO

VERBOSE_ENV = "SCALEFORMER_VERBOSE"  # "1": the libraries' bars and INFO lines stay (as `--verbose` does)


_CHOSEN: list[bool] = []  # an explicit choice (``--verbose``, ``scaleformer.verbose()``) outlasts later calls


def verbose_wanted() -> bool:
    """Whether the user asked for the libraries' chatter: ``--verbose`` or ``scaleformer.verbose()``, else
    ``SCALEFORMER_VERBOSE=1``, or the ``scaleformer`` logger set to INFO or below."""
    if _CHOSEN:
        return _CHOSEN[-1]
    lg = logging.getLogger("scaleformer")
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0") or logging.NOTSET < lg.level <= logging.INFO


def quiet_libraries(verbose: bool | None = None) -> None:
    """transformers' weight-loading bars ("Loading weights: 100%|...") and absl's INFO lines ("Using default
    tokenizer.", rouge-score's) off, or back on when ``verbose`` (None: :func:`verbose_wanted`). transformers is
    touched only where it is loaded already, so ``import scaleformer`` stays instant; its import hook
    (:mod:`scaleformer.model.autoreg`) calls this again once it loads."""
    if verbose is not None:
        _CHOSEN[:] = [verbose]
    verbose = verbose_wanted()
    logging.getLogger("absl").setLevel(logging.NOTSET if verbose else logging.WARNING)
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        (hf_logging.enable_progress_bar if verbose else hf_logging.disable_progress_bar)()


FIRST_LINE_S = 20.0  # the first line comes with the first unit done after this many seconds, if no tenth came first


def is_terminal(stream: IO[str] | None = None) -> bool:
    """Whether ``stream`` (default stdout) is an interactive terminal, where redrawing a bar is right."""
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def duration(seconds: float) -> str:
    """``42s``, ``4m12s``, ``2h05m``: short enough for a progress line."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Lines:
    """Announces ``what`` at about every ``every`` of ``total`` units, and at the end.

    ``start`` is where the work resumes (a continued training run starts at its checkpoint's step): the
    rate and the ETA count only the units done since this object was made. A tenth can take minutes (the
    embedded default's first was 4-8 minutes in), so the first line also comes once ``first`` seconds have
    passed: early enough to show the work is moving, with its rate and ETA.
    """

    def __init__(self, what: str, total: int | None, unit: str, *, start: int = 0, every: float = 0.1,
                 first: float = FIRST_LINE_S, write: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what, self.total, self.unit, self.start = what, total, unit, start
        self.step = max(1, math.ceil(total * every)) if total else None
        self.next = (start // self.step + 1) * self.step if self.step else None
        self.first, self.said, self.clock = first, False, clock
        self.t0 = clock()
        self.write = write or (lambda line: print(line, flush=True))

    def due(self, done: int) -> bool:
        """Whether ``update(done)`` will print (so a caller computes its detail only then)."""
        if self.next is None or self.total is None:
            return False
        early = not self.said and done > self.start and self.clock() - self.t0 >= self.first
        return early or done >= self.next or done >= self.total

    def update(self, done: int, detail: str = "") -> None:
        """Call after each unit with the count done so far; prints only when a mark is crossed."""
        if not self.due(done):
            return
        self.said = True
        self.next = (done // self.step + 1) * self.step if self.step else None
        if done >= self.total:
            self.next = None  # the last line has been said
        elapsed = self.clock() - self.t0
        rate = (done - self.start) / elapsed if elapsed > 0 and done > self.start else 0.0
        parts = [f"{self.what}: {self.unit} {done}/{self.total} ({100 * done / self.total:.0f}%)"]
        if detail:
            parts.append(detail)
        if rate > 0:
            parts.append(f"{rate:.3g} {self.unit}/s" if rate >= 1 else f"{1 / rate:.3g} s/{self.unit}")
            parts.append(f"ETA {duration((self.total - done) / rate)}" if done < self.total
                         else f"took {duration(elapsed)}")
        self.write(", ".join(parts))
