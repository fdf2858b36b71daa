"""A committed cost table restated under the paper profile's current recipe, when its dry run's runs are not at hand.

A cost table's rows keep what each cell measured (seconds per micro-batch and FLOPs at the paper's length,
seconds per generated document, the encoder's share of a step or a steady-state fit). The plan they are
multiplied by (micro-batches, validations, evaluation documents) comes from the paper profile's composed config
(:func:`scaleformer.costs.table.paper_plan`), so a change of recipe changes every total without a new dry
run. Only the training length needs the measurement again where the recipe cuts training inputs
(``data.max_train_input_tokens``: BookSum trains on 16,384 tokens of each book): a step is read at that length
from the same model the table scaled with, fixed + per-token for a steady-state fit, else the measured step's
share that grows with the input (:func:`train_factor`); a method whose training stops growing (truncation,
Unlimiformer's standard mode) is unchanged. Peak memory is not re-read: the table says its peaks are at the
evaluation length, an upper bound for training cut shorter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import column_label, expand_grid
from scaleformer.costs.check import finite
from scaleformer.costs.plan import paper_cells, paper_plan
from scaleformer.costs.report import render_markdown
from scaleformer.costs.table import cost_table_paths, estimate, gpu_basis, total_hours
from scaleformer.errors import ConfigError
from scaleformer.io import atomic_write_text, read_json_record

PROFILE = "dryrun"


def train_factor(row: dict[str, Any], length: float) -> float:
    """How much a row's step (and its FLOPs) at the paper's length changes at ``length`` training tokens: the
    encoder's share ``e`` of the step measured at ``n`` tokens grows with the input, the rest stays,
    ``f(x) = 1 - e + e x / n`` (the single-step probe's scaling); 1 where training does not grow."""
    paper, n, e = row.get("paper_tokens"), row.get("tokens"), row.get("encoder_share")
    if row.get("train_length_scaling") != "linear" or not paper or not n or e is None or length >= paper:
        return 1.0
    f = lambda x: 1 - e + e * x / n  # noqa: E731
    return f(length) / f(paper)


def at_training_length(row: dict[str, Any], cap: int | None) -> dict[str, Any]:
    """The row's training fields at the recipe's training length (``cap``: ``data.max_train_input_tokens``). What
    was measured at the paper's length stays under ``paper_<field>``, so restating again reads the same values."""
    out = {**row}
    for key in ("step_s", "step_ckpt_s", "flops_step"):
        out.setdefault(f"paper_{key}", row.get(key))
        out[key] = out[f"paper_{key}"]
    length = min(row["paper_tokens"], cap) if cap else row["paper_tokens"]
    out["train_tokens"] = round(length)
    if length >= row["paper_tokens"]:
        return out
    if row.get("probe") == "steady-state" and row.get("fixed_s") is not None and row.get("train_length_scaling") == "linear":
        step = lambda x: row["fixed_s"] + row["per_1k_tokens_s"] * x / 1000  # noqa: E731
        k = step(length) / step(row["paper_tokens"])
    else:
        k = train_factor(row, length)
    for key in ("step_s", "step_ckpt_s", "flops_step"):
        if out[key] is not None:
            out[key] = out[key] * k
    return out


def _cells_by_label(spec: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """The dry run's cells by (method, the column as its table names it)."""
    out = {}
    for c in expand_grid(spec, PROFILE):
        where = f"{spec['sweeps'][c.key]['key']}={c.value}" if "sweeps" in spec else column_label(spec, PROFILE, c.key)
        out[(c.method, where)] = c
    return out


def restate_rows(spec: dict[str, Any], rows: list[dict[str, Any]], basis: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each measured row re-planned under the current paper profile (rows not measured pass through)."""
    cells, paper = _cells_by_label(spec), paper_cells(spec)
    out = []
    for r in rows:
        if r.get("not_measured"):
            out.append(r)
            continue
        cell = cells.get((r["method"], r["column"]))
        plan = paper_plan(spec, cell, paper) if cell is not None else None
        m = at_training_length(r, plan and plan.get("max_train_input_tokens"))
        m = {k: v for k, v in m.items() if k not in ("total_s", "train_s", "gen_s", "val_s", "val_s_doc", "val_share",
                                                      "val_source", "arithmetic", "gpu_train_h", "gpu_basis", "plan")}
        out.append({**m, "plan": plan, **estimate(m, plan, r["method"], basis)})
    return out


def check_table(path: Path) -> dict[str, Any]:
    """A committed cost table as restating reads it, or ConfigError in one line naming the file and row: a JSON
    object with a list of rows, each measured row naming its method and column and the paper's length it
    was measured at (what the recipe's plan and training length are read against)."""
    record = read_json_record(path, "cost table", error=ConfigError)
    rows = record.get("rows")
    if not isinstance(rows, list):
        raise ConfigError(f"{path}: rows={type(rows).__name__}: a cost table holds a list of rows")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise ConfigError(f"{path}: rows[{i}] is a JSON {type(r).__name__}, not a row")
        if r.get("not_measured"):
            continue
        name = f"{path}: rows[{i}] ({r.get('method')!r}, {r.get('column')!r})"
        for key in ("method", "column"):
            if not isinstance(r.get(key), str) or not r[key]:
                raise ConfigError(f"{name}: {key}={r.get(key)!r}: a measured row names its {key}")
        tokens = r.get("paper_tokens")
        if not finite(tokens) or tokens <= 0:
            raise ConfigError(f"{name}: paper_tokens={tokens!r}: must be the positive number of tokens it was "
                              "measured at")
    return record


def restate(spec: dict[str, Any], folder: Path, commit: str) -> list[Path]:
    """Rewrite the artifact's committed cost tables in ``folder`` (a GPU's and a CPU's) under the current recipe."""
    written = []
    for path in cost_table_paths(spec["artifact"], folder):
        if not path.exists():
            continue
        record = check_table(path)
        basis = None if path.stem.endswith("-gpu") else gpu_basis(spec["artifact"], folder)
        rows = restate_rows(spec, record["rows"], basis)
        note = (f"Restated under the paper profile's recipe of commit {commit} (docs/reproducing.md, \"The paper "
                "profile's recipe\") from the dry run's measurements below: the plan (epochs, validations, evaluation "
                "documents) is the current config's, each step is read at the recipe's training length "
                "(scaleformer/costs/restate.py); peak memory stays at the evaluation length. The runs named "
                "are the dry run's, trained under the earlier optimiser settings, which a step's cost does not "
                "depend on.")
        prov = record.get("provenance", "")
        record.update(rows=rows, total_h=total_hours(rows), restated=note)
        atomic_write_text(path, json.dumps(record, indent=1) + "\n")
        md = render_markdown(spec, rows, prov).splitlines()
        md[1:1] = ["", note]
        written += [path, atomic_write_text(path.with_suffix(".md"), "\n".join(md) + "\n")]
    return written
