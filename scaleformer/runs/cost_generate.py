"""Generation's cost, measured inside a run (the generation half of :class:`scaleformer.runs.cost.CostProbe`).

Per ``predict`` call (one per evaluated split), after an untimed two-token warm-up on its first batch:
seconds, of which encoding (the method's ``encode``, wrapped: ScaleFormer's kept-position last layer runs
around the encoder module's forward, so forward hooks read 0 s), the peak memory, and the tokens generated
per document (``new_tokens``: a generation's time means nothing without its length, which random weights
leave to chance unless ``generation.min_new_tokens`` fixes it); the decoder's size (how decoding's cost
grows with the input, for the cost tables).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import lightning.pytorch as pl
import torch

from scaleformer.ops.measure import MemoryProbe, sync


class GenerationProbe(pl.Callback):
    """Generation's time, encoding apart, and peak; the method's ``encode`` wrapping the training probe shares."""

    def __init__(self) -> None:
        self.generate: list[dict[str, Any]] = []
        self.model: dict[str, int] = {}  # the decoder's size: how generation's cost grows with the input
        self._probe: MemoryProbe | None = None
        self._wrapped: list[Any] = []  # methods whose encode is wrapped (an instance attribute)
        self._counted: list[Any] = []  # models whose generate is wrapped to count its tokens
        self._new_tokens: list[int] = []  # per document, in the order generated
        self._base: int | None = None
        self._t0 = 0.0
        self._encode_s = 0.0

    def _memory(self, device: torch.device) -> MemoryProbe:
        if self._probe is None or self._probe.device != device:
            self._probe = MemoryProbe(device)
        return self._probe

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

    def _count_tokens(self, pl_module: pl.LightningModule) -> None:
        """Count each document's generated tokens as ``model.generate`` returns them."""
        model, eos = pl_module.model, pl_module.tokenizer.eos_token_id
        inner = model.generate

        def counted(*args: Any, **kwargs: Any) -> Any:
            out = inner(*args, **kwargs)
            self._new_tokens.extend(new_tokens(getattr(out, "sequences", out), eos))
            return out

        model.generate = counted  # an instance attribute over the class's method, removed by _unwrap
        self._counted = [model]

    def _unwrap(self) -> None:
        for method in self._wrapped:
            vars(method).pop("encode", None)
        for model in self._counted:
            vars(model).pop("generate", None)
        self._wrapped, self._counted = [], []

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Encoding apart from decoding: the two grow differently with the input (scaleformer.costs.table).
        self._encode_s, started = 0.0, [0.0]
        device = pl_module.device

        def before() -> None:
            sync(device)
            started[0] = time.perf_counter()

        def after() -> None:
            sync(device)
            self._encode_s += time.perf_counter() - started[0]

        self._around_encoder(pl_module, before, after)
        self._count_tokens(pl_module)
        self._start_timing(device)

    def _start_timing(self, device: torch.device) -> None:
        self._encode_s, self._new_tokens = 0.0, []  # the warm-up's two tokens are not the run's
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
                              **self._memory(pl_module.device).since(self._base), "base_bytes": self._base,
                              "new_tokens": self._new_tokens})
        if "decoder_params" not in self.model:
            decoder = pl_module.model.get_decoder()
            layers = getattr(decoder, "layers", None) or getattr(decoder, "block", None) or ()  # BART / T5
            # the weights a generated token multiplies through: the layers and the output projection
            params = [*(p for layer in layers for p in layer.parameters()),
                      *pl_module.model.get_output_embeddings().parameters()]
            self.model.update(d_model=int(decoder.config.d_model), decoder_layers=len(layers),
                              decoder_params=sum(p.numel() for p in params))


def new_tokens(sequences: torch.Tensor, eos_token_id: int | None) -> list[int]:
    """Tokens each row of ``model.generate``'s output generated: after the decoder's start token, up to and
    including the first end-of-sequence (the padding of rows that finished early is not generated)."""
    if sequences.ndim != 2:
        raise ValueError(f"new_tokens: sequences must be [batch, length], got shape {tuple(sequences.shape)}")
    generated = sequences[:, 1:]  # [batch, length - 1]
    if eos_token_id is None:
        return [generated.shape[1]] * generated.shape[0]
    is_eos = generated == eos_token_id
    first = is_eos.int().argmax(1) + 1  # [batch]: the length up to and including the first end
    return torch.where(is_eos.any(1), first, generated.shape[1]).tolist()
