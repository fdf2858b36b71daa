"""MASFormer's paper profile, priced by counting: the shape gives Pythia-1.4B's published parameters, each cell's
FLOPs follow from its own config and causal spans, and the CLI writes the bill without running anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaleformer.artifacts import grid
from scaleformer.artifacts.masformer_bill import H100_BF16_DENSE, parameters
from scaleformer.cli.reproduce import main

ROOT = Path(__file__).resolve().parents[2]
SPEC = grid.load_spec(ROOT / "experiments" / "masformer_table1.yaml")
SHAPE = SPEC["profiles"]["dryrun"]["shape"]


def test_the_shape_gives_pythias_published_parameter_count():
    p = parameters(SHAPE)
    assert p["total"] == 1_414_647_808 and p["layers"] == 1_208_602_624  # Pythia's table: total, non-embedding


def test_the_bill_counts_each_cell_from_its_own_spans(tmp_path):
    assert main(["masformer_table1", "--profile", "dryrun", "--out-dir", str(tmp_path)]) == 0
    bill = json.loads((tmp_path / "masformer_table1.json").read_text())
    cells = {(c["method"], c["dataset"]): c for c in bill["cells"]}
    assert len(cells) == 12 and not (tmp_path / "runs").exists()  # counted: nothing ran
    n, L, d, V = 8192, 24, 2048, 50304
    full = cells[("full", "arxiv")]
    assert full["sequences"] == 50_000 * 128 and full["tokens"] == 50_000 * 128 * n
    pairs = L * n * (n + 1) // 2  # causal full attention: every key up to the query, itself included
    assert full["pairs_per_sequence"] == pairs
    assert full["flops"] == 50_000 * 128 * (6 * n * (1_208_602_624 + V * d) + 12 * d * pairs)
    assert full["floor_h100_hours"] == pytest.approx(full["flops"] / H100_BF16_DENSE / 3600)
    block = cells[("block_1024", "arxiv")]
    assert block["pairs_per_sequence"] == L * (n // 1024) * 1024 * 1025 // 2 and block["cost_paper"] == L * 1024 * n
    l4 = cells[("masformer_l4", "pubmed")]
    assert l4["spans"][:5] == ["full", "full", "full", "full", "block 1024"] and l4["cost_paper"] == 20 * 1024 * n + 4 * n * n
    assert "at least" in (tmp_path / "masformer_table1.md").read_text()
    assert l4["weights_from"] == "arxiv" and l4["flops"] == 0, "PubMed scores ArXiv's weights: trained once"
    assert bill["floor_h100_hours"] == pytest.approx(
        sum(c["floor_h100_hours"] for (_, ds), c in cells.items() if ds == "arxiv"))


def test_table2_rows_fine_tune_their_own_continually_trained_models(tmp_path):
    """The paper's chain: each Table 2 row starts from its method's continual training on the Pile, which is Table
    1's own run wherever the row is one of Table 1's at the same sizes (trained once for both tables)."""
    t2 = grid.load_spec(ROOT / "experiments" / "masformer_table2.yaml")
    cells = [c for c in grid.expand_grid(t2, "paper") if c.available]
    grid.resolve_run_ids(cells, tmp_path)
    stage = {c.method: c for c in grid.continual_stage(cells)}
    assert set(stage) == set(t2["methods"]) and all(c.pretrain_from is stage[c.method] for c in cells)
    table1 = [c for c in grid.expand_grid(SPEC, "paper") if c.available]
    grid.resolve_run_ids(table1, tmp_path)
    shared = {c.method for c in table1 if c.key == "arxiv"} & {m for m, c in stage.items()
                                                               if c.run_id in {t.run_id for t in table1}}
    assert shared == {"full", "block_2048", "masformer_l4", "masformer_l8"}
    for c in cells:
        assert f"backbone.pretrained={stage[c.method].run_dir / 'model'}" in c.run_overrides()
    window = [o for o in stage["window_1024"].overrides if o.startswith(("method", "data"))]
    assert "method=sliding_window" in window and "method.window=1024" in window and "data=arxiv_lm" in window
    assert any(o.startswith("data.corpus=") for o in stage["window_1024"].overrides), "continued on the Pile"
