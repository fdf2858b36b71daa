"""SLED and ScaleFormer on real tiny encoders against a plain reference: every chunk encoded on its own
(one unpadded encoder call per chunk of the hand-checked plan in tests/chunk_reference.py), the kept
positions read by hand, and the fusion as the term-by-term loop of eqs. 2-5 (``fusion_loop``, also in
tests/chunk_reference.py). Also: the middle tokens drawn at evaluation overlap between neighbouring
chunks as much as training's draws."""

from __future__ import annotations

import pytest
import torch
from chunk_reference import chunk_spans, fusion_loop, windows
from transformers import BartConfig, BartModel, T5Config, T5EncoderModel

from scaleformer.methods import build_method, method_config
from scaleformer.model.spec import BackboneSpec

W = 64
SPECS = {
    "bart": BackboneSpec(max_positions=W, pad_id=1, prefix_ids=(0,), suffix_ids=(2,), d_model=16),
    "t5": BackboneSpec(max_positions=W, pad_id=0, prefix_ids=(), suffix_ids=(1,), d_model=16),
}
LENGTHS = [5, 16, 17, 45, 120]  # one short chunk, exactly one chunk, two, several (ragged batch)


def encoder(arch: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if arch == "bart":
        conf = BartConfig(vocab_size=100, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
                          decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                          max_position_embeddings=W, pad_token_id=1)
        return BartModel(conf).get_encoder().eval()
    conf = T5Config(vocab_size=100, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_heads=2, pad_token_id=0)
    return T5EncoderModel(conf).get_encoder().eval()


def documents(arch: str) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    """Right-padded random documents wrapped in the backbone's specials, and each as a list."""
    spec = SPECS[arch]
    g = torch.Generator().manual_seed(3)
    docs = [[*spec.prefix_ids, *torch.randint(3, 100, (n - len(spec.prefix_ids) - len(spec.suffix_ids),),
                                               generator=g).tolist(), *spec.suffix_ids] for n in LENGTHS]
    ids = torch.full((len(docs), max(LENGTHS)), spec.pad_id)
    for b, d in enumerate(docs):
        ids[b, :len(d)] = torch.tensor(d)
    return ids, (ids != spec.pad_id).long(), docs


def encode_alone(enc: torch.nn.Module, tokens: list[int]) -> torch.Tensor:
    """One chunk through the encoder by itself, no padding: [len, d]."""
    with torch.no_grad():
        return enc(input_ids=torch.tensor([tokens])).last_hidden_state[0]


def make(arch: str, name: str, **kw):
    return build_method(method_config({"name": name, "chunk_size": 16, "overlap": 5, "encoder_batch_size": 3,
                                       **kw}), SPECS[arch])


@pytest.mark.parametrize("arch", ["bart", "t5"])
@pytest.mark.parametrize("k,alpha", [(1, 0.5), (2, 0.3)])
def test_scaleformer_equals_chunks_encoded_one_by_one_and_fused_term_by_term(arch, k, alpha):
    enc = encoder(arch)
    ids, mask, docs = documents(arch)
    with torch.no_grad():
        got = make(arch, "scaleformer", boundary_tokens=k, alpha=alpha).encode(enc, ids, mask, training=False)
    for b, doc in enumerate(docs):
        hs = [encode_alone(enc, doc[s:e]) for s, e in chunk_spans(len(doc), 16, 5)]  # H_i, eq. 1
        left = torch.stack([h[:k] for h in hs])[None]  # [1, C, k, d] L_i: first k positions
        right = torch.stack([h[-k:] for h in hs])[None]  # R_i: last k positions
        lf, rf = fusion_loop(left, right, alpha, [len(hs)])  # eqs. 2-5, float64
        want = torch.cat([torch.cat([lf[0, i], rf[0, i]]) for i in range(len(hs))]).float()  # eq. 6, m = 0
        n = int(got.mask[b].sum())
        assert n == 2 * k * len(hs)
        torch.testing.assert_close(got.hidden[b, :n], want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_scaleformer_middles_are_interior_states_of_their_chunk_in_document_order(arch):
    k, m = 1, 4
    enc = encoder(arch)
    ids, mask, docs = documents(arch)
    specials = set(SPECS[arch].prefix_ids) | set(SPECS[arch].suffix_ids)
    with torch.no_grad():
        got = make(arch, "scaleformer", boundary_tokens=k, alpha=1.0, middle_tokens=m).encode(
            enc, ids, mask, training=False)
    for b, doc in enumerate(docs):
        cursor = 0
        for s, e in chunk_spans(len(doc), 16, 5):
            h = encode_alone(enc, doc[s:e])
            interior = [p for p in range(k, len(h) - k) if doc[s + p] not in specials]
            take = min(m, len(interior))
            out = got.hidden[b, cursor:cursor + 2 * k + take]
            torch.testing.assert_close(out[:k], h[:k], atol=2e-5, rtol=1e-4)  # alpha = 1: no fusion
            torch.testing.assert_close(out[-k:], h[-k:], atol=2e-5, rtol=1e-4)
            dist = torch.cdist(out[k:k + take], h[interior])  # [take, |interior|]
            picked = [interior[i] for i in dist.argmin(1).tolist()]
            assert dist.min(1).values.max() < 1e-4, "every middle state is one of the chunk's interior states"
            assert picked == sorted(set(picked)), "distinct, in document order"
            cursor += 2 * k + take
        assert cursor == int(got.mask[b].sum())


@pytest.mark.parametrize("arch", ["bart", "t5"])
@pytest.mark.parametrize("rule", ["sled", "centre"])
def test_sled_equals_chunks_encoded_one_by_one(arch, rule):
    enc = encoder(arch)
    ids, mask, docs = documents(arch)
    with torch.no_grad():
        got = make(arch, "sled", keep_rule=rule).encode(enc, ids, mask, training=False)
    for b, doc in enumerate(docs):
        want = torch.cat([encode_alone(enc, doc[s:e])[a:z] for s, e, a, z in windows(len(doc), 16, 5, rule)])
        assert int(got.mask[b].sum()) == len(doc) == want.shape[0]
        torch.testing.assert_close(got.hidden[b, :len(doc)], want, atol=2e-5, rtol=1e-4)


def _shared_middles(method, n: int, training: bool) -> list[int]:
    """Middle positions shared by each pair of consecutive chunks of one n-token document."""
    lay = method.layout(torch.tensor([n]))
    pos, valid = method.select(lay, training)  # [R, 2k + m] row positions
    k = method.cfg.boundary_tokens
    t = lay.table
    mids = [{int(t.start[r]) + p for p, ok in zip(pos[r, k:-k].tolist(), valid[r, k:-k].tolist()) if ok}
            for r in range(t.rows)]  # document positions (no prefix, raw slices)
    return [len(a & b) for a, b in zip(mids, mids[1:])]


def test_eval_middle_tokens_overlap_between_chunks_as_much_as_trainings():
    """16k tokens, L=1024, O=150, m=300: ~148 interior positions shared by neighbours, each drawn with
    probability 300/1022 by both, so ~12.7 shared positions per pair when the draws are independent."""
    spec = BackboneSpec(max_positions=1024, pad_id=1, prefix_ids=(0,), suffix_ids=(2,), d_model=16)
    n = 16_384

    def method(seed: int):
        return build_method(method_config({"name": "scaleformer", "middle_tokens": 300, "middle_seed": seed}), spec)

    evals = [c for seed in range(10) for c in _shared_middles(method(seed), n, training=False)]
    torch.manual_seed(0)
    trains = [c for _ in range(10) for c in _shared_middles(method(0), n, training=True)]
    assert len(evals) == len(trains) == 10 * 18
    mean_eval, mean_train = sum(evals) / len(evals), sum(trains) / len(trains)
    # Standard error of each mean ~0.25 (per-pair sd ~3.4 over 180 pairs): 1.5 is ~4 standard errors.
    assert abs(mean_eval - mean_train) < 1.5, (mean_eval, mean_train)
    assert 11.0 < mean_eval < 17.0  # independent draws (a position-only hash gave ~48)
    assert _shared_middles(method(3), n, training=False) == _shared_middles(method(3), n, training=False)
