"""The start-up note of a CPU run on a machine whose cores other work holds (scaleformer.runs.runtime)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from scaleformer.runs import runtime


@pytest.mark.parametrize(("others", "cores", "threads", "says"), [
    (0, 2, 2, False),   # idle
    (1, 2, 1, False),   # a pytest-xdist neighbour, one thread each: every thread has a core
    (2, 2, 2, True),    # two CPU-bound jobs beside torch's thread per core
    (1, 2, 2, True),
    (2, 2, 1, False),   # already one thread: nothing fewer to suggest
    (3, 16, 8, False),
    (None, 2, 2, False),  # no /proc/loadavg: nothing to say
])
def test_note_only_when_threads_outnumber_free_cores(others: int | None, cores: int, threads: int, says: bool) -> None:
    note = runtime.busy_note(others, cores, threads)
    assert (note is not None) == says
    if says:
        free = max(1, cores - others)
        assert f"OMP_NUM_THREADS={free}" in note and f"{threads} threads" in note and f"{cores} cores" in note


@pytest.mark.skipif(not Path("/proc/loadavg").is_file(), reason="Linux's /proc/loadavg")
def test_running_elsewhere_sees_a_cpu_bound_neighbour() -> None:
    before = runtime.running_elsewhere()
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        during = runtime.running_elsewhere(samples=9)
    finally:
        hog.kill()
        hog.wait()
    assert before is not None and during is not None
    assert during >= 1  # the neighbour counts (with no other work, 0 would be read)
