"""scripts/time_commands.py: the wall time and first progress line of a command, piped and in a terminal, and
the load beside it; the README's sentence renders from its file."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import results_runs  # noqa: E402
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


def test_a_real_tqdm_bar_is_drawn_in_the_terminal_and_found(tmp_path):
    # A pseudo-terminal of 0 columns, as pty.fork leaves it, makes tqdm draw nothing: the terminal has a size.
    code = "import time, tqdm\nfor _ in tqdm.tqdm(range(2)): time.sleep(30)"
    row = time_commands.terminal_first_line([sys.executable, "-c", code], tmp_path, limit_s=20)
    assert row["first_progress_s"] is not None and row["first_progress_s"] < 20


def test_the_training_bar_of_a_run_in_a_terminal_is_found(tmp_path):
    command = [sys.executable, "train.py", "debug=default", f"paths.root={tmp_path}/results",
               f"paths.cache={tmp_path}/cache"]
    row = time_commands.terminal_first_line(command, ROOT, limit_s=120)
    assert row["first_progress_s"] is not None and row["first_progress_s"] < 120


def test_a_command_that_never_draws_a_bar_gives_none(tmp_path):
    row = time_commands.terminal_first_line([sys.executable, "-c", "print('no bar')"], tmp_path, limit_s=20)
    assert row["first_progress_s"] is None


def test_bad_load_is_refused():
    with pytest.raises(SystemExit, match=r"^error: --load=-1: must be >= 0$"):
        time_commands.main(["--load", "-1"])


def _times(tmp_path, runs):
    (tmp_path / "times").mkdir()
    (tmp_path / "times" / "times.json").write_text(json.dumps({"runs": runs}))
    return tmp_path


def _label(rows, load):
    return {"commit": "70b0654abcde", "when": "2026-11-28 18:40 UTC", "machine": "x86_64, 2 cores", "cores": 2,
            "load_processes": load, "rows": rows}


IDLE = [{"step": "setup", "wall_s": 300.0}, {"step": "run", "wall_s": 660.0, "first_progress_s": 21.0, "load_mean": 1.1},
        {"step": "run_terminal", "first_progress_s": 24.0}, {"step": "test", "wall_s": 1140.0}]


def test_the_readme_sentence_renders_idle_and_busy_rows_from_the_file(tmp_path):
    busy = [{"step": "setup", "wall_s": 500.0}, {"step": "run", "wall_s": 1320.0, "first_progress_s": 40.0,
                                                 "load_mean": 3.2}, {"step": "run_terminal", "first_progress_s": 50.0}]
    one = {**_label(busy, 2), "omp_threads": 1}
    text = results_runs.render_times(_times(tmp_path, {"idle": _label(IDLE, 0), "busy": one}))
    assert "commit 70b0654abcde" in text and "mean load 1.1 on 2 cores" in text
    assert "`make run` takes 11 min, its first progress line after 21 s piped and 24 s in a terminal" in text
    assert "`make test` takes 19 min (a pytest-xdist worker per core)" in text and "5 min here" in text
    assert "Beside 2 CPU-bound processes" in text
    assert "with `OMP_NUM_THREADS=1` (mean load 3.2) `make run` takes 22 min (2.0x idle; its first progress line after 40 s)" in text
    assert "`make test` 19" not in text.split("Beside")[1]  # the busy run timed no tests: none claimed


def test_a_busy_run_stopped_unfinished_says_so_beside_the_one_thread_run(tmp_path):
    stuck = [{"step": "setup", "wall_s": 100.0}, {"step": "run", "wall_s": 1201.0, "first_progress_s": None,
                                                  "load_mean": 4.0, "stopped_at_s": 1200.0, "rc": -15}]
    done = [{"step": "setup", "wall_s": 100.0}, {"step": "run", "wall_s": 990.0, "first_progress_s": 37.0,
                                                 "load_mean": 3.0}]
    text = results_runs.render_times(_times(tmp_path, {"idle": _label(IDLE, 0),
                                                       "busy-default-threads": _label(stuck, 2),
                                                       "busy": {**_label(done, 2), "omp_threads": 1}}))
    busy = text.split("Beside")[1]
    assert "with torch's default thread per core (mean load 4.0) `make run` had not finished after 20 min " \
           "(no progress line; stopped there)" in busy
    assert busy.index("default thread per core") < busy.index("`OMP_NUM_THREADS=1`")
    assert "`make run` takes 16 min (1.5x idle; its first progress line after 37 s)" in busy


def test_the_sentence_needs_the_idle_rows(tmp_path):
    with pytest.raises(results_runs.MissingResults, match="no idle rows"):
        results_runs.render_times(_times(tmp_path, {"busy": _label(IDLE, 2)}))
