"""What a run costs, measured inside the run itself (``trainer.measure_cost=true``; the dry run sets it).

Per training micro-batch: seconds (the device synchronised around it), the peak memory of the step and
the memory resident when it started (:class:`scaleformer.bench.measure.MemoryProbe`: CUDA's peak
allocation, or the process's peak RSS on CPU, reset per step) and its input and target tokens. The
first step is the warm-up: it allocates the optimiser's state, and its FLOPs are counted (matmuls and
attention, forward and backward: :func:`scaleformer.ops.compat.flop_counter`), the encoder's forward
apart. After it, chunked methods alternate: odd steps as configured, even ones with
``method.checkpoint_chunks`` on, so three steps answer "how fast, and does it fit, with and without
recomputing the chunks?" from one run. Generation, per ``predict`` call (one per evaluated split),
after an untimed two-token warm-up on its first batch: seconds, of which encoding (the method's
``encode``), and the peak. The record goes into ``metrics.json`` under ``cost``;
:mod:`scaleformer.artifacts.costs` turns a grid's records into its cost table.

Off by default: the synchronisation per step costs a GPU its overlap between steps.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import lightning.pytorch as pl
import torch

from scaleformer.bench.measure import MemoryProbe, sync
from scaleformer.ops import compat


class CostProbe(pl.Callback):
    """Times and memory of each training micro-batch and each generation pass (see the module docstring)."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.generate: list[dict[str, Any]] = []
        self._probe: MemoryProbe | None = None
        self._t0 = 0.0
        self._base: int | None = None
        self._flops: Any = None
        self._toggled: Any = None  # the method config whose checkpoint_chunks this step switched on
        self.scaling = "linear"  # "bounded" for methods that read a window whatever the input's length
        self.train_scaling = "linear"  # the same for training (Unlimiformer's standard mode trains on a window)
        self.model: dict[str, int] = {}  # the decoder's size: how generation's cost grows with the input
        self._wrapped: list[Any] = []  # methods whose encode is timed (an instance attribute)
        self._encoder_flops: list[int] = []
        self._encode_s = 0.0

    def _memory(self, device: torch.device) -> MemoryProbe:
        if self._probe is None or self._probe.device != device:
            self._probe = MemoryProbe(device)
        return self._probe

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        cfg = getattr(getattr(pl_module, "method", None), "cfg", None)
        n = len(self.steps)
        if n >= 2 and n % 2 == 0 and getattr(cfg, "checkpoint_chunks", True) is False:
            cfg.checkpoint_chunks, self._toggled = True, cfg
        if not n:  # the warm-up's FLOPs (the counter's overhead is small beside a step's, and it is not timed)
            self._flops = compat.flop_counter()
            self._flops.__enter__()
            self._count_encoder(pl_module)
        sync(pl_module.device)
        self._base = self._memory(pl_module.device).start()
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        sync(pl_module.device)
        seconds = time.perf_counter() - self._t0
        probe = self._memory(pl_module.device)
        flops = None
        encoder_flops = None
        if self._flops is not None:
            self._flops.__exit__(None, None, None)
            flops, self._flops = int(self._flops.get_total_flops()), None
            encoder_flops = self._stop_counting()
        method = getattr(pl_module, "method", None)
        cfg = getattr(method, "cfg", None)
        if not self.steps and method is not None:  # does the encoder side keep growing with the input?
            n = int(batch["attention_mask"].sum(1).max())  # (cost tables: 64x the input, half as many states)

            def grows(length: Any) -> str:
                return "linear" if length(64 * n) >= 32 * length(n) else "bounded"

            self.scaling, self.train_scaling = grows(method.decoder_length), grows(method.train_length)
        self.steps.append({
            "time_s": round(seconds, 4), **probe.since(self._base), "base_bytes": self._base,
            "input_tokens": int(batch["attention_mask"].sum()), "target_tokens": int((batch["labels"] >= 0).sum()),
            "checkpoint_chunks": bool(getattr(cfg, "checkpoint_chunks", False)), "warmup": not self.steps,
            "flops": flops, "encoder_forward_flops": encoder_flops})
        if self._toggled is not None:
            self._toggled.checkpoint_chunks, self._toggled = False, None

    def _count_encoder(self, pl_module: pl.LightningModule) -> None:
        """Count the encoder's forward FLOPs apart (a second counter inside the step's): the share of a step
        that grows with the input, where the decoder's does not."""
        counted, inner = [0], [None]

        def before() -> None:
            inner[0] = compat.flop_counter()
            inner[0].__enter__()

        def after() -> None:
            inner[0].__exit__(None, None, None)
            counted[0] += int(inner[0].get_total_flops())

        self._around_encoder(pl_module, before, after)
        self._encoder_flops = counted

    def _around_encoder(self, pl_module: pl.LightningModule, before: Any, after: Any) -> None:
        """Run ``before``/``after`` around each encoding of a batch: the method's ``encode``, not the encoder
        module's forward, which ScaleFormer's kept-position last layer runs around (its generation's
        encoding read 0 s through forward hooks on the first GPU dry run)."""
        method = pl_module.method
        inner, depth = method.encode, [0]

        def timed(*args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            if depth[0] == 1:
                before()
            try:
                return inner(*args, **kwargs)
            finally:
                depth[0] -= 1
                if not depth[0]:
                    after()

        method.encode = timed  # an instance attribute over the class's method, removed by _unwrap
        self._wrapped = [method]

    def _unwrap(self) -> None:
        for method in self._wrapped:
            vars(method).pop("encode", None)
        self._wrapped = []

    def _stop_counting(self) -> int | None:
        self._unwrap()
        return self._encoder_flops[0] if self._encoder_flops else None

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if self._flops is not None:  # a failed first step must not leave the counters on
            self._flops.__exit__(None, None, None)
            self._flops = None
            self._stop_counting()

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Encoding apart from decoding: the two grow differently with the input (scaleformer.artifacts.costs).
        self._encode_s, started = 0.0, [0.0]
        device = pl_module.device

        def before() -> None:
            sync(device)
            started[0] = time.perf_counter()

        def after() -> None:
            sync(device)
            self._encode_s += time.perf_counter() - started[0]

        self._around_encoder(pl_module, before, after)
        self._start_timing(device)

    def _start_timing(self, device: torch.device) -> None:
        self._encode_s = 0.0
        self._base = self._memory(device).start()
        self._t0 = time.perf_counter()

    def on_predict_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                               batch_idx: int, dataloader_idx: int = 0) -> None:
        # The first generation of a process pays one-time costs: on the first GPU dry run its first cell
        # took 62 s against 8-10 s for the same lengths after it. Two new tokens of the first batch,
        # untimed and in predict's precision, take them; the timing restarts after.
        if batch_idx:
            return
        timed = pl_module.gen_cfg
        pl_module.gen_cfg = replace(timed, max_new_tokens=min(2, timed.max_new_tokens), min_new_tokens=0)
        try:
            with torch.no_grad(), trainer.precision_plugin.predict_step_context():
                pl_module.generate(batch)
        finally:
            pl_module.gen_cfg = timed
        self._start_timing(pl_module.device)

    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        sync(pl_module.device)
        seconds = time.perf_counter() - self._t0
        self._unwrap()
        self.generate.append({"time_s": round(seconds, 4), "encode_s": round(self._encode_s, 4),
                              **self._memory(pl_module.device).since(self._base), "base_bytes": self._base})
        if not self.model:
            decoder = pl_module.model.get_decoder()
            layers = getattr(decoder, "layers", None) or getattr(decoder, "block", None) or ()  # BART / T5
            # the weights a generated token multiplies through: the layers and the output projection
            params = [*(p for layer in layers for p in layer.parameters()),
                      *pl_module.model.get_output_embeddings().parameters()]
            self.model = {"d_model": int(decoder.config.d_model), "decoder_layers": len(layers),
                          "decoder_params": sum(p.numel() for p in params)}

    def record(self, precision: str) -> dict[str, Any]:
        """What ``metrics.json`` keeps under ``cost``."""
        dev = self._probe.device if self._probe is not None else torch.device("cpu")
        return {"device": str(dev), "precision": precision,
                "memory": "cuda max_memory_allocated" if dev.type == "cuda" else "process peak RSS (VmHWM)",
                "length_scaling": self.scaling, "train_length_scaling": self.train_scaling, "model": self.model,
                "train_steps": self.steps, "generate": self.generate}
