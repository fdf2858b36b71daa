"""MASFormer and its attention-span baselines on tiny random BART/T5: equivalences with full attention,
independent blocks and dense-mask references; position tiling; the attention cost C against counted
pairs; config errors; training loss, gradients and beam search end to end."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.nn.functional as F
from conftest import CONF
from omegaconf import OmegaConf
from transformers import BartConfig, BartForConditionalGeneration, T5Config, T5ForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

from scaleformer.errors import ConfigError
from scaleformer.methods import build_method, method_config
from scaleformer.model.spec import BackboneSpec
from scaleformer.ops.banded import banded_attention
from scaleformer.ops.spans import Span, encoder_layers, self_attention
from scaleformer.runs.context import to_config

pytestmark = pytest.mark.compat  # run on other transformers releases by `make test-compat`

BART = BackboneSpec(max_positions=64, pad_id=1, prefix_ids=(0,), suffix_ids=(2,), d_model=16)
T5 = BackboneSpec(max_positions=1024, pad_id=0, prefix_ids=(), suffix_ids=(1,), d_model=16)
METHODS = ["masformer", "block_attention", "sliding_window", "full_attention"]
SMALL = {"masformer": {"full_layers": 1, "block_size": 8}, "block_attention": {"block_size": 8},
         "sliding_window": {"window": 3}, "full_attention": {}}


def tiny(arch: str, attn: str = "sdpa"):
    torch.manual_seed(0)
    if arch == "bart":
        conf = BartConfig(vocab_size=100, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
                          decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                          max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                          decoder_start_token_id=2, forced_eos_token_id=2, attn_implementation=attn)
        return BartForConditionalGeneration(conf).eval(), BART
    conf = T5Config(vocab_size=100, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=1, num_heads=2,
                    relative_attention_num_buckets=8, relative_attention_max_distance=16, pad_token_id=0,
                    eos_token_id=1, decoder_start_token_id=0, attn_implementation=attn)
    return T5ForConditionalGeneration(conf).eval(), T5


def make(name: str, spec: BackboneSpec, **kw):
    return build_method(method_config({"name": name, **kw}), spec)


def batch(lengths: list[int], spec: BackboneSpec, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded random documents closed by the backbone's suffix special."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths)), spec.pad_id)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(3, 100, (n,), generator=g)
        ids[b, :len(spec.prefix_ids)] = torch.tensor(spec.prefix_ids, dtype=torch.long)
        ids[b, n - 1] = spec.suffix_ids[-1]
    return ids, (ids != spec.pad_id).long()


def close(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor, tol: float = 1e-5) -> None:
    err = (a - b)[mask.bool()].abs().max().item()
    assert err < tol, err


def dense_encoder(encoder, ids, mask, spans: list[Span]) -> torch.Tensor:
    """Reference: the stock layers with an explicit [B, 1, N, N] mask per layer (O(N^2), no kernels)."""
    n = ids.shape[1]
    valid = mask.bool()
    eye = torch.eye(n, dtype=torch.bool)
    t5 = hasattr(encoder, "block")
    if t5:
        x = encoder.embed_tokens(ids)
        bias = self_attention(encoder.block[0]).compute_bias(n, n)
    else:
        x = encoder.embed_tokens(ids) + encoder.embed_positions(ids)
        x = encoder.layernorm_embedding(x)
    for layer, span in zip(encoder_layers(encoder), spans):
        m = (span.dense_mask(n)[None] & valid[:, None, :]) | eye  # [B, N, N]; pads see themselves
        x = layer(x, m[:, None], bias)[0] if t5 else layer(x, m[:, None])
    return encoder.final_layer_norm(x) if t5 else x


# ------------------------------------------------------------------------------------ equivalences
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_masformer_all_full_layers_equals_full_attention(arch):
    model, spec = tiny(arch)
    ids, mask = batch([40, 29], spec)
    ref = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state  # stock encoder
    for name, kw in [("masformer", {"full_layers": 2, "block_size": 8}), ("full_attention", {})]:
        m = make(name, spec, max_length=128, **kw)
        m.wrap(model)
        close(m.encode(model.get_encoder(), ids, mask, training=False).hidden, ref, mask)


@pytest.mark.parametrize("arch,attn", [("bart", "sdpa"), ("bart", "eager"), ("t5", "sdpa")])
def test_block_attention_equals_independent_blocks(arch, attn):
    """Each block encoded alone, at the absolute positions it has in the long input (T5: relative)."""
    model, spec = tiny(arch, attn)
    ids, mask = batch([40, 29], spec)  # block 16 does not divide 40: the last block is padded
    m = make("block_attention", spec, block_size=16, max_length=64)
    enc = model.get_encoder()
    m.wrap(model)
    out = m.encode(enc, ids, mask, training=False)
    for s in range(0, 40, 16):
        blk, bm = ids[:, s:s + 16], mask[:, s:s + 16]
        keep = bm.sum(1) > 0
        blk, bm = blk[keep], bm[keep]
        if arch == "bart":  # inputs_embeds + stock positions 0..len-1 = tokens + positions s..s+len-1
            pos = enc.embed_positions.weight[2:]
            emb = enc.embed_tokens(blk) + pos[s:s + blk.shape[1]] - pos[:blk.shape[1]]
            ref = enc(inputs_embeds=emb, attention_mask=bm).last_hidden_state
        else:
            ref = enc(input_ids=blk, attention_mask=bm).last_hidden_state
        close(out.hidden[keep, s:s + 16], ref, bm)


@pytest.mark.parametrize("arch", ["bart", "t5"])
@pytest.mark.parametrize("name,kw", [("masformer", {"full_layers": 1, "block_size": 16}),
                                     ("block_attention", {"block_size": 7}),
                                     ("sliding_window", {"window": 5}),
                                     ("sliding_window", {"window": 70})])
def test_spans_match_dense_mask_reference(arch, name, kw):
    """Mixed spans, blocks and multi-chunk windows (chunks of 64) vs explicit N x N masks per layer;
    BART positions tiled past its 64 pretrained ones."""
    model, spec = tiny(arch)
    ids, mask = batch([150, 101], spec, seed=1)
    m = make(name, spec, max_length=200, **kw)
    m.wrap(model)
    enc = model.get_encoder()
    out = m.encode(enc, ids, mask, training=False).hidden
    close(out, dense_encoder(enc, ids, mask, m.spans(2)), mask)


def test_routed_window_layers_fall_back_to_stock_attention():
    """Called as a plain model (no window), routed layers are the model's own attention."""
    model, spec = tiny("t5")
    ids, mask = batch([30, 20], spec)
    ref = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
    make("sliding_window", spec, window=3).wrap(model)
    assert model.decoder.block[0].layer[0].SelfAttention.config._attn_implementation == "sdpa"
    close(model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state, ref, mask)


