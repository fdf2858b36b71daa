"""SLED and ScaleFormer end to end: token bookkeeping with a transparent stub encoder against the
plain reference chunk plan (tests/chunk_reference.py), then tiny random BART/T5 through training loss,
backward and beam search; config errors; a 2M-token document."""

from __future__ import annotations

import resource
import time

import pytest
import torch
from chunk_reference import chunk_spans, windows
from conftest import CONF, compose
from omegaconf import OmegaConf
from transformers import BartConfig, BartForConditionalGeneration, T5Config, T5ForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

from scaleformer.errors import ConfigError
from scaleformer.methods import build_method, method_config
from scaleformer.model.spec import BackboneSpec
from scaleformer.ops.fusion import span_cumulation
from scaleformer.ops.measure import MemoryProbe

BART = BackboneSpec(max_positions=1024, pad_id=1, prefix_ids=(0,), suffix_ids=(2,), d_model=16)
T5 = BackboneSpec(max_positions=1024, pad_id=0, prefix_ids=(), suffix_ids=(1,), d_model=16)
BASE = 1000  # stub documents: content token at document position p has id BASE + p


def make(name: str, spec: BackboneSpec = BART, **kw):
    return build_method(method_config({"name": name, **kw}), spec)


def batch(lengths, spec: BackboneSpec = BART, vocab: int | None = None, seed: int = 0):
    """Right-padded documents with the backbone's specials; ids BASE + position (or random < vocab)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths)), spec.pad_id)
    for b, n in enumerate(lengths):
        doc = BASE + torch.arange(n) if vocab is None else torch.randint(3, vocab, (n,), generator=g)
        head, tail = list(spec.prefix_ids)[:n], list(spec.suffix_ids)[: max(0, n - len(spec.prefix_ids))]
        doc[: len(head)] = torch.tensor(head, dtype=torch.long)
        if tail:
            doc[n - len(tail):] = torch.tensor(tail, dtype=torch.long)
        ids[b, :n] = doc
    return ids, (ids != spec.pad_id).long()


class Stub(torch.nn.Module):
    """Identity-like encoder: hidden = (token id, row position, row length, is real) * scale."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(1.0))

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(input_ids.shape[1]).expand_as(input_ids)
        row_len = attention_mask.sum(1, keepdim=True).expand_as(input_ids)
        h = torch.stack([input_ids, pos, row_len, attention_mask], -1).float() * self.scale
        return BaseModelOutput(last_hidden_state=h)


def tokens(enc, b):
    """Token ids a document passes to the decoder (stub encoder)."""
    return enc.hidden[b, enc.mask[b].bool(), 0].round().long().tolist()


def chunk_rows(doc: list[int], size: int, overlap: int, spec: BackboneSpec, wrap: bool) -> list[list[int]]:
    """The token ids of each chunk row of one document (after any query prefix)."""
    if not wrap:
        return [doc[s:e] for s, e in chunk_spans(len(doc), size, overlap)]
    nh, nt = len(spec.prefix_ids), len(spec.suffix_ids)
    content = doc[nh:len(doc) - nt] if len(doc) > nh + nt else []
    spans = chunk_spans(len(content), size - nh - nt, overlap) or [(0, 0)]
    return [list(spec.prefix_ids) + content[s:e] + list(spec.suffix_ids) for s, e in spans]


# --------------------------------------------------------------------------------------------- SLED
@pytest.mark.parametrize("wrap", [False, True])
@pytest.mark.parametrize("spec", [BART, T5], ids=["bart", "t5"])
def test_sled_keeps_every_token_exactly_once(wrap, spec):
    size, overlap = 16, 6
    lengths = [1, 2, 3, 15, 16, 17, 31, 57, 200]
    m = make("sled", spec, chunk_size=size, overlap=overlap, encoder_batch_size=3, chunk_special_tokens=wrap)
    ids, mask = batch(lengths, spec)
    enc = m.encode(Stub(), ids, mask, training=False)
    assert enc.hidden.shape[:2] == enc.mask.shape and enc.mask.dtype == mask.dtype
    n_spec = len(spec.prefix_ids) + len(spec.suffix_ids)
    for b, n in enumerate(lengths):
        want = ids[b, :n].tolist()
        if wrap and n < n_spec:  # a document without its closing special: the chunk gets both
            want = list(spec.prefix_ids) + list(spec.suffix_ids)
        assert tokens(enc, b) == want
        assert m.decoder_length(n) == len(want)


