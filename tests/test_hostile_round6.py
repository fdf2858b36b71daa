"""Hostile inputs, sixth round: the recipe and model selection, the leaderboard file, the decoding step, the result
scripts (restate_costs, time_commands, render_results, the SCROLLS submission), the local mirrors. One row per case
(the ``Case`` rows of test_hostile_table): a refusal in one line naming the value and the limit, or a check that the
outcome is right. The data-loss rows prove the files they were given are byte-identical afterwards, and the path
escape that nothing is written outside the run's folder."""

from __future__ import annotations

import json
import math
import shutil
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import torch
from conftest import ROOT, compose
from cost_records import record
from test_hostile_outputs import unchanged
from test_hostile_round5 import composes, train_cli
from test_hostile_table import Case, check_table, one_line, run_case
from tiny_models import METHODS, batch, tiny

from scaleformer.data.errors import DataError
from scaleformer.errors import ConfigError


def _script(name: str) -> Any:
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    return __import__(name)


# ---- security and data loss ---------------------------------------------------------------------------


def leaderboard_escape(tmp: Path, _: Path | None) -> None:
    """``data.leaderboard='scrolls:/../../escaped'``: a run refuses it at start-up (the command's check_groups is the
    same check), before its folder exists; nothing is written anywhere."""
    from scaleformer.runs.run import run

    cfg = compose(["debug=default", f"paths.root={tmp}/results", f"paths.cache={tmp}/cache",
                   "data.leaderboard=scrolls:/../../../../../escaped"])
    with pytest.raises(ConfigError, match=r"^data\.leaderboard='scrolls:/\.\./.*': the task must be a plain name"):
        run(cfg)
    assert not list(tmp.rglob("*"))  # no run folder, no leaderboard file: nothing at all


def _dryrun_copy(tmp: Path) -> Path:
    shutil.copytree(ROOT / "results" / "dryrun", tmp / "results" / "dryrun")
    shutil.copytree(ROOT / "results" / "gpu-perf", tmp / "results" / "gpu-perf")
    return tmp / "results"


DRYRUN = [f"results/dryrun/{n}" for n in ("table1-gpu.json", "table1-gpu.md", "table1.json", "table1.md",
                                          "table2.json", "table2.md", "figure2.json", "figure2.md", "bill.json",
                                          "bill.md")]


def restate_costs(*args: str, change: Any = None) -> Any:
    """``restate_costs.py --results <a copy of results/>`` with ``change`` made to the copy first; every table
    and the bill keep their bytes."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        results = _dryrun_copy(tmp)
        if change is not None:
            change(results / "dryrun")
        script = _script("restate_costs")
        argv = ["--results", str(results), *args]
        return unchanged(*DRYRUN)(lambda t: script.main(argv))(tmp, None)
    return trigger


def _row_without_paper_tokens(dryrun: Path) -> None:
    path = dryrun / "table1-gpu.json"
    doc = json.loads(path.read_text())
    del doc["rows"][2]["paper_tokens"]
    path.write_text(json.dumps(doc))


def restate_costs_empty(tmp: Path, _: Path | None) -> Any:
    (tmp / "empty").mkdir()
    try:
        return one_line(lambda: _script("restate_costs").main(["--results", str(tmp / "empty")]))
    finally:
        assert not list((tmp / "empty").rglob("*"))  # no bill from no tables


def _settings(tmp: Path, *extra: str) -> list[str]:
    """A run with the recipe's model selection, in seconds: 4 training ledgers, validation at each half epoch."""
    return [f"paths.root={tmp}/results", f"paths.cache={tmp.parent}/round6_cache", "method=truncation", "trainer=paper",
            "optim=tiny", "backbone=tiny_bart", "data.synthetic_docs.train=4", "data.synthetic_docs.validation=2",
            "data.synthetic_docs.test=1", "data.synthetic_words=150", "data.epochs=1", "trainer.limit_val_batches=2",
            "trainer.enable_progress_bar=false", "trainer.precision=32-true", "generation.num_beams=1",
            "generation.max_new_tokens=8", "metrics.bertscore.enabled=false", "data.eval_batch_size=1",
            "trainer.accelerator=cpu", "run_name=selected", *extra]


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    """The rows' folder to break (``Case.export``): a finished run whose export holds its best validation
    checkpoint (``trainer.select=best``)."""
    from scaleformer.runs.run import run

    tmp = tmp_path_factory.mktemp("selected")
    out = run(compose(_settings(tmp)))
    assert out["selection"]["rule"] == "best"
    return tmp


