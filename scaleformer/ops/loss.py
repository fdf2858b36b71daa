"""The training loss of a micro-batch of several documents: each document's mean token loss, then their mean.

Why: the backbone's loss is the mean over every target token of the batch, so a long summary outweighs a
short one, and a micro-batch of documents would not train as the lineage's one document per micro-batch with
gradient accumulation does (SLED's and Unlimiformer's ``per_device_train_batch_size`` 1: each document's own
token mean, then the mean over the accumulated documents, Lightning dividing each micro-batch's loss by the
accumulation). Taking each document's mean first makes a micro-batch of ``B`` documents give the gradient of
``B`` accumulated single-document steps (tested: every method, BART and T5, fp32).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

IGNORE = -100  # transformers' label for a position with no loss (padding)


def document_mean_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``logits`` ``[batch, T, vocab]``, ``labels`` ``[batch, T]`` (``-100``: no loss) -> the mean over documents
    of each document's mean token cross-entropy (fp32). A document without a target token counts zero."""
    batch, t, vocab = logits.shape
    token = F.cross_entropy(logits.reshape(batch * t, vocab).float(), labels.reshape(-1), ignore_index=IGNORE,
                            reduction="none").view(batch, t)  # [batch, T], 0 where ignored
    counts = (labels != IGNORE).sum(1)  # [batch]
    return (token.sum(1) / counts.clamp(min=1)).mean()


def document_loss(model: Any, labels: torch.Tensor, **inputs: Any) -> torch.Tensor:
    """``model(**inputs)``'s teacher-forced loss under :func:`document_mean_loss`; one document: the model's own
    loss (the same value, computed as it always was). ``model``: a :class:`ScaleformerForConditionalGeneration`
    (or any seq2seq model that takes ``labels``)."""
    if labels.shape[0] == 1:
        return model(labels=labels, **inputs).loss
    backbone = getattr(model, "backbone", model)
    shift = getattr(backbone, "prepare_decoder_input_ids_from_labels", None)
    if shift is None:  # a model that only shifts inside forward: its own loss is computed too, and not used
        return document_mean_loss(model(labels=labels, **inputs).logits, labels)
    return document_mean_loss(model(decoder_input_ids=shift(labels=labels), **inputs).logits, labels)
