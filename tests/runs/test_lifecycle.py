"""From trained to reported: evaluate a checkpoint, continue, re-score, export, summarize, many processes."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, compose, train_py, train_py_gloo
from helpers import ALLOW_HELPERS

from scaleformer.errors import ConfigError
from scaleformer.runs import checkpoints, runtime
from scaleformer.runs.run import run


def _tiny(tmp_path: Path, *extra: str, root: str = "results") -> list[str]:
    return [f"paths.root={tmp_path}/{root}", f"paths.cache={tmp_path.parent}/lifecycle_cache", "seed=3",
            "data.synthetic_docs.train=4", "data.synthetic_docs.validation=2", "data.synthetic_docs.test=0",
            "data.splits.test=null", "trainer.max_steps=3", "trainer.log_every_n_steps=1",
            "trainer.enable_progress_bar=false", "trainer.eval_splits=[validation]", "generation.num_beams=2",
            "generation.max_new_tokens=12", "metrics.bertscore.enabled=false", "method=truncation", *extra]


def _predictions(result: dict, root: Path) -> str:
    run_dir = root / "runs" / result["run_id"]
    return (next((run_dir / "eval").glob(f"step_{result['step']}-*")) / "predictions_validation.jsonl").read_text()


def _run_dir(result: dict, root: Path) -> Path:
    return root / "runs" / result["run_id"]


def test_evaluating_a_checkpoint_reproduces_the_training_runs_predictions(tmp_path):
    trained = run(compose(_tiny(tmp_path)))
    root = tmp_path / "results"
    ckpt = _run_dir(trained, root) / "checkpoints" / "step_3.ckpt"
    assert ckpt.exists()
    for path in (str(ckpt), "last"):
        again = run(compose(_tiny(tmp_path, "trainer.do_train=false", f"trainer.ckpt_path={path}",
                                  root="eval")))
        if path == "last":  # another root: no checkpoint there, untrained weights
            assert again["step"] == 0
            continue
        assert again["step"] == 3 and again["train_time_s"] == 0
        assert _predictions(again, tmp_path / "eval") == _predictions(trained, root)


def test_a_finished_run_leaves_nothing_alive_in_the_process(tmp_path):
    """Grids (reproduce's local runner) and Hydra's basic launcher run cell after cell in one process: a
    finished run's module, model and optimiser must go (a signature cache keyed on ``trainer.fit`` once
    kept 1.7 GB of host memory per BART-base cell)."""
    import gc

    from scaleformer.runs.module import SummarizationModule

    run(compose(_tiny(tmp_path, "trainer.max_steps=1")))
    gc.collect()
    alive = [o for o in gc.get_objects() if type(o) is SummarizationModule]
    assert alive == []


def test_a_metrics_change_rescoring_without_training(tmp_path, caplog):
    first = run(compose(_tiny(tmp_path)))
    ckpt = _run_dir(first, tmp_path / "results") / "checkpoints" / "step_3.ckpt"
    mtime = ckpt.stat().st_mtime_ns
    second = run(compose(_tiny(tmp_path, "metrics.use_stemmer=true")))
    assert second["run_id"] == first["run_id"] and second["step"] == 3
    assert second["evaluation_hash"] != first["evaluation_hash"]
    assert ckpt.stat().st_mtime_ns == mtime, "no new training, so no new checkpoint"
    assert _predictions(second, tmp_path / "results") == _predictions(first, tmp_path / "results")
    assert len(list((_run_dir(first, tmp_path / "results") / "eval").iterdir())) == 2


def test_a_fresh_start_replaces_the_runs_checkpoints(tmp_path):
    first = run(compose(_tiny(tmp_path, "trainer.max_steps=4")))
    ckpts = _run_dir(first, tmp_path / "results") / "checkpoints"
    assert (ckpts / "step_4.ckpt").exists()
    run(compose(_tiny(tmp_path, "trainer.max_steps=2", "trainer.ckpt_path=null")))
    assert sorted(p.name for p in ckpts.iterdir()) == ["last.ckpt", "replaced", "step_2.ckpt"]
    assert checkpoints.peek(ckpts / "last.ckpt")["step"] == 2
    kept = list((ckpts / "replaced").glob("*/step_4.ckpt"))  # moved aside, never deleted
    assert len(kept) == 1 and checkpoints.peek(kept[0])["step"] == 4


def test_a_checkpoint_of_another_method_is_refused_naming_both(tmp_path):
    first = run(compose(_tiny(tmp_path)))
    ckpt = _run_dir(first, tmp_path / "results") / "checkpoints" / "last.ckpt"
    with pytest.raises(ConfigError, match=r"method 'truncation'.*method 'sled'"):
        run(compose(_tiny(tmp_path, "method=sled", "trainer.do_train=false", f"trainer.ckpt_path={ckpt}")))


def test_a_missing_checkpoint_fails_before_any_model_is_built(tmp_path, monkeypatch):
    import scaleformer.runs.run as run_module

    monkeypatch.setattr(run_module, "build_model", lambda *a, **k: pytest.fail("model built"))
    with pytest.raises(ConfigError, match=r"trainer\.ckpt_path=.*no such checkpoint file"):
        run(compose(_tiny(tmp_path, f"trainer.ckpt_path={tmp_path}/nope.ckpt")))


def test_scoring_untrained_weights_is_announced(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="scaleformer"):
        result = run(compose(_tiny(tmp_path, "trainer.do_train=false")))
    assert result["step"] == 0 and "UNTRAINED" in caplog.text


@pytest.mark.parametrize(("override", "message"), [
    ("trainer.accelerator=gpu", r"trainer: .*gpu"),
    ("trainer.strategy=no_such_strategy", r"trainer: .*invalid strategy name"),
])
def test_lightning_setup_errors_are_one_line(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message) as e:
        run(compose(_tiny(tmp_path, override)))
    assert "\n" not in str(e.value)


def test_newest_checkpoint_includes_slurm_preemption_saves(tmp_path):
    ckpt_dir = tmp_path / "checkpoints"
    ckpt_dir.mkdir()
    torch.save({"global_step": 40, "state_dict": {}}, ckpt_dir / "last.ckpt")
    torch.save({"global_step": 55, "state_dict": {}}, tmp_path / "hpc_ckpt_2.ckpt")
    torch.save({"global_step": 30, "state_dict": {}}, tmp_path / "hpc_ckpt_1.ckpt")
    assert checkpoints.resolve("last", ckpt_dir, tmp_path) == tmp_path / "hpc_ckpt_2.ckpt"
    assert checkpoints.resolve("last", tmp_path / "elsewhere", tmp_path / "elsewhere") is None


def test_a_second_process_on_the_same_run_is_refused(tmp_path):
    rc_dir = None
    first = run(compose(_tiny(tmp_path)))
    rc_dir = _run_dir(first, tmp_path / "results")
    metrics_before = sorted(rc_dir.rglob("metrics.json"))
    with runtime.run_lock(rc_dir), pytest.raises(runtime.RunInUseError, match=r"in use \(pid \d+"):
        run(compose(_tiny(tmp_path, "metrics.use_stemmer=true")))
    assert sorted(rc_dir.rglob("metrics.json")) == metrics_before, "nothing of the first run was touched"
    assert not (rc_dir / "failed.json").exists()


def test_a_run_that_stops_before_training_leaves_no_folder(tmp_path):
    """Nothing to resume and nothing measured: a folder would only read as a failed run. A folder that
    existed before keeps its files and records the failure (failed.json)."""
    from scaleformer.data import DataError

    missing = tmp_path / "nowhere.jsonl"
    for name in ("never", "again"):
        with pytest.raises(DataError, match="nowhere.jsonl"):
            run(compose(_tiny(tmp_path, "data=local", f"data.path={missing}", f"run_name={name}")))
    assert not list((tmp_path / "results" / "runs").iterdir())
    done = run(compose(_tiny(tmp_path, "run_name=kept")))
    kept = _run_dir(done, tmp_path / "results")
    before = sorted(p.relative_to(kept) for p in kept.rglob("*") if p.name != "train.log")
    with pytest.raises(ConfigError, match="training identity"):  # another identity in that folder: refused
        run(compose(_tiny(tmp_path, "run_name=kept", "seed=4")))
    after = sorted(p.relative_to(kept) for p in kept.rglob("*") if p.name != "train.log")
    assert [p for p in after if p not in before] == [Path("failed.json")]


def _crash_resume(tmp_path: Path, crash: str) -> tuple[str, str]:
    base = ["trainer.max_steps=6", "trainer.checkpoint_every_n_steps=3", "method=scaleformer_middle"]
    straight = run(compose(_tiny(tmp_path, *base, root="straight")))
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(compose(_tiny(tmp_path, *base, f"+callbacks.crash._target_={crash}", "+callbacks.crash.step=5",
                          ALLOW_HELPERS,
                          root="resumed")))
    resumed = run(compose(_tiny(tmp_path, *base, root="resumed")))
    return _predictions(straight, tmp_path / "straight"), _predictions(resumed, tmp_path / "resumed")


def test_resuming_mid_epoch_after_a_crash_gives_identical_predictions(tmp_path):
    # 4 training documents, batch 1: the checkpoint at step 3 is in the middle of the first epoch.
    straight, resumed = _crash_resume(tmp_path, "tests.helpers.CrashAt")
    assert resumed == straight


def test_export_round_trips_and_loads_with_plain_transformers(tmp_path):
    """The run's predictions again from its export: through AutoModelForSeq2SeqLM (the method's gate in
    the weights), the Summarizer, and a format-1 copy (backbone alone + method_state.safetensors)."""

    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import scaleformer  # noqa: F401  (registers the Auto classes)
    from scaleformer.export.folder import META_FILE, METHOD_STATE
    from scaleformer.export.summarizer import Summarizer

    result = run(compose(_tiny(tmp_path, "method=memorizing")))
    model_dir = _run_dir(result, tmp_path / "results") / "model"
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        assert any(k.endswith("retrieval_gate") for k in f.keys()), "memorizing's gate travels in the weights"
    auto = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    assert type(auto).__name__ == "ScaleformerForConditionalGeneration" and auto.method.cfg.name == "memorizing"
    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = [json.loads(line) for line in _predictions(result, tmp_path / "results").splitlines()]
    docs = {json.loads(line)["id"]: json.loads(line)["input"] for f in tmp_path.parent.joinpath(
        "lifecycle_cache").rglob("validation.jsonl") for line in f.read_text().splitlines()}
    want = [r["prediction"] for r in rows]
    summarize = Summarizer.from_pretrained(model_dir, device="cpu")
    assert [summarize(docs[r["id"]]) for r in rows] == want
    plain = [tok.decode(auto.generate(tok(docs[r["id"]], return_tensors="pt").input_ids)[0],
                        skip_special_tokens=True).strip() for r in rows]
    assert plain == want

    old = tmp_path / "format1"
    state = auto.backbone.state_dict()
    gate = {k: v.contiguous() for k, v in state.items() if k.endswith("retrieval_gate")}
    auto.backbone.save_pretrained(old, state_dict={k: v for k, v in state.items() if k not in gate})
    save_file(gate, str(old / METHOD_STATE))
    tok.save_pretrained(old)
    record = json.loads((model_dir / META_FILE).read_text())
    (old / META_FILE).write_text(json.dumps({**record, "format": 1}))
    assert type(AutoModelForSeq2SeqLM.from_pretrained(old)).__name__ == "BartForConditionalGeneration"
    assert [Summarizer.from_pretrained(old, device="cpu")(docs[r["id"]]) for r in rows] == want


def test_summarize_cli_on_text_and_jsonl(tmp_path, capsys):
    from scaleformer.cli.summarize import main

    result = run(compose(_tiny(tmp_path)))
    model_dir = _run_dir(result, tmp_path / "results") / "model"
    doc = tmp_path / "doc.txt"
    doc.write_text("The ledger of Ash Crossing records 2 events. " * 300)
    assert main(["--model", str(model_dir), "--input", str(doc), "--num-beams", "1"]) == 0
    assert capsys.readouterr().out.strip() != ""
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": f"d{i}", "document": doc.read_text()[: 500 * (i + 1)]}) + "\n"
                            for i in range(2)))
    assert main(["--model", str(model_dir), "--input", str(docs), "--field", "document",
                 "--method", "scaleformer", "--set", "overlap=100"]) == 0
    out = [json.loads(line) for line in (tmp_path / "docs.summaries.jsonl").read_text().splitlines()]
    assert [r["id"] for r in out] == ["d0", "d1"] and all(isinstance(r["summary"], str) for r in out)
    with pytest.raises(SystemExit, match="field 'input' missing"):
        main(["--model", str(model_dir), "--input", str(docs)])


def test_scrolls_submission_files_follow_the_official_format(tmp_path):
    import csv

    sys.path.insert(0, str(ROOT / "scripts"))
    from scrolls_submission import main

    ev = tmp_path / "run" / "eval" / "step_9-abc"
    ev.mkdir(parents=True)
    (ev / "config.yaml").write_text("data:\n  name: govreport\n  data_files:\n    test: zip://gov_report/test.jsonl"
                                    "::https://huggingface.co/datasets/tau/scrolls/resolve/main/gov_report.zip\n")
    rows = [{"id": "gr-1", "prediction": 'A "quoted", multi\nline summary', "reference": []},
            {"id": "gr-2", "prediction": "Second.", "reference": []}]
    (ev / "predictions_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main([str(ev / "predictions_test.jsonl"), "--out", str(tmp_path / "sub")]) == 0
    assert json.loads((tmp_path / "sub" / "gov_report.json").read_text()) == {r["id"]: r["prediction"] for r in rows}
    with open(tmp_path / "sub" / "scrolls_predictions.csv", newline="") as f:
        got = list(csv.DictReader(f))
    assert [list(r) for r in got][0] == ["Task", "ID", "Prediction"]
    assert [(r["Task"], r["ID"], r["Prediction"]) for r in got] == [("gov_report", r["id"], r["prediction"])
                                                                   for r in rows]
    (ev / "config.yaml").write_text("data:\n  name: synthetic\n")
    with pytest.raises(SystemExit, match="not a SCROLLS task"):
        main([str(ev / "predictions_test.jsonl"), "--out", str(tmp_path / "sub2")])


def test_two_ddp_processes_give_the_same_predictions_as_one(tmp_path):
    trained = run(compose(_tiny(tmp_path, "data.synthetic_docs.validation=5")))
    ckpt = _run_dir(trained, tmp_path / "results") / "checkpoints" / "last.ckpt"
    common = _tiny(tmp_path, "data.synthetic_docs.validation=5", "trainer.do_train=false",
                   f"trainer.ckpt_path={ckpt}", root="ddp")
    ddp = ("trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp")
    proc = train_py_gloo(*common, *ddp)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    ddp = json.loads(next((tmp_path / "ddp").rglob("metrics.json")).read_text())
    assert ddp["world_size"] == 2 and ddp["splits"]["validation"]["n_examples"] == 5
    single = _predictions(trained, tmp_path / "results")
    assert next((tmp_path / "ddp").rglob("predictions_validation.jsonl")).read_text() == single
    assert proc.stdout.count("results: ") == 1, "rank 0 alone prints the summary"


def test_a_failing_cell_fails_alone_and_the_sweep_exits_nonzero(tmp_path):
    proc = train_py("-m", "debug=default", f"paths.root={tmp_path}", "method=truncation",
                     "optim.lr=0.001,-1")
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]
    assert len(list(tmp_path.rglob("metrics.json"))) == 1, "the good cell finished"
    assert "1 cell(s) of the sweep failed" in proc.stdout and "optim.lr=-1" in proc.stdout
    assert "optim.lr=-1.0: must be > 0" in proc.stdout


def test_submitit_local_launcher_runs_two_cells(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    proc = train_py("-m", "hydra/launcher=local", "debug=default", f"paths.root={tmp_path}",
                     "method=truncation,sled")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    got = {json.loads(p.read_text())["method"]["option"] for p in tmp_path.rglob("metrics.json")}
    assert got == {"truncation", "sled"}


@pytest.mark.slow
def test_a_killed_run_resumes_to_byte_identical_predictions(tmp_path):
    base = _tiny(tmp_path, "trainer.max_steps=6", "trainer.checkpoint_every_n_steps=3",
                 "method=scaleformer_middle", root="killed")
    straight = run(compose(_tiny(tmp_path, "trainer.max_steps=6", "trainer.checkpoint_every_n_steps=3",
                                 "method=scaleformer_middle", root="straight")))
    killed = train_py(*base, "+callbacks.kill._target_=tests.helpers.KillAt", "+callbacks.kill.step=5",
                      ALLOW_HELPERS)
    assert killed.returncode == 137
    resumed = train_py(*base)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got = next((tmp_path / "killed").rglob("predictions_validation.jsonl")).read_text()
    assert got == _predictions(straight, tmp_path / "straight")


def test_an_unwritable_output_folder_fails_at_start_up(tmp_path, monkeypatch):
    import scaleformer.runs.run as run_module

    monkeypatch.setattr(run_module, "prepare_backbone", lambda *a, **k: pytest.fail("work started"))
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match=r"paths\.run_dir=.*a_file.*not writable"):
        run(compose(_tiny(tmp_path, f"paths.root={blocker}")))


@pytest.mark.slow
def test_summarizing_a_million_token_document_on_the_cpu(tmp_path):
    from scaleformer.export.summarizer import Summarizer

    result = run(compose(_tiny(tmp_path, "method=scaleformer")))
    summarize = Summarizer.from_pretrained(_run_dir(result, tmp_path / "results") / "model", device="cpu",
                                           num_beams=1, max_new_tokens=8)
    words = "Ilsa Fairbank repaired 119 sacks of flour at the Hay Loft . ".split()
    text = " ".join(words[i % len(words)] for i in range(1_000_000))
    n_tokens = len(summarize.tokenizer(text)["input_ids"])
    assert n_tokens >= 1_000_000
    assert isinstance(summarize(text), str)


def test_a_query_prefix_too_long_for_the_window_fails_before_the_model_is_built(tmp_path, monkeypatch):
    import scaleformer.runs.run as run_module

    rows = [{"id": f"d{i}", "input": "words " * 800, "output": "a summary", "query": "why " * 40} for i in range(2)]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(run_module, "build_model", lambda *a, **k: pytest.fail("model built"))
    with pytest.raises(ConfigError, match=r"query prefix of \d+ tokens does not fit beside method\.chunk_size=1000"):
        run(compose(_tiny(tmp_path, "data=local", f"data.path={data}", "data.prefix_field=query", "method=sled",
                          "method.chunk_size=1000", "data.splits.validation=null", "data.splits.test=null")))


def test_input_blind_baselines_score_the_model_without_its_input(tmp_path, capsys, monkeypatch):
    """The exported model on its own documents, on swapped ones and on none, beside the most frequent
    training summary; fact recall is in every row on the synthetic ledgers, and in the run's table."""
    from scaleformer.runs.console import summary_table

    sys.path.insert(0, str(ROOT / "scripts"))
    from input_blind import main

    result = run(compose(_tiny(tmp_path)))
    assert "Facts" in summary_table(result, tmp_path).splitlines()[2]
    run_dir = _run_dir(result, tmp_path / "results")
    assert main([str(run_dir), "--limit", "1"]) == 2, "one document cannot be swapped with another"
    # A stand-in model that repeats the start of its input shows which document each baseline read
    # (a 3-step model writes the same text for every input).
    from scaleformer.export.summarizer import Summarizer

    monkeypatch.setattr(Summarizer, "summarize", lambda self, texts, progress=False: [t[:60] for t in texts])
    assert main([str(run_dir)]) == 0
    out = json.loads((run_dir / "eval" / "input_blind_validation.json").read_text())
    assert list(out["baselines"]) == ["own document", "another document", "no document", "training summary"]
    assert out["n"] == 2 and all("fact_recall" in b["scores"] and "rouge1" in b["scores"]
                                 for b in out["baselines"].values())
    own, swapped = (out["baselines"][k]["predictions"] for k in ("own document", "another document"))
    assert own[0] != own[1] and swapped == own[::-1], "each document's baseline reads the other's input"
    assert len(set(out["baselines"]["training summary"]["predictions"])) == 1
    printed = capsys.readouterr().out
    assert "Facts" in printed and "Fact parts" in printed and "fact_field_recall" not in printed


def test_default_results_writes_the_readme_files(tmp_path):
    """scripts/default_results.py (make default-results): the run's metrics and both splits' input-blind
    baselines, each naming the run's step and commit, with town accuracy on the ledgers."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from default_results import main

    out = tmp_path / "default"
    assert main(["--out", str(out), *_tiny(tmp_path, "data.synthetic_docs.test=2", "data.splits.test=test")]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    for split in ("validation", "test"):
        blind = json.loads((out / f"input_blind_{split}.json").read_text())
        assert blind["split"] == split and blind["n"] == 2 and blind["step"] == metrics["step"] == 3
        assert blind["commit"] == metrics["commit"]
        assert all("town_accuracy" in b["scores"] for b in blind["baselines"].values())
    assert sorted(p.name for p in out.iterdir()) == ["input_blind_test.json", "input_blind_validation.json",
                                                     "metrics.json"], "nothing half-written beside them"
