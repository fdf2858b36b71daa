"""Query-aware middles (``middle_strategy=query``) against plain references: the attention scores equal
transformers' own last-layer attention weights, the choice equals a loop over chunks, and the method
keeps exactly those positions' final encoder states."""

from __future__ import annotations

import pytest
import torch
from test_kept_layer import rows, tiny

from scaleformer.errors import ConfigError
from scaleformer.methods import build_method, method_config
from scaleformer.ops.kept_layer import layer_inputs
from scaleformer.ops.query_middle import choose, query_scores
from scaleformer.ops.spans import encoder_family, encoder_layers


def reference_choose(scores: torch.Tensor, pos: torch.Tensor, k: int) -> torch.Tensor:
    """One chunk at a time: the real middle slots get the top interior positions, ascending."""
    out = pos.clone()
    m = pos.shape[1] - 2 * k
    for r in range(pos.shape[0]):
        left_max, right_min = int(pos[r, :k].max()), int(pos[r, k + m:].min())
        take = sum(int(p) > left_max for p in pos[r, k:k + m])
        interior = [p for p in range(scores.shape[1]) if left_max < p < right_min]
        best = sorted(interior, key=lambda p: -float(scores[r, p]))[:take]
        for j, p in enumerate(sorted(best)):
            out[r, k + j] = p
    return out


def test_choose_equals_a_loop_over_chunks():
    g = torch.Generator().manual_seed(0)
    k, w = 2, 40  # 4 middle slots per row
    scores = torch.rand(5, w, generator=g)
    pos = torch.tensor([
        [3, 4, 10, 11, 12, 13, 30, 31],   # a full interior
        [3, 4, 6, 7, 3, 3, 8, 9],         # two real middles (the others mark "none" at the left start)
        [0, 1, 5, 6, 7, 8, 20, 21],       # no query: interior from 2
        [5, 6, 5, 5, 5, 5, 7, 8],         # no interior at all
        [3, 4, 9, 15, 20, 25, 38, 39],
    ])
    assert torch.equal(choose(scores, pos, k), reference_choose(scores, pos, k))


