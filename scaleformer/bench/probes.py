"""What an encode counts besides time and memory: the encoder's FLOPs, and how much of the input it read.

Input coverage: every document carries ``MARKERS`` distinct token ids, used nowhere else in it, at
evenly spaced positions from its first to its last content token. A forward pre-hook on the
encoder's input embedding records which markers reach it; a method that read fewer than all of them
truncated the input (truncation beyond its window, the MASFormer family beyond ``max_length``), and
the fraction read approximates how much. This needs no knowledge of the method, so a new method or
a peer is labelled as honestly as the known ones; it runs in one untimed call per size.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from scaleformer.ops import kept_layer

MARKERS = 16  # coverage resolution: 1/16 of the document

# Dense (no sparsity) bf16 tensor-core peak in TFLOP/s, by a substring of torch.cuda.get_device_name();
# first match wins, so specific names come before generic ones. Vendor datasheets.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("GH200", 989.4),
    ("H200", 989.4),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),  # SXM5 ("NVIDIA H100 80GB HBM3")
    ("H800", 989.4),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
)


def peak_tflops(name: str) -> float | None:
    """Dense bf16 peak of a device by name (None when unknown, e.g. any CPU)."""
    for key, value in PEAK_BF16_TFLOPS:
        if key.lower() in name.lower():
            return value
    return None


# ----------------------------------------------------------------------------------------- FLOPs
def encoder_flops(config: Any, calls: Sequence[tuple[int, int]], kept: Sequence[tuple[int, int, int]] = ()) -> int:
    """Dense forward FLOPs of the encoder calls ``(rows, width)``: projections, FFN and attention
    (QK^T and AV over each row's full width, pads included as computed); embeddings excluded.

    ``kept`` ``(rows, width, G)``: row groups whose last layer ran at G positions only
    (:mod:`scaleformer.ops.kept_layer`: keys/values over the width, the rest over G); their saving is
    taken off the calls' dense count.
    """
    d = config.d_model
    if getattr(config, "model_type", "") == "t5":
        layers, inner, ffn = config.num_layers, config.num_heads * config.d_kv, config.d_ff
        ffn_mats = 3 if getattr(config, "is_gated_act", False) else 2
    else:
        layers, inner, ffn, ffn_mats = config.encoder_layers, d, config.encoder_ffn_dim, 2
    total = 0
    for rows, w in calls:
        total += rows * (8 * w * d * inner + 2 * ffn_mats * w * d * ffn + 4 * w * w * inner)
    saved = sum(rows * (w - g) * (4 * d * inner + 2 * ffn_mats * d * ffn + 4 * w * inner) for rows, w, g in kept)
    return layers * total - saved


@dataclass
class EncoderCalls:
    """The encoder calls of a block: ``full`` ``(rows, width)`` per forward, ``kept`` per last-layer
    row group computed at kept positions only ``(rows, width, G)``."""

    full: list[tuple[int, int]] = field(default_factory=list)
    kept: list[tuple[int, int, int]] = field(default_factory=list)


@contextlib.contextmanager
def record_encoder_calls(encoder: torch.nn.Module) -> Iterator[EncoderCalls]:
    """Collect the shapes of every encoder forward call made inside the block (and of its last layer
    where it ran at kept positions only)."""
    calls = EncoderCalls()

    def hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        x = kwargs.get("input_ids", args[0] if args else None)
        if x is None:
            x = kwargs.get("inputs_embeds")
        if x is not None:
            calls.full.append((int(x.shape[0]), int(x.shape[1])))

    def observe(rows: int, width: int, g: int) -> None:
        calls.kept.append((rows, width, g))

    handle = encoder.register_forward_pre_hook(hook, with_kwargs=True)
    kept_layer.OBSERVERS.append(observe)
    try:
        yield calls
    finally:
        handle.remove()
        kept_layer.OBSERVERS.remove(observe)


# -------------------------------------------------------------------------------------- coverage
def marker_ids(vocab: int, body: int) -> list[int]:
    """The top ids of the vocabulary, one per marker (fewer when the document is very short)."""
    return list(range(vocab - min(MARKERS, body), vocab))


def make_inputs(config: Any, spec: Any, n: int, device: torch.device, seed: int
                ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """One document of exactly ``n`` tokens: the backbone's specials around random content ids, with the
    coverage markers spread over the content. Returns ids ``[1, n]``, mask ``[1, n]`` and the markers."""
    vocab = int(config.vocab_size)
    body_len = n - len(spec.prefix_ids) - len(spec.suffix_ids)
    markers = marker_ids(vocab, body_len)
    lo = min(4, vocab - len(markers) - 1)  # above the usual special ids (pad/bos/eos/unk)
    g = torch.Generator().manual_seed(seed * 1_000_003 + n)
    body = torch.randint(lo, vocab - len(markers), (body_len,), generator=g)  # [body_len]
    at = torch.linspace(0, body_len - 1, len(markers)).round().long()  # [markers] first .. last content token
    body[at] = torch.tensor(markers)
    ids = torch.cat([torch.tensor(spec.prefix_ids, dtype=torch.long), body,
                     torch.tensor(spec.suffix_ids, dtype=torch.long)])[None, :]  # [1, n]
    return ids.to(device), torch.ones_like(ids, device=device), markers


def content_ids(vocab: int, n: int, markers: int, seed: int, device: torch.device) -> torch.Tensor:
    """``[1, n]`` random ids that are neither specials nor markers (e.g. training labels)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(min(4, vocab - markers - 1), vocab - markers, (1, n), generator=g).to(device)


@contextlib.contextmanager
def watch_markers(encoder: torch.nn.Module, markers: Sequence[int]) -> Iterator[dict[str, Any]]:
    """Record which markers reach the encoder's input embedding inside the block. ``coverage`` is the
    fraction seen, or None when the embedding cannot be found or was never called."""
    emb = None
    with contextlib.suppress(AttributeError, NotImplementedError):
        emb = encoder.get_input_embeddings()
    emb = emb if emb is not None else getattr(encoder, "embed_tokens", None)
    result: dict[str, Any] = {"coverage": None}
    if emb is None:
        yield result
        return
    seen: list[torch.Tensor] = []  # [markers] bool per call, on the device (no sync inside the call)
    wanted: dict[torch.device, torch.Tensor] = {}

    def hook(module: torch.nn.Module, args: tuple) -> None:
        ids = args[0] if args else None
        if isinstance(ids, torch.Tensor) and not ids.is_floating_point():
            if ids.device not in wanted:
                wanted[ids.device] = torch.tensor(list(markers), device=ids.device)
            seen.append(torch.isin(wanted[ids.device], ids))

    handle = emb.register_forward_pre_hook(hook)
    try:
        yield result
    finally:
        handle.remove()
    if seen:
        hit = torch.stack([s.cpu() for s in seen]).any(0)  # [markers]
        result["coverage"] = float(hit.float().mean())
