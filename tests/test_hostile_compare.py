"""Hostile inputs to ``scaleformer compare`` and its statistics: one table, one row per case.

Each row stops with one clear line (``message``: a regex, never a traceback) or, where the right outcome
is to work, checks what must happen (``message=None``). The runs are two evaluation folders of
``scores_validation.jsonl`` (and, where a row needs it, ``predictions_validation.jsonl``) over 20
documents; a refusal must come before any output (a NaN used to make every interval NaN and p 0).
"""

from __future__ import annotations

import io
import json
import math
import re
import tracemalloc
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from test_hostile_table import Case, Trigger, check_table, one_line, run_case

N = 20


def rows(n: int = N, metric: str = "rouge1", shift: float = 0.0) -> list[Any]:
    return [{"id": f"d{i}", "input_tokens": 100, metric: 30.0 + (7 * i) % 11 + shift} for i in range(n)]


def _write(path: Path, content: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # a str row is written as it is; json.dumps writes NaN and Infinity, as a run would if a metric gave them
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in content))


def compare(a: list[Any], b: list[Any], *args: str, preds_a: list[Any] | None = None,
            stdout: list[str] | None = None) -> Trigger:
    """`scaleformer compare` of two evaluation folders holding these rows (``{tmp}`` in args: the tmp
    folder). A refusal must come before any work: nothing on stdout."""
    def go(tmp: Path, _: Path | None) -> Any:
        from scaleformer.cli.compare import main

        _write(tmp / "a" / "scores_validation.jsonl", a)
        _write(tmp / "b" / "scores_validation.jsonl", b)
        if preds_a is not None:
            _write(tmp / "a" / "predictions_validation.jsonl", preds_a)
        out = io.StringIO()
        try:
            with redirect_stdout(out):
                one_line(lambda: main([str(tmp / "a"), str(tmp / "b"), *(x.format(tmp=tmp) for x in args)]))
        except SystemExit:
            assert out.getvalue() == "", f"refused after printing:\n{out.getvalue()}"
            raise
        finally:
            if stdout is not None:
                stdout.append(out.getvalue())
    return go


def with_row(i: int, **change: Any) -> list[Any]:
    out = rows()
    out[i] = dict(out[i], **change)
    return out


def stats_call(fn: Callable[[], Any]) -> Trigger:
    return lambda tmp, _: fn()


def _holm(p: list[float]) -> Callable[[], Any]:
    from scaleformer.metrics.stats import holm

    return lambda: holm(p)


def _paired(a: list[float], b: list[float]) -> Callable[[], Any]:
    from scaleformer.metrics.stats import paired

    return lambda: paired(a, b)


