"""What a training step on one long document holds in memory: the model behind ``checkpoint_chunks=null``.

Terms, in bytes (Korthikanti et al. 2022 for the activations a transformer layer keeps for backward: 34
bytes per token per model dimension at 16 bits, the attention probabilities on top when the kernel keeps
them; they double at 32 bits):

- weights, gradients and AdamW's two moments: 16 bytes per parameter (fp32 masters under mixed precision);
- the encoder: every chunk row's activations in every layer (``rows x width`` tokens), or with
  ``checkpoint_chunks`` one micro-batch's plus every kept state (what the decoder reads);
- the decoder: its target tokens through its layers, with cross-attention over the kept states;
- the logits and their gradient: ``target x vocabulary`` at 32 bits, twice.

A fused attention kernel (SDPA's flash and memory-efficient ones, flash-attention) keeps no probabilities;
eager attention keeps ``heads x width x width`` per row and layer. The sum is an estimate for deciding
whether to recompute chunks, with a margin on top (:data:`MARGIN`, from a measured step): the allocator's
fragmentation and the transient buffers of a step are not in the terms.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Headroom over the count: what a real step needed beyond it. The tiny reader's SLED step on 4.6k tokens
# (fp32, 2 CPU cores) grew the process's peak by 258 MB where the terms below count 178 MB (1.45x:
# the allocator, backward's transient buffers, what the count leaves out); 2x covers that with room.
MARGIN = 2.0
FUSED_ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


@dataclass(frozen=True)
class Shape:
    """What the estimate reads of a backbone and a run."""

    params: int
    d_model: int
    heads: int
    encoder_layers: int
    decoder_layers: int
    vocab: int
    act_bytes: int  # 2 under 16-bit mixed precision, 4 in fp32
    fused_attention: bool


def layer_bytes(tokens: int, width: int, shape: Shape) -> float:
    """Activations one layer keeps for ``tokens`` tokens in rows of ``width`` (its attention's key length)."""
    per_token = 34 * shape.d_model * shape.act_bytes / 2
    scores = 0.0 if shape.fused_attention else 5 * shape.heads * width * shape.act_bytes / 2
    return tokens * (per_token + scores)


def training_bytes(shape: Shape, rows: int, width: int, kept: int, targets: int, *, checkpoint: bool,
                   micro_rows: int, documents: int = 1) -> float:
    """Peak bytes of one training step on ``documents`` documents of ``rows`` encoder rows of ``width`` tokens,
    ``kept`` states for the decoder and ``targets`` target tokens each (a micro-batch pads to its longest);
    ``checkpoint``: one encoder pass of ``micro_rows`` rows kept at once (the documents' rows encode together)."""
    state = 16 * shape.params
    enc_rows = min(micro_rows, rows * documents) if checkpoint else rows * documents
    encoder = shape.encoder_layers * layer_bytes(enc_rows * width, width, shape)
    if checkpoint:
        encoder += documents * kept * shape.d_model * shape.act_bytes
    # decoder: self-attention over the targets, cross-attention over the kept states (its keys/values, and the
    # probabilities when the kernel keeps them)
    cross = 2 * kept * shape.d_model * shape.act_bytes + (0 if shape.fused_attention else
                                                           shape.heads * targets * kept * shape.act_bytes)
    decoder = documents * shape.decoder_layers * (layer_bytes(targets, targets, shape) + cross)
    logits = documents * 2 * targets * shape.vocab * 4
    return MARGIN * (state + encoder + decoder + logits)


def generation_bytes(shape: Shape, rows: int, width: int, kept: int, beams: int, new_tokens: int,
                     param_bytes: int) -> tuple[float, float]:
    """(fixed, per document) peak bytes of decoding documents together, with :data:`MARGIN` on both.

    Fixed: the weights. Per document: one encoder layer's activations over its chunk rows (no gradients:
    layers free theirs as the next one runs), the ``kept`` states and every decoder layer's
    cross-attention keys/values over them (once per document, shared by its beams:
    :mod:`scaleformer.ops.decoding`), the beams' self-attention cache at ``new_tokens``, and the logits of
    a step (``beams x vocabulary`` at 32 bits, a few copies: scores, log-softmax, top-k).
    """
    act = shape.act_bytes
    encoder = layer_bytes(rows * width, width, shape)
    states = kept * shape.d_model * act
    cross = shape.decoder_layers * 2 * kept * shape.d_model * act
    self_cache = shape.decoder_layers * 2 * beams * new_tokens * shape.d_model * act
    logits = 3 * beams * shape.vocab * 4
    return MARGIN * shape.params * param_bytes, MARGIN * (encoder + states + cross + self_cache + logits)


def device_bytes(device: torch.device) -> int | None:
    """What a step may fill: a GPU's total memory, or the memory a CPU process has available now."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return int(torch.cuda.mem_get_info(index)[1])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