def rerun_without_best(tmp: Path, folder: Path | None) -> None:
    """The same command again with ``best.ckpt`` gone: the export of the best weights keeps its bytes; the last
    weights are exported beside it, their selection in the folder's name."""
    from scaleformer.runs.run import run

    shutil.copytree(folder, tmp, dirs_exist_ok=True)
    run_dir = tmp / "results" / "runs" / "selected"
    (run_dir / "checkpoints" / "best.ckpt").unlink()
    before = {p.relative_to(run_dir): p.read_bytes() for p in (run_dir / "model").rglob("*") if p.is_file()}
    out = run(compose(_settings(tmp)))
    assert out["selection"]["rule"].startswith("last (its checkpoint")
    after = {p.relative_to(run_dir): p.read_bytes() for p in (run_dir / "model").rglob("*") if p.is_file()}
    assert after == before
    beside = run_dir / f"model-last-step{out['step']}"
    record = json.loads((beside / "scaleformer.json").read_text())
    assert record["run"]["selection"] == "last" and record["run"]["step"] == out["step"]


def rerun_with_another_runs_best(tmp: Path, folder: Path | None) -> Any:
    """Another run's ``best.ckpt`` copied into the run folder: the same command again stops at start-up."""
    from scaleformer.runs import checkpoints
    from scaleformer.runs.run import run

    shutil.copytree(folder, tmp, dirs_exist_ok=True)
    best = tmp / "results" / "runs" / "selected" / "checkpoints" / "best.ckpt"
    ckpt = torch.load(best, weights_only=True)
    ckpt[checkpoints.META_KEY] = {**ckpt[checkpoints.META_KEY], "training_hash": "0therrun00"}
    torch.save(ckpt, best)
    return run(compose(_settings(tmp)))


# ---- model selection ----------------------------------------------------------------------------------


def validation_after_whole_steps(tmp: Path, _: Path | None) -> None:
    """Validation's schedule rounds to whole optimizer steps; a validation of untrained weights, or of the same
    weights again, is no candidate for the best checkpoint."""
    from scaleformer.runs.selection import BestCheckpoint
    from scaleformer.runs.trainer import align_validation

    for every, acc, batches, want in ((0.5, 4, 10, 4), (0.5, 2, 10, 6), (3, 2, 10, 4), (0.5, 1, 10, 0.5), (1.0, 3, 10, 1.0)):
        trainer = SimpleNamespace(val_check_interval=every, accumulate_grad_batches=acc, check_val_every_n_epoch=1)
        align_validation(trainer, batches)
        assert trainer.val_check_interval == want, (every, acc, trainer.val_check_interval)
    best = BestCheckpoint(tmp)
    saved: list[int] = []
    for step, score in ((0, 9.0), (2, 1.0), (2, 5.0), (4, 2.0)):
        fake = SimpleNamespace(sanity_checking=False, callback_metrics={"val/task_score": torch.tensor(score)},
                               global_step=step)
        fake.save_checkpoint = lambda path, weights_only, at=step: saved.append(at)
        best.on_validation_end(fake, None)
    assert [h["step"] for h in best.history] == [2, 4] and best.best_step == 4 and saved == [2, 4]


def validate_past_an_epoch(tmp: Path, _: Path | None) -> Any:
    from scaleformer.runs.trainer import align_validation

    return align_validation(SimpleNamespace(val_check_interval=50, accumulate_grad_batches=1,
                                            check_val_every_n_epoch=1), 2)


