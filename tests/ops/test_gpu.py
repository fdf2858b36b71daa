"""The gpu tier (``pytest -m gpu``; ``make gpu-check`` runs it with the gpu-base benchmark): the CUDA-only
paths, each against the CPU run or the stock path. Skipped, with the reason, where CUDA is absent.

Tolerances. fp32 on CUDA: generated tokens identical to the CPU's (the same math, reduction order
aside, and greedy/beam choices are stable at these margins). bf16 autocast: encoder states within a
relative (Frobenius) error of 3e-2 of the CPU fp32 states, and at least 3 of every 4 generated tokens
equal to the CPU's, position by position (bf16 keeps 8 bits of mantissa: a near-tie between two
tokens may flip, and everything after a flip differs).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT
from test_decoding import settings, shared, stock
from tiny_models import METHODS, batch, tiny

from scaleformer.methods import build_method, method_config
from scaleformer.ops import decoding
from scaleformer.ops.chunking import auto_encoder_batch_size

CUDA = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs a CUDA device (none here)")]
LENGTHS = [300, 170, 9]


def _run(arch: str, name: str, kw: dict, device: str, dtype: torch.dtype | None = None, beams: int = 1):
    """Encode a ragged batch with `name` and generate, on `device` (autocast to `dtype` when given)."""
    model, spec = tiny(arch)
    method = build_method(method_config({"name": name, **kw}), spec)
    model = method.wrap(model).to(device)
    ids, mask = batch(LENGTHS, spec)
    ids, mask = ids.to(device), mask.to(device)
    ctx = torch.autocast("cuda", dtype=dtype) if dtype is not None else torch.autocast("cuda", enabled=False)
    with torch.no_grad(), ctx:
        enc = method.encode(model.get_encoder(), ids, mask, training=False)
        out = shared(model, enc, **settings(beams))
    return enc.hidden.float().cpu(), out.sequences.cpu()


@pytest.mark.parametrize("beams", [1, 4])
@pytest.mark.parametrize(("name", "kw"), METHODS, ids=[m for m, _ in METHODS])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_fp32_on_cuda_generates_the_cpu_tokens(arch, name, kw, beams):
    _, cpu = _run(arch, name, kw, "cpu", beams=beams)
    _, gpu = _run(arch, name, kw, "cuda", beams=beams)
    assert torch.equal(gpu, cpu)


@pytest.mark.parametrize(("name", "kw"), METHODS, ids=[m for m, _ in METHODS])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_bf16_on_cuda_is_within_tolerance_of_the_cpu(arch, name, kw):
    h_cpu, cpu = _run(arch, name, kw, "cpu")
    h_gpu, gpu = _run(arch, name, kw, "cuda", dtype=torch.bfloat16)
    rel = (h_gpu - h_cpu).norm() / h_cpu.norm()
    assert rel < 3e-2, f"encoder states: relative error {rel:.3g}"
    width = min(cpu.shape[1], gpu.shape[1])
    agree = (cpu[:, :width] == gpu[:, :width]).float().mean().item()
    assert agree >= 0.75, f"{agree:.0%} of generated tokens equal the CPU's"


@pytest.mark.parametrize("impl", ["sdpa", "flash_attention_2"])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_grouped_beams_equal_the_stock_path_on_cuda(arch, impl):
    """The grouped-beam cross-attention (flash implementations go through sdpa with a boolean mask)."""
    if impl.startswith("flash") and importlib.util.find_spec("flash_attn") is None:
        pytest.skip("flash_attn is not installed")
    if impl.startswith("flash") and arch == "t5":
        pytest.skip("T5 has no flash-attention implementation in transformers")
    model, spec = tiny(arch)
    model.config._attn_implementation = impl
    dtype = torch.bfloat16 if impl.startswith("flash") else torch.float32
    method = build_method(method_config({"name": "sled", "chunk_size": 48, "overlap": 12}), spec)
    model = method.wrap(model).to("cuda", dtype)
    ids, mask = (t.cuda() for t in batch(LENGTHS, spec))
    with torch.no_grad():
        enc = method.encode(model.get_encoder(), ids, mask, training=False)
        want, got = stock(model, enc, **settings(4)), shared(model, enc, **settings(4))
    if dtype == torch.float32:
        assert torch.equal(got.sequences, want.sequences)
    else:  # same kernels on different layouts: bf16 rounding may differ, the first steps must not
        assert torch.equal(got.sequences[:, :3], want.sequences[:, :3])
    assert decoding.cross_attention_bytes(want.past_key_values) == 4 * decoding.cross_attention_bytes(
        got.past_key_values)


def test_auto_encoder_batch_size_respects_a_capped_memory_fraction():
    """``encoder_batch_size=0`` under ``set_per_process_memory_fraction``: the chosen size runs, 8x it
    does not (the cap, not the device's free memory, is what the allocator enforces)."""
    from transformers import BartConfig, BartModel

    torch.cuda.empty_cache()
    _, total = torch.cuda.mem_get_info()
    fraction = min(1.0, 2 * 2**30 / total)  # a 2 GiB budget
    torch.cuda.set_per_process_memory_fraction(fraction)
    try:
        cfg = BartConfig(d_model=768, encoder_layers=6, encoder_attention_heads=12, encoder_ffn_dim=3072,
                         max_position_embeddings=1024, vocab_size=1000)
        encoder = BartModel(cfg).get_encoder().cuda().eval()
        spec = type("Spec", (), {"d_model": 768, "n_encoder_layers": 6})()
        size = auto_encoder_batch_size(torch.device("cuda"), 1024, spec, training=False)
        assert size >= 1 and size == auto_encoder_batch_size(torch.device("cuda", 0), 1024, spec, training=False)
        with torch.no_grad():
            encoder(input_ids=torch.randint(3, 1000, (size, 1024), device="cuda"))
        torch.cuda.synchronize()
        with pytest.raises(torch.cuda.OutOfMemoryError), torch.no_grad():
            encoder(input_ids=torch.randint(3, 1000, (8 * size, 1024), device="cuda"))
            torch.cuda.synchronize()
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()


@pytest.mark.parametrize("middle", [0, 8])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_kept_layer_equals_the_full_last_layer_on_cuda(arch, middle):
    """ScaleFormer's kept-positions last layer on the device gives the full layer's states."""
    from test_kept_layer import rows
    from test_kept_layer import tiny as tiny_encoder

    model, spec = tiny_encoder(arch)
    model = model.eval().cuda()
    ids, mask = (t.cuda() for t in rows([300, 95, 12], spec.pad_id))
    kw = dict(chunk_size=40, overlap=10, middle_tokens=middle, encoder_batch_size=3)
    outs = []
    for on in (True, False):
        m = build_method(method_config({"name": "scaleformer", "kept_only_last_layer": on, **kw}), spec)
        with torch.no_grad():
            outs.append(m.encode(model.get_encoder(), ids, mask, training=False))
    assert torch.equal(outs[0].mask, outs[1].mask)
    torch.testing.assert_close(outs[0].hidden, outs[1].hidden, atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_retrieval_top_k_on_cuda_equals_the_cpu(arch):
    """Unlimiformer's and Memorizing's top-k retrieval on the device: the CPU's tokens, 4 beams."""
    for name, kw in METHODS:
        if name in ("unlimiformer", "memorizing"):
            _, cpu = _run(arch, name, kw, "cpu", beams=4)
            _, gpu = _run(arch, name, kw, "cuda", beams=4)
            assert torch.equal(gpu, cpu), name


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices for a 2-process NCCL run")
def test_two_nccl_processes_evaluate_as_one(tmp_path):
    def train_py(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "train.py", "debug=default", f"paths.root={tmp_path}/r",
                               f"paths.cache={tmp_path}/c", "data.synthetic_docs.validation=6",
                               "data.max_eval_examples=6", "trainer.enable_progress_bar=false", *args],
                              cwd=ROOT, capture_output=True, text=True, timeout=900,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})

    one = train_py("run_name=one", "trainer.accelerator=gpu", "trainer.devices=1")
    assert one.returncode == 0, one.stderr[-3000:]
    ckpt = tmp_path / "r" / "runs" / "one" / "checkpoints" / "last.ckpt"
    two = train_py("run_name=two", "trainer.accelerator=gpu", "trainer.devices=2", "trainer.strategy=ddp",
                   "trainer.do_train=false", f"trainer.ckpt_path={ckpt}")
    assert two.returncode == 0, two.stderr[-3000:]
    metrics = json.loads(next((tmp_path / "r" / "runs" / "two").rglob("metrics.json")).read_text())
    assert metrics["world_size"] == 2
    preds = [next((tmp_path / "r" / "runs" / r).rglob("predictions_validation.jsonl")).read_text()
             for r in ("one", "two")]
    assert preds[0] == preds[1]