@pytest.mark.parametrize("n,w", [(1, 1), (5, 1), (64, 3), (130, 7), (200, 64), (97, 100)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_banded_kernel_matches_dense_sdpa(n, w, with_bias):
    g = torch.Generator().manual_seed(n + w)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g) for _ in range(3))
    valid = torch.ones(2, n, dtype=torch.bool)
    valid[1, n // 2 + 1:] = False
    i = torch.arange(n)
    dense = (((i[:, None] - i[None, :]).abs() <= w) & valid[:, None, :]) | torch.eye(n, dtype=torch.bool)
    mask, band = dense[:, None], None  # [B, 1, N, N]
    if with_bias:  # a relative-position bias, as T5's: one value per head and offset
        off = torch.randn(3, 4 * n + 1, generator=g)
        mask = torch.where(mask, off[:, i[None, :] - i[:, None] + 2 * n][None], torch.finfo(q.dtype).min)
        c = max(w, 64)
        qi, kj = torch.arange(c)[:, None] + w, torch.arange(c + 2 * w)[None, :]
        band = off[:, (kj - qi).clamp(-2 * n, 2 * n) + 2 * n][None]  # [1, H, c, c + 2w]
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = banded_attention(q, k, v, valid, w, bias=band).transpose(1, 2)  # [B, H, N, dh]
    assert (out - ref).abs().max() < 1e-5


# ----------------------------------------------------------------------------------- positions
def test_position_tiling_and_truncation(caplog):
    model, spec = tiny("bart")
    old = model.get_encoder().embed_positions.weight.detach().clone()  # [2 + 64, d]
    m = make("masformer", spec, max_length=150, full_layers=1, block_size=32)
    m.wrap(model)
    m.wrap(model)  # idempotent
    new = model.get_encoder().embed_positions.weight
    assert new.shape == (2 + 150, 16) and new.requires_grad
    assert torch.equal(new[:2], old[:2])
    p = torch.arange(150)
    assert torch.equal(new[2 + p], old[2 + p % 64])
    assert model.model.decoder.embed_positions.weight.shape[0] == 66  # the decoder keeps its own
    ids, mask = batch([180, 120], spec)  # longer than max_length: truncated, never an index error
    with caplog.at_level(logging.WARNING):
        out = m.encode(model.get_encoder(), ids, mask, training=False)
    assert out.hidden.shape == (2, 150, 16) and out.mask.shape == (2, 150)
    assert "truncated" in caplog.text and m.describe()["truncated_inputs"] == 1
    assert ids[0, 149] != 2 and m.truncate(ids, mask)[0][0, 149] == 2  # re-closed with </s>
    assert m.decoder_length(180) == 150


def test_t5_needs_no_position_extension():
    model, spec = tiny("t5")
    m = make("masformer", spec, max_length=3000, block_size=512)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    m.wrap(model)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_prefix_is_encoded_before_the_document():
    model, spec = tiny("bart")
    ids, mask = batch([30, 20], spec)
    pre = torch.tensor([[5, 6, 7], [8, 9, spec.pad_id]])
    pmask = (pre != spec.pad_id).long()
    m = make("sliding_window", spec, window=4, max_length=64)
    m.wrap(model)
    out = m.encode(model.get_encoder(), ids, mask, training=False, prefix_ids=pre, prefix_mask=pmask)
    joined = torch.cat([pre[1, :2], ids[1, :20]])[None]
    ref = m.encode(model.get_encoder(), joined, torch.ones_like(joined), training=False)
    assert out.mask.sum(1).tolist() == [33, 22]
    close(out.hidden[1:, :22], ref.hidden, ref.mask)


# ---------------------------------------------------------------------------------------- cost
def counted(span: tuple, n: int) -> int:
    """Attended pairs counted from an explicit pattern (independent of Span)."""
    i = torch.arange(n)
    kind, size = span
    if kind == "full":
        pat = torch.ones(n, n, dtype=torch.bool)
    elif kind == "block":
        pat = (i[:, None] // size) == (i[None, :] // size)
    else:
        pat = (i[:, None] - i[None, :]).abs() <= size
    return int(pat.sum())


def test_attention_cost_matches_counted_pairs():
    L = 3
    for n in [1, 2, 7, 16, 33, 50]:
        for b in [1, 3, 8, 16, 64]:
            for lay in range(L + 1):
                m = make("masformer", T5, full_layers=lay, block_size=b)
                want = lay * counted(("full", 0), n) + (L - lay) * counted(("block", b), n)
                assert m.attention_cost(n, L) == want
            assert make("block_attention", T5, block_size=b).attention_cost(n, L) == L * counted(("block", b), n)
        for w in [1, 2, 5, 49, 60]:
            assert make("sliding_window", T5, window=w).attention_cost(n, L) == L * counted(("window", w), n)
        assert make("full_attention", T5).attention_cost(n, L) == L * n * n


def test_banded_kernel_attends_exactly_the_counted_pairs():
    """Uniform scores + one-hot values: output (i, j) > 0 iff query i attends key j."""
    for n, w in [(10, 1), (70, 3), (150, 40)]:
        zero = torch.zeros(1, 1, n, 1)
        out = banded_attention(zero, zero, torch.eye(n)[None, None], None, w)  # [1, N, 1, N]
        assert int((out > 0).sum()) == counted(("window", w), n) == Span("window", w).pairs(n)


def test_attention_cost_reproduces_the_papers_numbers():
    """Section 4 at n = 8192, 24 layers: Table 1/2's C column (window: exact pairs, the paper rounds 2wLn)."""
    n = 8192
    assert make("full_attention", T5).attention_cost(n, 24) == 1_610_612_736  # 1,610M
    assert make("masformer", T5, full_layers=4, block_size=1024).attention_cost(n, 24) == 436_207_616  # 436M
    assert make("masformer", T5, full_layers=8, block_size=1024).attention_cost(n, 24) == 671_088_640  # 671M
    assert make("block_attention", T5, block_size=2048).attention_cost(n, 24) == 402_653_184  # 402M
    assert make("sliding_window", T5, window=1024).attention_cost(n, 24) == 24 * (2049 * n - 1024 * 1025)


def test_describe_records_cost():
    model, spec = tiny("bart")
    m = make("masformer", spec, max_length=64, full_layers=1, block_size=16)
    with pytest.raises(ValueError, match="wrap"):
        m.attention_cost(10)
    m.wrap(model)
    ids, mask = batch([40, 29], spec)
    m.encode(model.get_encoder(), ids, mask, training=False)
    d = m.describe()
    assert d["encoder_layers"] == 2 and d["full_layers"] == 1 and "l*n^2" in d["attention_cost_formula"]
    assert d["attention_cost_at_max_length"] == 64 * 64 + 4 * 16 * 16
    assert d["attention_cost_mean"] == round((m.attention_cost(40) + m.attention_cost(29)) / 2)


# --------------------------------------------------------------------------------------- configs
@pytest.mark.parametrize("name", METHODS)
def test_yaml_configs_compose(compose_cfg, name):
    path = CONF / "method" / f"{name}.yaml"
    assert path.read_text().startswith(f"# python train.py method={name}")
    rc = to_config(compose_cfg([f"method={name}", "method.max_length=4096"]))
    assert rc.method.name == name and rc.method.max_length == 4096


@pytest.mark.parametrize("kw,key", [
    ({"name": "masformer", "block_size": 0}, "method.block_size"),
    ({"name": "masformer", "full_layers": -1}, "method.full_layers"),
    ({"name": "block_attention", "block_size": -4}, "method.block_size"),
    ({"name": "sliding_window", "window": 0}, "method.window"),
    ({"name": "full_attention", "max_length": 0}, "method.max_length"),
])
def test_bad_values_are_config_errors(kw, key):
    with pytest.raises(ConfigError, match=key):
        method_config(kw)


def test_backbone_dependent_errors():
    with pytest.raises(ConfigError, match="method.max_length"):
        make("masformer", BART, max_length=2)  # no room beyond <s> </s>
    model, spec = tiny("t5")
    m = make("masformer", spec, full_layers=3)  # tiny T5 has 2 encoder layers
    with pytest.raises(ConfigError, match=r"method.full_layers=3: must be <= the encoder's 2 layers"):
        m.wrap(model)

    class Other(torch.nn.Module):
        def get_encoder(self):
            return torch.nn.Linear(2, 2)

    with pytest.raises(ConfigError, match="support BART and T5"):
        make("block_attention", spec).wrap(Other())


def test_unwrapped_model_fails_clearly():
    model, spec = tiny("bart")
    ids, mask = batch([100], spec)
    with pytest.raises(ValueError, match="wrap"):  # 100 tokens > 64 pretrained positions
        make("block_attention", spec, block_size=8).encode(model.get_encoder(), ids, mask, training=False)
    ids, mask = batch([30], spec)
    with pytest.raises(ValueError, match="wrap"):  # window layers not routed
        make("sliding_window", spec, window=2).encode(model.get_encoder(), ids, mask, training=False)


# ------------------------------------------------------------------------------------- end to end
@pytest.mark.parametrize("arch", ["bart", "t5"])
@pytest.mark.parametrize("name", METHODS)
def test_train_step_and_generate(arch, name):
    model, spec = tiny(arch)
    m = make(name, spec, max_length=96, **SMALL[name])
    model = m.wrap(model).train()
    ids, mask = batch([90, 41], spec)  # BART: past the 64 pretrained positions
    labels = torch.randint(3, 100, (2, 6))
    enc = m.encode(model.get_encoder(), ids, mask, training=True)
    assert enc.hidden.shape == (2, 90, 16)
    loss = model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask, labels=labels).loss
    loss.backward()
    layers = encoder_layers(model.get_encoder())
    for p in (model.get_encoder().embed_tokens.weight, *self_attention(layers[-1]).parameters()):
        assert p.grad is not None and p.grad.abs().sum() > 0
    if arch == "bart":
        grad = model.get_encoder().embed_positions.weight.grad
        assert grad[2 + 64: 2 + 90].abs().sum() > 0  # tiled positions are trained
    model.eval()
    with torch.no_grad():
        enc = m.encode(model.get_encoder(), ids, mask, training=False)
        out = model.generate(encoder_outputs=BaseModelOutput(last_hidden_state=enc.hidden), attention_mask=enc.mask,
                             num_beams=2, max_new_tokens=4)
    assert out.shape[0] == 2


@pytest.mark.parametrize("arch", ["bart", "t5"])
@pytest.mark.parametrize("name", ["masformer", "sliding_window"])
def test_gradient_checkpointing_keeps_gradients(arch, name):
    model, spec = tiny(arch)
    ids, mask = batch([50, 33], spec)
    grads = []
    for ckpt in (False, True):
        mm = copy.deepcopy(model)
        if ckpt:
            (getattr(mm, "activation_checkpointing_enable", None) or mm.gradient_checkpointing_enable)()
        m = make(name, spec, max_length=64, **SMALL[name])
        mm = m.wrap(mm).train()
        for mod in mm.modules():  # no dropout: compare with and without checkpointing
            if isinstance(mod, torch.nn.Dropout):
                mod.p = 0.0
            for attr in ("dropout", "activation_dropout"):
                if isinstance(getattr(mod, attr, None), float):
                    setattr(mod, attr, 0.0)
        assert all(layer.gradient_checkpointing == ckpt for layer in encoder_layers(mm.get_encoder()))
        hidden = m.encode(mm.get_encoder(), ids, mask, training=True).hidden
        hidden[mask.bool()].sum().backward()
        grads.append(mm.get_encoder().embed_tokens.weight.grad.clone())
    assert torch.allclose(grads[0], grads[1], atol=1e-5)


def test_embedded_default_config_runs_each_method(compose_cfg):
    """The methods validate against the embedded default composition (tiny_bart, tiny_t5)."""
    for backbone in ("tiny_bart", "tiny_t5"):
        for name in METHODS:
            rc = to_config(compose_cfg([f"method={name}", f"backbone={backbone}"]))
            assert OmegaConf.to_container(rc.raw.method)["name"] == name


@pytest.mark.slow
@pytest.mark.parametrize("backbone", ["tiny_bart", "tiny_t5"])
@pytest.mark.parametrize("name", METHODS)
def test_pipeline_end_to_end(tmp_path, compose_cfg, backbone, name):
    """The real pipeline (train, generate, score, metrics.json) with the default method config."""
    from scaleformer.runs.run import run

    result = run(compose_cfg([
        f"paths.root={tmp_path}/results", f"paths.cache={tmp_path.parent}/shared_cache", "data.synthetic_docs.train=2",
        "data.synthetic_docs.validation=1", "data.synthetic_docs.test=1", "trainer.max_steps=2",
        "trainer.enable_progress_bar=false", "generation.num_beams=2", "generation.max_new_tokens=4",
        "metrics.bertscore.enabled=false", f"backbone={backbone}", f"method={name}"]))
    d = result["method"]
    assert result["train_steps"] == 2 and d["name"] == name and d["encoder_layers"] == 2
    assert d["attention_cost_mean"] > 0 and d["attention_cost_formula"].startswith("C = ")


def test_a_span_kind_from_elsewhere_runs_through_the_registry():
    """A kind registered from outside ops/spans.py (here: "strided", every other key in view) runs in
    run_encoder and counts its pairs with no change to the span code."""
    import torch

    from scaleformer.ops import spans

    class Strided(spans.Full):
        name = "strided_test"

        def pairs(self, size: int, n: int) -> int:
            return int(self.dense_mask(size, n).sum())

        def dense_mask(self, size: int, n: int) -> torch.Tensor:
            i = torch.arange(n)
            return ((i[:, None] - i[None, :]) % 2 == 0)

        def covers(self, size: int, n: int) -> bool:
            return n <= 1

        def prepare(self, encoder, size, x, valid, bias_attn):
            keep = self.dense_mask(size, x.shape[1])[None] & valid[:, None, :]  # [B, N, N]
            return {"mask": torch.where(keep, 0.0, torch.finfo(x.dtype).min)[:, None].to(x.dtype), "bias": None}

    with pytest.raises(ValueError, match="unknown span kind 'strided_test'"):
        spans.Span("strided_test")
    spans.register_span_kind(Strided())
    try:
        assert spans.Span("strided_test").pairs(5) == 13
        from transformers import BartConfig, BartModel

        torch.manual_seed(0)
        enc = BartModel(BartConfig(vocab_size=60, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
                                   decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                                   max_position_embeddings=64, attn_implementation="eager")).encoder.eval()
        ids = torch.randint(4, 60, (1, 12))
        out = spans.run_encoder(enc, ids, torch.ones_like(ids), [spans.Span("strided_test"), spans.Span("full")])
        ref = spans.run_encoder(enc, ids, torch.ones_like(ids), [spans.Span("full"), spans.Span("full")])
        assert out.shape == ref.shape and not torch.allclose(out, ref)
    finally:
        spans.SPAN_KINDS.pop("strided_test")