@pytest.mark.parametrize("rule", ["sled", "centre"])
def test_sled_each_token_from_the_chunk_the_keep_rule_assigns(rule):
    size, overlap = 16, 7  # odd overlap
    for n in [17, 40, 41, 100, 131]:
        m = make("sled", BART, chunk_size=size, overlap=overlap, keep_rule=rule)
        ids, mask = batch([n])
        enc = m.encode(Stub(), ids, mask, training=False)
        want = [(p, p - s) for s, _, a, e in windows(n, size, overlap, rule) for p in range(s + a, s + e)]
        got = [(int(tok) - BASE, int(pos)) for tok, pos in enc.hidden[0, 1:n - 1, :2].tolist()]
        assert got == want[1:n - 1], (rule, n)  # (document position, row position) of every content token


def test_sled_method_follows_sleds_published_windows():
    """N=780, L=512, 50%: SLED keeps [0, 384) from window 0, [384, 640) from 1, [640, 780) from 2."""
    m = make("sled", BART, chunk_size=512, overlap=256)
    ids, mask = batch([780])
    enc = m.encode(Stub(), ids, mask, training=False)
    row_pos = enc.hidden[0, :, 1].long().tolist()
    assert row_pos == list(range(384)) + list(range(128, 384)) + list(range(372, 512))
    assert m.decoder_length(780) == 780


def test_sled_prefix_rides_on_top_of_every_window_and_is_kept_encoded_alone():
    seen = []

    class Spy(Stub):
        def forward(self, input_ids, attention_mask):
            seen.append((input_ids.clone(), attention_mask.clone()))
            return super().forward(input_ids, attention_mask)

    m = make("sled", BART, chunk_size=16, overlap=4, encoder_batch_size=2)
    ids, mask = batch([40, 5])
    prefix = torch.tensor([[7, 8, 9], [7, 1, 1]])
    prefix_mask = (prefix != 1).long()
    enc = m.encode(Spy(), ids, mask, training=False, prefix_ids=prefix, prefix_mask=prefix_mask)
    assert tokens(enc, 0) == [7, 8, 9] + ids[0, :40].tolist()
    assert tokens(enc, 1) == [7] + ids[1, :5].tolist()
    # the kept copy: the prefix encoded on its own (row length = the prefix), positions 0..P-1
    assert enc.hidden[0, :3, 1].tolist() == [0, 1, 2] and enc.hidden[0, :3, 2].tolist() == [3, 3, 3]
    assert enc.hidden[1, :1, 2].tolist() == [1]
    rows = [(r[k], mk[k]) for r, mk in seen for k in range(r.shape[0])]
    spans = chunk_spans(40, 16, 4)
    doc0 = ids[0].tolist()
    for (row, rmask), (s, e) in zip(rows, spans):  # each window: the prefix, then all 16 document tokens
        assert row[rmask.bool()].tolist() == [7, 8, 9] + doc0[s:e]
    assert rows[len(spans)][0][rows[len(spans)][1].bool()].tolist() == [7] + ids[1, :5].tolist()
    prefix_only = [r[mk.bool()].tolist() for r, mk in rows[len(spans) + 1:]]
    assert prefix_only == [[7, 8, 9], [7]]


def test_prefix_longer_than_the_window_allows_is_a_config_error():
    spec = BackboneSpec(max_positions=20, pad_id=1, prefix_ids=(0,), suffix_ids=(2,), d_model=16)
    m = make("sled", spec, chunk_size=16, overlap=4)
    ids, mask = batch([40])
    with pytest.raises(ConfigError, match=r"query prefix of 5 tokens.*method.chunk_size=16.*\(20\).*at most 4"):
        m.encode(Stub(), ids, mask, training=False, prefix_ids=torch.full((1, 5), 7))
    enc = m.encode(Stub(), ids, mask, training=False, prefix_ids=torch.full((1, 4), 7))
    assert tokens(enc, 0) == [7] * 4 + ids[0].tolist()


