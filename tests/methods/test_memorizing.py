"""Memorizing Transformers (encoder-decoder adaptation) on tiny random BART/T5: the local context is the
backbone's own encoding of the first window as it is (a closed gate is exactly the backbone on it); the memory is
the rest of the document, disjoint from it; the gate is a trainable, checkpointed parameter that starts
near local attention; the memory layer mixes top-k retrieval and local attention per head exactly as
documented (brute-force check); a document without memory; the model trains and generates; config
errors."""

from __future__ import annotations

import copy
import math

import pytest
import torch

# The same tiny backbones and specs as the Unlimiformer tests (one definition).
from test_unlimiformer import ARCHS, SPECS, W, first_window_encoding, tiny  # noqa: E402
from transformers.modeling_outputs import BaseModelOutput

from scaleformer.errors import ConfigError
from scaleformer.methods import build_method, method_config
from scaleformer.ops.retrieval import cross_attentions

pytestmark = pytest.mark.compat  # run on other transformers releases by `make test-compat`


def make(arch: str, **kw):
    return build_method(method_config({"name": "memorizing", "chunk_size": 16, "overlap": 8, "k": 5, **kw}),
                        SPECS[arch])


def batch(lengths, arch: str):
    spec = SPECS[arch]
    g = torch.Generator().manual_seed(0)
    ids = torch.full((len(lengths), max(lengths)), spec.pad_id)
    for b, n in enumerate(lengths):
        body = torch.randint(3, 100, (n - len(spec.prefix_ids) - len(spec.suffix_ids),), generator=g).tolist()
        ids[b, :n] = torch.tensor([*spec.prefix_ids, *body, *spec.suffix_ids])
    return ids, (ids != spec.pad_id).long()


def dec_ids(n_docs: int, q: int = 7):
    return torch.randint(3, 100, (n_docs, q), generator=torch.Generator().manual_seed(1))


def gate_of(model):
    return [p for n, p in model.named_parameters() if n.endswith("retrieval_gate")]


def setup(arch: str, lengths=(100, 70), **kw):
    model = tiny(arch)
    m = make(arch, **kw)
    m.wrap(model)
    ids, mask = batch(list(lengths), arch)
    return model, m, m.encode(model.get_encoder(), ids, mask, training=False)


# ------------------------------------------------------------------------------------------- the gate
@pytest.mark.parametrize("arch", ARCHS)
def test_gate_is_a_trainable_checkpointed_parameter_of_the_memory_layer(arch):
    model, m, _ = setup(arch)
    names = [n for n, _ in model.named_parameters() if n.endswith("retrieval_gate")]
    layer0 = "layers.0.encoder_attn" if arch == "bart" else "block.0.layer.1.EncDecAttention"
    assert len(names) == 1 and layer0 in names[0]  # -2 of 2 decoder layers = layer 0
    (gate,) = gate_of(model)
    assert gate.requires_grad and gate.shape == (2,)  # one per head
    g0 = torch.sigmoid(gate * m.cfg.gate_scale)
    torch.testing.assert_close(g0, torch.full((2,), 0.05))  # starts close to local attention
    assert names[0] in model.state_dict()
    # optimised: a loss step moves it (the optimiser is built from model.parameters())
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids, mask = batch([100, 70], arch)
    enc = m.encode(model.get_encoder(), ids, mask, training=True)
    model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask, labels=dec_ids(2)).loss.backward()
    assert gate.grad is not None and (gate.grad != 0).all()
    before = gate.detach().clone()
    opt.step()
    assert (torch.sigmoid(gate * m.cfg.gate_scale) - torch.sigmoid(before * m.cfg.gate_scale)).abs().min() > 1e-3
    # checkpointed: a fresh wrapped model loads it back; wrapping again keeps it
    fresh = tiny(arch)
    make(arch).wrap(fresh)
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(gate_of(fresh)[0], gate.detach())
    m.wrap(model)
    assert gate_of(model)[0] is gate


