"""Unlimiformer on tiny random BART/T5: the decoder gets [local window | datastore]; retrieval equals full
cross-attention over the datastore when k covers it, retrieves the true top-k per head otherwise
(brute-force check); non-retrieving layers and the first decoding step attend to the backbone's own
encoding of the truncated input; generates with and without the cache; trains in every mode with
gradients where they should be; config errors."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, BartConfig, MarianConfig, MarianMTModel, T5Config
from transformers.modeling_outputs import BaseModelOutput

from scaleformer.errors import ConfigError
from scaleformer.methods import build_method, method_config
from scaleformer.model.spec import BackboneSpec
from scaleformer.ops.retrieval import (
    FULL,
    RANDOM,
    RETRIEVE,
    RetrievalBartAttention,
    RetrievalT5Attention,
    cross_attentions,
    random_subsets,
)

pytestmark = pytest.mark.compat  # run on other transformers releases by `make test-compat`

W = 64  # the tiny backbones' max positions: the window and the default k
SPECS = {
    "bart": BackboneSpec(max_positions=W, pad_id=1, prefix_ids=(0,), suffix_ids=(2,), d_model=16),
    "t5": BackboneSpec(max_positions=W, pad_id=0, prefix_ids=(), suffix_ids=(1,), d_model=16),
}
ARCHS = ["bart", "t5"]


def tiny(arch: str, impl: str = "sdpa"):
    """Tiny random backbone, no dropout, weights large enough that attention scores are well spread.

    T5 gets as many encoder as decoder layers: its generation cache is sized from num_layers.
    """
    torch.manual_seed(0)
    if arch == "bart":
        conf = BartConfig(vocab_size=100, d_model=16, encoder_layers=1, decoder_layers=2, encoder_attention_heads=2,
                          decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                          max_position_embeddings=W, dropout=0.0, attention_dropout=0.0, init_std=0.3,
                          pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    else:
        conf = T5Config(vocab_size=100, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=2,
                        dropout_rate=0.0, initializer_factor=2.0, pad_token_id=0, eos_token_id=1,
                        decoder_start_token_id=0)
    return AutoModelForSeq2SeqLM.from_config(conf, attn_implementation=impl).eval()


def make(arch: str, **kw):
    return build_method(method_config({"name": "unlimiformer", "chunk_size": 16, "overlap": 8, **kw}), SPECS[arch])


def batch(lengths, arch: str, seed: int = 0):
    """Right-padded random documents wrapped in the backbone's specials."""
    spec = SPECS[arch]
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths)), spec.pad_id)
    for b, n in enumerate(lengths):
        doc = [*spec.prefix_ids, *torch.randint(3, 100, (n - len(spec.prefix_ids) - len(spec.suffix_ids),),
                                                generator=g).tolist(), *spec.suffix_ids]
        ids[b, :n] = torch.tensor(doc)
    return ids, (ids != spec.pad_id).long()


def dec_ids(n_docs: int, q: int = 7):
    return torch.randint(3, 100, (n_docs, q), generator=torch.Generator().manual_seed(1))


def capture(model):
    """Forward hooks recording each cross-attention layer's query input and output."""
    seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for i, m in enumerate(cross_attentions(model, "test")):
        m.register_forward_hook(lambda mod, args, kwargs, out, i=i: seen.__setitem__(
            i, (args[0] if args else kwargs["hidden_states"], out[0])), with_kwargs=True)
    return seen


def brute(mod, h, enc_hidden, enc_mask):
    """Per-head scores [B, H, Q, T] (padding -inf), values [B, H, T, D] and the output projection of mod."""
    q_p, k_p, v_p, o_p = ((mod.q_proj, mod.k_proj, mod.v_proj, mod.out_proj) if hasattr(mod, "q_proj")
                          else (mod.q, mod.k, mod.v, mod.o))
    heads = mod.num_heads if hasattr(mod, "num_heads") else mod.n_heads

    def split(x):  # [B, N, H*D] -> [B, H, N, D]
        return x.view(*x.shape[:2], heads, -1).transpose(1, 2)

    scores = split(q_p(h)) @ split(k_p(enc_hidden)).transpose(-1, -2) * mod.scaling
    scores = scores.masked_fill(~enc_mask.bool()[:, None, None, :], float("-inf"))
    return scores, split(v_p(enc_hidden)), o_p


