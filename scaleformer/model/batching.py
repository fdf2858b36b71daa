"""How many documents to decode together: the generation batch the memory model says fits the device.

Why batch at all: a decoding step of one document is mostly per-token overhead (the loop, the launches,
the beam bookkeeping), the same for eight documents as for one, so documents decoded together share it.
A document's tokens do not depend on the batch (tested for every method, BART and T5, greedy and beam
search, ragged batches): batching changes the speed, not the results.

How many: the memory model (:func:`scaleformer.ops.memory.generation_bytes`: the weights once, and per
document its encoder layer, kept states, cross-attention keys/values, beams' self-attention cache and
logits) on the split's longest document, capped at :data:`MAX_BATCH` (beyond it a step's matmuls are no
longer overhead-bound on a GPU, and a long tail of padded beams only costs).
"""

from __future__ import annotations

from typing import Any

import torch

from scaleformer.ops import compat
from scaleformer.ops.memory import FUSED_ATTENTION, Shape, device_bytes, generation_bytes

# The largest batch chosen by the memory model (data.eval_batch_size sets any size by hand). On 2 CPU cores
# the tiny reader's documents per second stop growing by 8 (results/bench/batched-eval-cpu.md).
MAX_BATCH = 16


def shape_of(model: torch.nn.Module, act_bytes: int) -> Shape:
    """What the memory model reads of a backbone (``act_bytes``: 2 under 16-bit precision, 4 in fp32)."""
    conf = model.config
    heads = getattr(conf, "encoder_attention_heads", None) or getattr(conf, "num_heads", 1)
    return Shape(params=sum(p.numel() for p in model.parameters()), d_model=int(conf.d_model), heads=int(heads),
                 encoder_layers=int(getattr(conf, "encoder_layers", 0) or conf.num_layers),
                 decoder_layers=int(getattr(conf, "decoder_layers", 0) or getattr(conf, "num_decoder_layers", 0)
                                    or conf.num_layers),
                 vocab=int(conf.vocab_size), act_bytes=act_bytes,
                 fused_attention=compat.attn_impl(model) in FUSED_ATTENTION)


def rows_width(method: Any, longest: int) -> tuple[int, int]:
    """(encoder rows, their width) of one document: its chunks for a chunked method, else one window."""
    if hasattr(method, "layout"):
        lay = method.layout(torch.tensor([longest]))
        return int(lay.table.rows), int(lay.width)
    return 1, min(longest, int(method.spec.max_positions))


def auto_batch(backbone: torch.nn.Module, method: Any, longest: int, beams: int, new_tokens: int,
               device: torch.device, act_bytes: int, capacity: int | None = None) -> tuple[int, str]:
    """(documents per generation batch, the line that says why) for documents of up to ``longest`` tokens."""
    rows, width = rows_width(method, longest)
    kept = method.decoder_length(longest)
    param_bytes = next(backbone.parameters()).element_size()
    fixed, per_doc = generation_bytes(shape_of(backbone, act_bytes), rows, width, kept, beams, new_tokens,
                                      param_bytes)
    capacity = device_bytes(device) if capacity is None else capacity
    if capacity is None:
        return 1, "data.eval_batch_size=null: 1 (this device's memory is unknown)"
    fits = int((capacity - fixed) // per_doc) if capacity > fixed else 0
    n = max(1, min(MAX_BATCH, fits))
    return n, (f"data.eval_batch_size=null: {n} documents per generation batch: one document of up to "
               f"{longest:,} tokens at {beams} beam(s) and {new_tokens} new tokens needs ~{per_doc / 1e6:,.0f} MB "
               f"by the memory model (scaleformer.ops.memory), the {device.type} has {capacity / 1e9:.1f} GB "
               f"({fits:,} would fit; at most {MAX_BATCH})")