# -------------------------------------------------------------------------------------- ScaleFormer
def check_scaleformer_tokens(m, enc, ids, lengths, spec, *, k, mm, wrap, size, overlap):
    """Per chunk: first k | ordered interior middles | last k; counts as the paper less shortfall."""
    specials = set(spec.prefix_ids) | set(spec.suffix_ids)
    all_middles = []
    for b, n in enumerate(lengths):
        got = tokens(enc, b)
        expected_len, cursor, middles = 0, 0, []
        for row in chunk_rows(ids[b, :n].tolist(), size, overlap, spec, wrap):
            seg = len(row)
            kl = min(k, seg)
            kr = max(0, min(k, seg - kl))
            interior = [x for x in row[k:seg - k] if x not in specials] if seg > 2 * k else []
            take = min(mm, len(interior))
            out = got[cursor:cursor + kl + take + kr]
            assert out[:kl] == row[:kl], "left boundary = first k tokens"
            assert out[kl + take:] == (row[seg - kr:] if kr else []), "right boundary = last k tokens"
            mid = out[kl:kl + take]
            assert all(x in interior for x in mid), "middle tokens from the interior only"
            assert mid == sorted(mid, key=interior.index), "middle tokens in document order"
            assert len(set(mid)) == len(mid)
            middles.append(mid)
            cursor += kl + take + kr
            expected_len += kl + take + kr
        assert cursor == len(got) == expected_len
        assert m.decoder_length(n) == expected_len
        all_middles.append(middles)
    return all_middles


@pytest.mark.parametrize("wrap", [False, True])
@pytest.mark.parametrize("spec", [BART, T5], ids=["bart", "t5"])
@pytest.mark.parametrize("k,mm,strategy", [(1, 0, "random"), (2, 3, "random"), (1, 50, "random"),
                                            (3, 4, "uniform")])
def test_scaleformer_boundaries_middles_and_length(wrap, spec, k, mm, strategy):
    size, overlap = 16, 5
    lengths = [1, 2, 3, 5, 16, 17, 45, 120]
    m = make("scaleformer", spec, chunk_size=size, overlap=overlap, boundary_tokens=k, alpha=1.0,
             middle_tokens=mm, middle_strategy=strategy, chunk_special_tokens=wrap, encoder_batch_size=4)
    ids, mask = batch(lengths, spec)
    for training in (False, True):
        enc = m.encode(Stub(), ids, mask, training=training)
        assert (enc.hidden[..., 3][enc.mask.bool()] == 1).all(), "a pad position reached the decoder"
        check_scaleformer_tokens(m, enc, ids, lengths, spec, k=k, mm=mm, wrap=wrap, size=size, overlap=overlap)


def test_scaleformer_decoder_length_formula_paper_defaults():
    m = make("scaleformer", BART, middle_tokens=300)
    for n in [1, 1024, 1025, 16_384, 100_000]:
        c = len(chunk_spans(n, 1024, 150))  # 1, 1, 2, 19, 115
        if n <= 1024:
            assert m.decoder_length(n) == min(n, 2) + min(300, max(n - 2, 0))
        else:
            assert m.decoder_length(n) == c * (2 + 300)
    assert make("scaleformer", BART).decoder_length(16_384) == 2 * len(chunk_spans(16_384, 1024, 150))


def test_scaleformer_eval_selection_reproducible_and_batch_independent():
    kw = dict(chunk_size=32, overlap=8, middle_tokens=5, alpha=1.0, middle_seed=3)
    m = make("scaleformer", BART, **kw)
    ids, mask = batch([300, 70])
    a = m.encode(Stub(), ids, mask, training=False)
    b = make("scaleformer", BART, **kw).encode(Stub(), ids, mask, training=False)
    assert torch.equal(a.hidden, b.hidden)
    alone, alone_mask = batch([70])
    c = m.encode(Stub(), alone, alone_mask, training=False)
    assert tokens(c, 0) == tokens(a, 1), "selection must not depend on the batch"
    other = make("scaleformer", BART, **{**kw, "middle_seed": 4}).encode(Stub(), ids, mask, training=False)
    assert tokens(other, 0) != tokens(a, 0)