def restricted(scores, values, o_p, keep):
    """Softmax over the kept keys only, weighted values, output projection: the reference result."""
    probs = scores.masked_fill(~keep, float("-inf")).softmax(-1)  # [B, H, Q, T]
    out = probs @ values  # [B, H, Q, D]
    return o_p(out.transpose(1, 2).reshape(*out.shape[:1], out.shape[2], -1))


def assert_true_top_k(scores, idx, k):
    """idx [B, H, Q, k] holds the k best scores of every row (values exact; sets where no near-tie)."""
    want = scores.topk(k, dim=-1)  # sorted descending
    got = scores.gather(-1, idx).sort(dim=-1, descending=True).values
    torch.testing.assert_close(got, want.values, atol=1e-5, rtol=0)
    nxt = scores.topk(k + 1, dim=-1).values[..., -1]  # (k+1)-th best score
    clear = (want.values[..., -1] - nxt) > 1e-4  # [B, H, Q] rows without a near-tie at the boundary
    assert clear.float().mean() > 0.9
    same = (idx.sort(-1).values == want.indices.sort(-1).values).all(-1)
    assert same[clear].all()


def first_window_encoding(model, ids, mask, arch: str):
    """The backbone's own encoding of the first W tokens as they are (by hand): Unlimiformer's reference cuts
    ``input_ids[:, :window]`` (``pre_generate_hook``) and does not re-close the cut with </s>."""
    ids, mask = ids[:, :W], mask[:, :W]
    with torch.no_grad():
        return model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state, mask


def parts(m, enc):
    """(local hidden, local mask, datastore hidden, datastore mask) of an encode's output."""
    lo = m.state.local
    return enc.hidden[:, :lo], enc.mask[:, :lo], enc.hidden[:, lo:], enc.mask[:, lo:]


@pytest.mark.parametrize("name", ["unlimiformer", "memorizing"])
def test_the_local_window_is_the_inputs_first_tokens_as_the_reference_cuts_them(name):
    """A 1,025-token input's window is its first 1,024 tokens (``input_ids[:, :1024]``, Unlimiformer's
    ``pre_generate_hook``), its last not replaced by </s>; re-closing stays truncation's own rule."""
    import dataclasses

    spec = dataclasses.replace(SPECS["bart"], max_positions=1024)
    m = build_method(method_config({"name": name}), spec)
    ids = torch.randint(5, 100, (2, 1025))
    mask = torch.ones_like(ids)
    mask[1, 900:] = 0  # a shorter document beside it
    got, got_mask = m.local_window.truncate(ids, mask)
    assert torch.equal(got, ids[:, :1024]) and torch.equal(got_mask, mask[:, :1024])
    trunc, _ = build_method(method_config({"name": "truncation"}), spec).truncate(ids, mask)
    assert trunc[0, -1].item() == spec.suffix_ids[-1] and torch.equal(trunc[1], ids[1, :1024])


