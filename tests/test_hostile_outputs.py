"""Hostile outputs and cost tables: one table, one row per case (the ``Case`` rows of test_hostile_table).

Data loss: no command writes over one of its own inputs or over another of its outputs; it stops with one
line before it writes anything, and every file it was given is byte-identical afterwards (a symlink or a
hard link to an input counts as the input). Cost tables: the launch gate of ``reproduce`` fails closed
(an unknown estimate needs ``--yes``), a cost record is checked where the table reads it (one line naming
the run, the field and the value), and a cell without a record stays in the table as "not measured".
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from conftest import ROOT
from cost_records import record
from test_bad_inputs import jsonl
from test_hostile_table import Case, Trigger, check_table, one_line, run_case

from scaleformer.errors import ConfigError
from scaleformer.resources import conf_dir

PRED = {"id": "a", "prediction": "the toll was paid", "reference": "Alder paid the toll"}


def unchanged(*names: str) -> Callable[[Callable[[Path], Any]], Trigger]:
    """Run ``go(tmp)`` as a command, then check the named files under tmp are byte-identical to before."""
    def wrap(go: Callable[[Path], Any]) -> Trigger:
        def trigger(tmp: Path, _: Path | None) -> Any:
            before = {n: (tmp / n).read_bytes() for n in names}
            try:
                one_line(lambda: go(tmp))
            finally:
                assert {n: (tmp / n).read_bytes() for n in names} == before
        return trigger
    return wrap


# ---- data loss ----------------------------------------------------------------------------------------


def score(*args: str, predictions: str = "p.jsonl", link: str | None = None, keep: tuple[str, ...] = ()) -> Trigger:
    """`scaleformer score` of a one-document predictions file; ``link``: "sym:NAME" or "hard:NAME" to it;
    ``keep``: earlier outputs (written before) that must survive too."""
    def go(tmp: Path) -> Any:
        from scaleformer.cli import score as cli

        return cli.main([str(tmp / predictions), "--no-bertscore", "--sentence-splitter", "regex",
                         *(a.replace("{tmp}", str(tmp)) for a in args)])

    def trigger(tmp: Path, export: Path | None) -> Any:
        (tmp / predictions).write_bytes(jsonl(PRED))
        for name in keep:
            (tmp / name).write_text('{"earlier": true}\n')
        if link:
            kind, name = link.split(":")
            (os.symlink if kind == "sym" else os.link)(tmp / predictions, tmp / name)
        return unchanged(predictions, *keep)(go)(tmp, export)
    return trigger


def score_writes_both(tmp: Path, _: Path | None) -> None:
    """Distinct outputs still work: --out and its default scores file beside it, the predictions untouched."""
    from test_bad_inputs import score as bad_score

    bad_score(jsonl(PRED), "--out", "{tmp}/m.json")(tmp)
    assert json.loads((tmp / "m.json").read_text())["n_examples"] == 1
    assert [r["id"] for r in map(json.loads, (tmp / "m.scores.jsonl").read_text().splitlines())] == ["a"]
    assert (tmp / "p.jsonl").read_bytes() == jsonl(PRED)


def summarize(*args: str, model_file: bool = False) -> Trigger:
    """`scaleformer summarize` whose output is its input or inside the model folder: refused before the
    model loads (the folder need not hold a model)."""
    def go(tmp: Path) -> Any:
        from scaleformer.cli import summarize as cli

        return cli.main(["--model", str(tmp / "model"), *(a.replace("{tmp}", str(tmp)) for a in args)])

    def trigger(tmp: Path, export: Path | None) -> Any:
        (tmp / "d.jsonl").write_bytes(jsonl({"id": "1", "input": "The ledger of Alder."}))
        (tmp / "model").mkdir()
        (tmp / "model" / "config.json").write_text('{"model": true}')
        return unchanged("d.jsonl", "model/config.json")(go)(tmp, export)
    return trigger


def scrolls_submission_over_its_input(tmp: Path, export: Path | None) -> Any:
    """Predictions saved as gov_report.json, --out their own folder: the task file would replace them."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from scrolls_submission import main

    ev = tmp / "ev"
    ev.mkdir()
    (ev / "config.yaml").write_text('data:\n  name: govreport\n  data_files: {test: "zip://gov_report/test.jsonl"}\n')
    (ev / "gov_report.json").write_bytes(jsonl({"id": "g1", "prediction": "a summary"}))
    return unchanged("ev/gov_report.json", "ev/config.yaml")(
        lambda t: main([str(ev / "gov_report.json"), "--out", str(ev)]))(tmp, export)


