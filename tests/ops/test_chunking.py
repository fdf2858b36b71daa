"""Overlapping segmentation and kept spans against SLED's published windows and a plain reference, the
batched planner, id gathering (query prefix on top of the window), micro-batched encoding, packing."""

from __future__ import annotations

import math

import pytest
import torch
from chunk_reference import chunk_spans, windows

from scaleformer.errors import ConfigError
from scaleformer.ops.chunking import (
    encode_chunks,
    gather_chunk_ids,
    keep_spans,
    layout_chunks,
    num_chunks,
    plan_chunks,
    prefix_rows,
)
from scaleformer.ops.packing import pack_rows

# SLED's own examples (Mivg/SLED sled/modeling_sled.py, the _window_indices docstring), verbatim:
# (context_start, context_end, update_start, update_end). SledModel(model, 512) has window_fraction
# 0.5: margin int(512 * 0.5 / 2) = 128, overlap 256; SledModel(model, 256, window_fraction=0.75):
# margin int(256 * 0.25 / 2) = 32, overlap 64.
SLED_EXAMPLES = {
    (512, 256): {
        256: [(0, 256, 0, 256)],
        510: [(0, 510, 0, 510)],
        512: [(0, 512, 0, 512)],
        514: [(0, 512, 0, 384), (2, 514, 382, 512)],
        766: [(0, 512, 0, 384), (254, 766, 130, 512)],
        768: [(0, 512, 0, 384), (256, 768, 128, 512)],
        780: [(0, 512, 0, 384), (256, 768, 128, 384), (268, 780, 372, 512)],
        1050: [(0, 512, 0, 384), (256, 768, 128, 384), (512, 1024, 128, 384), (538, 1050, 358, 512)],
    },
    (256, 64): {
        128: [(0, 128, 0, 128)],
        254: [(0, 254, 0, 254)],
        256: [(0, 256, 0, 256)],
        258: [(0, 256, 0, 224), (2, 258, 222, 256)],
        446: [(0, 256, 0, 224), (190, 446, 34, 256)],
        448: [(0, 256, 0, 224), (192, 448, 32, 256)],
        500: [(0, 256, 0, 224), (192, 448, 32, 224), (244, 500, 172, 256)],
        1050: [(0, 256, 0, 224), (192, 448, 32, 224), (384, 640, 32, 224), (576, 832, 32, 224),
               (768, 1024, 32, 224), (794, 1050, 198, 256)],
    },
}


def planned(lengths, size, overlap, rule="sled"):
    """The planner's windows per document, in SLED's tuple form."""
    t = plan_chunks(torch.tensor(lengths), size, overlap)
    lo, hi = keep_spans(t, overlap, rule)
    rows = zip(t.doc.tolist(), t.start.tolist(), t.length.tolist(), lo.tolist(), hi.tolist())
    out: list[list[tuple[int, int, int, int]]] = [[] for _ in lengths]
    for b, s, n, a, e in rows:
        out[b].append((s, s + n, a - s, e - s))
    return out


@pytest.mark.parametrize("size,overlap", sorted(SLED_EXAMPLES))
def test_sled_keep_rule_reproduces_sleds_published_windows(size, overlap):
    examples = SLED_EXAMPLES[(size, overlap)]
    got = planned(list(examples), size, overlap)  # one ragged batch
    for (n, want), windows_n in zip(examples.items(), got):
        assert windows_n == want, n
        kept = [p for s, _, a, e in windows_n for p in range(s + a, s + e)]
        assert kept == list(range(n))  # every position once, in order


def test_centre_rule_splits_the_last_overlap_at_its_midpoint():
    # L=512, O=256, N=514: windows [0, 512) and [2, 514); the overlap [2, 512) splits at 257.
    assert planned([514], 512, 256, "centre") == [[(0, 512, 0, 257), (2, 514, 255, 512)]]
    # N=780: middle windows keep their centre as under "sled"; the last overlap [268, 768) splits at 518.
    assert planned([780], 512, 256, "centre") == [[(0, 512, 0, 384), (256, 768, 128, 262), (268, 780, 250, 512)]]
    with pytest.raises(ValueError, match="keep rule 'middle'"):
        keep_spans(plan_chunks(torch.tensor([10]), 4, 1), 1, "middle")


