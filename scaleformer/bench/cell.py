"""One benchmark cell: every phase of one (method, N) — encode, generate per beam count, train step.

Generation runs the framework's own path (:func:`scaleformer.ops.decoding.generate`, beams sharing each
document's cross-attention keys/values where the decoder allows it), and the cross-attention bytes
are read from the cache it returns, so what is reported is what the decoder held. Each generation also
gets its memory floor (:mod:`scaleformer.bench.floor`): the bytes one step reads over the copy
bandwidth measured at the start of the run, and the measured ms per token as a multiple of it.

Each encode and training step starts with one untimed call that is the size's warm-up and its probe:
peak memory, the encoder calls (for FLOPs) and the input coverage are read from it, then the timed
runs follow without hooks. Generation warms up once per method (its shapes barely change with N).
An out-of-memory phase is recorded in the cell, not raised; any other error is the method's.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Any

import torch

from scaleformer.bench.floor import step_floor
from scaleformer.bench.probes import (
    content_ids,
    encoder_flops,
    make_inputs,
    record_encoder_calls,
    watch_markers,
)
from scaleformer.bench.profile import Profile
from scaleformer.bench.shapes import Shape
from scaleformer.methods import Method
from scaleformer.ops import compat, decoding
from scaleformer.ops.measure import MemoryProbe, is_oom, measure


@dataclass
class Context:
    """What every phase of one (backbone, method) needs."""

    profile: Profile
    shape: Shape
    device: torch.device
    dtype: torch.dtype
    probe: MemoryProbe
    peak: float | None  # the device's dense bf16 TFLOP/s, None on CPU
    flops: bool = True  # dense encoder FLOPs describe this method's encoder calls
    bandwidth: float | None = None  # the device's measured copy bandwidth, bytes/s (None: no floor)

    def timed(self, fn: Any) -> tuple[dict[str, Any], Any]:
        p = self.profile
        timing, out = measure(fn, self.device, repeats=p.repeats, min_time_s=p.min_time_s, max_repeats=p.max_repeats)
        return timing.summary(), out


def _coverage(value: float | None) -> dict[str, Any]:
    return {"input_coverage": value, "truncated": None if value is None else value < 1.0}


def run_encode(ctx: Context, method: Method, model: Any, ids: torch.Tensor, mask: torch.Tensor,
               markers: list[int]) -> tuple[dict[str, Any], Any]:
    """Encoder time (inference), achieved FLOP/s, memory, input coverage; returns the encoded states."""
    n = ids.shape[1]
    encoder = model.get_encoder()
    base = ctx.probe.start()
    with torch.no_grad(), record_encoder_calls(encoder) as calls, watch_markers(encoder, markers) as seen:
        enc = method.encode(encoder, ids, mask, training=False)
    mem = ctx.probe.since(base)

    def run() -> None:
        method.encode(encoder, ids, mask, training=False)

    with torch.no_grad():
        out, _ = ctx.timed(run)
    t = out["time_s"]
    # None when the method bypasses the encoder's forward (nothing to count) or is not dense.
    flops = encoder_flops(model.config, calls.full, calls.kept) if calls.full and ctx.flops else None
    out |= {"tokens_per_s": n / t, "encoder_calls": len(calls.full), "last_layer_kept_only": bool(calls.kept),
            "flops": flops,
            "tflops_per_s": flops / t / 1e12 if flops else None,
            "peak_fraction": flops / t / 1e12 / ctx.peak if flops and ctx.peak else None,
            **mem, "mem_base_bytes": base, **_coverage(seen["coverage"])}
    return out, enc


def run_generate(ctx: Context, model: Any, enc: Any, beams: int, warmup: bool) -> dict[str, Any]:
    """Decoding time for exactly ``new_tokens`` tokens from already-encoded states (the encoder runs
    once per document; end-to-end = this + encoder time), through the framework's generation path
    (:func:`scaleformer.ops.decoding.generate`: beam-shared cross-attention where the decoder allows it).

    ``cross_attention_bytes`` is measured, not computed: the bytes of the cross-attention keys/values
    held by the cache generation returns (distinct storages), so per-beam copies show as such.
    ``floor``: the bytes one step reads with those keys/values, the floor they set at ``ctx.bandwidth``
    and ``ms_per_token`` (the median over ``new_tokens``) as a multiple of it (:func:`step_floor`).
    """
    k = ctx.profile.new_tokens
    base = ctx.probe.start()

    def gen() -> Any:
        return decoding.generate(
            model, enc.hidden, enc.mask, num_beams=beams, max_new_tokens=k, min_new_tokens=k, do_sample=False,
            early_stopping=False, length_penalty=1.0, no_repeat_ngram_size=0, forced_bos_token_id=None,
            forced_eos_token_id=None, use_cache=True, return_dict_in_generate=True)

    with torch.no_grad():
        if warmup:
            gen()
        out, res = ctx.timed(gen)
    made = int(res.sequences.shape[1]) - 1  # minus the decoder start token
    if made != k:
        raise AssertionError(f"generated {made} tokens, expected exactly {k} (min_new_tokens = max_new_tokens)")
    cross = decoding.cross_attention_bytes(res.past_key_values)
    shared = isinstance(getattr(res.past_key_values, "cross_attention_cache", None), decoding.SharedCrossCache)
    del res
    rows = int(enc.hidden.shape[0]) * beams  # sequences decoded together (generate returns the best beam only)
    floor = step_floor(model, rows=rows, new_tokens=k, cross_bytes=cross, cross_length=int(enc.hidden.shape[1]),
                       time_s=out["time_s"], bandwidth=ctx.bandwidth)
    return out | {"new_tokens": made, "tokens_per_s": k / out["time_s"], "cross_attention_bytes": cross,
                  "beam_shared_cross_attention": shared, "floor": floor, **ctx.probe.since(base)}


def run_train(ctx: Context, method: Method, model: Any, ids: torch.Tensor, mask: torch.Tensor,
              markers: list[int]) -> dict[str, Any]:
    """One training step: encode (training mode) + teacher-forced decoder + backward (no optimiser).

    From ``grad_ckpt_min_tokens``: the model's activation checkpointing, and for chunked methods also
    ``method.checkpoint_chunks`` (each encoder micro-batch recomputed in backward).
    """
    n = ids.shape[1]
    p = ctx.profile
    ckpt = p.grad_ckpt_min_tokens is not None and n >= p.grad_ckpt_min_tokens
    labels = content_ids(model.config.vocab_size, p.label_tokens, len(markers), p.seed + 7, ctx.device)
    encoder = model.get_encoder()

    def step() -> None:
        enc = method.encode(encoder, ids, mask, training=True)
        loss = model(encoder_outputs=(enc.hidden,), attention_mask=enc.mask, labels=labels).loss
        loss.backward()
        model.zero_grad(set_to_none=True)

    chunks = ckpt and hasattr(method.cfg, "checkpoint_chunks") and not method.cfg.checkpoint_chunks
    model.train()
    if chunks:
        method.cfg.checkpoint_chunks = True
    # the method's model may offer no activation checkpointing (then the step runs without)
    ckpt = ckpt and compat.enable_checkpointing(model, use_reentrant=False)
    try:
        base = ctx.probe.start()
        with watch_markers(encoder, markers) as seen:
            step()
        mem = ctx.probe.since(base)
        out, _ = ctx.timed(step)
    finally:
        if chunks:
            method.cfg.checkpoint_chunks = False
        if ckpt:
            compat.disable_checkpointing(model)
        model.eval()
        model.zero_grad(set_to_none=True)
    return {"status": "ok", **out, "tokens_per_s": n / out["time_s"], "grad_checkpointing": ckpt,
            "checkpoint_chunks": bool(getattr(method.cfg, "checkpoint_chunks", False) or chunks),
            "label_tokens": p.label_tokens, **mem, **_coverage(seen["coverage"])}


def measure_cell(ctx: Context, method: Method, model: Any, n: int, *, warmup: bool,
                 train_skip: str | None) -> dict[str, Any]:
    """All phases of one (method, N); an out-of-memory phase is recorded, not raised."""
    ids, mask, markers = make_inputs(ctx.shape.config, ctx.shape.spec, n, ctx.device, ctx.profile.seed)
    cell: dict[str, Any] = {"status": "ok"}
    phase = "encode"
    enc = None
    try:
        cell["encode"], enc = run_encode(ctx, method, model, ids, mask, markers)
        cell |= {k: cell["encode"][k] for k in ("input_coverage", "truncated")}
        length = int(enc.mask.sum())
        try:
            expected: int | None = method.decoder_length(n)
        except NotImplementedError:
            expected = None
        cell |= {"decoder_length": length, "decoder_length_expected": expected,
                 "decoder_length_ok": None if expected is None else expected == length,
                 "cross_attention_bytes": {}}
        cell["generate"] = {}
        for b in ctx.profile.beams:
            phase = f"generate_b{b}"
            g = run_generate(ctx, model, enc, b, warmup)
            g["e2e_time_s"] = cell["encode"]["time_s"] + g["time_s"]
            cell["generate"][str(b)] = g
            cell["cross_attention_bytes"][str(b)] = g["cross_attention_bytes"]
        peaks = [cell["encode"]["mem_peak_bytes"]] + [g["mem_peak_bytes"] for g in cell["generate"].values()]
        base = cell["encode"]["mem_base_bytes"]
        cell["mem_inference_growth_bytes"] = None if base is None or None in peaks else max(peaks) - base
        enc = None
        phase = "train"
        if train_skip:
            cell["train"] = {"status": "skipped", "reason": train_skip}
        else:
            t0 = time.perf_counter()
            cell["train"] = run_train(ctx, method, model, ids, mask, markers)
            cell["train"]["wall_s"] = time.perf_counter() - t0  # the phase, untimed call included
    except Exception as e:  # noqa: BLE001 - recorded; anything but OOM is an error of the method
        enc = None
        if not is_oom(e):
            raise
        msg = (str(e) or type(e).__name__).splitlines()[0][:300]
        cell |= {"status": "oom", "cause": "error", "oom_phase": phase, "error": msg}
        if phase == "train":
            cell["train"] = {"status": "oom", "error": cell["error"]}
    finally:
        del ids, mask, enc
        gc.collect()
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()
    return cell