# --------------------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("arch", ARCHS)
def test_k_covering_the_datastore_equals_full_cross_attention_over_it(arch, impl):
    ref = tiny(arch, impl)
    model = copy.deepcopy(ref)
    m = make(arch, training_mode="retrieval")  # k = max positions = 64 >= every datastore state below
    m.wrap(model)
    patched = RetrievalBartAttention if arch == "bart" else RetrievalT5Attention
    assert all(type(x) is patched for x in cross_attentions(model, "test"))
    assert set(model.state_dict()) == set(ref.state_dict())  # checkpoints load both ways
    ids, mask = batch([60, 45], arch)  # two lengths: padding on the second document
    enc = m.encode(model.get_encoder(), ids, mask, training=True)  # retrieval training: no first-step rule
    assert m.state.phase == RETRIEVE and m.state.local == 60
    _, _, store, store_mask = parts(m, enc)
    assert store.shape[1] == 60 <= m.state.k and torch.equal(store_mask.sum(1), mask.sum(1))
    dec = dec_ids(2)

    def logits(mdl, hidden, hmask):
        return mdl(encoder_outputs=(hidden,), attention_mask=hmask, decoder_input_ids=dec).logits

    want = logits(ref, store, store_mask)
    torch.testing.assert_close(logits(model, enc.hidden, enc.mask), want, atol=1e-4, rtol=0)
    m.state.k = 10**6  # k far above the number of states is clamped at run time: still exact
    torch.testing.assert_close(logits(model, enc.hidden, enc.mask), want, atol=1e-4, rtol=0)
    m.state.k = 3  # a small k really changes the attention (the hook is live)
    assert (logits(model, enc.hidden, enc.mask) - want).abs().max() > 1e-3


@pytest.mark.parametrize("arch", ARCHS)
def test_first_decoding_step_attends_to_the_local_window(arch):
    """As the reference (is_first_test_decoding_step): step 1 is the backbone reading the first window."""
    ref = tiny(arch)
    model = copy.deepcopy(ref)
    m = make(arch, k=4)
    m.wrap(model)
    ids, mask = batch([100, 70], arch)
    enc = m.encode(model.get_encoder(), ids, mask, training=False)
    local, local_mask = first_window_encoding(model, ids, mask, arch)
    torch.testing.assert_close(parts(m, enc)[0], local, atol=1e-4, rtol=1e-4)
    local = parts(m, enc)[0]
    kw = dict(num_beams=1, do_sample=False, max_new_tokens=4, min_new_tokens=4, output_scores=True,
              return_dict_in_generate=True)
    got = model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=enc.hidden), attention_mask=enc.mask, **kw)
    want = ref.generate(encoder_outputs=BaseModelOutput(last_hidden_state=local), attention_mask=local_mask, **kw)
    torch.testing.assert_close(got.scores[0], want.scores[0], atol=1e-4, rtol=0)
    finite = got.scores[1].isfinite() & want.scores[1].isfinite()
    assert (got.scores[1] - want.scores[1])[finite].abs().max() > 1e-3  # later steps retrieve


@pytest.mark.parametrize("arch", ARCHS)
def test_small_k_retrieves_the_true_top_k_per_head(arch):
    model = tiny(arch)
    k = 5
    m = make(arch, k=k)
    m.wrap(model)
    m.state.record = True
    seen = capture(model)
    ids, mask = batch([100, 70], arch)  # longer than the 64-token window
    enc = m.encode(model.get_encoder(), ids, mask, training=False)
    local, local_mask, store, store_mask = parts(m, enc)
    model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask, decoder_input_ids=dec_ids(2))
    for i, mod in enumerate(cross_attentions(model, "test")):
        h, out = seen[i]
        idx = m.state.retrieved[i]  # datastore indices
        assert idx.shape == (2, 2, 7, k)  # [batch, heads, queries, k]
        scores, values, o_p = brute(mod, h, store, store_mask)
        assert_true_top_k(scores, idx, k)
        keep = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, idx, True)
        torch.testing.assert_close(out[:, 1:], restricted(scores, values, o_p, keep)[:, 1:], atol=1e-5, rtol=1e-4)
        scores, values, o_p = brute(mod, h, local, local_mask)  # decoder position 0: the local window
        torch.testing.assert_close(out[:, :1], restricted(scores, values, o_p, scores > float("-inf"))[:, :1],
                                   atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_layers_outside_the_range_attend_to_the_first_window_encoded_as_one(arch):
    model = tiny(arch)
    m = make(arch, k=5, layers=[1, 2])  # layer 0 keeps the backbone's window
    m.wrap(model)
    m.state.record = True
    seen = capture(model)
    ids, mask = batch([100, 70], arch)
    enc = m.encode(model.get_encoder(), ids, mask, training=False)
    model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask, decoder_input_ids=dec_ids(2))
    mods = cross_attentions(model, "test")
    assert set(m.state.retrieved) == {1}
    local, local_mask = first_window_encoding(model, ids, mask, arch)  # not the first packed chunk states
    torch.testing.assert_close(parts(m, enc)[0], local, atol=1e-4, rtol=1e-4)
    local = parts(m, enc)[0]
    h, out = seen[0]
    scores, values, o_p = brute(mods[0], h, local, local_mask)
    torch.testing.assert_close(out, restricted(scores, values, o_p, scores > float("-inf")), atol=1e-5, rtol=1e-4)
    h, out = seen[1]
    scores, values, o_p = brute(mods[1], h, *parts(m, enc)[2:])
    assert_true_top_k(scores, m.state.retrieved[1], 5)


