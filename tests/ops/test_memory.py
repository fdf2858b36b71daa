"""The training memory model (scaleformer.ops.memory): each term by hand, on a shape with round numbers."""

from __future__ import annotations

import pytest

from scaleformer.ops.memory import MARGIN, Shape, layer_bytes, training_bytes

SHAPE = Shape(params=1000, d_model=10, heads=2, encoder_layers=3, decoder_layers=2, vocab=100, act_bytes=2,
              fused_attention=True)


def test_a_layer_keeps_34_bytes_per_token_and_dimension_at_16_bits_and_the_scores_only_unfused():
    assert layer_bytes(100, 50, SHAPE) == 100 * 34 * 10
    eager = Shape(**{**SHAPE.__dict__, "fused_attention": False})
    assert layer_bytes(100, 50, eager) == 100 * (34 * 10 + 5 * 2 * 50)
    fp32 = Shape(**{**SHAPE.__dict__, "act_bytes": 4})
    assert layer_bytes(100, 50, fp32) == 2 * layer_bytes(100, 50, SHAPE)


def test_a_step_sums_state_encoder_decoder_and_logits_and_checkpointing_keeps_one_micro_batch():
    rows, width, kept, targets = 8, 50, 120, 20
    state, logits = 16 * 1000, 2 * 20 * 100 * 4
    encoder = 3 * layer_bytes(rows * width, width, SHAPE)
    decoder = 2 * (layer_bytes(targets, targets, SHAPE) + 2 * kept * 10 * 2)
    plain = training_bytes(SHAPE, rows, width, kept, targets, checkpoint=False, micro_rows=2)
    assert plain == pytest.approx(MARGIN * (state + encoder + decoder + logits))
    ckpt = training_bytes(SHAPE, rows, width, kept, targets, checkpoint=True, micro_rows=2)
    one = 3 * layer_bytes(2 * width, width, SHAPE) + kept * 10 * 2
    assert ckpt == pytest.approx(MARGIN * (state + one + decoder + logits)) and ckpt < plain
