"""The decoding floor: the bytes one step reads (checked against real caches and a hand count), the copy
bandwidth, and the floor columns of a tiny CPU benchmark run (present, positive, multiple = measured /
floor); committed results written before the floor still render."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_bench import tiny_profile, tiny_shape  # tests/bench is on sys.path (rootdir-less test folder)
from transformers import AutoModelForSeq2SeqLM, BartConfig, T5Config

from scaleformer import bench
from scaleformer.bench.floor import kv_bytes, step_floor, weight_bytes
from scaleformer.bench.report import markdown
from scaleformer.bench.rows import LED
from scaleformer.bench.summary import summarise
from scaleformer.ops import decoding
from scaleformer.ops.measure import copy_bandwidth

ROOT = Path(__file__).resolve().parents[2]


def tiny_model(arch: str) -> torch.nn.Module:
    if arch == "bart":
        conf = BartConfig(vocab_size=96, d_model=32, encoder_layers=1, decoder_layers=2, encoder_attention_heads=2,
                          decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                          max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                          decoder_start_token_id=2, forced_eos_token_id=2)
    else:  # heads x d_kv (24) != d_model (32): the key/value width is not d_model
        conf = T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=3,
                        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    return AutoModelForSeq2SeqLM.from_config(conf, attn_implementation="sdpa").eval()


def generate(model: torch.nn.Module, length: int, beams: int, new_tokens: int, dtype: torch.dtype) -> object:
    hidden = torch.randn(1, length, model.config.d_model, dtype=dtype)  # [docs, T, d]
    with torch.no_grad():
        return decoding.generate(
            model, hidden, torch.ones(1, length, dtype=torch.long), num_beams=beams, max_new_tokens=new_tokens,
            min_new_tokens=new_tokens, do_sample=False, early_stopping=False, length_penalty=1.0,
            no_repeat_ngram_size=0, forced_bos_token_id=None, forced_eos_token_id=None, use_cache=True,
            return_dict_in_generate=True)


@pytest.mark.parametrize("arch", ["bart", "t5"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_analytic_kv_bytes_equal_the_real_caches(arch, dtype):
    model = tiny_model(arch).to(dtype)
    elem = torch.tensor([], dtype=dtype).element_size()
    res = generate(model, length=40, beams=2, new_tokens=5, dtype=dtype)
    cache = res.past_key_values
    assert isinstance(cache.cross_attention_cache, decoding.SharedCrossCache)  # once per document
    assert decoding.cross_attention_bytes(cache) == kv_bytes(model.config, 40, elem) > 0
    # The self-attention cache after k new tokens holds k positions per beam (step i reads i + its own).
    held = sum(t.numel() * t.element_size() for layer in cache.self_attention_cache.layers
               for t in (layer.keys, layer.values))
    assert held == kv_bytes(model.config, 5, elem, rows=2)


@pytest.mark.parametrize("arch", ["bart", "t5"])
@pytest.mark.parametrize("tied", [True, False])
def test_weight_bytes_hand_count(arch, tied):
    model = tiny_model(arch)
    head = model.get_output_embeddings()
    assert head.weight is model.get_decoder().embed_tokens.weight  # tied: counted once, whole, as the head
    if not tied:
        head.weight = torch.nn.Parameter(head.weight.detach().clone())
    rows = 2
    dec = dict(model.get_decoder().named_parameters())
    cross_kv = (".encoder_attn.k_proj.", ".encoder_attn.v_proj.", ".EncDecAttention.k.", ".EncDecAttention.v.")
    tables = {n: p for n, p in dec.items()
              if n.startswith(("embed_tokens.", "embed_positions.")) or "relative_attention_bias" in n}
    full = sum(p.numel() * 4 for n, p in dec.items() if n not in tables and not any(s in n for s in cross_kv))
    looked_up = sum(min(rows, p.shape[0]) * p.shape[1] * 4 for p in tables.values())
    lm_head = head.weight.numel() * 4
    if arch == "bart":
        lm_head += model.final_logits_bias.numel() * 4  # [1, vocab]
    got = weight_bytes(model, rows)
    assert got == {"decoder": full, "embedding_rows": looked_up, "lm_head": lm_head,
                   "total": full + looked_up + lm_head}


def test_step_floor_arithmetic_and_analytic_fallback():
    model = tiny_model("bart")
    f = step_floor(model, rows=4, new_tokens=7, cross_bytes=None, cross_length=50, time_s=0.7, bandwidth=2e9)
    assert f["cross_attention_bytes"] == kv_bytes(model.config, 50, 4, rows=4) and not f["cross_attention_measured"]
    assert f["self_attention_mean_length"] == 4.0
    assert f["self_attention_bytes"] == kv_bytes(model.config, 4.0, 4, rows=4)
    assert f["step_bytes"] == f["weight_bytes"] + f["cross_attention_bytes"] + f["self_attention_bytes"]
    assert f["floor_ms"] == pytest.approx(f["step_bytes"] / 2e9 * 1e3)
    assert f["ms_per_token"] == pytest.approx(100.0)
    assert f["floor_multiple"] == pytest.approx(100.0 / f["floor_ms"])
    none = step_floor(model, rows=1, new_tokens=1, cross_bytes=10, cross_length=5, time_s=1.0, bandwidth=None)
    assert none["floor_ms"] is None and none["floor_multiple"] is None and none["step_bytes"] > 0


def test_copy_bandwidth_on_the_cpu():
    bw = copy_bandwidth(torch.device("cpu"), size_bytes=4 * 2**20, repeats=10)
    assert bw["gb_per_s"] > 0 and bw["bytes_per_s"] == pytest.approx(bw["gb_per_s"] * 1e9)
    assert bw["size_bytes"] == 4 * 2**20 and bw["repeats"] == 10 and bw["counted"] == "read + write"
    assert bw["gb_per_s"] == pytest.approx(2 * bw["size_bytes"] / bw["time_s"] / 1e9)
    assert 0 < bw["time_min_s"] <= bw["time_s"]
    with pytest.raises(ValueError, match="repeats=0"):
        copy_bandwidth(torch.device("cpu"), size_bytes=1024, repeats=0)


def test_floor_columns_of_a_tiny_run(tmp_path):
    bench.run_profile(tiny_profile(methods=["sled", LED], sizes=[64, 128], targets=[]), tmp_path,
                            log=lambda s: None, copy_bytes=4 * 2**20)
    saved = json.loads((tmp_path / "test-tiny.json").read_text())
    bw = saved["environment"]["copy_bandwidth"]
    assert bw["gb_per_s"] > 0
    k = saved["settings"]["new_tokens"]
    for c in saved["results"]:
        assert c["status"] == "ok"
        for b, g in c["generate"].items():
            f = g["floor"]
            for key in ("step_bytes", "weight_bytes", "cross_attention_bytes", "self_attention_bytes", "floor_ms",
                        "ms_per_token", "floor_multiple", "bandwidth_gb_per_s"):
                assert f[key] > 0, (c["method"], c["n_tokens"], b, key)
            assert f["bandwidth_gb_per_s"] == pytest.approx(bw["gb_per_s"])
            assert f["ms_per_token"] == pytest.approx(g["time_s"] / k * 1e3)
            assert f["floor_ms"] == pytest.approx(f["step_bytes"] / bw["bytes_per_s"] * 1e3)
            assert f["floor_multiple"] == pytest.approx(f["ms_per_token"] / f["floor_ms"])
            assert f["cross_attention_bytes"] == c["cross_attention_bytes"][b]
            # LED is shaped like the backbone: the same decoder layers and width
            assert f["self_attention_bytes"] == kv_bytes(tiny_shape().config, (k + 1) / 2, 4, rows=int(b))
        g1, g2 = c["generate"]["1"]["floor"], c["generate"]["2"]["floor"]
        assert g2["weight_bytes"] - g1["weight_bytes"] == 32 * 4 * 2  # one more token + position row
        if c["method"] == LED:  # the stock cache: one copy of the cross-attention per beam
            assert g2["cross_attention_bytes"] == 2 * g1["cross_attention_bytes"]
        else:
            assert g2["cross_attention_bytes"] == g1["cross_attention_bytes"]
    assert all(cmp["floor_speedup"] > 0 for cmp in saved["comparisons"]) or not saved["comparisons"]
    md = (tmp_path / "test-tiny.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| sled | 128 |"))
    cells = [x.strip() for x in row.strip("|").split("|")]
    head = next(line for line in md.splitlines() if line.startswith("| method | N |"))
    names = [x.strip() for x in head.strip("|").split("|")]
    got = dict(zip(names, cells))
    g = by_n(saved, "sled", 128)["generate"]
    assert got["x floor (1/2b)"] == " / ".join(f"{g[b]['floor']['floor_multiple']:.1f}" for b in ("1", "2"))
    assert got["floor ms (1/2b)"] and got["ms/tok (1/2b)"] and got["step MiB (1/2b)"]
    assert "decoding floor" in md and f"Copy bandwidth: {bw['gb_per_s']:.1f} GB/s" in md


def by_n(doc: dict, method: str, n: int) -> dict:
    return next(c for c in doc["results"] if c["method"] == method and c["n_tokens"] == n)


def without_floor(doc: dict) -> dict:
    """A results file as written before the floor was measured: no bandwidth, no floor fields."""
    doc = json.loads(json.dumps(doc))
    for run in [doc["environment"], *doc.get("runs", [])]:
        run.pop("copy_bandwidth", None)
    for cell in doc["results"]:
        for gen in (cell.get("generate") or {}).values():
            if isinstance(gen, dict):
                gen.pop("floor", None)
    for cmp in doc.get("comparisons", []):
        cmp.pop("floor_speedup", None)
    return doc


@pytest.mark.parametrize("name", ["cpu-tiny", "gpu-base"])
def test_committed_results_render_with_or_without_the_floor(name):
    path = ROOT / "results" / "bench" / f"{name}.json"
    if not path.exists():
        pytest.skip(f"no {path}")
    doc = json.loads(path.read_text())
    measured = any(r.get("copy_bandwidth") for r in [doc["environment"], *doc.get("runs", [])])
    md = markdown(doc)
    assert "| floor ms (1/4b) |" in md
    assert ("not measured (results written before the floor was)" in md) is not measured
    old = without_floor(doc)
    md = markdown(old)
    assert "| floor ms (1/4b) |" in md and "not measured (results written before the floor was)" in md
    summarise(old)  # recomputing the summaries tolerates the missing floor too
    assert all(c.get("floor_speedup") is None for c in old["comparisons"])
