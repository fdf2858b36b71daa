"""The fast training step keeps the plain step's numbers, for every registered method on BART and T5.

What the fast step changes: every chunk of a batch in one encoder pass (``method.one_pass_training``), the
fused AdamW kernel (``optim.fused``), a non-finite loss read every few micro-batches on a GPU instead of
each one. Against the plain path (chunks ``encoder_batch_size`` at a time, the for-loop AdamW) in fp32 on
the CPU, dropout off (with it on, one pass draws other masks from the same distribution): the loss and
every gradient within 1e-5 relative, and the weights after an optimiser step too.
"""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_models import BART, METHODS, SMALL, T5, batch, tiny

from scaleformer.config import OptimConfig
from scaleformer.methods import build_method, method_config
from scaleformer.model.backbone import compile_decoder, compile_encoder
from scaleformer.model.hf import ScaleformerForConditionalGeneration
from scaleformer.ops import compat
from scaleformer.runs.module import SummarizationModule

REL = 1e-5
LENGTHS = [300, 170, 9]  # ragged: padding and a document shorter than a chunk


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _no_dropout(model: torch.nn.Module) -> None:
    """Dropout off: one pass draws the same distribution of masks as several, but not the same masks."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        for attr in ("dropout", "attention_dropout", "activation_dropout"):
            if isinstance(getattr(m, attr, None), float):
                setattr(m, attr, 0.0)


def _module(arch: str, name: str, kw: dict, fast: bool) -> tuple[SummarizationModule, dict]:
    model, spec = tiny(arch)
    model.train()
    _no_dropout(model)
    chunked = hasattr(method_config({"name": name, **kw}), "one_pass_training")
    knobs = {"one_pass_training": fast, "encoder_batch_size": 2} if chunked else {}
    method = build_method(method_config({"name": name, **kw, **knobs}), spec)
    module = SummarizationModule(ScaleformerForConditionalGeneration.from_parts(method.wrap(model), method),
                                 method, None, OptimConfig(lr=1e-2, fused=fast))
    ids, mask = batch(LENGTHS, BART if arch == "bart" else T5)
    labels = torch.randint(3, 120, (len(LENGTHS), 7), generator=torch.Generator().manual_seed(1))
    labels[1, 5:] = -100  # a shorter target
    return module, {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _grads(module: SummarizationModule, data: dict) -> tuple[float, dict[str, torch.Tensor]]:
    torch.manual_seed(0)  # the methods' own draws (random middles, retrieval's random-encoded steps)
    loss = module(data)
    loss.backward()
    return float(loss), {n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None}


def _flat(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([tensors[n].detach().flatten() for n in sorted(tensors)])


@pytest.mark.parametrize(("name", "kw"), METHODS, ids=[m for m, _ in METHODS])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_the_fast_step_keeps_the_loss_gradients_and_update_of_the_plain_step(arch, name, kw, monkeypatch):
    monkeypatch.setattr(SummarizationModule, "trainer", property(lambda self: _Trainer()), raising=False)
    plain, data = _module(arch, name, kw, fast=False)
    fast, _ = _module(arch, name, kw, fast=True)
    fast.load_state_dict(copy.deepcopy(plain.state_dict()))
    loss0, grads0 = _grads(plain, data)
    loss1, grads1 = _grads(fast, data)
    assert abs(loss1 - loss0) <= REL * abs(loss0)
    # the gradient as one vector: some entries are zero in exact arithmetic (a key projection's bias under
    # softmax), where any rounding is an infinite relative error of that tensor alone
    assert grads0.keys() == grads1.keys() and grads0 and _rel(_flat(grads1), _flat(grads0)) <= REL
    # the update from the same gradients (Adam divides a gradient by its own size: it would blow rounding
    # in those zero entries up to a full step)
    for n, p in fast.named_parameters():
        if p.grad is not None:
            p.grad.copy_(grads0[n])
    optimisers = [m.configure_optimizers()["optimizer"] for m in (plain, fast)]
    assert [o.defaults["fused"] for o in optimisers] == [None, True]
    for o in optimisers:
        o.step()
    after0, after1 = (dict(m.named_parameters()) for m in (plain, fast))
    moved = max(after0, key=lambda n: _rel(after1[n].detach(), after0[n].detach()))
    assert _rel(after1[moved].detach(), after0[moved].detach()) <= REL, moved


class _Trainer:
    """What configure_optimizers reads of a trainer."""

    estimated_stepping_batches = 10


COMPILED = [("bart", "sled", ("encoder",)), ("t5", "sled", ("encoder", "decoder")),
            ("bart", "unlimiformer", ("encoder", "decoder"))]  # Unlimiformer: retrieval in the decoder's cross-attention


@pytest.mark.parametrize(("arch", "name", "parts"), COMPILED, ids=["-".join([a, n, *p]) for a, n, p in COMPILED])
def test_compiled_layers_keep_the_loss_and_gradients(arch, name, parts, monkeypatch):
    """backbone.compile_encoder / compile_decoder: each layer through torch.compile (aot_eager here: dynamo's
    graph capture and AOTAutograd's backward, no code generation, so it runs in seconds on a CPU; the gpu
    tier runs inductor)."""
    monkeypatch.setattr(SummarizationModule, "trainer", property(lambda self: _Trainer()), raising=False)
    kw = dict(next(k for n, k in METHODS if n == name))
    plain, data = _module(arch, name, kw, fast=True)
    compiled, _ = _module(arch, name, kw, fast=True)
    compiled.load_state_dict(copy.deepcopy(plain.state_dict()))
    for part in parts:
        {"encoder": compile_encoder, "decoder": compile_decoder}[part](compiled.model.backbone, "aot_eager")
    torch.compiler.reset()  # an earlier test's capture of the same layer code would be reused uncounted
    graphs = compat.compiled_graphs()
    loss0, grads0 = _grads(plain, data)
    loss1, grads1 = _grads(compiled, data)
    assert compat.compiled_graphs() > graphs  # the compiled layers ran, not their eager fallback
    assert abs(loss1 - loss0) <= REL * abs(loss0) and _rel(_flat(grads1), _flat(grads0)) <= REL
    stacks = {"encoder": compiled.model.backbone.get_encoder(), "decoder": compiled.model.backbone.get_decoder()}
    for part in parts:
        layers = stacks[part].layers if arch == "bart" else stacks[part].block
        assert all(getattr(x, "_compiled_call_impl", None) is not None for x in layers)


@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_the_fused_optimizer_clips_gradients_under_mixed_precision(precision):
    """Lightning refuses gradient clipping with any optimizer that unscales inside its step under mixed
    precision (a fused AdamW), though bf16 has no scale: the module clips itself, to Lightning's norm."""
    import lightning.pytorch as pl

    module, data = _module("bart", "sled", dict(SMALL), fast=True)
    norms, clip = [], module.configure_gradient_clipping

    def clipped(optimizer, *args, **kwargs):  # each gradient's global norm before and after the module clips
        def norm() -> float:
            return float(torch.cat([p.grad.flatten().float() for p in module.parameters() if p.grad is not None]).norm())
        before = norm()
        clip(optimizer, *args, **kwargs)
        norms.append((before, norm()))

    module.configure_gradient_clipping = clipped
    trainer = pl.Trainer(accelerator="cpu", precision=precision, gradient_clip_val=0.5, max_steps=2,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader([data, data], batch_size=None))
    assert trainer.optimizers[0].defaults["fused"] is True
    assert len(norms) == 2 and all(b > 0.5 and abs(a - 0.5) <= 1e-3 for b, a in norms)
