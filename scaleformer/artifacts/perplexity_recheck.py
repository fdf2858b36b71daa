"""Every number of MASFormer's perplexity tables and of its Figure 3, recomputed from the spec and the per-document
scores archived beside them (``scores/<artifact>/<run>/scores_<split>.jsonl``), for ``render_results.py --check``.

The rendered files are never trusted: the grid is expanded from the spec again (its cells, seeds and run ids), C and
the sizes from each row's method built on its composed config, the paper's values from the spec, and each
perplexity, interval, seed's perplexity, comparison and Holm-adjusted p from the archived scores through the very
functions the renderers use (:mod:`scaleformer.artifacts.perplexity_stats`). Each disagreement is one line naming
the file, the row and the field: an edited ``cost_share``, ``p_holm``, ``diff`` or ``ppl`` fails the check.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import Cell, expand_grid, resolve_run_ids
from scaleformer.artifacts.perplexity_stats import (
    bucket_values,
    comparisons,
    cost_shares,
    paper_values,
    pooled,
    read_doc_scores,
    setting,
)
from scaleformer.compose import compose_config
from scaleformer.model.backbone import prepare
from scaleformer.runs.context import to_config

TABLE_FIELDS = ("ppl", "low", "high", "docs", "seeds", "seed_ppl")
TEST_FIELDS = ("diff", "low", "high", "p", "docs", "seeds", "test", "p_holm")
FIGURE_FIELDS = ("upper", "ppl", "low", "high", "docs", "seeds")


def _parse(text: str) -> Any:
    """A CSV cell as the renderer wrote it: empty is None, a number or a JSON list as such, else the text."""
    if text == "":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _same(written: Any, fresh: Any) -> bool:
    if isinstance(fresh, list):
        return isinstance(written, list) and len(written) == len(fresh) and all(map(_same, written, fresh))
    if isinstance(fresh, bool) or not isinstance(fresh, int | float):
        return written == fresh or (fresh in (None, "") and written in (None, ""))
    return isinstance(written, int | float) and not isinstance(written, bool) and math.isclose(
        float(written), float(fresh), rel_tol=1e-9, abs_tol=1e-12)


def grid(spec: dict[str, Any], profile: str) -> dict[tuple[str, str], list[Cell]]:
    """The spec's cells of ``profile`` by (row, column), in seed order, their run ids resolved."""
    cells = [c for c in expand_grid(spec, profile) if c.available]
    resolve_run_ids(cells)
    out: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        out.setdefault((c.method, c.key), []).append(c)
    return out


def archived(groups: dict[tuple[str, str], list[Cell]], folder: Path, split: str
             ) -> dict[tuple[str, str], list[dict[str, dict[str, Any]]] | None]:
    """Each (row, column)'s per-seed document scores from the archive (None where a run's file is missing)."""
    out = {}
    for key, group in groups.items():
        per_seed = [read_doc_scores(folder / str(c.run_id), split) for c in group]
        out[key] = None if any(s is None for s in per_seed) else per_seed  # type: ignore[assignment]
    return out


def _method_record(cell: Cell) -> tuple[Any, str]:
    """C (the paper's formula at n) and the sizes as the paper writes them, from the row's method as composed."""
    rc = to_config(compose_config(cell.overrides))
    described = prepare(rc.backbone, rc.method).method.describe()
    return described.get("attention_cost_paper"), setting(described)


def _check_rows(name: str, written: list[dict[str, Any]], fresh: dict[tuple[Any, ...], dict[str, Any]],
                key_fields: tuple[str, ...], fields: tuple[str, ...]) -> list[str]:
    problems = []
    seen = set()
    for r in written:
        key = tuple(r.get(k) for k in key_fields)
        seen.add(key)
        want = fresh.get(key)
        if want is None:
            problems.append(f"{name}: {' '.join(map(str, key))}: a row the spec and the archived scores do not give")
            continue
        for k in fields:
            if not _same(_parse(r.get(k, "")), want.get(k)):
                problems.append(f"{name}: {' '.join(map(str, key))}: {k} is {r.get(k)!r} in the file, "
                                f"{want.get(k)!r} from the spec and the archived scores")
    problems += [f"{name}: {' '.join(map(str, key))}: missing, while the spec and the archived scores give it"
                 for key in fresh if key not in seen]
    return problems


