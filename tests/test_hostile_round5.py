"""Hostile inputs, fifth round: the statistics and cost code a table trusts, the result scripts, gpu-perf, any model
folder. One row per case (the ``Case`` rows of test_hostile_table): a refusal in one line naming the value and
the limit, or a check that the outcome is right. The data-loss rows prove the files they were given are
byte-identical afterwards."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from conftest import ROOT, compose
from cost_records import record
from test_hostile_outputs import unchanged
from test_hostile_table import Case, check_table, one_line, run_case

from scaleformer.errors import ConfigError


def _scripts() -> None:
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))


# ---- data loss ----------------------------------------------------------------------------------------


def restate(target: str, cut: str | None = None) -> Any:
    """``render_results.py --restate TARGET`` on a copy of results/ (``cut``: a table cut to its header first)."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        _scripts()
        import render_results

        shutil.copytree(ROOT / "results" / "tiny", tmp / "results" / "tiny")
        if cut:
            csv = tmp / "results" / "tiny" / cut
            csv.write_text(csv.read_text().splitlines()[0] + "\n")
        names = [f"results/tiny/table2.{x}" for x in ("md", "csv", "tex")]
        with mock.patch.object(render_results, "RESULTS", tmp / "results"):
            return unchanged(*names)(lambda t: render_results.main(["--restate", target]))(tmp, None)
    return trigger


def gpu_perf(*args: str, earlier: bool = False, file: bool = False) -> Any:
    def trigger(tmp: Path, _: Path | None) -> Any:
        from scaleformer.costs import gpu_perf as gp

        out = tmp / "out"
        if earlier:
            out.mkdir()
            (out / "gpu-perf.json").write_text('{"rows": [{"cell": "measured on an H100"}]}\n')
        if file:
            out.write_text("a file\n")
        argv = [a.replace("{out}", str(out)) for a in args]
        keep = ["out/gpu-perf.json"] if earlier else ["out"] if file else []
        with mock.patch("torch.cuda.is_available", return_value=False):  # as CI: the no-GPU refusal, never a run
            return unchanged(*keep)(lambda t: gp.main(argv))(tmp, None)
    return trigger


def hf_trainer(*args: str, rows: list[dict[str, str]] | None = None) -> Any:
    def trigger(tmp: Path, _: Path | None) -> Any:
        _scripts()
        import hf_trainer as script

        model = tmp / "model"
        model.mkdir()
        for name in ("config.json", "NOTES.md", "recipe.json"):
            (model / name).write_text(f'{{"{name}": true}}\n')
        (tmp / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows or [{"input": "a doc", "output": "a sum"}]))
        argv = [a.replace("{tmp}", str(tmp)) for a in args]
        return unchanged("model/config.json", "model/NOTES.md", "model/recipe.json")(lambda t: script.main(argv))(tmp, None)
    return trigger


def summarize_into_folder(tmp: Path, _: Path | None) -> Any:
    from scaleformer.cli import summarize

    (tmp / "d.txt").write_text("The ledger of Alder.\n")
    (tmp / "out").mkdir()
    loaded = []
    with mock.patch("scaleformer.export.summarizer.Summarizer.from_pretrained", side_effect=lambda *a, **k: loaded.append(1)):
        try:
            return one_line(lambda: summarize.main(["--model", str(tmp / "nomodel"), "--input", str(tmp / "d.txt"),
                                                    "--output", str(tmp / "out")]))
        finally:
            assert not loaded  # refused before the model loads


# ---- statistics ---------------------------------------------------------------------------------------


