"""The step-overhead benchmark's bookkeeping (scaleformer.bench.step): which variants it sets against each
other, how it pairs their rows and what its table says; the measurement itself is `make bench-step`."""

from __future__ import annotations

import pytest

from scaleformer.bench import step


def _row(method: str, variant: str, tokens: int, step_s: float, overhead_s: float, ops: int) -> dict:
    return {"method": method, "variant": variant, "tokens": tokens, "timed": 10, "step_s": step_s, "step_iqr_s": 0.01,
            "bare_s": step_s - overhead_s, "bare_iqr_s": 0.01, "overhead_s": overhead_s, "overhead_iqr_s": 0.001,
            "overhead_share": overhead_s / step_s, "phases": dict.fromkeys(
                ("data", "forward", "backward", "optimizer", "other"), 0.001), "ops_per_step": ops, "bare_ops": ops // 2}


def test_two_variants_pair_at_each_length_old_first():
    rows = [_row("sled", "after", 4630, 0.9, 0.02, 5556), _row("sled", "after", 578, 0.1, 0.012, 5566),
            _row("sled", "compiled", 4640, 0.8, 0.01, 3777), _row("sled", "compiled", 580, 0.09, 0.006, 3790)]
    pairs = step.compare(rows, "after", "compiled")
    assert [(c["tokens"], c["ops_before"], c["ops_after"]) for c in pairs] == [(4640, 5556, 3777), (580, 5566, 3790)]
    assert pairs[0]["fell_x"] == pytest.approx(2.0) and all(c["variants"] == ["after", "compiled"] for c in pairs)
    assert step.compare(rows) == []  # no "before" rows: nothing to set against "after"
    doc = {"backbone": "tiny_bart_reader", "data": "synthetic", "torch_threads": 1, "machine": "cpu", "when": "today",
           "variants": ["after", "compiled"], "rows": rows, "comparison": pairs}
    text = step.render(doc)
    assert "After and compiled, in the same run:" in text and "| sled | 4,640 | 20.0 -> 10.0 |" in text
    assert "ops/step after -> compiled" in text and "| 5,556 -> 3,777 |" in text


def test_the_compiled_variant_compiles_every_layer_with_the_backend_asked_for():
    assert step.variant_overrides("sled", "after") == []
    assert step.variant_overrides("sled", "compiled", "aot_eager") == [
        "++backbone.compile_encoder=aot_eager", "++backbone.compile_decoder=aot_eager",
        "++trainer.cost_warmup=4", "trainer.max_steps=56"]  # the compile, the recompile, then the probes
    assert "++optim.fused=false" in step.variant_overrides("truncation", "before")


@pytest.mark.parametrize(("argv", "named"), [(["--variants", "after"], "--variants=after"),
                                             (["--variants", "after,fast"], "--variants=after,fast"),
                                             (["--name", "../step"], "--name=../step")])
def test_a_bad_choice_is_one_line_before_anything_runs(argv, named, capsys):
    assert step.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {named}: ") and err.count("\n") == 1