@pytest.mark.parametrize("arch", ARCHS)
def test_k_above_a_documents_real_states_is_full_attention_for_that_document(arch):
    ref = tiny(arch)
    model = copy.deepcopy(ref)
    m = make(arch, k=10, training_mode="retrieval")
    m.wrap(model)
    ids, mask = batch([60, 8], arch)  # 60 datastore states in all; the second document has only 8 < k
    enc = m.encode(model.get_encoder(), ids, mask, training=True)
    _, _, store, store_mask = parts(m, enc)
    dec = dec_ids(2)
    got = model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask, decoder_input_ids=dec).logits
    want = ref(encoder_outputs=(store,), attention_mask=store_mask, decoder_input_ids=dec).logits
    torch.testing.assert_close(got[1], want[1], atol=1e-4, rtol=0)  # padding took the spare slots, weight 0
    assert (got[0] - want[0]).abs().max() > 1e-3  # 10 of 60: retrieval


def test_random_subsets_take_min_k_real_states_per_layer_and_document():
    mask = torch.tensor([[1] * 8 + [0] * 4, [1] * 3 + [0] * 9])  # 8 and 3 real states
    keep = random_subsets(mask, n_layers=3, k=5)
    assert keep.shape == (3, 2, 12)
    assert torch.equal(keep.sum(-1), torch.tensor([[5, 3]] * 3))
    assert not (keep & ~mask.bool()).any()


# --------------------------------------------------------------------------------------- generation
@pytest.mark.parametrize("beams", [1, 2])
@pytest.mark.parametrize("arch", ARCHS)
def test_generation_with_cache_matches_recomputation(arch, beams):
    model = tiny(arch)
    m = make(arch, k=4)
    m.wrap(model)
    m.state.record = True
    ids, mask = batch([100, 70], arch)
    enc = m.encode(model.get_encoder(), ids, mask, training=False)
    kw = dict(attention_mask=enc.mask, num_beams=beams, do_sample=False, max_new_tokens=6, min_new_tokens=6,
              output_scores=True, return_dict_in_generate=True)
    # cached: keys/values projected once, one query per step (softmax over k scores, k values gathered)
    cached = model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=enc.hidden), **kw)
    assert m.state.retrieved[0].shape == (2 * beams, 2, 1, 4)  # one query per step, per beam
    # recomputed: every step re-runs all queries through the dense top-k form
    fresh = model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=enc.hidden), use_cache=False, **kw)
    assert m.state.retrieved[0].shape[2] == 6  # the last step saw all 6 decoder positions
    assert cached.sequences.shape[0] == 2 and torch.equal(cached.sequences, fresh.sequences)
    torch.testing.assert_close(torch.stack(cached.scores), torch.stack(fresh.scores), atol=1e-4, rtol=0)


# ----------------------------------------------------------------------------------------- training
@pytest.mark.parametrize("mode", ["standard", "random_encoded", "retrieval", "alternating"])
def test_only_standard_training_stops_growing_with_the_input(mode):
    """The cost table scales a training step by train_length: the standard mode trains on the local window
    (truncation's input), the others encode the whole document; evaluation always does."""
    m = make("bart", training_mode=mode)
    window = m.local_window.decoder_length(10_000)
    assert m.decoder_length(10_000) > 10_000 > window
    assert m.train_length(10_000) == (window if mode == "standard" else m.decoder_length(10_000))


