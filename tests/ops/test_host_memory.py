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
# untimed ones: the heap grows by a few such blocks before every request finds a freed one (seen in brk
# calls; a bounded overhead: the resident set then stays flat).
PROBE = """
import resource, torch
from scaleformer.ops.host_memory import heap, keep_freed_memory
from scaleformer.runs.runtime import machine
kept = keep_freed_memory()
torch.set_num_threads(1)
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(8):
    x = torch.ones(8 * 2**20); del x
f0 = faults()
for _ in range(5):
    x = torch.ones(8 * 2**20); del x
print(kept, (faults() - f0) / 5, machine().endswith(f"CPU heap: {heap()}"), heap())
"""


def probe(**env: str) -> tuple[bool, float, str]:
    """Whether the setting took, the page faults per 32 MiB tensor, and the heap the process's results
    record (checked to be the one its ``machine()`` names)."""
    out = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, **env}, capture_output=True, text=True,
                         check=True).stdout.split(maxsplit=3)
    assert out[2] == "True", f"machine() does not end with the heap {out[3]!r}"
    return out[0] == "True", float(out[1]), out[3].strip()


def test_freed_tensor_memory_is_reused_without_page_faults():
    kept, faults, heap = probe()
    if not kept:
        pytest.skip("not glibc: the C library's heap is left as it is")
    assert faults < 0.05 * PAGES
    assert heap == host_memory.KEPT


def test_the_opt_out_keeps_glibcs_defaults_which_fault_each_large_tensor_in_again():
    kept, faults, heap = probe(**{host_memory.ENV: "0"})
    assert kept is False
    assert heap != host_memory.KEPT
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if host_memory._libc() is None or (thp.exists() and "[always]" in thp.read_text()):
        pytest.skip("not glibc, or huge pages back every mapping: fewer faults, same reason")
    # above glibc's largest dynamic mmap threshold (32 MiB): mapped afresh and unmapped on free each time
    assert faults > 0.9 * PAGES


RELEASE = """
import torch
from pathlib import Path
from scaleformer.ops.host_memory import keep_freed_memory, release_freed_memory
keep_freed_memory()
rss = lambda: int(next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS")).split()[1]) * 1024
x = torch.ones(16 * 2**20); del x
kept = rss()
print(release_freed_memory(), (kept - rss()) / 2**20)
"""


def test_release_hands_kept_memory_back_and_returns_none_as_a_gradient_hook_must():
    if host_memory._libc() is None or not Path("/proc/self/status").exists():
        pytest.skip("not glibc, or no /proc resident set to read")
    ret, freed_mib = subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True,
                                    check=True).stdout.split()
    assert ret == "None"
    assert float(freed_mib) > 48  # the 64 MiB tensor's memory, kept after del, leaves on release