@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_scores_are_the_last_layers_attention_weights(arch):
    model, spec = tiny(arch)
    model.set_attn_implementation("eager")  # transformers' own weights to compare with
    encoder = model.get_encoder().eval()
    ids, mask = rows([40, 33], spec.pad_id)
    with torch.no_grad():
        out = encoder(input_ids=ids, attention_mask=mask, output_attentions=True)
    weights = out.attentions[-1]  # [b, H, w, w]
    layer = encoder_layers(encoder)[-1]
    seen = {}
    handle = layer.register_forward_pre_hook(lambda mod, a, kw: seen.update(a=a, kw=kw), with_kwargs=True)
    with torch.no_grad():
        encoder(input_ids=ids, attention_mask=mask)
    handle.remove()
    x, bias = layer_inputs(encoder_family(encoder), layer, seen["a"], seen["kw"])
    query = torch.arange(ids.shape[1])[None, :] < torch.tensor([[5], [3]])  # the first 5 / 3 tokens
    with torch.no_grad():
        got = query_scores(encoder_family(encoder), layer, x, bias, mask.bool(), query)
    want = torch.stack([weights[b, :, :n].mean(0).mean(0) for b, n in ((0, 5), (1, 3))])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    # lift: against the attention each position gets from every real token of its row (its positional prior)
    with torch.no_grad():
        lifted = query_scores(encoder_family(encoder), layer, x, bias, mask.bool(), query, lift=True)
    prior = torch.stack([weights[b, :, :n].mean(0).mean(0) for b, n in ((0, 40), (1, 33))])
    torch.testing.assert_close(lifted[:, :33], (want / prior)[:, :33], atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("strategy", ["query", "query_lift"])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_the_method_keeps_the_most_attended_interior_states(arch, strategy, monkeypatch):
    model, spec = tiny(arch)
    encoder = model.get_encoder().eval()
    kw = dict(chunk_size=40, overlap=10, middle_tokens=6, encoder_batch_size=3)
    ids, mask = rows([150, 60], spec.pad_id)
    prefix = torch.tensor([[5, 6, 7, 8], [9, 10, spec.pad_id, spec.pad_id]])
    pkw = {"prefix_ids": prefix, "prefix_mask": (prefix != spec.pad_id).long()}
    method = build_method(method_config({"name": "scaleformer", "middle_strategy": strategy, **kw}), spec)
    import scaleformer.ops.query_middle as qm

    chosen, lifts = [], []
    real, real_scores = qm.choose, qm.query_scores
    monkeypatch.setattr(qm, "choose", lambda s, p, k: chosen.append((s, p, real(s, p, k))) or chosen[-1][2])
    monkeypatch.setattr(qm, "query_scores", lambda *a: lifts.append(a[-1]) or real_scores(*a))
    with torch.no_grad():
        enc = method.encode(encoder, ids, mask, training=False, **pkw)
    assert chosen, "the query pick ran"
    assert set(lifts) == {strategy == "query_lift"}, "the scores the strategy names"
    for scores, before, after in chosen:
        assert torch.equal(after, reference_choose(scores, before, 1))
        assert not torch.equal(after, before), "the random middles were replaced"
    random = build_method(method_config({"name": "scaleformer", **kw}), spec)
    with torch.no_grad():
        base = random.encode(encoder, ids, mask, training=False, **pkw)
    assert torch.equal(enc.mask, base.mask), "the same number of kept tokens per document"


def test_query_middles_need_a_query():
    _, spec = tiny("bart")
    method = build_method(method_config({"name": "scaleformer", "middle_strategy": "query", "middle_tokens": 4,
                                         "chunk_size": 40, "overlap": 10}), spec)
    with pytest.raises(ConfigError, match=r"method\.middle_strategy='query': needs a query per document"):
        method.check_prefix(0)
    method.check_prefix(5)


def test_an_unreadable_last_layer_keeps_the_drawn_middles(monkeypatch, caplog):
    """Where the layer is laid out otherwise (another transformers release), no scores: the drawn
    middles, the full encoder's states, one warning."""
    import scaleformer.ops.query_middle as qm

    model, spec = tiny("bart")
    encoder = model.get_encoder().eval()
    ids, mask = rows([90, 60], spec.pad_id)
    pos = torch.tensor([[0, 5, 6, 30], [0, 3, 4, 20]])
    monkeypatch.setattr(qm, "layer_fits", lambda enc: False)
    monkeypatch.setattr(qm, "_warned", [])
    with torch.no_grad(), caplog.at_level("WARNING"):
        got = qm.query_middle_picks(1)(encoder, ids, mask, [(None, pos)])[0]
        want = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got, want.gather(1, pos[..., None].expand(-1, -1, want.shape[-1])))
    assert sum("keeping the drawn middles" in r.getMessage() for r in caplog.records) == 1


def test_the_selector_report_counts_every_middle_pick_once(tmp_path):
    """scripts/selector_picks.py on one QA ledger: per strategy, the tenths of the interior hold every
    middle pick (shares sum to 100), and the query strategies move picks the random draw made."""
    import importlib.util
    import json

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("selector_picks", ROOT / "scripts" / "selector_picks.py")
    picks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(picks)
    out = tmp_path / "picks.json"
    assert picks.main(["--docs", "1", "--out", str(out), f"paths.cache={tmp_path}/cache"]) == 0
    report = json.loads(out.read_text())
    assert report["documents"] == 1 and report["middle_tokens"] == 300
    for name in ("random", "query", "query_lift"):
        r = report[name]
        assert r["middles"] > 0 and abs(sum(r["by_tenth_of_interior"]) - 100) < 0.5, name
        assert 0 <= r["in_next_chunk"] <= 100 and 0 <= r["answer_tokens_kept"] <= 100
    assert any(report[name]["answer_tokens_kept"] > 0 for name in ("random", "query", "query_lift")), \
        "the answer's tokens are found in the document"
    assert report["query"]["by_tenth_of_interior"] != report["random"]["by_tenth_of_interior"]