@pytest.mark.parametrize("arch", ARCHS)
def test_closed_gate_is_exactly_the_backbone_on_the_first_window(arch):
    ref = tiny(arch)
    model, m, enc = setup(arch, gate_init=1e-7, k=5)
    ids, mask = batch([100, 70], arch)
    local, local_mask = first_window_encoding(ref, ids, mask, arch)  # by hand: the first W tokens as they are
    assert m.state.local == local.shape[1] == W
    torch.testing.assert_close(enc.hidden[:, :W], local, atol=1e-4, rtol=1e-4)
    trunc = build_method(method_config({"name": "truncation"}), SPECS[arch]).encode(
        ref.get_encoder(), ids, mask, training=False)
    assert (trunc.hidden - local).abs().max() > 1e-3  # truncation re-closes the cut with </s>: another window
    dec = dec_ids(2)
    got = model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask, decoder_input_ids=dec).logits
    want = ref(encoder_outputs=(local,), attention_mask=local_mask, decoder_input_ids=dec).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_memory_is_the_rest_of_the_document_disjoint_from_the_local_window(arch):
    model, m, enc = setup(arch, lengths=(100, 70, 40))
    lo = m.state.local
    store_mask = enc.mask[:, lo:]  # [B, T_s]: datastore positions (prefix + document order) in the memory
    j = torch.arange(store_mask.shape[1])
    covered = W  # the window holds the first 64 tokens as they are
    want = torch.stack([(j >= covered) & (j < n) for n in (100, 70, 40)])
    want[2] = False  # 40 tokens fit the window: no memory
    assert torch.equal(store_mask.bool(), want)
    assert [m.decoder_length(n) for n in (100, 70, 40)] == enc.mask.sum(1).tolist() == [W + 36, W + 6, 40]
    capped = make(arch, memory_size=5)
    capped.wrap(tiny(arch))
    ids, mask = batch([100, 70], arch)
    out = capped.encode(model.get_encoder(), ids, mask, training=False)
    assert out.mask[:, W:].sum(1).tolist() == [5, 5] and out.mask[:, W:W + covered].sum() == 0