def stats_outcomes(tmp: Path, _: Path | None) -> None:
    """Degenerate inputs that have an answer give it."""
    from scaleformer.artifacts.significance import cell_interval
    from scaleformer.metrics import stats

    base = np.arange(24, dtype=float).reshape(3, 8)
    p = stats.seeds_paired(base + 5, base)
    assert (p.diff, p.low, p.high, p.p_value) == (5.0, 5.0, 5.0, 0.0)  # certain: on every seed and document
    assert stats.seeds_paired(base, base).p_value == 1.0  # no difference anywhere
    one_doc = stats.seeds_ci([[10.0], [20.0], [30.0]])
    assert one_doc.n == 1 and one_doc.method == "t over seeds" and one_doc.low < 20 < one_doc.high
    ci, _ = cell_interval([[0.0, 0.0, 0.0, 10.0]], "rouge1")
    assert ci.low == 0.0 and ci.high <= 100.0  # clamped, as the several-seed path


def refuses(fn: Any, *args: Any) -> Any:
    def trigger(tmp: Path, _: Path | None) -> Any:
        return fn(*args)
    return trigger


# ---- cost fits and records ----------------------------------------------------------------------------


def _two_lengths(t_long: float, t_short: float, short_tokens: int = 2000) -> dict[str, Any]:
    rec = record()
    for g, (tokens, t) in enumerate(((4000, t_long), (short_tokens, t_short))):
        rec["train_groups"][g].update(input_tokens=tokens, tokens_per_step=[tokens])
        for s in rec["train_steps"]:
            if s["group"] == g:
                s["time_s"] = t
    return rec


def cost_fallbacks(tmp: Path, _: Path | None) -> None:
    """A line that cannot be read (a negative slope, lengths too close) gives way to the one-length model, said;
    no step time comes out negative, zero or NaN, and a table never totals one."""
    from scaleformer.costs import table as costs
    from scaleformer.runs import cost_fit

    for rec, why in ((_two_lengths(1.0, 1.1), "slope is negative"), (_two_lengths(1.0, 0.99, 3999), "too close")):
        got = cost_fit.summary(rec, 150_000, True)
        assert why in got["fit_note"] and math.isfinite(got["step_s"]) and got["step_s"] > 0, got
        assert got["mfu"] is None or got["mfu"] > 0
    m = {"step_s": -3.41, "gen_s_doc": 10.0, "device": "cpu", "flops_step": 1.0}
    plan = {"micro_batches": 10, "steps": 10, "accumulate": 1, "eval_docs": 1, "val_docs": 0, "val_rounds": 0}
    est = costs.estimate(m, plan)
    assert est["total_s"] is None and "refused: step_s=-3.41" in est["arithmetic"]
    assert costs.total_hours([{"plan": plan, "total_s": None, "run_id": "x"}]) is None


def bad_record(change: Any) -> Any:
    def trigger(tmp: Path, _: Path | None) -> Any:
        from scaleformer.costs import table as costs
        from scaleformer.runs.results import Results

        rec = record()
        change(rec)
        result = Results(data={"summary": {"train": {"n_examples": 4, "input_tokens_mean": 4000.0}}},
                         splits={"test": {"n_examples": 1, "generation_time_s": 10.0, "input_tokens_per_s": 400.0}},
                         cost=rec)
        return costs.measured(result, run="cell-9")
    return trigger


def composes(*overrides: str) -> Any:
    def trigger(tmp: Path, _: Path | None) -> Any:
        from scaleformer.runs.context import to_config

        return to_config(compose(list(overrides)))
    return trigger


def train_cli(*args: str) -> Any:
    def trigger(tmp: Path, _: Path | None) -> Any:
        from scaleformer.cli import train

        return train.check_overrides(list(args))
    return trigger


def backbone_prepare(tmp: Path, _: Path | None) -> Any:
    from scaleformer.model.backbone import prepare
    from scaleformer.runs.context import to_config

    return prepare(to_config(compose(["backbone.compile_encoder=tvm"])).backbone)


def config_dir_list(tmp: Path, _: Path | None) -> Any:
    from scaleformer.cli import train

    (tmp / "data").mkdir()
    (tmp / "data" / "mine.yaml").write_text("- a\n- b\n")
    with mock.patch.object(sys, "argv", ["train.py", "--config-dir", str(tmp), "data=mine"]):
        return one_line(train.main)


# ---- the archive a table's statistics are rechecked from ----------------------------------------------


