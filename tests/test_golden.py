"""Golden values (torchtune-style recipe tests): fixed runs and encodings whose numbers are pinned.

Each run case fine-tunes a shipped reader for a few steps on the bundled synthetic set with a fixed
seed and compares the per-step training losses and the validation predictions against
``tests/golden/runs.json``; each encoding case pins what a method hands the decoder on one fixed
3,000-word document. A refactor that changes what the framework computes fails here loudly.

A golden must fail on a change of the computation, never on the CPU it runs on. Two things moved the
last bits across x86 kernels (``ATEN_CPU_CAPABILITY`` default / avx2 / avx512): a random
initialisation (torch's vectorised normal sampler draws other float32 weights per kernel, ~4e-8
apart) and float32 arithmetic (~1e-7 relative on a loss, above float32's own epsilon). So the goldens
start from the shipped readers' weights (fixed bytes) and compute in float64. Measured spread across
the default and avx2 kernels and 1 or 2 threads, relative: at most 3.0e-14 on an encoding value,
2.5e-15 on a BART run's loss, 3.3e-9 on a T5 run's (transformers' T5 layer norm takes its variance in
float32). The tolerances sit a few hundred times above that; each one-setting change of a method in
``MUTATIONS`` moves a pinned value by 8.8e-7 or more, and :func:`test_each_golden_catches_a_mutation`
shows the comparison fails on it. CI runs the goldens under both kernels (``make test-kernels``).

When a change is *meant* to move the numbers (a method made more faithful, a new default), rerun
with ``SCALEFORMER_UPDATE_GOLDEN=1`` and say in the commit message why the values moved.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import compose

from scaleformer.methods import REGISTRY
from scaleformer.runs.run import run

GOLDEN = Path(__file__).parent / "golden" / "runs.json"
UPDATE = os.environ.get("SCALEFORMER_UPDATE_GOLDEN") == "1"
STEPS = 6
# Relative tolerance of a run's losses per backbone: BART's runs are float64 throughout (measured spread
# 2.5e-15); transformers' T5 layer norm takes its variance in float32, whose rounding training amplifies
# (measured spread 3.3e-9). Both are far below what a one-setting change moves (1e-6 and more).
RUN_LOSS_REL = {"tiny_bart_reader": 1e-11, "tiny_t5_reader": 1e-6}
ENCODE_REL = 1e-11  # 330 x the measured cross-kernel spread of an encoding value (3.0e-14)

CASES = {
    "tiny_bart_reader-scaleformer_middle": ["backbone=tiny_bart_reader", "method=scaleformer_middle"],
    "tiny_bart_reader-truncation": ["backbone=tiny_bart_reader", "method=truncation"],
    "tiny_bart_reader-unlimiformer": ["backbone=tiny_bart_reader", "method=unlimiformer"],
    "tiny_t5_reader-sled": ["backbone=tiny_t5_reader", "method=sled"],
}

# Methods whose encoder side is pinned: what the decoder sees (shape, sums) and the teacher-forced
# loss. Input-sensitive, unlike the predictions of a few-step run of a weak model.
# Every registered method is pinned (a method added to the registry needs its golden and its mutation).
ENCODE_CASES = [("tiny_bart_reader", m) for m in (*sorted(REGISTRY), "scaleformer_middle")] + [
    ("tiny_t5_reader", "scaleformer_middle"), ("tiny_t5_reader", "unlimiformer")]

# One small change per case that a refactor could make by accident; each golden must catch its own.
# Retrieval mutations (k) move the loss alone: they show the loss check has teeth.
MUTATIONS = {
    "tiny_bart_reader-scaleformer_middle": ["method.alpha=0.49"],
    "tiny_bart_reader-truncation": ["method.max_tokens=1023"],
    "tiny_bart_reader-unlimiformer": ["method.k=64"],  # trains as truncation: retrieval shows in the text
    "tiny_t5_reader-sled": ["method.overlap=148"],
    "encode:tiny_bart_reader-truncation": ["method.max_tokens=1023"],
    "encode:tiny_bart_reader-sled": ["method.keep_rule=centre"],
    "encode:tiny_bart_reader-scaleformer": ["method.alpha=0.49"],
    "encode:tiny_bart_reader-scaleformer_middle": ["method.middle_seed=1"],
    "encode:tiny_bart_reader-unlimiformer": ["method.k=1023"],
    "encode:tiny_bart_reader-memorizing": ["method.k=31"],
    "encode:tiny_bart_reader-masformer": ["method.block_size=1000"],
    "encode:tiny_bart_reader-block_attention": ["method.block_size=1000"],
    "encode:tiny_bart_reader-sliding_window": ["method.window=500"],
    "encode:tiny_bart_reader-full_attention": ["method.max_length=2000"],
    "encode:tiny_t5_reader-scaleformer_middle": ["method.alpha=0.49"],
    "encode:tiny_t5_reader-unlimiformer": ["method.k=1023"],
}


def _overrides(tmp_path: Path, case: list[str]) -> list[str]:
    return [
        *case,
        "optim=tiny_finetune",
        "trainer.precision=64-true",
        f"paths.root={tmp_path}/results",
        f"paths.cache={tmp_path}/cache",
        "seed=7",
        "data.synthetic_docs.train=4",
        "data.synthetic_docs.validation=2",
        "data.synthetic_docs.test=0",
        "data.synthetic_words=1500",
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


def _observe(tmp_path: Path, case: list[str]) -> dict[str, Any]:
    result = run(compose(_overrides(tmp_path, case)))
    out = next((tmp_path / "results").rglob("predictions_validation.jsonl"))
    preds = [json.loads(line) for line in out.read_text().splitlines()]
    return {
        "losses": _losses(tmp_path),
        "predictions": {p["id"]: p["prediction"] for p in preds},
        "rouge1": result["splits"]["validation"]["rouge1"],
    }


def _run_mismatches(name: str, want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    bad = []
    if got["losses"] != pytest.approx(want["losses"], rel=RUN_LOSS_REL[name.split("-")[0]], abs=0):
        bad.append(f"losses {got['losses']} != {want['losses']}")
    if got["predictions"] != want["predictions"]:
        bad.append("predictions differ")
    if got["rouge1"] != pytest.approx(want["rouge1"], abs=1e-9):
        bad.append(f"rouge1 {got['rouge1']} != {want['rouge1']}")
    return bad


def _encode_observation(backbone: str, method_name: str, extra: list[str] | None = None) -> dict[str, Any]:
    import torch

    from scaleformer.data.synthetic import split_rows
    from scaleformer.model.backbone import build_model, prepare
    from scaleformer.runs.context import to_config
    from scaleformer.runs.module import SummarizationModule

    rc = to_config(compose([f"backbone={backbone}", f"method={method_name}", "seed=7", *(extra or [])]))
    ready = prepare(rc.backbone, rc.method)
    tok = ready.tokenizer
    torch.manual_seed(0)
    module = SummarizationModule(build_model(rc.backbone, ready.conf), ready.method, tok, rc.optim, rc.generation)
    module = module.eval().to(torch.float64)
    row = split_rows("golden", 1, 3000, seed=11)[0]
    ids = torch.tensor([tok(row["input"])["input_ids"]])
    labels = torch.tensor([tok(row["output"])["input_ids"]])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    with torch.no_grad():
        enc = module.encode(batch, training=False)
        loss = module(batch)
    assert enc.hidden.dtype == loss.dtype == torch.float64, "the golden path must stay in float64"
    h = enc.hidden
    return {"input_tokens": ids.shape[1], "shape": list(h.shape), "mask_sum": int(enc.mask.sum()),
            "sum": float(h.sum()), "abs_sum": float(h.abs().sum()), "loss": float(loss)}


def _encode_mismatches(want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    bad = [f"{k} {got[k]} != {want[k]}" for k in ("input_tokens", "shape", "mask_sum") if got[k] != want[k]]
    bad += [f"{k} {got[k]!r} != {want[k]!r}" for k in ("sum", "abs_sum", "loss")
            if got[k] != pytest.approx(want[k], rel=ENCODE_REL, abs=0)]
    return bad


def _write(name: str, value: dict[str, Any]) -> None:
    table = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    table[name] = value
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(table, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def _want(name: str) -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())[name]


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_run(tmp_path, name):
    got = _observe(tmp_path, CASES[name])
    assert len(got["losses"]) == STEPS, "one logged loss per training step"
    if UPDATE:
        _write(name, got)
        pytest.skip("golden values written")
    assert not _run_mismatches(name, _want(name), got)


@pytest.mark.parametrize(("backbone", "method"), ENCODE_CASES)
def test_golden_encoding(backbone, method):
    name = f"encode:{backbone}-{method}"
    got = _encode_observation(backbone, method)
    if UPDATE:
        _write(name, got)
        pytest.skip("golden values written")
    assert not _encode_mismatches(_want(name), got)


def test_every_golden_has_a_mutation():
    assert set(MUTATIONS) == set(CASES) | {f"encode:{b}-{m}" for b, m in ENCODE_CASES}
    assert set(json.loads(GOLDEN.read_text())) == set(MUTATIONS), "golden file holds exactly the cases"


@pytest.mark.skipif(UPDATE, reason="the goldens are being rewritten")
@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_golden_catches_a_mutation(tmp_path, name):
    """The same comparison the golden test makes fails on a one-setting change of the method."""
    if name.startswith("encode:"):
        backbone, method = name.removeprefix("encode:").split("-", 1)
        bad = _encode_mismatches(_want(name), _encode_observation(backbone, method, MUTATIONS[name]))
    else:
        bad = _run_mismatches(name, _want(name), _observe(tmp_path, [*CASES[name], *MUTATIONS[name]]))
    assert bad, f"{name}: {MUTATIONS[name]} changed nothing the golden pins"
