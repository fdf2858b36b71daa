"""The SCROLLS query tasks end to end: rows in SCROLLS' own format, the query split off as the prefix,
trained and scored through SLED and ScaleFormer + Middle with the task's own metric; offline, the hub
path stops at once with one line naming the data set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, compose

from scaleformer.runs.run import run

QUERIES = {
    "qmsum": ("Summarize the discussion about the remote control.", "The team chose a round remote."),
    "qasper": ("Which dataset do they use?", "SQuAD"),
    "narrative_qa": ("Who is the captain of the ship?", "Ahab"),
    "quality": ("Why does the narrator leave?\n\n (A) fear\n (B) money\n (C) love\n (D) duty", "love"),
    "contract_nli": ("The receiving party may share information with employees.", "Entailment"),
}
METRIC = {"qmsum": "rouge", "qasper": "f1", "narrative_qa": "f1", "quality": "exact_match",
          "contract_nli": "exact_match"}


def scrolls_rows(task: str, split: str, n: int) -> list[dict]:
    """Rows as SCROLLS publishes them: id, pid, input = query + blank line + document, output."""
    query, answer = QUERIES[task]
    doc = " ".join(f"Paragraph {i} of the {split} document talks about ships and remotes." for i in range(30))
    sep = "\n\n\n" if task == "quality" else "\n\n"
    return [{"id": f"{split}-{i}", "pid": f"{split}-{i}_0", "input": f"{query}{sep}{doc} Number {i}.",
             "output": answer} for i in range(n)]


def write_task(folder: Path, task: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 3), ("validation", 2)):
        rows = scrolls_rows(task, split, n)
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.mark.parametrize("method", ["sled", "scaleformer_middle"])
@pytest.mark.parametrize("task", sorted(QUERIES))
def test_a_local_copy_in_scrolls_format_runs_with_the_query_as_prefix(tmp_path, task, method, monkeypatch):
    from scaleformer.data import SummarizationDataModule

    seen = []
    real = SummarizationDataModule.longest_prefix

    def spy(self):  # the longest query handed to the method (checked against it at start-up)
        seen.append(real(self))
        return seen[-1]

    monkeypatch.setattr(SummarizationDataModule, "longest_prefix", spy)
    data = write_task(tmp_path / task, task)
    result = run(compose([f"data={task}", "data.source=local", f"data.path={data}", "data.splits.test=null",
                          f"method={method}", "method.chunk_size=48", "method.overlap=8",
                          *(["method.middle_tokens=8"] if method == "scaleformer_middle" else []),
                          "debug=default", f"paths.root={tmp_path}/r", f"paths.cache={tmp_path}/c",
                          "data.max_eval_examples=2", "trainer.enable_progress_bar=false"]))
    scores = result["splits"]["validation"]
    assert scores["task_metric"] == METRIC[task] and scores["n_examples"] == 2
    assert isinstance(scores["task_score"], float)
    if METRIC[task] != "rouge":
        assert {"f1", "exact_match"} <= set(scores)
    assert seen and max(seen) >= 4, "the query reached the method as its prefix"


def test_the_query_is_the_head_of_truncations_input(tmp_path):
    from scaleformer.data import SummarizationDataModule
    from scaleformer.model.tokenizer import load_offline_tokenizer
    from scaleformer.runs.context import to_config

    data = write_task(tmp_path / "qasper", "qasper")
    rc = to_config(compose(["data=qasper", "data.source=local", f"data.path={data}", "data.splits.test=null",
                            f"paths.cache={tmp_path}/c"]))
    dm = SummarizationDataModule(rc.data, load_offline_tokenizer("bart"))
    dm.prepare_data()
    dm.setup()
    item = dm.datasets["validation"][0]
    tok = load_offline_tokenizer("bart")
    assert tok.decode(item["prefix_ids"], skip_special_tokens=True).strip() == QUERIES["qasper"][0]
    assert tok.decode(item["input_ids"], skip_special_tokens=True).lstrip().startswith("Paragraph 0")


@pytest.mark.parametrize("task", sorted(QUERIES))
def test_offline_the_hub_path_stops_in_seconds_naming_the_data_set(tmp_path, task):
    out = subprocess.run([sys.executable, "train.py", f"data={task}", f"paths.root={tmp_path}/r",
                          f"paths.cache={tmp_path}/c", "metrics.bertscore.enabled=false"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 1, out.stderr[-2000:]
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith("error: cannot load data=") and f"data={task}" in line, line
    # Fast: it stops before any model is built, and leaves nothing behind (the timeout guards a hang).
    assert "Traceback" not in out.stderr and "parameters)" not in out.stdout + out.stderr
    assert not (tmp_path / "r" / "runs").exists() or not any((tmp_path / "r" / "runs").iterdir())


def test_the_submission_covers_all_seven_tasks(tmp_path):
    """Each SCROLLS data option's run is recognised as its task; all seven make one official CSV."""
    import csv

    from omegaconf import OmegaConf

    sys.path.insert(0, str(ROOT / "scripts"))
    from scrolls_submission import DATA_OPTION, SCROLLS_TASKS, main

    files = []
    for task in SCROLLS_TASKS:
        ev = tmp_path / task / "eval"
        ev.mkdir(parents=True)
        cfg = compose([f"data={DATA_OPTION[task]}"])
        (ev / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create({"data": OmegaConf.to_container(
            cfg.data, resolve=False)})))
        rows = [{"id": f"{task}-{i}", "prediction": f"answer {i}"} for i in range(2)]
        (ev / "predictions_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        files.append(str(ev / "predictions_test.jsonl"))
    assert main([*files, "--out", str(tmp_path / "sub")]) == 0
    with open(tmp_path / "sub" / "scrolls_predictions.csv", newline="") as f:
        got = list(csv.DictReader(f))
    assert {r["Task"] for r in got} == set(SCROLLS_TASKS) and len(got) == 14
    assert all(json.loads((tmp_path / "sub" / f"{t}.json").read_text()) for t in SCROLLS_TASKS)
