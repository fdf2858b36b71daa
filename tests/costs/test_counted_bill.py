"""MASFormer's paper profile, priced by counting: the shape gives Pythia-1.4B's published parameters, each cell's
FLOPs follow from its own config and causal spans, and the CLI writes the bill without running anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaleformer.artifacts import grid
from scaleformer.cli.reproduce import main
from scaleformer.compose import compose_config
from scaleformer.costs.counted_bill import H100_BF16_DENSE, parameters
from scaleformer.runs.context import to_config

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


T2 = grid.load_spec(ROOT / "experiments" / "masformer_table2.yaml")


def test_table2_paper_profile_follows_appendix_b():
    """Each fine-tuning cell carries the paper's choices: the learning rate its sweep chose (Table 7), the summary
    length and steps of its data set (Table 8, section 4.2.1), a linear schedule and weight decay 0.001."""
    cells = {(c.method, c.key): c for c in grid.expand_grid(T2, "paper") if c.available}
    want = {("full", "qmsum"): (1e-5, 3000, 32, 256), ("masformer_l4", "arxiv"): (1e-3, 12000, 64, 512),
            ("block_4096", "govreport"): (1e-5, 8000, 32, 1024), ("window_1024", "qmsum"): (5e-4, 3000, 32, 256)}
    for key, (lr, steps, batch, room) in want.items():
        rc = to_config(compose_config(cells[key].overrides))
        t = rc.trainer
        assert (rc.optim.lr, t.max_steps, rc.data.max_target_tokens) == (lr, steps, room), key
        assert rc.data.batch_size * t.accumulate_grad_batches * t.devices == batch, key
        assert rc.generation.max_new_tokens == room - 1 and rc.method.max_length == 8192
        assert (rc.optim.schedule, rc.optim.weight_decay, rc.generation.num_beams) == ("linear", 0.001, 1)
    ablation = grid.load_spec(ROOT / "experiments" / "masformer_ablation.yaml")
    top = next(c for c in grid.expand_grid(ablation, "paper") if c.method == "masformer_l8_top" and c.key == "qmsum")
    assert "optim.lr=5e-5" in top.overrides, "a row `like` Table 2's l = 8 takes its rate (the paper gives none)"


def test_table2_bill_prices_its_own_continual_runs_fine_tuning_and_generation(tmp_path):
    assert main(["masformer_table2", "--profile", "dryrun", "--out-dir", str(tmp_path)]) == 0
    bill = json.loads((tmp_path / "masformer_table2.json").read_text())
    n, L, d, V, N = 8192, 24, 2048, 50304, 1_208_602_624
    cont = {c["method"]: c for c in bill["continual"]}
    assert {m for m, c in cont.items() if c.get("priced_in") == "masformer_table1"} == {
        "full", "block_2048", "masformer_l4", "masformer_l8"}, "Table 1's own runs: priced in its bill"
    w = cont["window_1024"]
    assert w["sequences"] == 50_000 * 128 and w["pairs_per_sequence"] == L * sum(min(i + 1, 1025) for i in range(n))  # w keys back, itself
    assert w["flops"] == 50_000 * 128 * (6 * n * (N + V * d) + 12 * d * w["pairs_per_sequence"])
    assert cont["full"]["flops"] == 0 and w["floor_h100_hours"] > 100
    cells = {(c["method"], c["dataset"]): c for c in bill["cells"]}
    assert len(cells) == 27
    full = cells[("full", "qmsum")]
    pairs = L * n * (n + 1) // 2
    assert full["sequences"] == 3000 * 32 and full["head_positions"] == 257  # the summary's 256 and the sep
    assert full["flops"] == 3000 * 32 * (6 * n * N + 6 * 257 * V * d + 12 * d * pairs)
    g = full["generation"]
    prompt, new, docs = n - 256, 255, 272 + 281
    assert (g["documents"], g["prompt_tokens"], g["new_tokens"]) == (docs, prompt, new)
    assert g["batches"] == -(-docs // (8 * 8)) * 8  # batches of 8 documents on each of 8 processes
    keys = L * ((prompt + new) * (prompt + new + 1) // 2 - prompt * (prompt + 1) // 2)
    assert g["prefill_flops"] == docs * (2 * prompt * N + 2 * V * d + 4 * d * L * prompt * (prompt + 1) // 2)
    assert g["decode_bytes"] == g["batches"] * new * 2 * (N + V * d) + docs * 4 * d * keys
    assert g["decode_bound"] == "bandwidth"  # a batch of 8 reads 2.6 GB of weights for 8 tokens
    stages = bill["floor_h100_hours_by_stage"]
    assert stages["continual"] == pytest.approx(sum(c["floor_h100_hours"] for c in bill["continual"]))
    assert bill["floor_h100_hours"] == pytest.approx(sum(stages.values()))
    text = (tmp_path / "masformer_table2.md").read_text()
    assert "masformer_table1's own | 0 here" in text and "at least" in text


def test_a_paper_launch_quotes_the_counted_floor_before_asking_for_yes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # results/dryrun/ of this folder
    assert main(["masformer_table1", "--profile", "paper"]) == 2
    assert "unknown: no cost table yet" in capsys.readouterr().err
    assert main(["masformer_table1", "--profile", "dryrun"]) == 0
    floor = json.loads((tmp_path / "results" / "dryrun" / "masformer_table1.json").read_text())["floor_h100_hours"]
    capsys.readouterr()
    assert main(["masformer_table1", "--profile", "paper"]) == 2, "nothing runs without --yes"
    err = capsys.readouterr().err
    assert f"counted at no less than {floor:,.0f} H100-hours at peak" in err and "pass --yes" in err


def test_tables_3_and_4_bills_price_only_the_runs_table2_does_not_have(tmp_path):
    """Table 3's short continual training is priced at its own n (a quarter of the tokens); each fine-tuning run
    that is Table 2's (the same name: Table 3's C.T. row, Table 4's bottom rows) is priced in Table 2's bill."""
    assert main(["masformer_continual", "--profile", "dryrun", "--out-dir", str(tmp_path)]) == 0
    t3 = json.loads((tmp_path / "masformer_continual.json").read_text())
    cont = {c["method"]: c for c in t3["continual"]}
    assert set(cont) == {"masformer_l8_ct_short", "masformer_l8_ct"}, "w.o. C.T. fine-tunes the reader as it is"
    assert cont["masformer_l8_ct"]["priced_in"] == "masformer_table1"
    short = cont["masformer_l8_ct_short"]
    assert short["n"] == 2048 and short["tokens"] == 50_000 * 128 * 2048 and "priced_in" not in short
    cells = {(c["method"], c["dataset"]): c for c in t3["cells"]}
    assert {k for k, c in cells.items() if c.get("priced_in") == "masformer_table2"} == {
        ("masformer_l8_ct", "qmsum"), ("masformer_l8_ct", "govreport")}
    assert cells[("masformer_l8", "qmsum")]["flops"] > 0, "without continual training: a run of its own"
    assert main(["masformer_ablation", "--profile", "dryrun", "--out-dir", str(tmp_path)]) == 0
    t4 = json.loads((tmp_path / "masformer_ablation.json").read_text())
    theirs = {c["method"] for c in t4["cells"] if c.get("priced_in") == "masformer_table2"}
    assert theirs == {"masformer_l8", "masformer_l12"}, "the bottom rows are Table 2's runs"
    assert {c["method"] for c in t4["continual"] if "priced_in" not in c} == {
        "masformer_l8_middle", "masformer_l8_top", "masformer_l8_every", "masformer_l12_every"}
    assert t4["floor_h100_hours"] == pytest.approx(sum(t4["floor_h100_hours_by_stage"].values()))