def best_file(content: Any) -> Any:
    """A ``best.ckpt`` in the run's checkpoints that this run did not write: another run's, or not a checkpoint."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        from scaleformer.runs import checkpoints
        from scaleformer.runs.selection import check_best_file

        path = tmp / "checkpoints" / "best.ckpt"
        path.parent.mkdir()
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            torch.save({"state_dict": {"w": torch.zeros(1)}, "global_step": 3,
                        checkpoints.META_KEY: {"training_hash": content}}, path)
        return check_best_file(path.parent, "mine000000")
    return trigger


# ---- decoding -----------------------------------------------------------------------------------------


def _model(name: str = "sled"):
    from scaleformer.methods import build_method, method_config
    from scaleformer.model.hf import ScaleformerForConditionalGeneration

    backbone, spec = tiny("bart")
    method = build_method(method_config({"name": name, **dict(METHODS)[name]}), spec)
    return ScaleformerForConditionalGeneration.from_parts(backbone, method).eval()


def generate_nan_penalty(tmp: Path, _: Path | None) -> Any:
    model = _model()
    ids, mask = batch([300, 9], model.method.spec)
    return model.generate(ids, attention_mask=mask, num_beams=4, length_penalty=float("nan"), max_new_tokens=5)


def step_ngram_longer_than_output(tmp: Path, _: Path | None) -> None:
    """``no_repeat_ngram_size=50`` with 13-token outputs: the step gives generate's tokens (it failed)."""
    model = _model()
    ids, mask = batch([300, 170, 9], model.method.spec)
    for beams in (1, 4):
        kw = dict(num_beams=beams, max_new_tokens=12, no_repeat_ngram_size=50)
        assert torch.equal(model.generate(ids, attention_mask=mask, step_decoding=True, **kw),
                           model.generate(ids, attention_mask=mask, **kw))


def compiled_greedy_step(tmp: Path, _: Path | None) -> None:
    """The greedy 8-token step captured whole for sled and truncation (fullgraph, dynamo's eager backend: the
    data-dependent branch the round found is refused there as under inductor); generate's tokens."""
    import torch._dynamo

    for name in ("sled", "truncation"):
        torch._dynamo.reset()
        model = _model(name)
        ids, mask = batch([300, 170, 9], model.method.spec)
        kw = dict(num_beams=1, max_new_tokens=8)
        assert torch.equal(model.generate(ids, attention_mask=mask, step_decoding=True, compile_step="eager", **kw),
                           model.generate(ids, attention_mask=mask, **kw)), name


# ---- result scripts -----------------------------------------------------------------------------------


def time_commands(*args: str, out: str | None = None, logs: str | None = None) -> Any:
    """``time_commands.py`` refusing before the clone and the half hour of measuring (no git, no machine probe)."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        script = _script("time_commands")
        argv = [a.replace("{tmp}", str(tmp)) for a in args]
        if out is not None:
            target = tmp / "out"
            target.mkdir() if out == "folder" else target.write_text(out)
            argv += ["--out", str(target)]
        if logs is not None:
            (tmp / "logs").write_text(logs)
            argv += ["--logs", str(tmp / "logs")]
        with mock.patch.object(script, "machine", side_effect=AssertionError("measured before refusing")), \
                mock.patch.object(script.subprocess, "run", side_effect=AssertionError("cloned before refusing")):
            return one_line(lambda: script.main(argv))
    return trigger


def render_times(change: Any) -> Any:
    """``render_results.py`` on a copy of results/ whose times.json was changed: one line, the pages untouched."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        render_results = _script("render_results")
        shutil.copytree(ROOT / "results", tmp / "results")
        path = tmp / "results" / "times" / "times.json"
        doc = json.loads(path.read_text())
        change(doc)
        path.write_text(json.dumps(doc))
        pages = {p: (ROOT / p).read_bytes() for p in render_results.PAGES}
        try:
            with mock.patch.object(render_results, "RESULTS", tmp / "results"):
                return one_line(lambda: render_results.main([]))
        finally:
            assert {p: (ROOT / p).read_bytes() for p in render_results.PAGES} == pages
    return trigger


def _nan_times(doc: dict) -> None:
    for run in doc["runs"].values():
        for row in run["rows"]:
            row["wall_s"] = float("nan")


