"""What the memory model (:mod:`scaleformer.ops.memory`) decides when a run starts, each decision and its
numbers in the run's log.

- ``method.checkpoint_chunks=null``: chunks are recomputed in backward only when a training step on the
  longest training document would not fit the device, so a cell pays the recomputation (a third more encoder
  FLOPs) only where it must.
- ``data.micro_batch_size=null`` with ``data.bucket``: the documents of an optimizer step (``data.batch_size x
  trainer.accumulate_grad_batches``, grouped by length) go through in micro-batches of as many as fit, and
  gradient accumulation makes up the rest: several documents per launch where the device has room, the same
  documents in every optimizer step whatever fits (each document's loss weighs alike: ``ops.loss``).
- ``data.eval_batch_size=null``: the documents decoded together (:mod:`scaleformer.model.batching`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from scaleformer.model.batching import auto_batch, rows_width, shape_of
from scaleformer.ops.measure import compute_dtype
from scaleformer.ops.memory import Shape, device_bytes, training_bytes

log = logging.getLogger("scaleformer")


def step_shape(model: torch.nn.Module, precision: str) -> Shape:
    return shape_of(model, compute_dtype(precision).itemsize)


def step_bytes(method: Any, model: torch.nn.Module, precision: str, longest: int, targets: int,
               checkpoint: bool) -> Callable[[int], float]:
    """Bytes of a training step on ``n`` documents of up to ``longest`` tokens, by the memory model."""
    shape, (rows, width) = step_shape(model, precision), rows_width(method, longest)
    kept = method.decoder_length(longest)
    micro_rows = getattr(method.cfg, "encoder_batch_size", 0) or 16
    return lambda n: training_bytes(shape, rows, width, kept, targets, checkpoint=checkpoint, micro_rows=micro_rows,
                                    documents=n)


def choose_checkpointing(method: Any, model: torch.nn.Module, precision: str, device: torch.device, longest: int,
                         targets: int, capacity: int | None = None) -> tuple[bool, str]:
    """(whether to recompute the chunks, the line that says why) for documents of up to ``longest`` tokens."""
    need = step_bytes(method, model, precision, longest, targets, checkpoint=False)(1)
    rows = rows_width(method, longest)[0]
    capacity = device_bytes(device) if capacity is None else capacity
    if capacity is None:
        return False, "method.checkpoint_chunks=null: off (this device's memory is unknown)"
    on = need > capacity
    return on, (f"method.checkpoint_chunks=null: {'on' if on else 'off'}: a training step on the longest training "
                f"document ({longest:,} tokens, {rows} chunks) needs ~{need / 1e9:.1f} GB by the memory "
                f"model (scaleformer.ops.memory), the {device.type} has {capacity / 1e9:.1f} GB")


def resolve_checkpointing(method: Any, model: torch.nn.Module, precision: str, device: torch.device,
                          longest: int, targets: int) -> None:
    """Set a chunked method's ``checkpoint_chunks`` left null (auto) for this run's device and data."""
    if getattr(method.cfg, "checkpoint_chunks", False) is not None:
        return
    method.cfg.checkpoint_chunks, why = choose_checkpointing(method, model, precision, device, longest, targets)
    log.info("%s", why)


def resolve_eval_batch(dm: Any, module: Any, precision: str, device: torch.device) -> int:
    """Set the data module's documents per evaluation batch: ``data.eval_batch_size``, or (null) what the
    memory model says fits this device for the longest evaluated document (scaleformer.model.batching)."""
    if dm.cfg.eval_batch_size is not None:
        dm.eval_batch_size = int(dm.cfg.eval_batch_size)
        return dm.eval_batch_size
    longest = max((dm.longest(s) for s in ("validation", "test") if s in dm.datasets), default=0)
    if getattr(module, "decoder_only", False):  # the memory model prices encoder-decoder generation
        log.info("data.eval_batch_size=null: %d (data.batch_size) per evaluation batch of a decoder-only model",
                 dm.cfg.batch_size)
        dm.eval_batch_size = int(dm.cfg.batch_size)
        return dm.eval_batch_size
    if longest == 0:
        return dm.eval_batch_size
    g = module.gen_cfg
    dm.eval_batch_size, why = auto_batch(module.model.backbone, module.method, longest, g.num_beams,
                                         g.max_new_tokens, device, compute_dtype(precision).itemsize)
    log.info("%s", why)
    return dm.eval_batch_size


def choose_micro_batch(method: Any, model: torch.nn.Module, precision: str, device: torch.device, longest: int,
                       targets: int, step_docs: int, capacity: int | None = None) -> tuple[int | None, str]:
    """(documents per training micro-batch, the line that says why): the largest divisor of ``step_docs`` whose
    micro-batch of documents of ``longest`` tokens fits; None where this device's memory is unknown."""
    capacity = device_bytes(device) if capacity is None else capacity
    if capacity is None:
        return None, "data.micro_batch_size=null: this device's memory is unknown"
    need = step_bytes(method, model, precision, longest, targets,
                      checkpoint=bool(getattr(method.cfg, "checkpoint_chunks", False)))
    n = next((d for d in range(step_docs, 0, -1) if step_docs % d == 0 and need(d) <= capacity), 1)
    return n, (f"data.micro_batch_size=null: {n} per micro-batch of the {step_docs} documents of an optimizer step "
               f"({step_docs // n} accumulated): {n} of up to {longest:,} tokens need ~{need(n) / 1e9:.1f} GB by the "
               f"memory model (scaleformer.ops.memory; all {step_docs}: ~{need(step_docs) / 1e9:.1f} GB), the "
               f"{device.type} has {capacity / 1e9:.1f} GB")


def resolve_micro_batch(dm: Any, method: Any, model: torch.nn.Module, precision: str, device: torch.device,
                        accumulate: int, trainer: Any, resume: Any, started: int | None = None) -> dict[str, Any]:
    """With ``data.bucket``: the training micro-batch (``data.micro_batch_size``, or null: the memory model's, or
    ``started``, the one of the run a checkpoint continues: its counters and dropout draws are of that size) and
    the accumulation that keeps an optimizer step's documents, set on the data module, the trainer and the
    resume callback; the record of what was chosen and by whom (empty without bucketing)."""
    cfg = dm.cfg
    if not cfg.bucket:
        return {}
    step_docs = cfg.batch_size * accumulate
    n, by = cfg.micro_batch_size, "data.micro_batch_size"
    if n is None and started and step_docs % started == 0:
        n, by = int(started), "the continued run"
        log.info("data.micro_batch_size=null: %d per micro-batch, as in the run this checkpoint continues", n)
    if n is None:
        n, why = choose_micro_batch(method, model, precision, device, dm.longest("train"),
                                    dm.longest("train", "label"), step_docs)
        by = "memory model" if n is not None else "data.batch_size"
        n = n or cfg.batch_size
        log.info("%s%s", why, "" if by == "memory model" else f": {n} per micro-batch (data.batch_size)")
    dm.train_batch, dm.train_group = n, step_docs
    trainer.accumulate_grad_batches = step_docs // n  # a plain Trainer attribute, read by the fit loop
    resume.batch_size = n
    return {"documents": n, "accumulate_grad_batches": step_docs // n, "step_documents": step_docs, "chosen_by": by}