@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_inductor_compiled_layers_keep_the_training_loss_on_cuda(arch):
    """backbone.compile_encoder=inductor and compile_decoder=inductor: the layers' generated kernels give the
    eager bf16 loss and gradients within bf16's rounding (the CPU tier checks the graph capture with
    aot_eager)."""
    from scaleformer.model.backbone import compile_decoder, compile_encoder

    results = []
    for backend in (None, "inductor"):
        model, spec = tiny(arch)
        model = model.eval().cuda()  # dropout off: inductor draws its masks from another generator
        method = build_method(method_config({"name": "sled", **dict(METHODS)["sled"]}), spec)
        if backend:
            compile_encoder(model, backend)
            compile_decoder(model, backend)
        ids, mask = batch(LENGTHS, spec)
        labels = torch.randint(3, 120, (len(LENGTHS), 6), generator=torch.Generator().manual_seed(1)).cuda()
        torch.manual_seed(0)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            enc = method.encode(model.get_encoder(), ids.cuda(), mask.cuda(), training=True)
            loss = model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask, labels=labels).loss
        loss.backward()
        grad = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
        results.append((float(loss), grad))
    (l0, g0), (l1, g1) = results
    assert abs(l1 - l0) <= 2e-2 * abs(l0)
    assert float((g1 - g0).norm() / g0.norm()) <= 5e-2