def scrolls_out_is_a_file(tmp: Path, _: Path | None) -> Any:
    (tmp / "out").write_text("taken\n")
    (tmp / "predictions_test.jsonl").write_text('{"id": "a", "prediction": "x"}\n')
    return unchanged("out")(lambda t: _script("scrolls_submission").main(
        [str(tmp / "predictions_test.jsonl"), "--out", str(tmp / "out")]))(tmp, None)


# ---- messages -----------------------------------------------------------------------------------------


def wandb_rows(tmp: Path, _: Path | None) -> Any:
    from scaleformer.runs.trainer import instantiate_all

    return instantiate_all({"wandb": {"_target_": "scaleformer.runs.wandb_logger.WandbLogger", "prediction_rows": "abc",
                                      "offline": True, "save_dir": str(tmp)}}, "logger")


def mirror(broken: str) -> Any:
    """A local mirror of SCROLLS' GovReport zip whose rows lack ``output``, or of BookSum cut to half a parquet
    file: what is wrong with the file, never "the hub cannot be reached"."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        from scaleformer.data.mirrors import write_mirrors
        from scaleformer.data.sources import make_source
        from scaleformer.runs.context import to_config

        paths = write_mirrors(tmp / "m", {"train": 2, "validation": 2, "test": 2}, 0.01, tasks=["gov_report"])
        if broken == "zip":
            z = paths["gov_report"]
            with zipfile.ZipFile(z) as src:
                members = {n: src.read(n) for n in src.namelist()}
            with zipfile.ZipFile(z, "w") as out:
                for n, data in members.items():
                    rows = [{k: v for k, v in json.loads(line).items() if k != "output"}
                            for line in data.decode().splitlines()] if n.endswith(".jsonl") else None
                    out.writestr(n, "".join(json.dumps(r) + "\n" for r in rows).encode() if rows is not None else data)
            overrides = ["data=govreport", f"data.files_base={tmp}/m/scrolls"]
        else:
            part = sorted(paths["booksum"].rglob("train-*.parquet"))[0]
            part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
            overrides = ["data=booksum", f"data.hub_id={paths['booksum']}"]
        rc = to_config(compose([*overrides, f"paths.cache={tmp}/cache"]))
        return list(make_source(rc.data).rows("train").rows)
    return trigger


def help_lists_no_internal_files(tmp: Path, _: Path | None) -> None:
    """``train.py --help`` lists each group's options only: no shared base (``_data_defaults``), no schema."""
    import contextlib
    import io

    from scaleformer.cli import train

    out = io.StringIO()
    with mock.patch.object(sys, "argv", ["train.py", "--help"]), contextlib.redirect_stdout(out), \
            pytest.raises(SystemExit):
        train.main()
    groups = out.getvalue().split("== Configuration groups ==")[1].split("== Config ==")[0]
    options = [o.strip() for line in groups.splitlines() if ": " in line for o in line.split(": ", 1)[1].split(",")]
    assert "sled" in options and not [o for o in options if o.startswith("_") or o.endswith("_schema")], options


def compose_only(*overrides: str) -> Any:
    def trigger(tmp: Path, _: Path | None) -> Any:
        from scaleformer.cli.train import composition_error

        try:
            return compose(list(overrides))
        except ConfigError:
            raise
        except Exception as e:  # Hydra's: the command prints it as this one line
            raise ConfigError(composition_error(e)) from None
    return trigger


# ---- left from the fifth round ------------------------------------------------------------------------


def negative_fixed_cost(tmp: Path, _: Path | None) -> None:
    """4,000 tokens at 1.0 s, 2,000 at 0.2 s: a line with fixed cost -0.6 s, impossible: the one-length model, said."""
    from scaleformer.runs import cost_fit

    rec = record()
    for g, (tokens, t) in enumerate(((4000, 1.0), (2000, 0.2))):
        rec["train_groups"][g].update(input_tokens=tokens, tokens_per_step=[tokens])
        for s in rec["train_steps"]:
            if s["group"] == g:
                s["time_s"] = t
    got = cost_fit.summary(rec, 150_000, True)
    assert "fixed cost is negative" in got["fit_note"] and math.isfinite(got["step_s"]) and got["step_s"] > 0, got
    assert got["step_s"] < 59.4  # the line's 59.4 s at 150k tokens is gone