@pytest.mark.parametrize("mode", ["standard", "random_encoded", "retrieval", "alternating"])
@pytest.mark.parametrize("arch", ARCHS)
def test_training_modes_run_and_gradients_reach_what_was_attended(arch, mode):
    model = tiny(arch).train()
    k = 10
    m = make(arch, k=k, training_mode=mode)
    m.wrap(model)
    m.state.record = True
    ids, mask = batch([100, 70], arch)
    lengths = mask.sum(1)
    for step in range(2 if mode == "alternating" else 1):
        model.zero_grad()
        enc = m.encode(model.get_encoder(), ids, mask, training=True)
        enc.hidden.retain_grad()
        labels = dec_ids(2)
        model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask, labels=labels).loss.backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.get_encoder().parameters()
                   if p.requires_grad and p.dim() > 1)
        reached = enc.hidden.grad.abs().sum(-1) > 0  # [B, T] states the loss depends on
        phase = m.state.phase
        if mode == "standard":  # trains like truncation: the first window, plain attention
            assert phase == FULL and enc.hidden.shape[1] == W
            assert torch.equal(reached, enc.mask.bool())
            continue
        lo = m.state.local
        assert torch.equal(enc.mask[:, lo:].sum(1), lengths)  # the whole input is in the datastore
        assert phase == {"random_encoded": RANDOM, "retrieval": RETRIEVE}.get(mode, [RETRIEVE, RANDOM][step])
        if phase == RANDOM:
            assert lo == 0  # the datastore only
            keep = m.state.random_keep  # [layers, B, T]
            assert torch.equal(keep.sum(-1), torch.full((2, 2), k))
            assert not (keep & ~enc.mask.bool()).any()
            assert not torch.equal(keep[0], keep[1])  # a fresh subset per layer
            assert torch.equal(reached, keep.any(0))
        else:
            assert lo == W  # the local window first
            assert not reached[:, :lo].any()  # every layer retrieves, at every position in training
            used = torch.zeros_like(reached[:, lo:])
            for idx in m.state.retrieved.values():  # [B, H, Q, k] datastore indices
                used.scatter_(1, idx.flatten(1), True)
            assert torch.equal(reached[:, lo:], used & enc.mask[:, lo:].bool())


@pytest.mark.parametrize("arch", ARCHS)
def test_random_subsets_survive_activation_checkpointing(arch):
    """The subsets are drawn in encode(), so a checkpointed layer recomputes with the same ones."""
    model = tiny(arch).train()
    m = make(arch, k=10, training_mode="random_encoded")
    m.wrap(model)
    ids, mask = batch([100, 70], arch)
    enc = m.encode(model.get_encoder(), ids, mask, training=True)
    hidden = enc.hidden.detach()
    grads = []
    for ckpt in (False, True):
        if ckpt:
            enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
            enable(**{"activation_checkpointing_kwargs" if enable.__name__.startswith("activation")
                      else "gradient_checkpointing_kwargs": {"use_reentrant": False}})
            assert model.get_decoder().gradient_checkpointing
        h = hidden.clone().requires_grad_(True)
        model(encoder_outputs=(h,), attention_mask=enc.mask, labels=dec_ids(2)).loss.backward()
        grads.append(h.grad)
    torch.testing.assert_close(grads[0], grads[1])
    assert torch.equal(grads[0].abs().sum(-1) > 0, m.state.random_keep.any(0))


