"""``method.checkpoint_chunks=null``, decided when training starts: chunks are recomputed in backward only
when a training step on the longest training document would not fit the device, by the memory model
(:mod:`scaleformer.ops.memory`), so a cell pays the recomputation (a third more encoder FLOPs) only where it
must. The decision and its numbers go to the run's log.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from scaleformer.model.batching import auto_batch, shape_of
from scaleformer.ops.measure import compute_dtype
from scaleformer.ops.memory import Shape, device_bytes, training_bytes

log = logging.getLogger("scaleformer")


def step_shape(model: torch.nn.Module, precision: str) -> Shape:
    return shape_of(model, compute_dtype(precision).itemsize)


def choose_checkpointing(method: Any, model: torch.nn.Module, precision: str, device: torch.device, longest: int,
                         targets: int, capacity: int | None = None) -> tuple[bool, str]:
    """(whether to recompute the chunks, the line that says why) for documents of up to ``longest`` tokens."""
    shape = step_shape(model, precision)
    lay = method.layout(torch.tensor([longest]))
    kept = method.decoder_length(longest)
    need = training_bytes(shape, lay.table.rows, lay.width, kept, targets, checkpoint=False,
                          micro_rows=method.cfg.encoder_batch_size or 16)
    capacity = device_bytes(device) if capacity is None else capacity
    if capacity is None:
        return False, "method.checkpoint_chunks=null: off (this device's memory is unknown)"
    on = need > capacity
    return on, (f"method.checkpoint_chunks=null: {'on' if on else 'off'}: a training step on the longest training "
                f"document ({longest:,} tokens, {lay.table.rows} chunks) needs ~{need / 1e9:.1f} GB by the memory "
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
    if longest == 0:
        return dm.eval_batch_size
    g = module.gen_cfg
    dm.eval_batch_size, why = auto_batch(module.model.backbone, module.method, longest, g.num_beams,
                                         g.max_new_tokens, device, compute_dtype(precision).itemsize)
    log.info("%s", why)
    return dm.eval_batch_size