def grid_switch_number(tmp: Path, _: Path | None) -> Any:
    """A grid's or script's override composes through compose_config: a switch given a number is refused there too."""
    from scaleformer.compose import compose_config

    return compose_config(["method=sled", "method.checkpoint_chunks=2"])


def hf_trainer_empty_reference(tmp: Path, _: Path | None) -> None:
    """Two perfect predictions, one empty reference: the empty one is skipped and counted, ROUGE 100."""
    from transformers import AutoTokenizer, EvalPrediction

    from scaleformer.resources import resolve_asset

    tok = AutoTokenizer.from_pretrained(resolve_asset("asset:readers/tiny_bart_reader"))
    text = "Mara Quill repaired three lanterns in Alder."
    ids = tok([text, text, ""], padding=True, return_tensors="np").input_ids
    refs = ids.copy()
    refs[2] = tok.pad_token_id  # decodes to nothing: a document without its reference
    got = _script("hf_trainer").rouge_metrics(tok)(EvalPrediction(predictions=ids, label_ids=refs))
    assert got["n_no_reference"] == 1 and got["n_scored"] == 2 and got["rouge1"] == 100.0, got


CASES = [
    # security and data loss
    Case("leaderboard-task-escapes-the-run", leaderboard_escape, None),
    Case("restate-costs-a-table-not-json", restate_costs(change=lambda d: (d / "figure2.json").write_text("{not json")),
         r"figure2\.json: not a readable cost table .*; nothing was written$"),
    Case("restate-costs-an-empty-results", restate_costs_empty, r"^--results=.*: no cost tables in .*: nothing "
         r"to price; nothing was written$"),
    Case("restate-costs-a-row-without-paper-tokens", restate_costs(change=_row_without_paper_tokens),
         r"table1-gpu\.json: rows\[2\] \('memorizing', 'SummScreenFD shape'\): paper_tokens=None: must be the positive "
         r"number of tokens"),
    Case("restate-costs-an-unknown-commit", restate_costs("--previous-commit", "deadbeef"),
         r"^--previous-commit=deadbeef: no results/dryrun/table1-gpu\.json there \(fatal: .*\); nothing was"),
    Case("rerun-without-the-best-checkpoint-keeps-its-export", rerun_without_best, None, export=True),
    Case("rerun-with-another-runs-best-checkpoint", rerun_with_another_runs_best,
         r"^the best checkpoint .*best\.ckpt \(trainer\.select=best\): written by training identity 0therrun00, not "
         r"this run's", ConfigError, True),
    # model selection
    Case("select-best-without-a-validation-split", composes("++trainer.select=best", "data.splits.validation=null"),
         r"^trainer\.select='best': needs validation during fit, and data\.splits\.validation is null", ConfigError),
    Case("limit-val-batches-negative", composes("trainer.limit_val_batches=-1"),
         r"^trainer\.limit_val_batches=-1: must be a count of documents \(an integer >= 0\) or a share", ConfigError),
    Case("limit-val-batches-share-above-one", composes("trainer.limit_val_batches=1.5"),
         r"^trainer\.limit_val_batches=1\.5: must be a count of documents", ConfigError),
    Case("validation-after-whole-optimizer-steps", validation_after_whole_steps, None),
    Case("val-check-interval-zero", composes("trainer.val_check_interval=0"),
         r"^trainer\.val_check_interval=0: must be a count of training micro-batches \(an integer >= 1\)", ConfigError),
    Case("val-check-interval-past-an-epoch", validate_past_an_epoch,
         r"^trainer\.val_check_interval=50: above the 2 training micro-batches of an epoch", ConfigError),
    Case("best-checkpoint-of-another-run", best_file("other00000"),
         r"^the best checkpoint .*best\.ckpt \(trainer\.select=best\): written by training identity other00000",
         ConfigError),
    Case("best-checkpoint-garbage", best_file(b"\x00garbage" * 8),
         r"^the best checkpoint .*best\.ckpt \(trainer\.select=best\): not a readable checkpoint", ConfigError),
    # decoding
    Case("generation-length-penalty-nan", composes("generation.length_penalty=nan"),
         r"^generation\.length_penalty=nan: must be a finite number", ConfigError),
    Case("generate-length-penalty-nan", generate_nan_penalty, r"^generate\(length_penalty=nan\): must be a finite",
         ConfigError),
    Case("step-ngram-longer-than-the-output", step_ngram_longer_than_output, None),
    Case("step-greedy-compiles-for-sled-and-truncation", compiled_greedy_step, None),
    # result scripts
    Case("render-results-nan-times", render_times(_nan_times),
         r"times\.json: runs\.\S+, step setup: wall_s=nan is not a finite number >= 0"),
    Case("render-results-rows-removed", render_times(lambda d: d["runs"]["idle"].pop("rows")),
         r"times\.json: runs\.idle: no rows"),
    Case("time-commands-limit-nan", time_commands("--limit-s", "nan"),
         r"^--limit-s=nan: must be a finite number of seconds > 0"),
    Case("time-commands-logs-a-file", time_commands(logs="taken\n"), r"^--logs=.*/logs: is a file"),
    Case("time-commands-out-a-folder", time_commands(out="folder"), r"^--out=.*/out: is a folder"),
    Case("time-commands-out-not-json", time_commands(out="{not json"), r"^--out=.*/out: .*not a readable "
         r"times file"),
    Case("time-commands-out-without-runs", time_commands(out='{"rows": []}'),
         r"^--out=.*/out: has no \"runs\" mapping"),
    Case("scrolls-submission-out-a-file", scrolls_out_is_a_file, r"^--out=.*/out: is a file"),
    # messages
    Case("wandb-prediction-rows-text", wandb_rows,
         r"^logger\.wandb \(.*\): logger\.wandb\.prediction_rows='abc': must be an integer >= 0", ConfigError),
    Case("micro-batch-size-text", train_cli("data.micro_batch_size=abc"),
         r"^data\.micro_batch_size='abc': must be an integer \(or null\)"),
    Case("bucket-maybe", train_cli("data.bucket=maybe"), r"^data\.bucket='maybe': must be true or false"),
    Case("early-stopping-patience-nan", train_cli("trainer.early_stopping_patience=nan"),
         r"^trainer\.early_stopping_patience=nan: must be an integer \(or null\)"),
    Case("mirror-zip-rows-without-output", mirror("zip"),
         r"gov_report\.zip split 'train': missing field 'output'", DataError),
    Case("mirror-parquet-truncated", mirror("parquet"),
         r"^cannot load data=booksum: local dataset folder .*: .*Parquet magic bytes not found", DataError),
    Case("help-lists-no-internal-files", help_lists_no_internal_files, None),
    Case("method-schema-as-an-option", compose_only("method=sled_schema"),
         r"Could not find 'method/sled_schema' Available options in 'method': block_attention", ConfigError),
    Case("data-shared-base-as-an-option", compose_only("data=_scrolls"), r"Could not find 'data/_scrolls'", ConfigError),
    # left from the fifth round
    Case("cost-fit-negative-fixed-cost", negative_fixed_cost, None),
    Case("a-switch-given-a-number-in-a-grid", grid_switch_number,
         r"^method\.checkpoint_chunks=2: must be true or false \(or null\)", ConfigError),
    Case("a-switch-given-a-number-in-a-sweep", train_cli("method.checkpoint_chunks=0,2"),
         r"^method\.checkpoint_chunks=0: must be true or false"),
    Case("hf-trainer-empty-reference-skipped", hf_trainer_empty_reference, None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_hostile_round6(case: Case, request, tmp_path: Path) -> None:
    run_case(case, tmp_path, request)


def test_the_table_has_one_row_per_case_and_both_outcomes() -> None:
    check_table(CASES)
