"""The parameters and training FLOPs of a GPT-NeoX / GPT-3 shape under causal spans: what MASFormer's counted bill
prices (:mod:`scaleformer.costs.counted_bill`) and what the GPU bench divides by measured time
(:mod:`scaleformer.bench.gpu_masformer`), one formula for both.

A shape is ``{layers, width, vocab, tied, positions}`` (Pythia-1.4B: 24, 2,048, 50,304, untied, 2,048). Its layers
hold ``L (12 d^2 + 13 d) + 2 d`` parameters (attention ``4 d^2 + 4 d``, MLP ``8 d^2 + 5 d``, two norms ``4 d``, the
final norm), its embeddings ``V d`` once or twice (tied or not): 1,414,647,808 for Pythia-1.4B, its published count.
A training sequence of n tokens costs ``6 n N`` for the layers' matmuls (N: their parameters; the input embedding is
a lookup), ``6 K V d`` for the output head on the K positions a loss reads, and ``12 d`` per attended (query, key)
pair (QK^T and AV, 2 d each, forward, and twice that backward).
"""

from __future__ import annotations

from typing import Any

from scaleformer.ops.span_cost import counted_cost
from scaleformer.ops.spans import Span

# An H100 SXM's dense bf16 peak and HBM3 bandwidth (NVIDIA's datasheet): what the counted bill prices at and what
# the GPU bench measures its share of.
H100_BF16_DENSE = 989.4e12  # FLOP/s
H100_HBM = 3.35e12  # B/s

# Pythia-1.4B, MASFormer's paper profile backbone (GPT-3 XL's shape), as the MASFormer specs write it.
PYTHIA_1_4B = {"layers": 24, "width": 2048, "vocab": 50304, "tied": False, "positions": 2048, "heads": 16}


def parameters(shape: dict[str, Any]) -> dict[str, int]:
    """A GPT-NeoX/GPT-3 shape's parameters: the layers', the embeddings' (untied: input and output), the total."""
    missing = [k for k in ("layers", "width", "vocab") if k not in shape]
    if missing:
        raise ValueError(f"the bill's model shape {shape!r}: has no {', '.join(missing)} (a shape names layers, width, "
                         "heads, positions and vocab)")
    L, d, V = int(shape["layers"]), int(shape["width"]), int(shape["vocab"])
    layers = L * (12 * d * d + 13 * d) + 2 * d
    embeddings = V * d * (1 if shape.get("tied") else 2)
    return {"layers": layers, "embeddings": embeddings, "total": layers + embeddings}


def training_flops(shape: dict[str, Any], spans: list[Span], n: int, head: int | None = None) -> dict[str, int]:
    """One training sequence of ``n`` tokens: the matmuls', the attention's (its spans' pairs) and their sum;
    ``head``: the positions the loss reads (all n by default)."""
    d, V = int(shape["width"]), int(shape["vocab"])
    matmul = 6 * n * parameters(shape)["layers"] + 6 * (n if head is None else head) * V * d
    pairs = counted_cost(spans, n)
    return {"pairs": pairs, "matmul": matmul, "attention": 12 * d * pairs, "total": matmul + 12 * d * pairs}