def test_scaleformer_training_selection_is_fresh():
    m = make("scaleformer", BART, chunk_size=64, overlap=8, middle_tokens=5, alpha=1.0)
    ids, mask = batch([400])
    draws = {tuple(tokens(m.encode(Stub(), ids, mask, training=True), 0)) for _ in range(4)}
    assert len(draws) == 4


def test_scaleformer_uniform_is_evenly_spaced():
    m = make("scaleformer", BART, chunk_size=64, overlap=8, middle_tokens=4, alpha=1.0,
             middle_strategy="uniform")
    ids, mask = batch([64])
    got = tokens(m.encode(Stub(), ids, mask, training=True), 0)  # interior positions 1..62 (62 tokens)
    assert got == [0, BASE + 8, BASE + 24, BASE + 39, BASE + 55, 2]
    assert tokens(m.encode(Stub(), ids, mask, training=False), 0) == got


def test_scaleformer_output_is_the_fusion_of_raw_boundaries():
    kw = dict(chunk_size=16, overlap=4, boundary_tokens=2, middle_tokens=2, middle_strategy="uniform")
    lengths = [100, 30, 10]
    ids, mask = batch(lengths)
    raw = make("scaleformer", BART, alpha=1.0, **kw).encode(Stub(), ids, mask, training=False)
    fused = make("scaleformer", BART, alpha=0.3, **kw).encode(Stub(), ids, mask, training=False)
    assert torch.equal(raw.mask, fused.mask)
    per = 2 * 2 + 2
    for b, n in enumerate(lengths):
        c = len(chunk_spans(n, 16, 4))
        h = raw.hidden[b, : c * per].view(1, c, per, -1)
        lf, rf = span_cumulation(h[:, :, :2], h[:, :, -2:], 0.3, torch.ones(1, c, dtype=torch.bool))
        want = torch.cat([lf, h[:, :, 2:4], rf], 2).view(c * per, -1)
        torch.testing.assert_close(fused.hidden[b, : c * per], want)


def test_scaleformer_prefix_passed_once_boundaries_from_the_document():
    m = make("scaleformer", BART, chunk_size=16, overlap=4, alpha=1.0)
    ids, mask = batch([40])
    prefix = torch.tensor([[7, 8, 9]])
    enc = m.encode(Stub(), ids, mask, training=False, prefix_ids=prefix, prefix_mask=torch.ones_like(prefix))
    got = tokens(enc, 0)
    spans = chunk_spans(40, 16, 4)  # the prefix does not shrink the window
    doc = ids[0].tolist()
    assert got == [7, 8, 9] + [x for s, e in spans for x in (doc[s], doc[e - 1])]
    assert enc.hidden[0, 3:, 1].tolist() == [3, 18] * len(spans)  # boundaries sit after the prefix in each row


