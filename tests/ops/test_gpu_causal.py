"""The gpu tier for MASFormer as its paper runs it (``pytest -m gpu``): the causal spans on CUDA. Skipped, with the
reason, where CUDA is absent.

- each span kind in bf16 and fp16 within a stated tolerance of its fp32 output on the same device (relative
  Frobenius error 2e-2: half precision keeps 8 to 11 bits of mantissa);
- the block and window kernels reach a fused sdpa backend (flash or memory-efficient), never the math fallback:
  they run with only those two enabled, where the math path would raise "No available kernel";
- cached decoding on CUDA equals the whole sequence's forward;
- one continual-training step under ``trainer.strategy=fsdp`` on one GPU with ``bf16-mixed``.
"""

from __future__ import annotations

import pytest
import torch
from conftest import compose
from tiny_models import tiny_causal

from scaleformer.ops.causal_spans import route_causal_spans
from scaleformer.ops.spans import Span

CUDA = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs a CUDA device (none here)")]
SPANS = {"full": Span("full", causal=True), "block": Span("block", 64, causal=True),
         "window": Span("window", 48, causal=True)}


def _qkv(dtype: torch.dtype, n: int = 512) -> tuple[torch.Tensor, ...]:
    g = torch.Generator("cuda").manual_seed(0)
    return tuple(torch.randn(2, 8, n, 64, device="cuda", generator=g).to(dtype) for _ in range(3))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", sorted(SPANS))
def test_half_precision_spans_are_within_tolerance_of_fp32(kind, dtype):
    span = SPANS[kind]
    want = span.attend(*_qkv(torch.float32)).float()
    got = span.attend(*_qkv(dtype)).float()
    assert torch.linalg.norm(got - want) / torch.linalg.norm(want) < 2e-2


@pytest.mark.parametrize("kind", ["block", "window"])
def test_block_and_window_kernels_reach_a_fused_backend_not_the_math_one(kind):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):  # math is not among them
        out = SPANS[kind].attend(*_qkv(torch.bfloat16))
    assert out.shape == (2, 8, 512, 64) and torch.isfinite(out).all()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_cached_decoding_on_cuda_equals_the_whole_sequence(family):
    model = tiny_causal(family).float().cuda()
    route_causal_spans(model, [Span("full", causal=True), Span("block", 8, causal=True), Span("window", 5, causal=True)])
    ids = torch.randint(3, 61, (2, 40), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    with torch.no_grad():
        whole = model(ids, use_cache=False).logits
        first = model(ids[:, :30], use_cache=True)
        cache, steps = first.past_key_values, []
        for t in range(30, 40):
            out = model(ids[:, t:t + 1], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, 1), whole[:, 30:], atol=1e-4, rtol=1e-4)


def test_one_fsdp_continual_training_step_on_one_gpu_in_bf16_mixed(tmp_path):
    from scaleformer.runs.run import run

    out = run(compose(["experiment=masformer_lm", "backbone=tiny_gpt2_reader", "method.max_length=256",
                       "trainer.max_steps=1", "trainer.strategy=fsdp", "trainer.accelerator=gpu", "trainer.devices=1",
                       "trainer.precision=bf16-mixed", "trainer.enable_progress_bar=false",
                       "data.synthetic_docs.train=8", "data.synthetic_docs.validation=0", "data.splits.validation=null",
                       "data.synthetic_docs.test=2", "trainer.eval_splits=[test]", "metrics.perplexity_bucket=64",
                       f"paths.root={tmp_path}/results", f"paths.cache={tmp_path}/cache"]))
    assert out["train_steps"] == 1 and out["splits"]["test"]["ppl"] > 1
