"""The side-by-side bench of the causal kernels, on a tiny shape: every pattern and phase measured, the floors
counted as its docstring says, the comparisons computed from the rows, and flex's mask equal to the span's."""

from __future__ import annotations

import json

import pytest
import torch

from scaleformer.bench import causal_peers
from scaleformer.ops.spans import Span


def test_a_tiny_run_writes_every_row(tmp_path):
    out = tmp_path / "peers"
    assert causal_peers.main(["--n", "160", "--rounds", "2", "--heads", "1", "--dh", "8", "--no-flex",
                              "--out", str(out)]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    rows = {(r["pattern"], r["phase"]): r for r in result["rows"]}
    assert set(rows) == {(p, ph) for p, _ in causal_peers.PATTERNS for ph in causal_peers.PHASES}
    for r in rows.values():
        for impl in ("project", "sdpa dense mask"):
            assert len(r[impl]["times_s"]) == 2 and r[impl]["time_s"] > 0
        assert r["ratio_to_fastest_peer"] == pytest.approx(r["project"]["time_s"] / r["sdpa dense mask"]["time_s"])
    assert "flex" in result["notes"]
    md = out.with_suffix(".md").read_text()
    assert "| window 512 | token |" in md and "sdpa with the dense mask takes" in md


def test_the_floors():
    """4 dh FLOPs per attended pair and head forward, 3x that in training; a token reads its span's keys and values."""
    span = Span("window", 3, causal=True)
    f = causal_peers.floors(span, 10, heads=2, dh=4, gemm=1e9, bandwidth=1e9, elem=4)
    assert f["forward"] == pytest.approx(4 * span.pairs(10) * 4 * 2 / 1e9)
    assert f["training"] == pytest.approx(3 * f["forward"])
    assert f["token"] == pytest.approx(2 * 4 * 2 * 4 * 4 / 1e9)  # w + 1 = 4 keys and values, 2 heads x 4, fp32
    block = causal_peers.floors(Span("block", 4, causal=True), 10, heads=1, dh=1, gemm=1, bandwidth=1, elem=1)
    assert block["token"] == 2 * 2  # position 9 reads its block's keys 8 and 9


@pytest.mark.parametrize(("kind", "size"), [("full", 0), ("block", 4), ("window", 3)])
def test_flex_masks_are_the_spans(kind, size):
    """The mask function handed to flex is the span's causal mask, for the prompt and for a decoded token."""
    span = Span(kind, size, causal=True)
    n = 11
    q, k = torch.arange(n)[:, None], torch.arange(n)[None, :]
    assert torch.equal(causal_peers.mask_mod(span)(0, 0, q, k), span.dense_mask(n))
    last = causal_peers.mask_mod(span, n - 1)(0, 0, torch.zeros(1, 1, dtype=torch.long), k)
    assert torch.equal(last, span.dense_mask(n)[-1:])


@pytest.mark.slow
def test_flex_runs_compiled_in_each_phase_it_has(tmp_path):
    """With flex: its forward and token rows are measured, and on a CPU its training row is absent with the reason
    (asked of eager flex: a compiled call that raised would leave every later flex call eager)."""
    out = tmp_path / "peers"
    assert causal_peers.main(["--n", "256", "--rounds", "2", "--heads", "1", "--dh", "16", "--out", str(out)]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    for r in result["rows"]:
        assert ("flex" in r) == (r["phase"] != "training"), (r["pattern"], r["phase"])
    assert "backward" in result["notes"]["flex"]
