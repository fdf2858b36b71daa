"""The GPU bench of MASFormer's patterns (scaleformer.bench.gpu_masformer): its patterns are the paper's at n = 8,192
(full, blocks of n / 8, l = L / 6 and L / 3), its FLOPs the bill's, and its measuring path runs end to end on a tiny
shape here on the CPU, so a lent GPU's first window measures instead of debugging."""

from __future__ import annotations

import pytest
import torch

from scaleformer.bench import gpu_masformer as bench
from scaleformer.bench.gpt_shape import PYTHIA_1_4B, parameters, training_flops

TINY = {"layers": 3, "width": 32, "vocab": 64, "tied": False, "positions": 64, "heads": 4}


def test_the_patterns_are_the_papers_at_8192():
    got = {label: [(s.kind, s.size) for s in spans] for label, spans in bench.patterns(24, 8192)}
    assert list(got) == ["full", "block 1024", "masformer l=4, b=1024", "masformer l=8, b=1024"]
    assert got["masformer l=4, b=1024"] == [("full", 0)] * 4 + [("block", 1024)] * 20
    assert parameters(PYTHIA_1_4B)["total"] == 1_414_647_808  # Pythia-1.4B's published count


def test_the_measuring_path_runs_on_a_tiny_shape_and_counts_the_bills_flops(capsys):
    label, spans = bench.patterns(TINY["layers"], 64)[2]
    row = bench.measure_pattern(label, spans, TINY, 64, 2, torch.device("cpu"), rate=1e9)
    t, k = row["train_step"], row["cached_token"]
    assert t["repeats"] == 2 and t["time_s"] > 0 and t["flops"] == training_flops(TINY, spans, 64)["total"]
    assert k["time_s"] > 0 and k["keys"] == 64 + 2 * 8  # the full layer reads all 64 keys, the block layers 8
    md = bench.render({"device": "cpu", "n": 64, "repeats": 2, "matmul_flops_per_s": 1e9, "rows": [row]})
    assert f"| {label} |" in md


def test_without_cuda_it_says_so_and_writes_nothing(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    with pytest.raises(SystemExit, match="needs a CUDA device"):
        bench.main(["--out", str(tmp_path / "m")])
    assert not list(tmp_path.iterdir())