# ------------------------------------------------------------------------------------ gradients
def test_gradients_reach_every_contributing_chunk():
    emb = torch.nn.Embedding(2000, 4)

    class Embed(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            return BaseModelOutput(last_hidden_state=emb(input_ids))

    n, size, overlap = 300, 32, 8
    ids, mask = batch([n])
    for name, kw in [("scaleformer", {"middle_tokens": 2}), ("sled", {})]:
        emb.zero_grad()
        m = make(name, BART, chunk_size=size, overlap=overlap, **kw)
        enc = m.encode(Embed(), ids, mask, training=True)
        enc.hidden.pow(2).sum().backward()
        touched = emb.weight.grad.abs().sum(1) > 0
        for s, e in chunk_spans(n, size, overlap):  # both boundaries of every chunk got a gradient
            assert touched[ids[0, s]] and touched[ids[0, e - 1]]
        if name == "sled":
            assert touched[ids[0, :n]].all()


def tiny_bart():
    torch.manual_seed(0)
    cfg = BartConfig(vocab_size=100, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                     max_position_embeddings=1024)
    return BartForConditionalGeneration(cfg), BART


def tiny_t5():
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=100, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_decoder_layers=1,
                   num_heads=2, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return T5ForConditionalGeneration(cfg), T5


def test_gradients_flow_to_encoder_parameters():
    model, spec = tiny_bart()
    model.train()
    m = make("scaleformer", spec, chunk_size=32, overlap=8, middle_tokens=3, encoder_batch_size=2)
    ids, mask = batch([100, 20], spec, vocab=100)
    enc = m.encode(model.get_encoder(), ids, mask, training=True)
    labels = torch.randint(3, 100, (2, 6))
    model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask, labels=labels).loss.backward()
    enc_params = dict(model.get_encoder().named_parameters())
    missing = [k for k, p in enc_params.items() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, missing


# ----------------------------------------------------------------------------------- end to end
SMALL = {"chunk_size": 32, "overlap": 8}


@pytest.mark.parametrize("backbone", [tiny_bart, tiny_t5], ids=["bart", "t5"])
@pytest.mark.parametrize("name,kw,with_prefix", [
    ("sled", {}, False),
    ("scaleformer", {}, False),
    ("scaleformer", {"middle_tokens": 300}, False),
    ("sled", SMALL, True),
    ("scaleformer", {**SMALL, "middle_tokens": 4, "chunk_special_tokens": True}, True),
])
def test_end_to_end_train_and_generate(backbone, name, kw, with_prefix):
    """Documents of 1, L and L + 1 tokens (plus one between) through loss, backward and beam search."""
    model, spec = backbone()
    m = make(name, spec, **kw)
    size = kw.get("chunk_size", 1024)
    lengths = [1, size, size + 1, 40]
    ids, mask = batch(lengths, spec, vocab=100)
    pkw = {}
    if with_prefix:
        prefix = torch.tensor([[5, 6], [5, spec.pad_id], [7, 7], [9, spec.pad_id]])
        pkw = {"prefix_ids": prefix, "prefix_mask": (prefix != spec.pad_id).long()}
    model.train()
    enc = m.encode(model.get_encoder(), ids, mask, training=True, **pkw)
    labels = torch.randint(3, 100, (len(lengths), 5))
    out = model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask, labels=labels)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    model.eval()
    with torch.no_grad():
        enc = m.encode(model.get_encoder(), ids, mask, training=False, **pkw)
        assert torch.isfinite(enc.hidden).all()
        # A fresh BaseModelOutput per call: generate expands it in place for the beams.
        gens = [model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=enc.hidden),
                               attention_mask=enc.mask, num_beams=2, max_new_tokens=5) for _ in range(2)]
    assert gens[0].shape[0] == len(lengths) and torch.equal(gens[0], gens[1])


# ------------------------------------------------------------------------------------ config errors
@pytest.mark.parametrize("name,kw,pattern", [
    ("sled", {"overlap": 1024}, r"method.overlap=1024: must be < method.chunk_size \(1024\)"),
    ("sled", {"overlap": -1}, r"method.overlap=-1: must be >= 0"),
    ("sled", {"chunk_size": 0}, r"method.chunk_size=0"),
    ("sled", {"encoder_batch_size": -1}, r"method.encoder_batch_size=-1"),
    ("scaleformer", {"boundary_tokens": 0}, r"method.boundary_tokens=0: must be >= 1"),
    ("scaleformer", {"boundary_tokens": 600}, r"method.boundary_tokens=600: .*chunk_size \(1024\)"),
    ("scaleformer", {"middle_tokens": -1}, r"method.middle_tokens=-1: must be >= 0"),
    ("scaleformer", {"alpha": 1.5}, r"method.alpha=1.5: must be in \[0, 1\]"),
    ("scaleformer", {"alpha": -0.1}, r"method.alpha=-0.1"),
    ("scaleformer", {"middle_strategy": "topk"}, r"method.middle_strategy='topk'"),
    ("scaleformer", {"chunk_sise": 10}, r"chunk_sise"),
    ("sled", {"keep_rule": "middle"}, r"method.keep_rule='middle': must be one of sled, centre"),
    ("unlimiformer", {"keep_rule": "edge"}, r"method.keep_rule='edge'"),
])
def test_bad_config_values(name, kw, pattern):
    with pytest.raises(ConfigError, match=pattern):
        method_config({"name": name, **kw})


