"""Golden regression runs (torchtune-style recipe tests): fixed tiny runs whose numbers are pinned.

Each case trains a tiny backbone for a few steps on the bundled synthetic set with a fixed seed and
compares the per-step training losses and the validation predictions against
``tests/golden/runs.json``. A refactor that changes what the framework computes fails here loudly.

When a change is *meant* to move the numbers (a method made more faithful, a new default), rerun
with ``SCALEFORMER_UPDATE_GOLDEN=1`` and say in the commit message why the values moved.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
from conftest import compose

from scaleformer.runs.run import run

GOLDEN = Path(__file__).parent / "golden" / "runs.json"
UPDATE = os.environ.get("SCALEFORMER_UPDATE_GOLDEN") == "1"
STEPS = 6

CASES = {
    "tiny_bart-scaleformer_middle": ["backbone=tiny_bart", "method=scaleformer_middle"],
    "tiny_bart-truncation": ["backbone=tiny_bart", "method=truncation"],
    "tiny_bart-unlimiformer": ["backbone=tiny_bart", "method=unlimiformer"],
    "tiny_t5-sled": ["backbone=tiny_t5", "method=sled"],
}


def _overrides(tmp_path: Path, case: list[str]) -> list[str]:
    return [
        *case,
        f"paths.root={tmp_path}/results",
        f"paths.cache={tmp_path}/cache",
        "seed=7",
        "data.synthetic_docs.train=4",
        "data.synthetic_docs.validation=2",
        "data.synthetic_docs.test=0",
        f"trainer.max_steps={STEPS}",
        "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false",
        "~callbacks.checkpoint",
        "trainer.eval_splits=[validation]",
        "generation.num_beams=2",
        "generation.max_new_tokens=24",
        "metrics.bertscore.enabled=false",
    ]


def _losses(tmp_path: Path) -> list[float]:
    rows = list(csv.DictReader(next(tmp_path.rglob("metrics.csv")).open()))
    return [float(r["train/loss"]) for r in rows if r.get("train/loss")]


def _observe(tmp_path: Path, case: list[str]) -> dict:
    result = run(compose(_overrides(tmp_path, case)))
    out = next((tmp_path / "results").rglob("predictions_validation.jsonl"))
    preds = [json.loads(line) for line in out.read_text().splitlines()]
    return {
        "losses": _losses(tmp_path),
        "predictions": {p["id"]: p["prediction"] for p in preds},
        "rouge1": result["splits"]["validation"]["rouge1"],
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_run(tmp_path, name):
    got = _observe(tmp_path, CASES[name])
    assert len(got["losses"]) == STEPS, "one logged loss per training step"
    if UPDATE:
        table = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        table[name] = got
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(table, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        pytest.skip("golden values written")
    want = json.loads(GOLDEN.read_text())[name]
    assert got["losses"] == pytest.approx(want["losses"], rel=1e-4, abs=1e-5)
    assert got["predictions"] == want["predictions"]
    assert got["rouge1"] == pytest.approx(want["rouge1"], abs=1e-6)


# Methods whose encoder side is pinned: what the decoder sees (shape, sums) and the teacher-forced
# loss of a seeded random model on one fixed 3,000-word document. Input-sensitive, unlike the
# predictions of a few-step run (which a random model writes whatever the document).
ENCODE_CASES = [("tiny_bart", m) for m in ("truncation", "sled", "scaleformer", "scaleformer_middle",
                                          "unlimiformer", "memorizing", "masformer")] + [
    ("tiny_t5", "scaleformer_middle"), ("tiny_t5", "unlimiformer")]


def _encode_observation(backbone: str, method_name: str) -> dict:
    import torch

    from scaleformer.data.synthetic import split_rows
    from scaleformer.methods import build_method
    from scaleformer.model.backbone import backbone_spec, build_model, load_tokenizer, model_config
    from scaleformer.runs.context import to_config
    from scaleformer.runs.module import SummarizationModule

    rc = to_config(compose([f"backbone={backbone}", f"method={method_name}", "seed=7"]))
    tok = load_tokenizer(rc.backbone)
    conf = model_config(rc.backbone, tok)
    method = build_method(rc.method, backbone_spec(rc.backbone, tok, conf))
    torch.manual_seed(0)
    module = SummarizationModule(build_model(rc.backbone, conf), method, tok, rc.optim, rc.generation).eval()
    row = split_rows("golden", 1, 3000, seed=11)[0]
    ids = torch.tensor([tok(row["input"])["input_ids"]])
    labels = torch.tensor([tok(row["output"])["input_ids"]])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    with torch.no_grad():
        enc = module.encode(batch, training=False)
        loss = module(batch)
    h = enc.hidden.double()
    return {"input_tokens": ids.shape[1], "shape": list(enc.hidden.shape), "mask_sum": int(enc.mask.sum()),
            "sum": float(h.sum()), "abs_sum": float(h.abs().sum()), "loss": float(loss)}


@pytest.mark.parametrize(("backbone", "method"), ENCODE_CASES)
def test_golden_encoding(backbone, method):
    name = f"encode:{backbone}-{method}"
    got = _encode_observation(backbone, method)
    if UPDATE:
        table = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        table[name] = got
        GOLDEN.write_text(json.dumps(table, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        pytest.skip("golden values written")
    want = json.loads(GOLDEN.read_text())[name]
    assert (got["input_tokens"], got["shape"], got["mask_sum"]) == (want["input_tokens"], want["shape"],
                                                                     want["mask_sum"])
    for key in ("sum", "abs_sum"):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-4), key
    # Methods' losses differ from one another by ~1e-5 on a random model: pin tighter than that.
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-7, abs=0), "loss"
