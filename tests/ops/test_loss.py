"""A micro-batch of several documents trains as the same documents accumulated one at a time.

scaleformer.ops.loss: each document's mean token loss, then their mean; the gradient of a ragged micro-batch
equals the mean of the single-document gradients (fp32, 1e-5), for every registered method, BART and T5.
Evaluation mode: dropout and training's fresh random draws (ScaleFormer's middle tokens) are new for every
call, so only the deterministic forward can be compared; what differs in training is the draw, not the loss.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tiny_models import METHODS, batch, tiny

from scaleformer.methods import build_method, method_config
from scaleformer.model.hf import ScaleformerForConditionalGeneration
from scaleformer.ops.loss import IGNORE, document_loss, document_mean_loss

LENGTHS = [260, 150, 9, 200]  # ragged inputs, most past the 128-position window
TARGETS = [7, 3, 12, 5]  # ragged summaries: a token mean over the batch would weigh the third four times the second


def labels_for(spec_pad: int, seed: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    out = torch.full((len(TARGETS), max(TARGETS)), IGNORE)
    for b, n in enumerate(TARGETS):
        out[b, :n] = torch.randint(3, 120, (n,), generator=g)
    return out


def reference(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The math spelled out: per document, the mean of its target tokens' -log p; then the mean of those."""
    per_doc = []
    for b in range(labels.shape[0]):
        keep = labels[b] != IGNORE
        logp = F.log_softmax(logits[b].double(), -1)[keep]
        per_doc.append(-logp.gather(1, labels[b][keep][:, None]).mean())
    return torch.stack(per_doc).mean()


def test_document_mean_loss_is_the_per_document_mean():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 12, 50, generator=g)
    labels = torch.randint(0, 50, (4, 12), generator=g)
    for b, n in enumerate(TARGETS):
        labels[b, n:] = IGNORE
    got = document_mean_loss(logits, labels)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), reference(logits, labels), rtol=1e-6, atol=1e-6)
    token_mean = F.cross_entropy(logits.reshape(-1, 50), labels.reshape(-1), ignore_index=IGNORE)
    assert not torch.isclose(got, token_mean, rtol=1e-3), "ragged targets: the two normalisations must differ here"


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(("name", "kw"), METHODS, ids=[m for m, _ in METHODS])
@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_a_micro_batch_has_the_gradient_of_its_documents_accumulated(arch, name, kw):
    backbone, spec = tiny(arch)
    method = build_method(method_config({"name": name, **kw}), spec)
    model = ScaleformerForConditionalGeneration.from_parts(method.wrap(backbone), method).eval().float()
    ids, mask = batch(LENGTHS, spec, seed=1)
    labels = labels_for(spec.pad_id)

    model.zero_grad()
    together = document_loss(model, labels, input_ids=ids, attention_mask=mask)
    together.backward()
    bucketed = grads(model)

    model.zero_grad()
    singles = []
    for b in range(len(LENGTHS)):
        n, t = int(mask[b].sum()), TARGETS[b]
        loss = document_loss(model, labels[b:b + 1, :t], input_ids=ids[b:b + 1, :n], attention_mask=mask[b:b + 1, :n])
        (loss / len(LENGTHS)).backward()  # Lightning's division by the accumulation
        singles.append(loss.detach())
    accumulated = grads(model)

    torch.testing.assert_close(together.detach(), torch.stack(singles).mean(), rtol=1e-5, atol=1e-5)
    assert bucketed.keys() == accumulated.keys() and len(bucketed) > 10
    for key in bucketed:
        torch.testing.assert_close(bucketed[key], accumulated[key], rtol=1e-5, atol=1e-5, msg=key)


def test_one_document_keeps_the_backbones_own_loss():
    backbone, spec = tiny("bart")
    method = build_method(method_config({"name": "sled", **dict(METHODS)["sled"]}), spec)
    model = ScaleformerForConditionalGeneration.from_parts(method.wrap(backbone), method).eval()
    ids, mask = batch([200], spec, seed=3)
    labels = labels_for(spec.pad_id)[:1, :TARGETS[0]]
    own = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    assert torch.equal(document_loss(model, labels, input_ids=ids, attention_mask=mask), own)
    logits = model(input_ids=ids, attention_mask=mask, labels=labels).logits
    torch.testing.assert_close(document_mean_loss(logits, labels), own, rtol=1e-6, atol=1e-6)
