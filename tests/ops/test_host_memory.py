"""The CPU heap under tensors: a freed large tensor's memory is reused, not faulted in again page by page."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scaleformer.ops import host_memory

PAGES = 8 * 2**20 * 4 // 4096  # 4 KiB pages of one 32 MiB float32 tensor

# One thread: page faults then count first touches only (another thread's touches of the same pages are
# counted too, whatever the heap does). The tensor is allocated, touched and freed five times after eight
# untimed ones: glibc's aligned allocations leave a freed block a little short of the next request, so the
# heap grows by a few such blocks before every request finds one (a bounded overhead: the resident set
# then stays flat).
PROBE = """
import resource, torch
from scaleformer.ops.host_memory import keep_freed_memory
kept = keep_freed_memory()
torch.set_num_threads(1)
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(8):
    x = torch.ones(8 * 2**20); del x
f0 = faults()
for _ in range(5):
    x = torch.ones(8 * 2**20); del x
print(kept, (faults() - f0) / 5)
"""


def probe(**env: str) -> tuple[bool, float]:
    out = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, **env}, capture_output=True, text=True,
                         check=True).stdout.split()
    return out[0] == "True", float(out[1])


def test_freed_tensor_memory_is_reused_without_page_faults():
    kept, faults = probe()
    if not kept:
        pytest.skip("not glibc: the C library's heap is left as it is")
    assert faults < 0.05 * PAGES


def test_the_opt_out_keeps_glibcs_defaults_which_fault_each_large_tensor_in_again():
    kept, faults = probe(**{host_memory.ENV: "0"})
    assert kept is False
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if host_memory._libc() is None or (thp.exists() and "[always]" in thp.read_text()):
        pytest.skip("not glibc, or huge pages back every mapping: fewer faults, same reason")
    # above glibc's largest dynamic mmap threshold (32 MiB): mapped afresh and unmapped on free each time
    assert faults > 0.9 * PAGES


def test_release_hands_memory_back_and_returns_none_as_a_gradient_hook_must():
    assert host_memory.release_freed_memory(object()) is None