def _run_folder(tmp: Path) -> Path:
    run = tmp / "run"
    (run / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text('{"model": true}')
    (run / "config.yaml").write_text("seed: 1\n")
    (run / "eval" / "step_1-x").mkdir(parents=True)
    (run / "eval" / "step_1-x" / "metrics.json").write_text('{"splits": {}}\n')
    return run


def input_blind(out: str) -> Trigger:
    def trigger(tmp: Path, export: Path | None) -> Any:
        sys.path.insert(0, str(ROOT / "scripts"))
        from input_blind import main

        run = _run_folder(tmp)
        return unchanged("run/config.yaml", "run/model/config.json")(
            lambda t: main([str(run), "--out", str(run / out)]))(tmp, export)
    return trigger


def qa_by_window_over_metrics(tmp: Path, export: Path | None) -> Any:
    sys.path.insert(0, str(ROOT / "scripts"))
    from qa_by_window import main

    run = _run_folder(tmp)
    return unchanged("run/eval/step_1-x/metrics.json")(
        lambda t: main([str(run), "--out", str(run / "eval" / "step_1-x" / "metrics.json")]))(tmp, export)


# ---- the launch gate ----------------------------------------------------------------------------------


def gate(table: str | None, *args: str, launches: bool = False) -> Trigger:
    """`scaleformer reproduce table1` (the paper profile) with ``table`` as results/dryrun/table1.json
    (None: no cost table); ``launches``: the run must start (and does, with --yes), else it must not."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        from scaleformer.cli import reproduce

        if table is not None:
            (tmp / "results" / "dryrun").mkdir(parents=True)
            (tmp / "results" / "dryrun" / "table1.json").write_text(table)
        launched: list[int] = []
        with contextlib.chdir(tmp), mock.patch.object(reproduce, "launch", lambda *a, **k: launched.append(1)
                                                      or ([], [])), \
                mock.patch.object(reproduce, "build_table", lambda *a, **k: {}):
            try:
                one_line(lambda: reproduce.main(["table1", *args]))
            finally:
                assert bool(launched) == launches
    return trigger


# ---- cost records -------------------------------------------------------------------------------------


def _step(t: Any = 2.0, **kw: Any) -> dict[str, Any]:
    return {"time_s": t, "mem_peak_bytes": 5e9, "base_bytes": 3e9, "input_tokens": 1000, "checkpoint_chunks": False,
            "flops": 100.0, "encoder_forward_flops": 20.0, **kw}


def _results(cost: dict[str, Any]) -> Any:
    from scaleformer.runs.results import Results

    return Results(run_id="r1", data={"summary": {"train": {"n_examples": 4, "input_tokens_mean": 4000.0}}},
                   splits={"test": {"n_examples": 1, "generation_time_s": 10.0, "input_tokens_per_s": 100.0}},
                   cost={"device": "cpu", "length_scaling": "linear", "generate": [], **cost})


def single_step(warmup: dict[str, Any] | None = None, **timed: Any) -> Trigger:
    """A single-step record (warm-up, then one timed step) read as the cost table reads it."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        from scaleformer.costs import table as costs

        step = _step(**timed)
        for k in [k for k, v in timed.items() if v is KeyError]:
            del step[k]
        return costs.measured(_results({"train_steps": [warmup or _step(9.0), step]}))
    return trigger


def steady(edit: Callable[[dict[str, Any]], None]) -> Trigger:
    """The hand-made steady-state record of tests/cost_records.py with one field changed."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        from scaleformer.costs import table as costs

        rec = record()
        edit(rec)
        return costs.measured(_results(rec))
    return trigger


def _cells_and_results(with_record: bool) -> tuple[dict[str, Any], list[Any], Any]:
    """A two-point sweep whose second run left a metrics.json without a cost record (or none at all)."""
    from scaleformer.artifacts.grid import Cell
    from scaleformer.artifacts.tables import Collected

    spec = {"artifact": "figure2", "profiles": {}, "sweeps": {"alpha": {"key": "method.alpha"}}}
    cells = [Cell("alpha", "sled", [], value=v, run_id=f"run-{v}") for v in (0.0, 0.5)]
    got = Collected()
    got.results[("alpha", "sled", 0.0, None)] = _results({"train_steps": [_step(9.0), _step()]})
    if with_record:
        got.results[("alpha", "sled", 0.5, None)] = _results({})
    return spec, cells, got


def not_measured(with_record: bool) -> Trigger:
    """The cell stays in the table as "not measured", naming its run, and the total is unknown."""
    def trigger(tmp: Path, _: Path | None) -> None:
        from scaleformer.costs import report as cost_report
        from scaleformer.costs import table as costs

        spec, cells, got = _cells_and_results(with_record)
        rows = costs.cost_rows(spec, "dryrun", cells, got)
        assert [r["run_id"] for r in rows] == ["run-0.0", "run-0.5"]
        why = "its metrics.json has no cost record" if with_record else "no metrics.json"
        assert rows[1]["not_measured"].startswith(why) and rows[0].get("not_measured") is None
        assert costs.total_hours(rows) is None
        text = cost_report.render_markdown(spec, rows, "")
        assert "| sled | method.alpha=0.5 | not measured (run run-0.5) |" in text
        assert "Whole table on this cpu: unknown, 1 run(s) not measured (run-0.5)" in text
        assert f"not measured: run run-0.5, {why}" in text
    return trigger


def bad_record_through_reproduce(tmp: Path, _: Path | None) -> Any:
    """`reproduce --profile dryrun --render-only` whose cost table meets a bad record: one line, no traceback."""
    from scaleformer.cli import reproduce
    from scaleformer.costs import table as costs

    def build_costs(*a: Any, **k: Any) -> dict[str, Path]:
        costs.measured(_results({"train_steps": [_step(9.0), _step(float("nan"))]}), run="table1-cell-7")
        return {}

    with mock.patch.object(reproduce, "build_table", lambda *a, **k: {}), \
            mock.patch.object(reproduce, "build_costs", build_costs):
        return one_line(lambda: reproduce.main(["table1", "--profile", "dryrun", "--render-only",
                                                "--root", str(tmp)]))


# ---- the table --------------------------------------------------------------------------------------

UNKNOWN = r"^the cost of table1's paper profile is unknown: "
RECORD = r"^cost record of run r1: "

CASES = [
    # data loss: an output over an input, or over another output
    Case("score-scores-over-predictions", score("--scores", "{tmp}/p.jsonl"),
         r"^--scores='.*/p\.jsonl': is the predictions file \(.*/p\.jsonl\), which it reads; writing there would "
         r"overwrite it: name another file$"),
    Case("score-out-over-predictions", score("--out", "{tmp}/p.jsonl"), r"^--out='.*/p\.jsonl': is the predictions file"),
    Case("score-out-and-scores-same-file", score("--out", "{tmp}/m.json", "--scores", "{tmp}/m.json", keep=("m.json",)),
         r"^--scores='.*/m\.json': is also where --out goes; one would overwrite the other: give them different "
         r"paths$"),
    Case("score-default-scores-over-predictions", score("--out", "{tmp}/p.json", predictions="p.scores.jsonl"),
         r"^--scores \(default, beside --out\)='.*/p\.scores\.jsonl': is the predictions file"),
    Case("score-scores-via-symlink", score("--scores", "{tmp}/l.jsonl", link="sym:l.jsonl"),
         r"^--scores='.*/l\.jsonl': is the predictions file \(.*/p\.jsonl\)"),
    Case("score-scores-via-hardlink", score("--scores", "{tmp}/h.jsonl", link="hard:h.jsonl"),
         r"^--scores='.*/h\.jsonl': is the predictions file \(.*/p\.jsonl\)"),
    Case("score-out-over-train-config", score("--out", str(conf_dir() / "config.yaml")),
         r"^--out='.*conf/config\.yaml': is train\.py's config"),
    Case("score-distinct-outputs-still-written", score_writes_both, None),
    Case("summarize-output-over-input", summarize("--input", "{tmp}/d.jsonl", "--output", "{tmp}/d.jsonl"),
         r"^--output='.*/d\.jsonl': is the --input file \(.*/d\.jsonl\), which it reads"),
    Case("summarize-output-inside-model", summarize("--input", "{tmp}/d.jsonl", "--output", "{tmp}/model/config.json"),
         r"^--output='.*/model/config\.json': is inside the --model folder \(.*/model\), which it reads: "
         r"write outside that folder$"),
    Case("scrolls-submission-over-its-input", scrolls_submission_over_its_input,
         r"^--out='.*/ev/gov_report\.json': is a predictions file \(.*/ev/gov_report\.json\), which it reads"),
    Case("input-blind-over-the-runs-config", input_blind("config.yaml"),
         r"^--out='.*/run/config\.yaml': is the run's config \(.*/run/config\.yaml\), which it reads"),
    Case("input-blind-inside-the-model", input_blind("model/config.json"),
         r"^--out='.*/run/model/config\.json': is inside the run's exported model"),
    Case("qa-by-window-over-metrics", qa_by_window_over_metrics,
         r"^--out='.*/metrics\.json': is one of the runs' files \(.*/metrics\.json\), which it reads"),
    # the launch gate fails closed: an estimate that is not a positive number is unknown, and needs --yes
    Case("reproduce-total-h-missing", gate('{"rows": [{"device": "cpu"}]}'),
         UNKNOWN + r"results/dryrun/table1\.json: it has no total_h; pass --yes to run it$"),
    Case("reproduce-total-h-negative", gate('{"rows": [], "total_h": -5}'),
         UNKNOWN + r".*total_h=-5 is not a positive number of hours; pass --yes"),
    Case("reproduce-total-h-nan", gate('{"rows": [], "total_h": NaN}'), UNKNOWN + r".*total_h=NaN is not a positive"),
    Case("reproduce-total-h-zero", gate('{"rows": [], "total_h": 0}'), UNKNOWN + r".*total_h=0 is not a positive"),
    Case("reproduce-total-h-text", gate('{"rows": [], "total_h": "abc"}'), UNKNOWN + r".*total_h='abc' is not a"),
    Case("reproduce-table-not-a-mapping", gate('[1, 2]'), UNKNOWN + r".*not a cost table \(a JSON list\)"),
    Case("reproduce-cells-not-measured", gate('{"rows": [], "total_h": null, "not_measured": ["run-7", "run-9"]}'),
         UNKNOWN + r".*: 2 cell\(s\) not measured \(run run-7 and more\); pass --yes"),
    Case("reproduce-no-cost-table", gate(None), UNKNOWN + r"no cost table yet at results/dryrun/table1\.json"),
    Case("reproduce-unknown-with-yes-launches", gate('{"rows": [], "total_h": "abc"}', "--yes", launches=True),
         None),
    Case("reproduce-known-under-an-hour-launches", gate('{"rows": [], "total_h": 0.5}', launches=True), None),
    # cost records checked where the table reads them
    Case("record-negative-step-time", single_step(t=-2.0),
         RECORD + r"train_steps\[1\]\.time_s=-2\.0: must be a positive, finite number; measure the cell again",
         ConfigError),
    Case("record-zero-step-time", single_step(t=0.0), RECORD + r"train_steps\[1\]\.time_s=0\.0: must be a positive",
         ConfigError),
    Case("record-zero-input-tokens", single_step(input_tokens=0),
         RECORD + r"train_steps\[1\]\.input_tokens=0: must be a positive", ConfigError),
    Case("record-no-checkpoint-chunks", single_step(checkpoint_chunks=KeyError),
         RECORD + r"train_steps\[1\]\.checkpoint_chunks=None: missing or not true/false", ConfigError),
    Case("record-nan-flops", single_step(warmup=_step(9.0, flops=float("nan"))),
         RECORD + r"train_steps\[0\]\.flops=nan: must be a finite number >= 0", ConfigError),
    Case("record-no-step-time", single_step(time_s=KeyError),
         RECORD + r"train_steps\[1\]\.time_s=None: missing: the table needs it", ConfigError),
    Case("record-text-step-time", single_step(t="2.0"), RECORD + r"train_steps\[1\]\.time_s='2\.0': must be",
         ConfigError),
    Case("record-scaling-typo", steady(lambda r: r.update(length_scaling="Linear")),
         RECORD + r"length_scaling='Linear': must be one of linear, bounded", ConfigError),
    Case("record-steady-negative-time", steady(lambda r: r["train_steps"][5].update(time_s=-1.0)),
         RECORD + r"train_steps\[5\]\.time_s=-1\.0: must be a positive", ConfigError),
    Case("record-steady-nan-group-flops", steady(lambda r: r["train_groups"][1].update(flops=float("nan"))),
         RECORD + r"train_groups\[1\]\.flops=nan: must be a finite number >= 0", ConfigError),
    Case("record-steady-zero-tokens", steady(lambda r: r["train_groups"][0].update(tokens_per_step=[0])),
         RECORD + r"train_groups\[0\]\.tokens_per_step=\[0\]: must be a non-empty list of positive", ConfigError),
    Case("record-steady-group-out-of-range", steady(lambda r: r["train_steps"][0].update(group=9)),
         RECORD + r"train_steps\[0\]\.group=9: must index train_groups \(0-3\)", ConfigError),
    Case("record-nan-generation-time", steady(lambda r: r.update(generate=[{"time_s": float("nan")}])),
         RECORD + r"generate\[0\]\.time_s=nan: must be a positive", ConfigError),
    Case("record-bad-record-through-reproduce", bad_record_through_reproduce,
         r"^cost record of run table1-cell-7: train_steps\[1\]\.time_s=nan: must be a positive, finite number"),
    # a cell without a record: a row that says so, never a silent gap
    Case("cell-with-no-cost-record", not_measured(with_record=True), None),
    Case("cell-with-no-metrics-file", not_measured(with_record=False), None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_hostile_output(case: Case, tmp_path: Path) -> None:
    run_case(case, tmp_path)


def test_the_table_has_one_row_per_case_and_both_outcomes() -> None:
    check_table(CASES)


def test_a_valid_record_still_reads_and_a_complete_table_still_totals() -> None:
    """The checks refuse only what is wrong: the hand-made steady-state record and a single-step one read
    as before, and a table whose every cell was measured has a known total."""
    from scaleformer.costs import table as costs

    assert costs.measured(_results(record()))["step_s"] > 0
    assert costs.measured(_results({"train_steps": [_step(9.0), _step()]}))["step_s"] > 0
    rows = [{"run_id": "a", "plan": {}, "total_s": 3600.0}, {"run_id": "b", "plan": {}, "total_s": 7200.0}]
    assert costs.total_hours(rows) == 3.0
    assert costs.known_hours({"total_h": 3.0}) == (3.0, "")
