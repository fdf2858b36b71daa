"""MASFormer's perplexity artifacts: rows of one method at several sizes, pooled perplexity with intervals over
documents, paired tests on per-document log-perplexity, and the smoke profile end to end."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from scaleformer.artifacts import grid
from scaleformer.artifacts.perplexity_figure import build_perplexity_figure
from scaleformer.artifacts.perplexity_recheck import recheck_table
from scaleformer.artifacts.perplexity_stats import compare, pooled
from scaleformer.artifacts.perplexity_tables import build_perplexity, setting

ROOT = Path(__file__).resolve().parents[2]
SPEC = grid.load_spec(ROOT / "experiments" / "masformer_table1.yaml")


def _docs(nll_per_token: list[float], tokens: list[int]) -> dict[str, dict]:
    return {f"d{i}": {"id": f"d{i}", "nll": x * n, "tokens": n, "length": n + 1}
            for i, (x, n) in enumerate(zip(nll_per_token, tokens))}


def test_rows_map_to_method_options_with_their_profile_sizes():
    cells = {c.method: c for c in grid.expand_grid(SPEC, "tiny") if c.seed == 1}
    assert cells["block_2048"].overrides[-1] == "method=block_attention"
    assert "method.block_size=256" in cells["block_2048"].overrides
    assert {"method.full_layers=1", "method.block_size=128"} <= set(cells["masformer_l4"].overrides)
    assert not cells["masformer_l2"].available  # the profile says why (skip_rows)
    paper = {c.method: c for c in grid.expand_grid(SPEC, "paper")}
    assert "method.full_layers=2" in paper["masformer_l2"].overrides and paper["masformer_l2"].available
    with pytest.raises(ValueError, match="METHODS=nosuch"):
        grid.select_methods(SPEC, "nosuch")
    assert grid.select_methods(SPEC, "full,masformer_l4") == ["full", "masformer_l4"]


def test_pooled_perplexity_is_token_weighted_over_seeds_and_documents():
    a, b = _docs([1.0, 2.0, 1.5], [10, 30, 20]), _docs([1.2, 1.8, 1.4], [10, 30, 20])
    got = pooled([a, b])
    want = math.exp((10 * 1.0 + 30 * 2.0 + 20 * 1.5 + 10 * 1.2 + 30 * 1.8 + 20 * 1.4) / 120)
    assert got["ppl"] == pytest.approx(want) and got["low"] <= got["ppl"] <= got["high"]
    assert got["seed_ppl"] == pytest.approx([math.exp(100 / 60), math.exp(94 / 60)])
    assert got["docs"] == 3 and got["seeds"] == 2


def test_a_paired_comparison_finds_a_clear_difference_and_none_where_there_is_none():
    tokens = [20 + 7 * i for i in range(12)]
    base = [1.0 + 0.05 * (i % 5) for i in range(12)]
    worse = _docs([x + 0.1 for x in base], tokens)
    r = compare([worse], [_docs(base, tokens)])
    assert r["diff"] == pytest.approx(0.1) and r["p"] < 0.001 and r["low"] > 0
    same = compare([_docs(base, tokens)], [_docs(base, tokens)])
    assert same["diff"] == 0 and same["p"] == 1
    seeds = compare([worse, _docs([x + 0.12 for x in base], tokens)],
                    [_docs(base, tokens), _docs([x + 0.01 for x in base], tokens)])
    assert seeds["seeds"] == 2 and seeds["test"] == "two-level t" and seeds["diff"] == pytest.approx(0.105)


def test_settings_are_written_as_the_paper_writes_them():
    assert setting({"name": "masformer", "full_layers": 1, "block_size": 128, "placement": "bottom"}) == \
        "l=1, b=128, bottom"
    assert setting({"name": "block_attention", "block_size": 256}) == "b=256"
    assert setting({"name": "full_attention"}) == ""


def test_smoke_profile_runs_and_renders_with_cost_shares_and_paired_tests(tmp_path):
    from scaleformer.artifacts.gridrun import run_grid

    assert run_grid(SPEC, "smoke", tmp_path, methods="full,block_1024,masformer_l4") == []
    paths = build_perplexity(SPEC, "smoke", tmp_path, tmp_path, methods="full,block_1024,masformer_l4")
    rows = {r["method"]: r for r in csv.DictReader(paths["csv"].open())}
    assert rows["full"]["status"] == "ok" and float(rows["full"]["cost_share"]) == 1.0
    assert float(rows["block_1024"]["cost_share"]) == pytest.approx(32 / 256)  # b / n
    assert float(rows["masformer_l4"]["cost_share"]) == pytest.approx((5 * 32 * 256 + 256 ** 2) / (6 * 256 ** 2))
    for r in rows.values():
        assert float(r["low"]) <= float(r["ppl"]) <= float(r["high"])
    tests = list(csv.DictReader(paths["tests"].open()))
    assert {(t["row"], t["against"]) for t in tests} == {("masformer_l4", "full")}
    md = paths["md"].read_text()
    assert "| MASFormer (l=4) | l=1, b=32, bottom |" in md and "Problems" not in md
    figure = grid.load_spec(ROOT / "experiments" / "masformer_figure3.yaml")  # Table 1's runs, read by length
    assert figure["rows"] == SPEC["rows"] and figure["artifact"] == "masformer_figure3"
    drawn = build_perplexity_figure(figure, "smoke", tmp_path, tmp_path, methods="full,block_1024,masformer_l4")
    by_length = list(csv.DictReader(drawn["csv"].open()))
    for method, r in rows.items():  # every document in one bucket, each bucket within the run's n = 256
        mine = [b for b in by_length if b["method"] == method]
        assert sum(int(b["docs"]) for b in mine) == int(r["docs"]) and all(int(b["upper"]) <= 256 for b in mine)
    assert drawn["png"].read_bytes()[:4] == b"\x89PNG" and "| Full attention |" in drawn["md"].read_text()
    archived = tmp_path / "scores" / "masformer_table1"
    assert recheck_table(SPEC, paths["csv"], archived, "smoke") == []  # every number again from the archives
    text = paths["csv"].read_text()
    paths["csv"].write_text(text.replace(rows["full"]["ppl"], str(float(rows["full"]["ppl"]) * 1.01), 1))
    assert any("full arxiv: ppl is" in p for p in recheck_table(SPEC, paths["csv"], archived, "smoke"))


def test_masformer_table2_smoke_renders_rouge_rows_on_the_profiles_own_column(tmp_path):
    """Summarization as language modeling through the ROUGE tables: rows of one method at two sizes, one column
    (the profile's own), a row the profile has no size for shown as skipped with its reason."""
    from scaleformer.artifacts import tables
    from scaleformer.artifacts.gridrun import run_grid

    spec = grid.load_spec(ROOT / "experiments" / "masformer_table2.yaml")
    assert run_grid(spec, "smoke", tmp_path, methods="window_1024,block_2048") == []
    paths = tables.build_table(spec, "smoke", tmp_path, tmp_path, methods="window_1024,block_2048,masformer_l6")
    md = paths["md"].read_text()
    assert "| split | method | synthetic 0.15k R-1 | synthetic 0.15k R-2 | synthetic 0.15k R-L |" in md
    assert "arxiv" not in md.split("| split |")[1].split("\n")[0]
    assert "| masformer_l6 | synthetic 0.15k | skipped: l = L/4 is not a whole layer of 6 |" in md
    rows = [r for r in csv.DictReader(paths["csv"].open()) if r["method"] == "window_1024" and r["metric"] == "rouge2"]
    assert rows and rows[0]["status"] == "ok" and rows[0]["paper"] == "4.32"


def test_masformer_figure4_draws_table2s_runs_against_their_share_of_full_attentions_cost(tmp_path):
    """Figure 4 reads Table 2's runs: C from each run's record as a share of full attention's (the tiny sizes
    land on the paper's shares), R-2 with its interval, rechecked from the scores Table 2 archives."""
    from scaleformer.artifacts import tables
    from scaleformer.artifacts.gridrun import run_grid
    from scaleformer.artifacts.metric_by_cost import build_cost_figure
    from scaleformer.artifacts.scores_archive import recheck_all, recheck_figure

    table2 = grid.load_spec(ROOT / "experiments" / "masformer_table2.yaml")
    spec = grid.load_spec(ROOT / "experiments" / "masformer_figure4.yaml")
    rows = "full,block_2048,masformer_l4"
    assert run_grid(table2, "smoke", tmp_path, methods=rows) == []
    tables.build_table(table2, "smoke", tmp_path, tmp_path, methods=rows)  # archives the per-document scores
    paths = build_cost_figure(spec, "smoke", tmp_path, tmp_path, methods=rows)
    got = {(r["split"], r["method"]): r for r in csv.DictReader(paths["csv"].open())}
    n, L = 256, 6
    assert float(got[("test", "full")]["cost"]) == L * n * n and float(got[("test", "full")]["cost_share"]) == 1
    assert float(got[("test", "block_2048")]["cost_share"]) == pytest.approx(64 / n)  # b / n
    assert float(got[("test", "masformer_l4")]["cost_share"]) == pytest.approx((5 * 32 * n + n * n) / (L * n * n))
    assert float(got[("dev", "masformer_l4")]["paper_cost_share"]) == pytest.approx(436 / 1610)  # the paper's 27%
    assert got[("dev", "block_2048")]["paper"] == "5.03" and got[("test", "block_2048")]["paper"] == ""
    for r in got.values():
        assert r["status"] == "ok" and float(r["ci_low"]) <= float(r["ours"]) <= float(r["ci_high"])
    assert paths["png"].read_bytes()[:4] == b"\x89PNG" and "| test | MASFormer (l=4) | l=1, b=32, bottom |" in \
        paths["md"].read_text()
    archived = tmp_path / "scores" / "masformer_table2"
    assert recheck_figure(spec, paths["csv"], archived) == []
    text = paths["csv"].read_text()
    row = got[("dev", "full")]  # the CSV's first row
    paths["csv"].write_text(text.replace(f",{row['ci_high']},", f",{float(row['ci_high']) + 1},", 1))
    assert any("dev full on qmsum: ci_high" in p for p in recheck_all(tmp_path))  # found by render_results --check


def test_the_placement_ablation_reuses_table2s_runs_and_moves_only_the_full_layers(tmp_path):
    from scaleformer.artifacts import tables
    from scaleformer.artifacts.gridrun import run_grid

    spec = grid.load_spec(ROOT / "experiments" / "masformer_ablation.yaml")
    table2 = grid.load_spec(ROOT / "experiments" / "masformer_table2.yaml")
    cells = {c.method: c for c in grid.expand_grid(spec, "smoke")}
    same = {c.method: c for c in grid.expand_grid(table2, "smoke")}
    grid.resolve_run_ids([*cells.values(), *same.values()], tmp_path)
    assert cells["masformer_l8"].run_id == same["masformer_l8"].run_id  # the bottom row is Table 2's run
    top = cells["masformer_l8_top"].overrides
    assert set(top) - set(cells["masformer_l8"].overrides) == {"method.placement=top"}
    assert run_grid(spec, "smoke", tmp_path, methods="masformer_l8,masformer_l8_every") == []
    md = tables.build_table(spec, "smoke", tmp_path, tmp_path, methods="masformer_l8,masformer_l8_every")["md"]
    assert "| dev | Every 3 |" in md.read_text() and "(6.9)" in md.read_text()


def test_the_lm_placement_rows_are_table1s_runs_but_for_the_moved_layers(tmp_path):
    spec = grid.load_spec(ROOT / "experiments" / "masformer_lm_placement.yaml")
    for profile in ("tiny", "paper"):
        cells = {(c.method, c.seed): c for c in grid.expand_grid(spec, profile)}
        same = {(c.method, c.seed): c for c in grid.expand_grid(SPEC, profile)}
        grid.resolve_run_ids([*cells.values(), *same.values()], tmp_path)
        for key in ((m, s) for m, s in cells if m in ("full", "block_2048", "masformer_l4")):
            assert cells[key].run_id == same[key].run_id  # Table 1's own runs
        for (method, seed), c in cells.items():
            if method.startswith("masformer_l4_"):
                moved = set(c.overrides) - set(cells[("masformer_l4", seed)].overrides)
                assert moved == {f"method.placement={method.rsplit('_', 1)[1]}"}


def test_continual_training_rows_start_from_their_own_continued_models(tmp_path):
    """Table 3's rows: without continual training (Table 2's own run where the profile has no chain), after a short
    one and after one at the fine-tuning length; each continued run is Table 1's with the row's pattern."""
    from scaleformer.artifacts import tables
    from scaleformer.artifacts.gridrun import run_grid

    spec = grid.load_spec(ROOT / "experiments" / "masformer_continual.yaml")
    table2 = grid.load_spec(ROOT / "experiments" / "masformer_table2.yaml")
    cells = {c.method: c for c in grid.expand_grid(spec, "smoke")}
    same = {c.method: c for c in grid.expand_grid(table2, "smoke")}
    grid.resolve_run_ids([*cells.values(), *same.values()], tmp_path)
    assert cells["masformer_l8"].run_id == same["masformer_l8"].run_id and cells["masformer_l8"].pretrain_from is None
    short, full = cells["masformer_l8_ct_short"].pretrain_from, cells["masformer_l8_ct"].pretrain_from
    assert short.overrides[-2:] == ["method.max_length=128", "method=masformer"] and short.run_id != full.run_id
    smoke_lm = {c.method: c for c in grid.expand_grid(SPEC, "smoke")}
    grid.resolve_run_ids(list(smoke_lm.values()), tmp_path)
    assert full.run_id == smoke_lm["masformer_l8"].run_id, "Table 1's own run of the same pattern"
    assert run_grid(spec, "smoke", tmp_path) == []
    for row, c in (("masformer_l8_ct_short", short), ("masformer_l8_ct", full)):
        assert (c.run_dir / "model" / "config.json").is_file()
        ran = json.loads((cells[row].result_dir / "metrics.json").read_text())
        assert ran["backbone"]["pretrained"] == str(c.run_dir / "model"), "fine-tuned from its continued model"
    md = tables.build_table(spec, "smoke", tmp_path, tmp_path)["md"].read_text()
    assert "| dev | C.T. (n/4) |" in md and "| dev | C.T. (n) |" in md and "(7.2)" in md  # the paper's R-2 beside