def recheck_table(spec: dict[str, Any], table: Path, folder: Path, profile: str | None = None) -> list[str]:
    """A perplexity table (``<artifact>.csv``) and its comparisons (``<artifact>-tests.csv``) recomputed (``profile``:
    by default the folder's, ``results/<profile>/scores/<artifact>/``)."""
    profile = profile or folder.parent.parent.name
    split = next(iter(spec["splits"].values()))
    groups = grid(spec, profile)
    scores = archived(groups, folder, split)
    records = {key: _method_record(group[0]) for key, group in groups.items()}
    shares = cost_shares(spec, {key: cost for key, (cost, _) in records.items()})
    fresh: dict[tuple[Any, ...], dict[str, Any]] = {}
    for (method, key), group in groups.items():
        cost, sizes = records[(method, key)]
        per_seed = scores[(method, key)]
        value = pooled(per_seed) if per_seed else None
        fresh[(method, key)] = {"status": "ok" if value else "missing", "setting": sizes, "cost": cost,
                                "cost_share": shares[(method, key)], **paper_values(spec, split, method, key),
                                "run_ids": " ".join(sorted(str(c.run_id) for c in group)),
                                **({k: value[k] for k in TABLE_FIELDS} if value else {})}
    rows = list(csv.DictReader(table.open(encoding="utf-8")))
    ok = {k: v for k, v in fresh.items() if v["status"] == "ok"}
    problems = [f"{table.name}: {r['method']} {r['dataset']}: status {r['status']!r}, but the archived scores of its "
                f"runs are {'complete' if (r['method'], r['dataset']) in ok else 'missing'}"
                for r in rows if (r["status"] == "ok") != ((r["method"], r["dataset"]) in ok)]
    problems += _check_rows(table.name, [r for r in rows if r["status"] == "ok"], ok, ("method", "dataset"),
                            ("setting", "cost", "cost_share", "paper_ppl", "paper_cost_millions", "run_ids",
                             *TABLE_FIELDS))
    tests_file = table.with_name(f"{table.stem}-tests.csv")
    tests = comparisons(spec, {k: v for k, v in scores.items() if v})
    written = list(csv.DictReader(tests_file.open(encoding="utf-8"))) if tests_file.is_file() else []
    if tests and not tests_file.is_file():
        problems.append(f"{tests_file.name}: missing, while the spec lists {len(tests)} comparisons")
    problems += _check_rows(tests_file.name, written, {(t["row"], t["against"], t["dataset"]): t for t in tests},
                            ("row", "against", "dataset"), TEST_FIELDS)
    return problems


def recheck_figure(spec: dict[str, Any], figure: Path, folder: Path, profile: str | None = None) -> list[str]:
    """Figure 3's CSV (perplexity by document length) recomputed from its runs' archived scores (``folder``: the
    archive of the artifact whose runs it reads, ``same_runs_as``)."""
    profile = profile or folder.parent.parent.name
    if profile not in (spec.get("bucket") or {}):
        return [f"{figure.name}: no bucket width for profile {profile!r} in the spec"]
    width, split = int(spec["bucket"][profile]), next(iter(spec["splits"].values()))
    groups = grid(spec, profile)
    fresh = {}
    for (method, key), per_seed in archived(groups, folder, split).items():
        for b in bucket_values(per_seed, width) if per_seed else []:
            fresh[(method, key, b["bucket"])] = b
    rows = list(csv.DictReader(figure.open(encoding="utf-8")))
    return _check_rows(figure.name, rows, fresh, ("method", "dataset", "bucket"), FIGURE_FIELDS)