def twenty_thousand_documents(tmp: Path, _: Path | None) -> None:
    """20,000 documents (a real test set's size): scipy's path needed ~10 GB; this one stays within tens of
    MB of Python and numpy memory and says which methods it used. 2,000 resamples keep the row to seconds:
    the memory is per block of resamples, the same at 10,000 (``make bench-compare`` measures those)."""
    from functools import partial
    from unittest import mock

    import numpy as np

    from scaleformer.cli.compare import main
    from scaleformer.metrics.stats import paired

    rng = np.random.default_rng(0)
    b = np.round(np.clip(rng.normal(40, 12, 20_000), 0, 100), 3)
    a = b + np.round(rng.normal(0.5, 3, 20_000), 3)
    _write(tmp / "a" / "scores_validation.jsonl", [{"id": f"d{i}", "rouge1": float(v)} for i, v in enumerate(a)])
    _write(tmp / "b" / "scores_validation.jsonl", [{"id": f"d{i}", "rouge1": float(v)} for i, v in enumerate(b)])
    tracemalloc.start()
    try:
        with redirect_stdout(io.StringIO()) as out, mock.patch("scaleformer.cli.compare.paired",
                                                               partial(paired, resamples=2000)):
            one_line(lambda: main([str(tmp / "a"), str(tmp / "b"), "--json", str(tmp / "cmp.json")]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 128 * 2 ** 20, f"peak {peak / 2 ** 20:.0f} MiB"
    got = json.loads((tmp / "cmp.json").read_text())
    m = got["metrics"]["rouge1"]
    assert got["n_documents"] == 20_000 and m["diff"] == pytest.approx(float((a - b).mean()))
    assert m["ci_low"] < m["diff"] < m["ci_high"] and m["p_value"] < 0.001
    assert (m["interval_method"], m["test_method"], m["resamples"]) == ("BCa", "normal", 2000)
    assert "interval: BCa bootstrap, 2,000 resamples; p: sign-flip permutation test, its normal limit" \
           in out.getvalue()


def few_documents_say_exact(tmp: Path, _: Path | None) -> None:
    """Up to 13 documents the p-value enumerates every sign pattern, and the output says so."""
    seen: list[str] = []
    compare(rows(5), rows(5, shift=1.0), "--json", "{tmp}/c.json", stdout=seen)(tmp, None)
    assert "p: sign-flip permutation test, all 2^5 sign patterns (exact)" in seen[0]
    m = json.loads((tmp / "c.json").read_text())["metrics"]["rouge1"]
    assert m["test_method"] == "exact" and m["interval_method"] == "none" and m["p_value"] == 2 / 32


# ---- the table --------------------------------------------------------------------------------------

FILE_A = r"a/scores_validation\.jsonl"
DUPLICATE = [*rows(), rows()[3]]
def json_over_an_input(kind: str) -> Trigger:
    """--json naming one of the files the command reads: refused, and that file keeps its bytes."""
    def go(tmp: Path, _: Path | None) -> None:
        target = tmp / "b" / f"{kind}_validation.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text('{"id": "d0", "reference": "kept"}\n')
        before = target.read_bytes() if kind == "predictions" else None
        try:
            compare(rows(), rows(), "--json", str(target))(tmp, None)
        finally:
            after = target.read_bytes()
            if before is not None:
                assert after == before
            else:  # the scores file the trigger itself wrote
                assert after == "".join(json.dumps(r) + "\n" for r in rows()).encode()
    return go


CASES = [
    # silently wrong: a NaN or an infinity became "+nan, CI [+nan, +nan], p 0.0000"
    Case("nan-score", compare(with_row(2, rouge1=math.nan), rows()),
         FILE_A + r":3: document 'd2': rouge1=nan is not a finite number \(1 of 20 documents\)"),
    Case("infinite-score-in-b", compare(rows(), with_row(0, rouge1=-math.inf), "--metric", "rouge1"),
         r"b/scores_validation\.jsonl:1: document 'd0': rouge1=-inf is not a finite number"),
    Case("score-beyond-floats-range", compare(with_row(4, rouge1=10 ** 400), rows()),
         FILE_A + r":5: document 'd4': rouge1=10000000000000000000\.\.\. \(401 characters\) is not a finite number"),
    Case("difference-beyond-floats-range", compare(with_row(1, rouge1=1e308), with_row(1, rouge1=-1e308)),
         r"^document 'd1': rouge1 A - B = 1e\+308 - -1e\+308 is beyond float's range \(1 of 20 documents\)"),
    Case("stats-refuse-nan", stats_call(_paired([1.0, math.nan], [1.0, 2.0])),
         r"^paired, run A: score nan of document 1 is not a finite number", ValueError),
    # silently wrong: a document scored twice kept its last row and counted once
    Case("duplicate-id", compare(DUPLICATE, rows()),
         FILE_A + r":21: document id 'd3' appears twice \(first on line 4\): a document is scored once \(ids are "
         r"compared as strings\)$"),
    Case("duplicate-id-int-and-string", compare([{"id": 1, "rouge1": 2.0}, {"id": "1", "rouge1": 3.0}], rows()),
         FILE_A + r":2: document id '1' appears twice \(first on line 1\)"),
    Case("duplicate-id-in-predictions", compare(rows(), rows(), preds_a=[{"id": "d0", "reference": "x"}] * 2),
         r"a/predictions_validation\.jsonl:2: document id 'd0' appears twice"),
    # silently wrong: no shared metric gave an empty table and exit 0
    Case("no-shared-metric", compare(rows(metric="rouge1"), rows(metric="f1")),
         r"/a/scores_validation\.jsonl and .*/b/scores_validation\.jsonl share no metric scored for every document "
         r"\(looked for: rouge1, .*fact_recall\); name one with --metric$"),
    # silently wrong: an impossible p-value made the family significant
    Case("holm-negative-p", stats_call(_holm([-0.5, 0.03])),
         r"^holm: p-value -0\.5 \(position 0\) is not in \[0, 1\]$", ValueError),
    Case("holm-p-above-one", stats_call(_holm([0.01, 1.5])), r"^holm: p-value 1\.5 \(position 1\)", ValueError),
    Case("holm-nan-p", stats_call(_holm([0.2, math.nan])), r"^holm: p-value nan \(position 1\)", ValueError),
    # tracebacks
    Case("row-is-a-list", compare([*rows()[:1], [1, 2], *rows()[1:]], rows()),
         FILE_A + r":2: a row must be a JSON object with an \"id\", got an array$"),
    Case("row-is-a-string", compare(rows(), ['"d0"', *rows()[1:]]),
         r"b/scores_validation\.jsonl:1: a row must be a JSON object with an \"id\", got a string$"),
    Case("prediction-row-is-a-list", compare(rows(), rows(), preds_a=[[1, 2]]),
         r"a/predictions_validation\.jsonl:1: a row must be a JSON object"),
    Case("row-without-id", compare([{"rouge1": 1.0}, *rows()[1:]], rows()),
         FILE_A + r":1: the row has no \"id\"$"),
    Case("id-is-an-object", compare(with_row(0, id={"k": 1}), rows()),
         FILE_A + r":1: \"id\" must be a string or an integer, got \{'k': 1\}$"),
    Case("json-names-a-folder", compare(rows(), rows(), "--json", "{tmp}"),
         r"^--json .*: is a folder; name a file, e.g\. .*/compare\.json$"),
    Case("json-under-a-file",
         compare(rows(), rows(), "--json", "{tmp}/a/scores_validation.jsonl/x.json"),
         r"^--json .*x\.json: .*a/scores_validation\.jsonl is a file, not a folder$"),
    Case("json-over-run-b-scores", json_over_an_input("scores"),
         r"^--json='.*/b/scores_validation\.jsonl': is run B's scores \(.*\), which it reads"),
    Case("json-over-run-b-predictions", json_over_an_input("predictions"),
         r"^--json='.*/b/predictions_validation\.jsonl': is run B's predictions \(.*\), which it reads"),
    # works: real test-set sizes in bounded memory; the exact test at a few documents
    Case("twenty-thousand-documents", twenty_thousand_documents, None),
    Case("few-documents-exact-test", few_documents_say_exact, None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_hostile_compare_case(case: Case, tmp_path: Path) -> None:
    msg = run_case(case, tmp_path)
    assert msg is None or re.search(case.message, msg.removeprefix("error: "))


def test_the_table_has_one_row_per_case_and_both_outcomes() -> None:
    check_table(CASES)