def test_backbone_limits():
    with pytest.raises(ConfigError, match=r"method.chunk_size=2048: must be <= the backbone's max positions \(1024\)"):
        make("scaleformer", BART, chunk_size=2048)
    with pytest.raises(ConfigError, match=r"method.overlap=10: .*special tokens per chunk \(10\)"):
        make("sled", BART, chunk_size=12, overlap=10, chunk_special_tokens=True)
    make("sled", BART, chunk_size=12, overlap=10)  # fine without per-chunk specials


def test_empty_document_is_rejected_not_nan():
    ids, mask = batch([5, 5])
    mask[1] = 0
    with pytest.raises(ValueError, match=r"documents \[1\].*no tokens"):
        make("scaleformer", BART).encode(Stub(), ids, mask, training=False)


@pytest.mark.parametrize("file,want", [("sled", ("sled", 0)), ("scaleformer", ("scaleformer", 0)),
                                       ("scaleformer_middle", ("scaleformer", 300))])
def test_method_yaml_files(file, want):
    from conftest import compose

    from scaleformer.runs.context import to_config

    cfg = to_config(compose([f"method={file}", "seed=5"])).method
    assert cfg.name == want[0] and cfg.chunk_size == 1024 and cfg.overlap == 150
    assert getattr(cfg, "keep_rule", "sled") == "sled"
    assert getattr(cfg, "middle_tokens", 0) == want[1]
    if want[0] == "scaleformer":
        assert cfg.boundary_tokens == 1 and cfg.alpha == 0.5 and cfg.middle_seed == 5, "the run's seed"


def test_sled_paper_default_experiment():
    exp = OmegaConf.load(CONF / "experiment" / "sled_paper_default.yaml")
    assert {"override /method": "sled"} in list(exp.defaults)
    cfg = method_config(compose(["experiment=sled_paper_default"]).method)
    assert (cfg.name, cfg.chunk_size, cfg.overlap) == ("sled", 256, 128)


# --------------------------------------------------------------------------------------- 2M tokens
@pytest.mark.slow
def test_two_million_tokens_on_cpu():
    model, spec = tiny_bart()
    model.eval()
    n = 2_000_000
    m = make("scaleformer", spec, encoder_batch_size=64)
    ids, mask = batch([n], spec, vocab=100)
    probe = MemoryProbe(torch.device("cpu"))  # this encoding's peak, not the process's (earlier tests')
    probe.start()
    t0 = time.perf_counter()
    with torch.inference_mode():
        enc = m.encode(model.get_encoder(), ids, mask, training=False)
    took = time.perf_counter() - t0
    c = len(chunk_spans(n, 1024, 150))
    assert enc.hidden.shape == (1, 2 * c, 16) and torch.isfinite(enc.hidden).all()
    peak = probe.peak()  # None where /proc cannot reset the peak: the process's, an upper bound
    peak_mb = peak / 2**20 if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"2M tokens: {c} chunks, {took:.1f}s, peak RSS {peak_mb:.0f} MB")
    assert peak_mb < 4096