# ------------------------------------------------------------------------------------ the memory layer
@pytest.mark.parametrize("arch", ARCHS)
def test_memory_layer_mixes_top_k_and_local_attention_per_head(arch):
    k = 5
    model, m, enc = setup(arch, lengths=(100, 70, 40), k=k)  # the third document has no memory
    m.state.record = True
    mods = cross_attentions(model, "test")
    seen = {}
    for i, mod in enumerate(mods):
        mod.register_forward_hook(lambda mod, args, kwargs, out, i=i: seen.__setitem__(i, (args[0], out[0])),
                                  with_kwargs=True)
    g = torch.tensor([0.3, 0.8])  # a different gate per head
    with torch.no_grad():
        gate_of(model)[0].copy_(torch.log(g / (1 - g)) / m.cfg.gate_scale)
    model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask, decoder_input_ids=dec_ids(3))
    assert set(m.state.retrieved) == {0}  # only the memory layer retrieves
    lo = m.state.local
    local, local_mask, store, mem_mask = enc.hidden[:, :lo], enc.mask[:, :lo], enc.hidden[:, lo:], enc.mask[:, lo:]

    def parts(mod, h, states, states_mask):
        q_p, k_p, v_p, o_p = ((mod.q_proj, mod.k_proj, mod.v_proj, mod.out_proj) if arch == "bart"
                              else (mod.q, mod.k, mod.v, mod.o))

        def split(x):
            return x.view(*x.shape[:2], 2, -1).transpose(1, 2)  # [B, H, N, D]

        scores = split(q_p(h)) @ split(k_p(states)).transpose(-1, -2) * mod.scaling  # [B, H, Q, T]
        scores = scores.masked_fill(~states_mask.bool()[:, None, None, :], float("-inf"))
        return scores, split(v_p(states)), o_p

    def attend(scores, values, keep):
        return scores.masked_fill(~keep, float("-inf")).softmax(-1) @ values  # [B, H, Q, D]

    def project(o_p, heads):
        return o_p(heads.transpose(1, 2).reshape(heads.shape[0], heads.shape[2], -1))

    h, out = seen[0]
    l_scores, l_values, o_p = parts(mods[0], h, local, local_mask)
    local_heads = attend(l_scores, l_values, l_scores > float("-inf"))
    m_scores, m_values, _ = parts(mods[0], h, store, mem_mask)
    top = m_scores[:2].topk(k, dim=-1)  # the documents with a memory (>= k states each)
    got_idx = m.state.retrieved[0][:2]  # indices into the datastore
    torch.testing.assert_close(m_scores[:2].gather(-1, got_idx).sort(-1, descending=True).values, top.values)
    topk_keep = torch.zeros_like(m_scores[:2], dtype=torch.bool).scatter_(-1, top.indices, True)
    gate = g[None, :, None, None]
    mixed = gate * attend(m_scores[:2], m_values[:2], topk_keep) + (1 - gate) * local_heads[:2]
    torch.testing.assert_close(out[:2], project(o_p, mixed), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out[2:], project(o_p, local_heads[2:]), atol=1e-5, rtol=1e-4)  # no memory: local only
    h, out = seen[1]  # every other layer: the local window only
    l_scores, l_values, o_p = parts(mods[1], h, local, local_mask)
    torch.testing.assert_close(out, project(o_p, attend(l_scores, l_values, l_scores > float("-inf"))),
                               atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------------------------------------ running
@pytest.mark.parametrize("beams", [1, 2])
@pytest.mark.parametrize("arch", ARCHS)
def test_generation_runs_and_the_cache_changes_nothing(arch, beams):
    model, m, enc = setup(arch, k=4, gate_init=0.5)
    kw = dict(attention_mask=enc.mask, num_beams=beams, do_sample=False, max_new_tokens=6, min_new_tokens=6,
              output_scores=True, return_dict_in_generate=True)
    cached = model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=enc.hidden), **kw)  # 1 query/step
    fresh = model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=enc.hidden), use_cache=False, **kw)
    assert cached.sequences.shape[0] == 2 and torch.equal(cached.sequences, fresh.sequences)
    torch.testing.assert_close(torch.stack(cached.scores), torch.stack(fresh.scores), atol=1e-4, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_training_encodes_everything_and_attends_as_generation_does(arch):
    model, m, _ = setup(arch, k=5)
    ids, mask = batch([100, 70], arch)
    model.train()
    enc = m.encode(model.get_encoder(), ids, mask, training=True)
    lo = m.state.local
    assert lo == W and enc.mask[:, lo:].sum(1).tolist() == [100 - W, 70 - W]
    enc.hidden.retain_grad()
    loss = model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask, labels=dec_ids(2)).loss
    assert math.isfinite(loss.item())
    loss.backward()
    reached = enc.hidden.grad.abs().sum(-1) > 0  # [B, T]
    assert reached[:, :lo][enc.mask[:, :lo].bool()].all()  # the local window
    assert not reached[:, lo:lo + W].any()  # datastore states the window already holds: not in the memory
    assert reached[:, lo + W:].any()  # retrieved memory states


def test_defaults_follow_wu_et_al():
    from conftest import compose

    from scaleformer.runs.context import to_config

    cfg = to_config(compose(["method=memorizing"])).method
    assert (cfg.k, cfg.memory_size, cfg.layer, cfg.keep_rule, cfg.overlap) == (32, None, -2, "sled", 512)


# ---------------------------------------------------------------------------------------- bad input
def test_bad_config_values_are_config_errors():
    for kw, key in [({"k": 0}, "method.k"), ({"gate_init": 0.0}, "method.gate_init"),
                    ({"gate_init": 1.0}, "method.gate_init"), ({"gate_scale": 0.0}, "method.gate_scale"),
                    ({"memory_size": 0}, "method.memory_size=0"),
                    ({"k": 64, "memory_size": 32}, r"method.k=64: must be <= method.memory_size \(32\)"),
                    ({"keep_rule": "x"}, "method.keep_rule='x'")]:
        with pytest.raises(ConfigError, match=key):
            make("bart", **kw)


@pytest.mark.parametrize("layer", [2, -3, 7])
def test_memory_layer_outside_the_decoder_names_the_key_and_the_depth(layer):
    with pytest.raises(ConfigError, match=rf"method\.layer={layer}.*2 layers"):
        make("t5", layer=layer).wrap(tiny("t5"))


def test_layer_counts_from_the_end_and_the_other_layers_see_the_window():
    model = copy.deepcopy(tiny("bart"))
    make("bart", layer=-1).wrap(model)
    assert [x.retrieval_role for x in cross_attentions(model, "test")] == ["window", "memory"]
