"""The encoder's last layer at kept positions only (scaleformer.ops.kept_layer) against the full encoder.

Reference: the stock encoder's forward at every position, then the same positions gathered. Equal
within 1e-5 in fp32 for BART and T5, ragged rows, row subsets, query prefixes and ScaleFormer with
and without middle tokens; in training with dropout the full layer runs (same random stream).
"""

from __future__ import annotations

import pytest
import torch
from transformers import BartConfig, BartForConditionalGeneration, T5Config, T5ForConditionalGeneration

from scaleformer.methods import build_method, method_config
from scaleformer.model.spec import BackboneSpec
from scaleformer.ops import kept_layer
from scaleformer.ops.kept_layer import deterministic, encode_at, full_then_gather

pytestmark = pytest.mark.compat  # run on other transformers releases by `make test-compat`

BART = BackboneSpec(max_positions=128, pad_id=1, prefix_ids=(0,), suffix_ids=(2,), d_model=32, n_encoder_layers=2)
T5 = BackboneSpec(max_positions=128, pad_id=0, prefix_ids=(), suffix_ids=(1,), d_model=32, n_encoder_layers=2)


def tiny(arch: str, layers: int = 2, dropout: float = 0.0, layerdrop: float = 0.0):
    torch.manual_seed(0)
    if arch == "bart":
        cfg = BartConfig(vocab_size=120, d_model=32, encoder_layers=layers, decoder_layers=1, encoder_attention_heads=4,
                         decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
                         init_std=0.05, dropout=dropout, attention_dropout=0.0, activation_dropout=dropout,
                         encoder_layerdrop=layerdrop, attn_implementation="sdpa")
        return BartForConditionalGeneration(cfg), BART
    cfg = T5Config(vocab_size=120, d_model=32, d_kv=8, d_ff=64, num_layers=layers, num_decoder_layers=1, num_heads=4,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                   dropout_rate=dropout, attn_implementation="sdpa")
    return T5ForConditionalGeneration(cfg), T5


def rows(lengths: list[int], pad: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths)), pad)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(3, 120, (n,), generator=g)
    return ids, (ids != pad).long()


def positions(lengths: list[int], g: int, seed: int = 1) -> torch.Tensor:
    """``[len(lengths), g]`` ascending real positions of each row (repeats allowed in short rows)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, n, (g,), generator=gen).sort().values for n in lengths])


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_encode_at_equals_the_full_encoder(arch, layers):
    model, spec = tiny(arch, layers)
    enc = model.get_encoder().eval()
    lengths = [40, 17, 33, 5]
    ids, mask = rows(lengths, spec.pad_id)
    sub = torch.tensor([1, 3])
    picks = [(None, positions(lengths, 6)), (sub, positions([lengths[1], lengths[3]], 3, seed=2))]
    seen = []
    kept_layer.OBSERVERS.append(lambda *a: seen.append(a))
    try:
        with torch.no_grad():
            got = encode_at(enc, ids, mask, picks)
            want = full_then_gather(enc, ids, mask, picks)
    finally:
        kept_layer.OBSERVERS.clear()
    assert seen == [(4, 40, 6), (2, 40, 3)]  # (rows, width, kept) per row group
    for a, b in zip(got, want):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("prefix", [False, True])
@pytest.mark.parametrize("middle", [0, 8])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_scaleformer_switch_gives_the_same_states(arch, middle, prefix):
    model, spec = tiny(arch)
    model.eval()
    kw = dict(chunk_size=40, overlap=10, middle_tokens=middle, encoder_batch_size=3)
    lengths = [300, 95, 12]
    ids, mask = rows(lengths, spec.pad_id)
    pkw = {}
    if prefix:
        p = torch.tensor([[5, 6, 7], [8, spec.pad_id, spec.pad_id], [9, 9, spec.pad_id]])
        pkw = {"prefix_ids": p, "prefix_mask": (p != spec.pad_id).long()}
    outs = []
    for on in (True, False):
        m = build_method(method_config({"name": "scaleformer", "kept_only_last_layer": on, **kw}), spec)
        with torch.no_grad():
            outs.append(m.encode(model.get_encoder(), ids, mask, training=False, **pkw))
    assert torch.equal(outs[0].mask, outs[1].mask)
    torch.testing.assert_close(outs[0].hidden, outs[1].hidden, atol=1e-5, rtol=0)


def test_training_with_dropout_runs_the_full_layer():
    """Dropout masks drawn for kept positions only would change the random stream: the full layer runs."""
    model, spec = tiny("bart", dropout=0.1)
    enc = model.get_encoder().train()
    assert not deterministic(enc)
    ids, mask = rows([30, 22], spec.pad_id)
    picks = [(None, positions([30, 22], 4))]
    torch.manual_seed(3)
    got = encode_at(enc, ids, mask, picks)[0]
    after = torch.rand(1)
    torch.manual_seed(3)
    want = full_then_gather(enc, ids, mask, picks)[0]
    assert torch.equal(got, want) and torch.equal(after, torch.rand(1))
    assert not deterministic(tiny("bart", layerdrop=0.5)[0].get_encoder().train())
    assert deterministic(enc.eval()) and deterministic(tiny("t5")[0].get_encoder().train())


@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_training_without_dropout_gives_the_same_gradients(arch):
    grads = []
    lengths = [36, 20]
    for fn in (encode_at, full_then_gather):
        model, spec = tiny(arch)
        enc = model.get_encoder().train()
        ids, mask = rows(lengths, spec.pad_id)
        out = fn(enc, ids, mask, [(None, positions(lengths, 5))])[0]  # [2, 5, d]
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        grads.append({n: p.grad.clone() for n, p in enc.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_checkpointed_micro_batches_recompute_the_kept_path(arch):
    """checkpoint_chunks with the last layer at kept positions (training without dropout): same gradients, at
    the same batching (one_pass_training off: one pass sums in another order, to rounding)."""
    grads = []
    for ckpt in (False, True):
        model, spec = tiny(arch)
        model.train()
        m = build_method(method_config({"name": "scaleformer", "chunk_size": 40, "overlap": 10, "middle_tokens": 6,
                                        "encoder_batch_size": 2, "one_pass_training": False,
                                        "checkpoint_chunks": ckpt}), spec)
        ids, mask = rows([150, 60], spec.pad_id)
        seen: list = []
        kept_layer.OBSERVERS.append(lambda *a, seen=seen: seen.append(a))
        try:
            enc = m.encode(model.get_encoder(), ids, mask, training=True)
        finally:
            kept_layer.OBSERVERS.clear()
        assert seen, "the kept path ran"
        (enc.hidden * torch.linspace(-1, 1, enc.hidden.shape[-1])).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.get_encoder().named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-6, rtol=1e-5, msg=name)