# ------------------------------------------------------------------------------- copies, checkpoints
@pytest.mark.parametrize("backbone", [tiny_bart, tiny_t5], ids=["bart", "t5"])
@pytest.mark.parametrize("name,kw", [("sled", {}), ("scaleformer", {"middle_tokens": 4}), ("unlimiformer", {})])
def test_packing_with_and_without_gradients_agree(backbone, name, kw):
    """Micro-batches are written straight into the packed input, differentiably: the same states either way."""
    model, spec = backbone()
    model.eval()
    m = make(name, spec, **SMALL, encoder_batch_size=3, **kw)
    lengths = [150, 33, 70]
    ids, mask = batch(lengths, spec, vocab=100)
    prefix = torch.tensor([[5, 6], [5, spec.pad_id], [spec.pad_id, spec.pad_id]])
    for pkw in ({}, {"prefix_ids": prefix, "prefix_mask": (prefix != spec.pad_id).long()}):
        with torch.no_grad():
            direct = m.encode(model.get_encoder(), ids, mask, training=False, **pkw)
        graph = m.encode(model.get_encoder(), ids, mask, training=False, **pkw)
        assert graph.hidden.requires_grad and not direct.hidden.requires_grad
        assert torch.equal(direct.mask, graph.mask)  # (the encoder's kernels may differ with gradients on)
        torch.testing.assert_close(direct.hidden, graph.hidden.detach(), atol=1e-6, rtol=0)
        if name != "unlimiformer":  # (its local window is the encoder's output, pads included)
            assert (direct.hidden[direct.mask == 0] == 0).all()


@pytest.mark.parametrize("backbone", [tiny_bart, tiny_t5], ids=["bart", "t5"])
@pytest.mark.parametrize("name,kw", [("sled", {}), ("scaleformer", {"middle_tokens": 4})])
def test_checkpoint_chunks_same_loss_and_gradients(backbone, name, kw):
    """Recomputing each micro-batch in backward (random state restored) changes nothing but memory. Both
    paths encode 2 chunks at a time (one_pass_training off): with dropout on, one pass draws other masks."""
    results = []
    for ckpt in (False, True):
        model, spec = backbone()
        model.train()  # dropout on: the recomputation must draw the same masks
        m = make(name, spec, **SMALL, encoder_batch_size=2, one_pass_training=False, checkpoint_chunks=ckpt, **kw)
        ids, mask = batch([120, 50], spec, vocab=100)
        torch.manual_seed(5)
        enc = m.encode(model.get_encoder(), ids, mask, training=True)
        loss = model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask,
                     labels=torch.randint(3, 100, (2, 6), generator=torch.Generator().manual_seed(1))).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (l0, g0), (l1, g1) = results
    assert torch.equal(l0, l1) and g0.keys() == g1.keys()
    assert any(n.startswith(("model.encoder", "encoder")) for n in g0)
    for n in g0:
        torch.testing.assert_close(g0[n], g1[n], atol=1e-6, rtol=1e-5, msg=n)


def test_checkpoint_chunks_is_a_runtime_key():
    cfg = method_config({"name": "scaleformer", "checkpoint_chunks": True})
    assert "checkpoint_chunks" in type(cfg).RUNTIME_KEYS and "kept_only_last_layer" in type(cfg).RUNTIME_KEYS
    assert "checkpoint_chunks" in type(method_config({"name": "sled"})).RUNTIME_KEYS


@pytest.mark.slow
def test_two_million_token_training_step_with_checkpoint_chunks():
    """A training step on a 2,000,000-token document (scaleformer_middle, the repo's tiny_bart) holds the
    kept states plus one micro-batch: under 4 GB of peak RSS growth (measured 2.3 GB; ~29 GB without)."""
    from scaleformer.bench.shapes import load_shape, random_model
    from scaleformer.ops.measure import MemoryProbe

    shape = load_shape("tiny_bart")
    model, _ = random_model(shape.config, "sdpa", torch.device("cpu"), torch.float32, 0)
    model.train()
    m = build_method(method_config({"name": "scaleformer", "middle_tokens": 300, "checkpoint_chunks": True}),
                     shape.spec)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 200, (1, 2_000_000), generator=g)
    labels = torch.randint(4, 200, (1, 32), generator=g)
    probe = MemoryProbe(torch.device("cpu"))
    if not probe.available:
        pytest.skip("no /proc peak-RSS reset on this system")
    base = probe.start()
    enc = m.encode(model.get_encoder(), ids, torch.ones_like(ids), training=True)
    model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask, labels=labels).loss.backward()
    grown = probe.since(base)["mem_growth_bytes"]
    print(f"2M-token training step: decoder input {tuple(enc.hidden.shape)}, peak RSS growth {grown / 2**20:.0f} MiB")
    assert enc.hidden.shape[1] == m.decoder_length(2_000_000)
    assert grown < 4 * 2**30