def check_archive(change: Any) -> Any:
    """``render_results.py --check`` on a copy of results/tiny with one thing broken: one line, no traceback."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        _scripts()
        import render_results

        shutil.copytree(ROOT / "results" / "tiny", tmp / "results" / "tiny")
        change(tmp / "results" / "tiny")
        with mock.patch.object(render_results, "RESULTS", tmp / "results"):
            return one_line(lambda: render_results.main(["--check"]))
    return trigger


def _first_scores(tiny: Path) -> Path:
    return sorted((tiny / "scores" / "table1").rglob("scores_test.jsonl"))[0]


def _edit_first_row(edit: Any) -> Any:
    def change(tiny: Path) -> None:
        path = _first_scores(tiny)
        rows = path.read_text().splitlines()
        rows[0] = edit(rows[0])
        path.write_text("\n".join(rows) + "\n")
    return change


def _n_docs_abc(tiny: Path) -> None:
    import csv

    rows = list(csv.DictReader((tiny / "table1.csv").open()))
    row = next(r for r in rows if r["n_docs"])
    row["n_docs"] = "abc"
    with open(tiny / "table1.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def restate_abc(tmp: Path, _: Path | None) -> Any:
    _scripts()
    import render_results

    shutil.copytree(ROOT / "results" / "tiny", tmp / "results" / "tiny")
    _n_docs_abc(tmp / "results" / "tiny")
    with mock.patch.object(render_results, "RESULTS", tmp / "results"):
        return unchanged("results/tiny/table1.csv", "results/tiny/table1.md")(
            lambda t: render_results.main(["--restate", "table1"]))(tmp, None)


def _link_to_system_file(tiny: Path) -> None:
    path = _first_scores(tiny)
    path.unlink()
    path.symlink_to("/etc/hostname")


# ---- a model folder -----------------------------------------------------------------------------------


def summarize_folder(build: Any) -> Any:
    def trigger(tmp: Path, export: Path | None) -> Any:
        from scaleformer.export.summarizer import Summarizer

        folder = tmp / "m"
        shutil.copytree(export, folder)
        build(folder)
        return Summarizer.from_pretrained(folder, device="cpu")
    return trigger


def _pickle_only(folder: Path) -> None:
    import torch

    (folder / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(1)}, folder / "pytorch_model.bin")


def _pickle_named_safetensors(folder: Path) -> None:
    import torch

    torch.save({"w": torch.zeros(1)}, folder / "model.safetensors")


def _vocab_mismatch(folder: Path) -> None:
    conf = json.loads((folder / "config.json").read_text())
    conf["vocab_size"] = conf.get("vocab_size", 100) + 7
    (folder / "config.json").write_text(json.dumps(conf))
    (folder / "scaleformer.json").unlink(missing_ok=True)


CASES = [
    # data loss: refused before anything is written; the files given stay byte-identical
    Case("restate-a-table-cut-to-its-header", restate("table2", cut="table2.csv"),
         r"^--restate table2: .*; nothing was written$"),
    Case("restate-an-empty-name", restate(""), r"^--restate : must be \[SUB/\]ARTIFACT"),
    Case("restate-an-unknown-artifact", restate("nosuch"), r"^--restate nosuch: must be \[SUB/\]ARTIFACT"),
    Case("restate-outside-results-tiny", restate("../table1"), r"^--restate \.\./table1: must be \[SUB/\]ARTIFACT"),
    Case("gpu-perf-over-an-earlier-call", gpu_perf("--tiny", "--out", "{out}", earlier=True),
         r"^--out=.*/out: already holds gpu-perf\.json \(an earlier call's cells\)"),
    Case("gpu-perf-out-is-a-file", gpu_perf("--tiny", "--out", "{out}", file=True), r"^--out=.*/out: is a file"),
    Case("gpu-perf-budget-nan", gpu_perf("--tiny", "--budget-s", "nan"), r"^--budget-s=nan: must be a finite number"),
    Case("gpu-perf-without-a-gpu", gpu_perf(), r"^no GPU here: .*--tiny runs the test tier's shapes"),
    Case("gpu-perf-backend-listed-not-installed", gpu_perf("--tiny", "--variants", "compiled", "--compile-backend", "tvm"),
         r"^--compile-backend='tvm': torch lists it but cannot compile with it here \(ImportError"),
    Case("hf-trainer-over-its-model", hf_trainer("--model", "{tmp}/model", "--train", "{tmp}/t.jsonl", "--steps", "1",
                                                 "--output", "{tmp}/model"),
         r"^--output='.*/model': is \(or holds, or is inside\) the --model folder"),
    Case("hf-trainer-lr-inf", hf_trainer("--train", "{tmp}/t.jsonl", "--lr", "inf", "--output", "{tmp}/o"),
         r"^--lr=inf: must be a finite number > 0"),
    Case("hf-trainer-empty-reference", hf_trainer("--train", "{tmp}/t.jsonl", "--output", "{tmp}/o",
                                                  rows=[{"input": "a doc", "output": ""}]),
         r"t\.jsonl:1: field 'output' \(--target-field\) is empty: a row needs its reference"),
    Case("summarize-output-is-a-folder", summarize_into_folder, r"^--output .*/out: is a folder; give a file"),
    # statistics: degenerate inputs answered, impossible ones refused
    Case("stats-degenerate-inputs-answered", stats_outcomes, None),
    Case("sign-flip-nan", refuses(lambda: __import__("scaleformer.metrics.stats").metrics.stats.sign_flip_p(
        [1.0, float("nan"), 2.0, 3.0])), r"^sign_flip_p: score nan of document 1 is not a finite number", ValueError),
    Case("sign-flip-empty", refuses(lambda: __import__("scaleformer.metrics.stats").metrics.stats.sign_flip_p([])),
         r"^sign_flip_p needs at least one document", ValueError),
    Case("small-ci-empty", refuses(lambda: __import__("scaleformer.metrics.stats").metrics.stats.small_ci([])),
         r"^small_ci needs at least one document", ValueError),
    Case("proportion-not-whole", refuses(lambda: __import__("scaleformer.metrics.stats").metrics.stats.proportion_ci(2.5, 5)),
         r"^proportion_ci: 2\.5 of 5 is not a share \(need whole numbers", ValueError),
    Case("seeds-ci-unequal-documents", refuses(lambda: __import__("scaleformer.metrics.stats").metrics.stats.seeds_ci(
        [[1.0, 2.0], [3.0]])), r"^seeds_ci needs .* got \[2, 1\] documents per seed", ValueError),
    Case("cell-interval-out-of-range", refuses(lambda: __import__(
        "scaleformer.artifacts.significance").artifacts.significance.cell_interval([[150.0, 90.0]], "rouge1")),
        r"^cell_interval: rouge1 score 150\.0 is outside \[0, 100\]", ValueError),
    # cost fits and records: a bill users act on
    Case("cost-fit-falls-back-and-says-so", cost_fallbacks, None),
    Case("cost-lengths-too-close", composes("++trainer.cost_lengths=[1.0,0.9999]"),
         r"^trainer.cost_lengths=\[1\.0, 0\.9999\]: must be at least 1\.25x apart", ConfigError),
    Case("cost-record-absurd-time", bad_record(lambda r: r["train_steps"][5].update(time_s=1e308)),
         r"train_steps\[5\]\.time_s=1e\+308: must be at most 604,800 s \(a week\)", ConfigError),
    Case("cost-record-no-phases", bad_record(lambda r: r["train_steps"][5].pop("phases")),
         r"train_steps\[5\]\.phases=None: missing: a timed micro-batch's phases", ConfigError),
    # training keys
    Case("a-switch-given-a-number", train_cli("method.checkpoint_chunks=2"),
         r"^method\.checkpoint_chunks=2: must be true or false \(or null\)"),
    Case("a-misspelt-key", train_cli("method.chunk_sise=5"),
         r"^method\.chunk_sise: the method group has no key 'chunk_sise'; did you mean method\.chunk_size\?"),
    Case("a-backend-listed-not-installed", backbone_prepare,
         r"^backbone\.compile_encoder='tvm': torch lists it but cannot compile with it here", ConfigError),
    Case("a-config-file-that-is-a-list", config_dir_list, r"data/mine\.yaml: holds a YAML list, not a mapping of keys"),
    # the archive a table is rechecked from
    Case("archive-not-json", check_archive(_edit_first_row(lambda _: "{not json")), r"scores_test\.jsonl:1: "),
    Case("archive-nan-score", check_archive(_edit_first_row(lambda r: r.replace('"rouge1": ', '"rouge1": NaN, "x": '))),
         r"scores_test\.jsonl:1: document 'test-0000': score rouge1=nan is not a finite number"),
    Case("archive-text-score", check_archive(_edit_first_row(lambda r: r.replace('"rouge1": ', '"rouge1": "39", "x": '))),
         r"scores_test\.jsonl:1: document 'test-0000': score rouge1='39' is not a finite number"),
    Case("archive-row-without-id", check_archive(_edit_first_row(lambda r: r.replace('"id": ', '"doc": '))),
         r"scores_test\.jsonl:1: each line must be a JSON object with an id"),
    Case("archive-links-to-a-system-file", check_archive(_link_to_system_file), r"not a regular file"),
    Case("archive-stray-folder", check_archive(lambda t: (t / "scores" / "nosuch").mkdir()),
         r"scores/nosuch: no artifact 'nosuch'"),
    Case("archive-table-deleted", check_archive(lambda t: (t / "table1.csv").unlink()),
         r"table1\.csv: missing, while its scores are archived"),
    Case("table-count-not-a-number", check_archive(_n_docs_abc), r"table1\.csv: .*n_docs is 'abc' in the CSV"),
    Case("restate-a-count-not-a-number", restate_abc, r"^--restate table1: table1\.csv: .*: n_docs='abc' is not a number; nothing"),
    # any model folder
    Case("model-folder-pickle-only", summarize_folder(_pickle_only),
         r"no model\.safetensors \(it has pytorch_model\.bin: a pickle, which scaleformer never reads", ValueError, True),
    Case("model-safetensors-is-a-pickle", summarize_folder(_pickle_named_safetensors),
         r"model\.safetensors: not a safetensors file", ValueError, True),
]


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    """A model folder to break: the shipped tiny reader saved through ``scaleformer.wrap`` (method sled)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import scaleformer
    from scaleformer.resources import resolve_asset

    folder = tmp_path_factory.mktemp("export") / "m0"
    reader = resolve_asset("asset:readers/tiny_bart_reader")
    scaleformer.wrap(AutoModelForSeq2SeqLM.from_pretrained(reader), "sled").save_pretrained(folder)
    AutoTokenizer.from_pretrained(reader).save_pretrained(folder)
    return folder


def plain_bart_vocab_mismatch(tmp: Path, _: Path | None) -> Any:
    """A plain BART folder (no scaleformer record) whose config.json says another vocabulary than its weights."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from scaleformer.export.summarizer import Summarizer
    from scaleformer.resources import resolve_asset

    reader, folder = resolve_asset("asset:readers/tiny_bart_reader"), tmp / "bart"
    AutoModelForSeq2SeqLM.from_pretrained(reader).save_pretrained(folder)
    AutoTokenizer.from_pretrained(reader).save_pretrained(folder)
    _vocab_mismatch(folder)
    return Summarizer.from_pretrained(folder, method="sled", device="cpu")


CASES.append(Case("plain-bart-config-against-its-weights", plain_bart_vocab_mismatch,
                  r"bart: its weights do not match its config\.json", ValueError))


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_hostile_round5(case: Case, request, tmp_path: Path) -> None:
    run_case(case, tmp_path, request)


def test_the_table_has_one_row_per_case_and_both_outcomes() -> None:
    check_table(CASES)
