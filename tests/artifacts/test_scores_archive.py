"""A table's per-document scores archived beside it, and every statistic recomputed from them alone
(scaleformer.artifacts.scores_archive): equal on the untouched archive, a line per difference otherwise."""

from __future__ import annotations

import json
import random

from conftest import ROOT

from scaleformer.artifacts import grid, scores_archive, tables


def _table(tmp_path):
    spec = grid.load_spec(ROOT / "experiments" / "table2.yaml")
    cells = [c for c in grid.expand_grid(spec, "smoke", methods="truncation,sled") if c.key == "summscreen"]
    grid.resolve_run_ids(cells, tmp_path / "runs")
    rng = random.Random(0)
    base = [rng.uniform(20, 60) for _ in range(30)]
    for c in cells:
        per_doc = [v + (3.0 if c.method == "sled" else 0.0) + rng.gauss(0, 2) for v in base]
        rows = [{"id": f"doc-{i:03d}", "rouge1": v, "rouge2": v / 2, "rougeL": v / 3} for i, v in enumerate(per_doc)]
        mean = sum(per_doc) / len(per_doc)
        split = {"rouge1": mean, "rouge2": mean / 2, "rougeL": mean / 3, "n_examples": len(per_doc)}
        c.result_dir.mkdir(parents=True)
        (c.result_dir / "metrics.json").write_text(json.dumps({"run_id": c.run_id, "config_hash": "abc",
                                                               "commit": "deadbeef",
                                                               "splits": {"validation": split, "test": split}}))
        for s in ("validation", "test"):
            (c.result_dir / f"scores_{s}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (c.result_dir / f"predictions_{s}.jsonl").write_text("".join(
                json.dumps({"id": r["id"], "prediction": "p", "reference": f"ref {r['id']}"}) + "\n" for r in rows))
    out = tmp_path / "out"
    paths = tables.build_table(spec, "smoke", tmp_path / "runs", out, methods="truncation,sled")
    return spec, paths["csv"], out / "scores" / "table2"


def test_the_archive_recomputes_every_statistic_and_a_changed_score_fails(tmp_path):
    spec, csv_path, archived = _table(tmp_path)
    files = sorted(archived.rglob("scores_*.jsonl"))
    assert len(files) == 4  # 2 runs x (dev, test)
    first = json.loads(files[0].read_text().splitlines()[0])
    assert "_reference_sha" in first and "rouge1" in first
    assert scores_archive.recheck(spec, csv_path, archived) == []

    lines = files[-1].read_text().splitlines()
    row = json.loads(lines[0])
    row["rouge1"] += 5.0
    files[-1].write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    problems = scores_archive.recheck(spec, csv_path, archived)
    assert problems and any("rouge1: ci_low is" in p for p in problems)
    assert any("ours is" in p for p in problems)  # the mean no longer matches the CSV either


def test_a_missing_score_file_is_named(tmp_path):
    spec, csv_path, archived = _table(tmp_path)
    victim = sorted(archived.rglob("scores_test.jsonl"))[0]
    victim.unlink()
    problems = scores_archive.recheck(spec, csv_path, archived)
    assert any(str(victim) in p and "is missing" in p for p in problems)


def test_recheck_all_finds_a_table_rendered_one_folder_down(tmp_path):
    """A few rows rendered apart (``--out-dir results/tiny/<name>``) are rechecked with the rest."""
    spec, csv_path, archived = _table(tmp_path)  # the table in tmp_path/out/
    assert scores_archive.recheck_all(tmp_path) == []
    victim = sorted(archived.rglob("scores_test.jsonl"))[0]
    first, *rest = victim.read_text().splitlines()
    row = json.loads(first)
    row["rouge1"] += 5.0  # still a ROUGE in points: the statistics, not the range check, must catch it
    victim.write_text("\n".join([json.dumps(row), *rest]) + "\n")
    assert any(p.startswith("table2.csv: test") for p in scores_archive.recheck_all(tmp_path))


def test_a_table_restated_from_its_archive_gets_every_statistic_back(tmp_path):
    """A CSV whose statistics went stale (here: edited by hand) is recomputed from the archived scores."""
    import csv

    from scaleformer.artifacts.restate import restate

    spec, csv_path, archived = _table(tmp_path)
    rows = list(csv.DictReader(csv_path.open()))
    good = {k: rows[-1][k] for k in scores_archive.CHECKED}
    rows[-1].update(p_value="0.5", ci_high="99.0", significant="False")
    csv_path.write_text(tables.render_csv(rows))
    assert len(scores_archive.recheck(spec, csv_path, archived)) >= 2
    restate(spec, "smoke", csv_path.parent)
    assert scores_archive.recheck(spec, csv_path, archived) == []
    assert {k: list(csv.DictReader(csv_path.open()))[-1][k] for k in scores_archive.CHECKED} == good
    assert "Restated from the archived per-document scores" in csv_path.with_suffix(".md").read_text()