def _grid():
    for size in (1, 2, 7, 16, 1024):
        for overlap in sorted({0, 1, size // 2, size - 1}):
            if overlap >= size:
                continue
            for n in sorted({1, 2, size - 1, size, size + 1, 3 * size + 5, 100_003}):
                if n >= 1 and (n < 50_000 or size >= 16):  # keep tiny strides off the 100k documents
                    yield n, size, overlap


@pytest.mark.parametrize("rule", ["sled", "centre"])
def test_planner_matches_the_plain_reference_on_a_grid(rule):
    cases = list(_grid())
    for size, overlap in sorted({(s, o) for _, s, o in cases}):
        lengths = [n for n, s, o in cases if (s, o) == (size, overlap)]
        got = planned(lengths, size, overlap, rule)
        for n, g in zip(lengths, got):
            assert g == windows(n, size, overlap, rule), (n, size, overlap)
            assert len(g) == num_chunks(torch.tensor([n]), size, overlap).item() == \
                max(1, math.ceil((n - overlap) / (size - overlap)))


def test_chunk_counts_and_spans_hand_written():
    assert chunk_spans(1, 1024, 150) == [(0, 1)]
    assert chunk_spans(1024, 1024, 150) == [(0, 1024)]
    assert chunk_spans(1025, 1024, 150) == [(0, 1024), (1, 1025)]
    assert chunk_spans(3000, 1024, 150) == [(0, 1024), (874, 1898), (1748, 2772), (1976, 3000)]
    assert chunk_spans(0, 1024, 150) == []
    assert chunk_spans(10, 4, 1) == [(0, 4), (3, 7), (6, 10)]
    assert chunk_spans(11, 4, 1) == [(0, 4), (3, 7), (6, 10), (7, 11)]
    t = plan_chunks(torch.tensor([1, 1024, 1025, 3000, 10, 11]), 1024, 150)
    assert t.counts.tolist() == [1, 1, 2, 4, 1, 1]
    t = plan_chunks(torch.tensor([10, 11, 3]), 4, 1)
    assert t.counts.tolist() == [3, 4, 1] and t.first.tolist() == [0, 3, 7]
    assert t.start.tolist() == [0, 3, 6, 0, 3, 6, 7, 0] and t.length.tolist() == [4, 4, 4, 4, 4, 4, 4, 3]
    assert t.index.tolist() == [0, 1, 2, 0, 1, 2, 3, 0] and t.is_last.tolist() == [0, 0, 1, 0, 0, 0, 1, 1]
    # 16k-token document with the paper's L=1024, O=150: ceil((16384 - 150) / 874) = 19 chunks
    assert plan_chunks(torch.tensor([16_384]), 1024, 150).counts.tolist() == [19]


def _batch(lengths, head=(0,), tail=(2,), pad=1):
    """Right-padded ids: specials around content ids 1000 + position."""
    width = max(lengths)
    ids = torch.full((len(lengths), width), pad)
    for b, n in enumerate(lengths):
        ids[b, :n] = 1000 + torch.arange(n)
        ids[b, :min(len(head), n)] = torch.tensor(head)[:n]
        if n > len(head):
            ids[b, n - len(tail):n] = torch.tensor(tail)
    return ids, (ids != pad).long()


@pytest.mark.parametrize("wrap", [False, True])
@pytest.mark.parametrize("with_prefix", [False, True])
def test_gather_chunk_ids_matches_python_slicing(wrap, with_prefix):
    head, tail, pad, size, overlap = (0,), (2,), 1, 12, 4
    lengths = [1, 3, 12, 13, 40]
    ids, mask = _batch(lengths, head, tail, pad)
    prefix = torch.tensor([[7, 8, 9], [7, pad, pad], [7, 8, pad], [9, 9, 9], [5, pad, pad]])
    plen = (prefix != pad).sum(1) if with_prefix else None
    lay = layout_chunks(mask.sum(1), plen, chunk_size=size, overlap=overlap, n_head=1, n_tail=1,
                        chunk_special_tokens=wrap, max_positions=size + 3)
    rows, rmask = gather_chunk_ids(lay, ids, pad_id=pad, head_ids=head if wrap else (),
                                   tail_ids=tail if wrap else (), prefix_ids=prefix if with_prefix else None)
    assert rows.shape == (lay.table.rows, lay.width)
    r = 0
    for b, n in enumerate(lengths):
        doc = ids[b, :n].tolist()
        pre = prefix[b, : int(plen[b])].tolist() if with_prefix else []
        content = doc[1:-1] if wrap else doc
        room = size - (2 if wrap else 0)  # the prefix comes on top of the window (SLED)
        for s, e in chunk_spans(len(content), room, overlap) or [(0, 0)]:
            want = pre + (list(head) if wrap else []) + content[s:e] + (list(tail) if wrap else [])
            got = rows[r][rmask[r].bool()].tolist()
            assert got == want
            assert (rows[r][~rmask[r].bool()] == pad).all()
            assert len(want) <= size + len(pre)
            r += 1
    assert r == lay.table.rows


def test_prefix_too_long_for_the_window_is_a_config_error():
    with pytest.raises(ConfigError, match=r"query prefix of 10 tokens .*method.chunk_size=12.*max positions "
                                          r"\(16\).*at most 4 tokens"):
        layout_chunks(torch.tensor([50, 5]), torch.tensor([3, 10]), chunk_size=12, overlap=4, n_head=0,
                      n_tail=0, chunk_special_tokens=False, max_positions=16)
    lay = layout_chunks(torch.tensor([50]), torch.tensor([4]), chunk_size=12, overlap=4, n_head=0,
                        n_tail=0, chunk_special_tokens=False, max_positions=16)
    assert lay.row_len.max() == 16  # exactly at the limit


def test_prefix_rows_hold_each_prefix_alone():
    prefix = torch.tensor([[7, 8, 9], [1, 1, 1], [5, 6, 1]])
    docs, ids, mask = prefix_rows(prefix, torch.tensor([3, 0, 2]), pad_id=1)
    assert docs.tolist() == [0, 2]
    assert ids.tolist() == [[7, 8, 9], [5, 6, 1]] and mask.tolist() == [[1, 1, 1], [1, 1, 0]]


def test_special_positions_when_slicing_the_document():
    lay = layout_chunks(torch.tensor([30, 5]), None, chunk_size=12, overlap=4, n_head=1, n_tail=1,
                        chunk_special_tokens=False)
    t = lay.table
    assert lay.special_lo.tolist() == [1 if (i == 0) else 0 for i in t.index.tolist()]
    assert lay.special_hi.tolist() == [1 if last else 0 for last in t.is_last.tolist()]


class _Rowwise(torch.nn.Module):
    """Hidden state depends on the whole row (cumsum) so any row mix-up or pad leak shows."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(1.0))

    def forward(self, input_ids, attention_mask):
        x = (input_ids.float() * attention_mask).cumsum(1)[..., None] * self.scale  # [mb, w, 1]
        return type("Out", (), {"last_hidden_state": torch.cat([x, x.new_ones(x.shape) * input_ids.shape[1]], -1)})


def test_encode_chunks_micro_batches_agree_and_trim():
    lengths = [3, 40, 12, 100]
    ids, mask = _batch(lengths)
    lay = layout_chunks(mask.sum(1), None, chunk_size=16, overlap=3, n_head=1, n_tail=1,
                        chunk_special_tokens=False)
    rows, rmask = gather_chunk_ids(lay, ids, pad_id=1)
    pos = torch.stack([torch.zeros_like(lay.row_len), lay.row_len - 1], 1)  # first and last real token
    first_rows = lay.table.first
    picks = [(None, pos), (first_rows, torch.zeros(len(lengths), 1, dtype=torch.long))]
    ref = encode_chunks(_Rowwise(), rows, rmask, lay.row_len, 10_000, picks)
    for bs in (1, 2, 3, 7):
        got = encode_chunks(_Rowwise(), rows, rmask, lay.row_len, bs, picks)
        torch.testing.assert_close(got[0][..., 0], ref[0][..., 0])
        torch.testing.assert_close(got[1][..., 0], ref[1][..., 0])
        assert got[0].shape == (lay.table.rows, 2, 2) and got[1].shape == (len(lengths), 1, 2)
    one = encode_chunks(_Rowwise(), rows, rmask, lay.row_len, 1, picks)
    assert one[0][:, 0, 1].tolist() == lay.row_len.float().tolist()  # each pass trimmed to its row


def test_pack_rows_orders_heads_then_rows():
    values = torch.arange(5 * 3, dtype=torch.float).view(5, 3, 1)  # [R, G, 1]
    valid = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 1, 1], [1, 0, 0]], dtype=torch.bool)
    doc = torch.tensor([0, 0, 1, 1, 2])
    head_vals = -torch.arange(1, 7, dtype=torch.float).view(3, 2, 1)
    head_valid = torch.tensor([[1, 1], [1, 0], [0, 0]], dtype=torch.bool)
    hidden, mask = pack_rows(values, valid, doc, 3, (head_vals, head_valid))
    assert mask.tolist() == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]]
    assert hidden[0, :5, 0].tolist() == [-1, -2, 0, 1, 3]
    assert hidden[1, :, 0].tolist() == [-3, 6, 7, 8, 10, 11]
    assert hidden[2, :1, 0].tolist() == [12]
    assert (hidden[mask == 0] == 0).all()


def test_auto_encoder_batch_size_follows_free_memory():
    from types import SimpleNamespace

    from scaleformer.ops.chunking import auto_encoder_batch_size

    spec = SimpleNamespace(d_model=768, n_encoder_layers=6)
    cpu = auto_encoder_batch_size(torch.device("cpu"), 1024, spec, training=True)
    assert cpu == 16
    gib = 2**30
    infer = auto_encoder_batch_size(torch.device("cuda"), 1024, spec, training=False, free_bytes=40 * gib)
    train = auto_encoder_batch_size(torch.device("cuda"), 1024, spec, training=True, free_bytes=40 * gib)
    # bart-base shape: 1024 * 768 * (34 + 5 * 12 * 1024 / 768) bytes = ~89 MiB per layer and chunk
    per_layer = 1024 * 768 * (34 + 5 * 12 * 1024 / 768)
    assert infer == int(0.5 * 40 * gib // per_layer)
    assert train == int(0.5 * 40 * gib // (6 * per_layer))
    assert auto_encoder_batch_size(torch.device("cuda"), 1024, spec, training=True, free_bytes=gib) >= 1
    assert auto_encoder_batch_size(torch.device("cuda"), 1024, spec, training=False, free_bytes=80 * gib) > \
        auto_encoder_batch_size(torch.device("cuda"), 1024, spec, training=False, free_bytes=20 * gib)


def test_auto_encoder_batch_size_respects_the_process_memory_cap(monkeypatch):
    """With set_per_process_memory_fraction, the budget is the cap minus what the allocator holds,
    not the device's free memory (the allocator, not the device, refuses beyond the cap)."""
    from types import SimpleNamespace

    from scaleformer.ops.chunking import auto_encoder_batch_size

    gib = 2**30
    spec = SimpleNamespace(d_model=768, n_encoder_layers=6)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (70 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 1 * gib)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    dev = torch.device("cuda")  # index-less, as Summarizer(device="cuda") passes it

    def fraction(value):
        def get(device):  # torch 2.11 refuses a device without an index here
            assert isinstance(device, int), f"an index-less {device!r} reached get_per_process_memory_fraction"
            return value
        return get

    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", fraction(1.0))
    assert auto_encoder_batch_size(dev, 1024, spec, training=False) == \
        auto_encoder_batch_size(dev, 1024, spec, training=False, free_bytes=70 * gib)
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", fraction(0.05))  # 4 GiB cap
    assert auto_encoder_batch_size(dev, 1024, spec, training=False) == \
        auto_encoder_batch_size(dev, 1024, spec, training=False, free_bytes=3 * gib)


def test_auto_encoder_batch_size_matches_fixed_size_output():
    """encoder_batch_size=0 (auto) encodes exactly like an explicit micro-batch size."""
    from transformers import BartConfig, BartForConditionalGeneration

    from scaleformer.methods import build_method, method_config
    from scaleformer.model.spec import BackboneSpec

    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(vocab_size=50, d_model=16, encoder_layers=1, decoder_layers=1,
                                                    encoder_attention_heads=2, decoder_attention_heads=2,
                                                    encoder_ffn_dim=16, decoder_ffn_dim=16,
                                                    max_position_embeddings=64)).eval()
    spec = BackboneSpec(max_positions=64, pad_id=1, prefix_ids=(0,), suffix_ids=(2,), d_model=16)
    ids = torch.randint(3, 50, (2, 300))
    mask = torch.ones_like(ids)
    outs = []
    for bs in (0, 3):
        m = build_method(method_config({"name": "scaleformer", "chunk_size": 64, "overlap": 16,
                                        "encoder_batch_size": bs, "middle_tokens": 5}), spec)
        outs.append(m.encode(model.get_encoder(), ids, mask, training=False).hidden)
    torch.testing.assert_close(outs[0], outs[1])


def test_write_rows_in_place_and_differentiable():
    """Rows written once into a buffer (the last row a dump): each source row gets its slot's gradient."""
    from scaleformer.ops.packing import write_rows

    a = torch.randn(3, 2, requires_grad=True)
    b = torch.randn(2, 2, requires_grad=True)
    buf = torch.zeros(6, 2)
    out = write_rows(write_rows(buf, torch.tensor([0, 5, 2]), a), torch.tensor([1, 5]), b)
    assert out.data_ptr() == buf.data_ptr()  # in place: no copy of the buffer
    assert torch.equal(out[:3], torch.stack([a[0], b[0], a[2]]).detach()) and torch.equal(out[3:5], torch.zeros(2, 2))
    w = torch.randn(5, 2)
    (out[:5] * w).sum().backward()  # the dump row (5) is never read
    assert torch.equal(a.grad, torch.stack([w[0], torch.zeros(2), w[2]]))
    assert torch.equal(b.grad, torch.stack([w[1], torch.zeros(2)]))