@pytest.mark.parametrize("beams", [1, 4])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_static_cache_compiled_step_generates_the_eager_tokens_on_cuda(arch, beams, monkeypatch):
    """generation.static_cache + generation.compile: transformers compiles greedy search's decoding step
    (torch.compile "reduce-overhead": a CUDA graph; 5.24's beam search calls the model eagerly), and the
    tokens equal the eager dynamic cache's, at the capture and at a replay with new documents' keys/values."""
    from scaleformer.config import GenerationConfig
    from scaleformer.ops import static_decoding

    model, spec = tiny(arch)
    method = build_method(method_config({"name": "sled", **dict(METHODS)["sled"]}), spec)
    model = method.wrap(model).cuda()
    compiled = []
    real = type(model).get_compiled_call
    monkeypatch.setattr(type(model), "get_compiled_call",
                        lambda self, *a, **k: compiled.append(1) or real(self, *a, **k))
    kw = static_decoding.generation_kwargs(GenerationConfig(static_cache=True, compile=True))
    for seed in (0, 1):
        ids, mask = batch(LENGTHS, spec, seed=seed)
        with torch.no_grad():
            enc = method.encode(model.get_encoder(), ids.cuda(), mask.cuda(), training=False)
            want = shared(model, enc, **settings(beams))
            got = shared(model, enc, **settings(beams), **kw)
        assert torch.equal(got.sequences, want.sequences)
        assert type(got.past_key_values.self_attention_cache).__name__ == "StaticCache"
    assert bool(compiled) == (beams == 1)


@pytest.mark.parametrize("beams", [1, 4])
def test_the_decoding_step_compiled_on_cuda_runs_as_a_graph(beams):
    """scaleformer's decoding step through inductor on CUDA (mode reduce-overhead: CUDA graphs): a second batch of
    documents replays it; greedy keeps the eager step's tokens (fused kernels may flip beam search's near-ties)."""
    import torch._dynamo

    from scaleformer.ops import step_decoding

    torch._dynamo.reset()
    model, spec = tiny("bart")
    method = build_method(method_config({"name": "sled", **dict(METHODS)["sled"]}), spec)
    model = method.wrap(model).cuda()
    for seed in (0, 1):
        ids, mask = batch(LENGTHS, spec, seed=seed)
        with torch.no_grad():
            enc = method.encode(model.get_encoder(), ids.cuda(), mask.cuda(), training=False)
            kw = dict(settings(beams), do_sample=False)
            eager = step_decoding.generate(model, enc.hidden, enc.mask, **kw)
            got = step_decoding.generate(model, enc.hidden, enc.mask, compile="inductor", **kw)
        assert got.shape[0] == eager.shape[0]
        if beams == 1:
            assert torch.equal(got, eager)
