"""The memory floor of one decoding step: the bytes it must read, over the device's copy bandwidth.

Why: one new token per sequence is a matrix-vector product per weight, so decoding is bound by how
many bytes a step reads, not by FLOPs. ``floor_ms = step_bytes / bandwidth`` is the time a step
cannot beat on this device; the measured ms per token over it (``floor_multiple``) says how much of
the decode is that floor and how much is everything else (kernel launches, Python, copies, beam
bookkeeping). A multiple near 1 leaves nothing to gain but fewer bytes; a large one points elsewhere.

What one step reads, counted here (``rows`` = sequences decoded together: beams x documents):

* **weights**: every decoder parameter, read once per step whatever ``rows`` is, except
  - the cross-attention key/value projections: they run once per document before decoding
    (:func:`scaleformer.ops.decoding.generate`; transformers' own cache does the same at step 0);
  - embedding tables (token, learned positions, T5's relative-position bias): a lookup reads one row
    per sequence, so ``min(rows, table rows)`` rows each;
  plus the output projection (``lm_head``, tied to the token embedding in BART: counted whole here,
  since every step scores the whole vocabulary) and BART's ``final_logits_bias``. Tensors sharing a
  storage are counted once.
* **cross-attention keys/values**: what the generation cache holds, read in full each step
  (measured from the cache: once per document when beams share them, once per beam otherwise).
* **self-attention keys/values** at the mean decoded length: step ``i`` (0-based) of ``k`` attends
  to the ``i`` positions cached before it plus its own, ``(k + 1) / 2`` on average, per row.

Not counted: activations (a few vectors of width d per row), the writes of new keys/values, the
stock cache's per-step beam reorder copy, and the once-per-document cross-attention projection
inside the timed generation; each would only raise the floor, so the floor stays a lower bound.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

CROSS_ATTENTION = (".encoder_attn", ".EncDecAttention")  # BART/LED, T5 decoder cross-attention modules
KV_PROJECTIONS = ("k_proj", "v_proj", "k", "v")


def decoder_dims(config: Any) -> tuple[int, int]:
    """(decoder layers, key/value width per layer = heads x head_dim) of a BART, LED or T5 config."""
    # The config itself: transformers 5's get_text_config(decoder=True) misreports BART's decoder layers.
    c = config
    if getattr(c, "d_kv", None):  # T5: heads x d_kv need not equal d_model
        return int(c.num_decoder_layers or c.num_layers), int(c.num_heads * c.d_kv)
    return int(c.decoder_layers), int(c.d_model)  # BART, LED: heads x head_dim = d_model


def kv_bytes(config: Any, length: float, elem: int, rows: int = 1) -> float:
    """Keys + values of every decoder layer for ``rows`` sequences of ``length`` positions:
    ``2 x layers x rows x length x width x elem`` (a layer holds ``[rows, heads, length, head_dim]`` each)."""
    layers, width = decoder_dims(config)
    return 2 * layers * rows * length * width * elem


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def weight_bytes(model: nn.Module, rows: int) -> dict[str, int]:
    """Bytes of parameters one decoding step of ``rows`` sequences reads (see the module docstring):
    ``decoder`` (full matrices), ``embedding_rows`` (looked-up rows), ``lm_head`` and their ``total``."""
    decoder = model.get_decoder()
    skip = {id(p) for name, m in decoder.named_modules() if name.endswith(CROSS_ATTENTION)
            for sub in KV_PROJECTIONS if isinstance(getattr(m, sub, None), nn.Module)
            for p in getattr(m, sub).parameters()}
    rows_read = 0
    for m in decoder.modules():
        if isinstance(m, nn.Embedding):
            skip.add(id(m.weight))
            rows_read += min(rows, m.num_embeddings) * m.embedding_dim * m.weight.element_size()
    head = model.get_output_embeddings()
    head_tensors = list(head.parameters()) if head is not None else []
    bias = getattr(model, "final_logits_bias", None)  # BART: [1, vocab], added every step
    if isinstance(bias, torch.Tensor):
        head_tensors.append(bias)
    seen: set[int] = set()

    def count(tensors: Any, excluded: set[int]) -> int:
        total = 0
        for t in tensors:
            if id(t) in excluded or _storage(t) in seen:
                continue
            seen.add(_storage(t))
            total += t.numel() * t.element_size()
        return total

    lm_head = count(head_tensors, set())  # first: a head tied to the token embedding is counted here, whole
    full = count(decoder.parameters(), skip)
    return {"decoder": full, "embedding_rows": rows_read, "lm_head": lm_head, "total": full + rows_read + lm_head}


def step_floor(model: nn.Module, *, rows: int, new_tokens: int, cross_bytes: int | None, cross_length: int,
               time_s: float, bandwidth: float | None) -> dict[str, Any]:
    """One generation cell's step bytes, floor and measured multiple.

    ``rows``: sequences decoded together; ``cross_bytes``: the cross-attention keys/values the cache held
    (None: not measurable, then ``rows`` copies of ``cross_length`` positions, as the stock cache holds);
    ``time_s``: the timed generation of ``new_tokens`` tokens; ``bandwidth``: bytes/s (None: no floor).
    """
    elem = next(model.parameters()).element_size()
    weights = weight_bytes(model, rows)
    mean_len = (new_tokens + 1) / 2
    cross = cross_bytes if cross_bytes is not None else int(kv_bytes(model.config, cross_length, elem, rows))
    self_kv = int(kv_bytes(model.config, mean_len, elem, rows))
    total = weights["total"] + cross + self_kv
    ms_per_token = time_s / new_tokens * 1e3
    floor_ms = total / bandwidth * 1e3 if bandwidth else None
    return {"step_bytes": total, "weight_bytes": weights["total"], "weight_bytes_detail": weights,
            "cross_attention_bytes": cross, "cross_attention_measured": cross_bytes is not None,
            "self_attention_bytes": self_kv, "self_attention_mean_length": mean_len,
            "bandwidth_gb_per_s": bandwidth / 1e9 if bandwidth else None,
            "floor_ms": floor_ms, "ms_per_token": ms_per_token,
            "floor_multiple": ms_per_token / floor_ms if floor_ms else None}
