"""scripts/time_commands.py: the wall time and first progress line of a command, piped and in a terminal, and
the load beside it; the README's sentence renders from its file."""

from __future__ import annotations

import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import time_commands  # noqa: E402

# The progress a run prints: a line per tenth when piped, a redrawn bar in a terminal.
PROGRESS = ("import sys, time; time.sleep(0.3); "
            "print('train: step 1/2 (50%)' if not sys.stdout.isatty() else 'Epoch 0:  50%|##| 1/2 [00:01<00:01]',"
            " end='\\n' if not sys.stdout.isatty() else '\\r', flush=True); time.sleep(30)")


def test_piped_times_the_command_and_finds_its_first_progress_line(tmp_path):
    code = "import time; print('loading', flush=True); time.sleep(0.3); print('train: step 1/2 (50%)', flush=True)"
    row = time_commands.piped([sys.executable, "-c", code], tmp_path, tmp_path / "log", time_commands.PIPE_PROGRESS)
    assert row["rc"] == 0 and 0.3 <= row["first_progress_s"] <= row["wall_s"] < 30
    assert row["load_mean"] >= 0 and row["load_max"] >= row["load_mean"]
    assert (tmp_path / "log").read_text() == "loading\ntrain: step 1/2 (50%)\n"


def test_a_failing_command_stops_with_one_line_naming_its_log(tmp_path):
    with pytest.raises(SystemExit, match=r"^error: .* exited 3; its output is in .*log$"):
        time_commands.piped([sys.executable, "-c", "raise SystemExit(3)"], tmp_path, tmp_path / "log")


def test_in_a_terminal_the_first_drawn_bar_stops_the_command(tmp_path):
    row = time_commands.terminal_first_line([sys.executable, "-c", PROGRESS], tmp_path, limit_s=20)
    assert row["first_progress_s"] is not None and 0.3 <= row["first_progress_s"] < 20  # not the 30 s sleep


def test_a_command_that_never_draws_a_bar_gives_none(tmp_path):
    row = time_commands.terminal_first_line([sys.executable, "-c", "print('no bar')"], tmp_path, limit_s=20)
    assert row["first_progress_s"] is None


def test_bad_load_is_refused():
    with pytest.raises(SystemExit, match=r"^error: --load=-1: must be >= 0$"):
        time_commands.main(["--load", "-1"])