def test_query_prefix_is_encoded_once_in_both_phases():
    model = tiny("bart")
    m = make("bart", k=5)
    m.wrap(model)
    ids, mask = batch([100, 70], "bart")
    prefix = torch.tensor([[5, 6, 7], [8, 9, 1]])  # the second query is 2 tokens + padding
    pmask = (prefix != 1).long()
    enc = m.encode(model.get_encoder(), ids, mask, training=False, prefix_ids=prefix, prefix_mask=pmask)
    lo = m.state.local
    assert lo == W and torch.equal(enc.mask[:, :lo].sum(1), torch.tensor([W, W]))  # prefix + document, cut
    assert torch.equal(enc.mask[:, lo:].sum(1), mask.sum(1) + pmask.sum(1))  # every token once, the query once
    assert m.decoder_length(100) == W + 100
    enc = m.encode(model.get_encoder(), ids, mask, training=True, prefix_ids=prefix, prefix_mask=pmask)
    assert m.state.phase == FULL and torch.equal(enc.mask.sum(1), torch.tensor([W, W]))  # truncation


def test_defaults_are_the_reference_implementations():
    """src/run.py UnlimiformerArguments: all layers, overlap 0.5, chunk = window; k = the window."""
    from conftest import compose

    from scaleformer.runs.context import to_config

    cfg = to_config(compose(["method=unlimiformer"])).method
    assert (cfg.layers, cfg.k, cfg.chunk_size, cfg.overlap, cfg.keep_rule, cfg.training_mode) == \
        (None, None, 1024, 512, "sled", "standard")
    spec = BackboneSpec(max_positions=1024, pad_id=1, prefix_ids=(0,), suffix_ids=(2,), d_model=16)
    assert build_method(cfg, spec).state.k == 1024


# ----------------------------------------------------------------------------------------- bad input
def test_bad_config_values_are_config_errors():
    for kw, key in [({"k": 0}, "method.k"), ({"layers": [0]}, "method.layers"),
                    ({"training_mode": "magic"}, "method.training_mode")]:
        with pytest.raises(ConfigError, match=key):
            make("bart", **kw)


@pytest.mark.parametrize("layers", [[0, 3], [1, 1], [2, 5], [-3, 2]])
def test_layer_range_outside_the_decoder_names_the_key_and_the_depth(layers):
    with pytest.raises(ConfigError, match=r"method\.layers=.*2 layers"):
        make("bart", layers=layers).wrap(tiny("bart"))


def test_negative_layer_range_counts_from_the_end():
    model = tiny("t5")
    make("t5", layers=[-1, 2]).wrap(model)
    assert [x.retrieval_role for x in cross_attentions(model, "test")] == ["window", "retrieve"]


def test_unsupported_backbones_are_config_errors():
    marian = MarianMTModel(MarianConfig(vocab_size=50, d_model=16, encoder_layers=1, decoder_layers=1,
                                        encoder_attention_heads=2, decoder_attention_heads=2,
                                        encoder_ffn_dim=16, decoder_ffn_dim=16, max_position_embeddings=32,
                                        pad_token_id=1, decoder_start_token_id=1, eos_token_id=2))
    with pytest.raises(ConfigError, match="BART and T5"):
        make("bart").wrap(marian)
    model = tiny("bart")
    model.config._attn_implementation = "flex_attention"
    with pytest.raises(ConfigError, match="backbone.attn_implementation"):
        make("bart").wrap(model)


@pytest.mark.parametrize(("t", "k"), [(100, 7), (1000, 10), (1003, 10), (66560, 1024), (5000, 1)])
def test_two_stage_top_k_selects_what_topk_selects(t, k):
    from scaleformer.ops.retrieval import topk_unsorted

    g = torch.Generator().manual_seed(t)
    scores = torch.randn(2, 3, 4, t, generator=g)
    scores[1, :, :, t // 3:] = float("-inf")  # a short document: padding keys
    values, idx = topk_unsorted(scores, k)
    want = scores.topk(k, dim=-1)
    assert idx.shape == want.indices.shape and int(idx.max()) < t
    assert torch.equal(values.sort(-1, descending=True).values, want.values)
    assert torch.equal(scores.gather(-1, idx), values)  # the indices point at those values
    finite = want.values.isfinite()
    assert torch.equal(idx.sort(-1).values[finite.all(-1)], want.indices.sort(-1).values[finite.all(-1)])
