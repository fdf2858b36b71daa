"""What a run costs, measured inside the run itself (``trainer.measure_cost=true``; the dry run sets it).

Training is measured in steady state, on a schedule of groups: each setting (as configured and, for a
chunked method trained without it, with ``method.checkpoint_chunks`` on) at each input length
(``trainer.cost_lengths``: fractions of the batch's own length; the probe cuts the batch's inputs to it, so
a group's cost at two lengths gives fixed + per-token cost). A group is ``trainer.cost_warmup`` untimed
micro-batches, then ``trainer.cost_repeats`` timed ones. The warm-ups take a new shape's one-time costs
(allocator growth, kernel selection; one GPU step after a one-step warm-up still carried them) and the
probes, so the timed micro-batches run with nothing attached: the first counts the FLOPs (matmuls and
attention, forward and backward: :func:`scaleformer.ops.compat.flop_counter`; the encoder's forward apart),
the second the host-device synchronisations (CUDA's sync debug mode; a CPU has none) and the operators of
its whole cycle (torch.profiler: dispatcher calls, and kernels on a GPU), the last the peak memory
(:class:`scaleformer.ops.measure.MemoryProbe`). Each timed micro-batch's cycle (the previous one's
end to its end) is split at Lightning's hooks into data (the collate function's time), forward (to
``on_before_backward``), backward, optimiser (from ``on_before_optimizer_step``: clipping, the step, the
scheduler) and other (callbacks, logging, the loop). On a GPU these are CUDA events, read with one
synchronisation after each group's last timed micro-batch; on a CPU, host clocks. The matmul rate the
table's MFU divides by is measured before the first step, in this process, at the run's precision. With
``trainer.cost_bare``, each timed micro-batch's forward + backward runs again alone right after it (the
framework's overhead is the pair's difference). Each micro-batch also records what its cycle waited on
(``waits``: the launching thread's CPU time, its involuntary switches, garbage collection, the CUDA
allocator's trips to the driver, the SM clock; :mod:`scaleformer.runs.cost_waits`), so a slow one can be
told apart. Training ends when the schedule is done.

Generation's half (per ``predict`` call, encoding apart) is :class:`scaleformer.runs.cost_generate.GenerationProbe`.
The record goes into ``metrics.json`` under ``cost``; :mod:`scaleformer.costs.table` turns a grid's
records into its table.

Off by default: it cuts inputs and toggles checkpointing, which a run that trains for its scores must not.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
import torch

from scaleformer.ops import compat
from scaleformer.ops.measure import (
    compute_dtype,
    count_ops,
    matmul_peak,
    profiler_activities,
)
from scaleformer.runs.cost_generate import GenerationProbe
from scaleformer.runs.cost_schedule import settings
from scaleformer.runs.cost_waits import WaitCounters, since

log = logging.getLogger("scaleformer")


class CostProbe(GenerationProbe):
    """Steady-state times, phases, syncs, FLOPs and memory of training; generation's time (module docstring)."""

    def __init__(self, warmup: int = 3, repeats: int = 10, lengths: Sequence[float] = (1.0, 0.5),
                 bare: bool = False, setting_names: Sequence[str] | None = None) -> None:
        if warmup < 1 or repeats < 1 or not lengths:
            raise ValueError(f"cost schedule needs warm-up >= 1, repeats >= 1 and a length; got {warmup}, "
                             f"{repeats}, {list(lengths)}")
        self.warmup, self.repeats, self.lengths = warmup, repeats, [float(x) for x in lengths]
        super().__init__()
        self.bare = bare  # each timed micro-batch's forward + backward again, alone, right after it
        # the settings the run's config asks for (checkpoint_chunks=null may be decided before fit starts)
        self.setting_names = list(setting_names) if setting_names is not None else None
        self.groups: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.peak: dict[str, Any] = {}
        self._flops: Any = None
        self._eager: Any = None  # compiled modules run eagerly while the FLOP counter is on (compat.stance)
        self._graphs: int | None = None  # graphs compiled in the process when the running micro-batch began
        self.compiled_modules = 0  # the model's compiled modules (they compile in the second micro-batch)
        self._syncs: Any = None  # the warnings recorder of the sync-counting micro-batch
        self._ops: Any = None  # the profiler of the op-counting micro-batch's cycle
        self._toggled: Any = None  # (method config, its checkpoint_chunks) while a group sets its own
        self._slot: tuple[int, int] | None = None  # (group, index in it) of the running micro-batch
        self._host: dict[str, float] = {}  # mark -> perf_counter of the running micro-batch
        self._events: dict[str, Any] = {}  # mark -> CUDA event (timed micro-batches on a GPU)
        self._prev_end: tuple[float, Any] | None = None  # the previous micro-batch's end: host time, event
        self._pending: list[tuple[dict[str, Any], dict[str, Any], Any, Any]] = []  # CUDA records to resolve
        self._data_s = 0.0
        self.scaling = "linear"  # "bounded" for methods that read a window whatever the input's length
        self.train_scaling = "linear"  # the same for training (Unlimiformer's standard mode trains on a window)
        self._scaled = False  # whether the scaling above was read (at the first micro-batch)
        self._encoder_flops: list[int] = []
        self._waits: WaitCounters | None = None  # what a slow cycle waited on (cost_waits), read at its ends
        self._cycle_counts: dict[str, Any] | None = None  # their reading where the running cycle started

    # ------------------------------------------------------------------------------------ schedule
    @property
    def per_group(self) -> int:
        return self.warmup + self.repeats

    @property
    def _probe_index(self) -> int:
        """The warm-up micro-batch that counts syncs and operators (the first runs the FLOP counter). Compiled
        modules compile in the second (the first runs them eagerly) and again at the first new shape (then
        for dynamic shapes), so theirs are counted in the last, beside the peak memory (a GPU's is the
        allocator's: the profiler adds none); each micro-batch records the graphs compiled in it."""
        return self.warmup - 1 if self.compiled_modules else min(1, self.warmup - 1)

    def micro_batches(self, method_cfg: Any) -> int:
        """Micro-batches the schedule trains for a method of this config."""
        return len(settings(method_cfg)) * len(self.lengths) * self.per_group

    def watch_loader(self, loader: Any) -> None:
        """Time the training loader's collate function: the data phase (its host time; with worker processes
        it runs beside the step and is not seen here)."""
        inner = loader.collate_fn

        def timed(items: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return inner(items)
            finally:
                self._data_s += time.perf_counter() - t0

        loader.collate_fn = timed

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        cfg = getattr(getattr(pl_module, "method", None), "cfg", None)
        names = self.setting_names if self.setting_names is not None else settings(cfg)
        if getattr(cfg, "checkpoint_chunks", None) is True and "plain" in names:
            # checkpoint_chunks=null, decided on for this device and data: the memory model says the plain
            # step would not fit, so it is not timed (it would stop the run out of memory)
            names = [n for n in names if n != "plain"]
        self.groups = [{"setting": s, "fraction": f} for s in names for f in self.lengths]
        self.peak = matmul_peak(pl_module.device, compute_dtype(str(trainer.precision)))
        if self._waits is not None:  # a second fit: the first one's collector callback goes
            self._waits.close()
        self._waits = WaitCounters(pl_module.device)
        self.compiled_modules = compat.compiled_modules(pl_module)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._waits is not None:
            self._waits.close()

    # --------------------------------------------------------------------------------- micro-batches
    def _mark(self, name: str, device: torch.device) -> None:
        if self._slot is None:
            return
        self._host[name] = time.perf_counter()
        if device.type == "cuda" and self._slot[1] >= self.warmup - 1:  # the last warm-up's end starts the first cycle
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._events[name] = event

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        n = len(self.steps)
        g, i = divmod(n, self.per_group)
        self._slot = (g, i) if g < len(self.groups) else None
        if self._slot is None:
            return
        group, cfg = self.groups[g], getattr(getattr(pl_module, "method", None), "cfg", None)
        if hasattr(cfg, "checkpoint_chunks"):  # the group's setting, whatever training would have chosen
            self._toggled = (cfg, cfg.checkpoint_chunks)
            cfg.checkpoint_chunks = group["setting"] == "checkpoint"
        if group["fraction"] < 1:  # the group's length: the batch's inputs cut to a share of their width
            keep = max(1, round(group["fraction"] * batch["input_ids"].shape[1]))
            batch["input_ids"], batch["attention_mask"] = batch["input_ids"][:, :keep], batch["attention_mask"][:, :keep]
        if i == 0:  # FLOPs (the counter's overhead stays out of the timed micro-batches), compiled modules eager
            self._eager = compat.stance()
            self._eager.__enter__()
            self._flops = compat.flop_counter()
            self._flops.__enter__()
            self._count_encoder(pl_module)
        if i == self._probe_index and pl_module.device.type == "cuda":
            self._syncs = warnings.catch_warnings(record=True)
            recorded = self._syncs.__enter__()
            warnings.simplefilter("always")
            self._syncs.recorded = recorded
            torch.cuda.set_sync_debug_mode("warn")
        if i == self._probe_index and self._ops is None:  # the run's first micro-batch: no previous end to start at
            self._ops = torch.profiler.profile(activities=profiler_activities(pl_module.device))
            self._ops.__enter__()
        if i == self.warmup - 1:
            self._base = self._memory(pl_module.device).start()
        self._events = {}
        self._graphs = compat.compiled_graphs() if self.compiled_modules else None
        if self._cycle_counts is None and self._waits is not None:  # the first cycle starts at its own hook
            self._cycle_counts = self._waits.read()
        self._mark("start", pl_module.device)

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        self._mark("forward", pl_module.device)

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._mark("backward", pl_module.device)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        self._mark("optimizer", pl_module.device)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self._slot is None:
            return
        device = pl_module.device
        self._mark("end", device)
        ended = self._waits.read() if self._waits is not None else None
        g, i = self._slot
        if self._syncs is not None:  # closed first: stopping the profiler below synchronises the device itself
            torch.cuda.set_sync_debug_mode(0)
            self.groups[g]["syncs_per_step"] = sum("synchroniz" in str(w.message) for w in self._syncs.recorded)
            self._syncs.__exit__(None, None, None)
            self._syncs = None
        if self._ops is not None:
            self._ops.__exit__(None, None, None)
            self.groups[g].update(count_ops(self._ops))
            self._ops = None
            if self.bare:  # the bare forward + backward's operators, to set against the cycle's
                with torch.profiler.profile(activities=profiler_activities(device)) as prof:
                    self._time_bare(trainer, pl_module, batch, {})
                self.groups[g].update({f"bare_{k}": v for k, v in count_ops(prof).items()})
        group = self.groups[g]
        tokens = batch["attention_mask"].sum()  # read when the group is resolved: no sync per micro-batch
        targets = (batch["labels"] >= 0).sum()
        step = {"group": g, "warmup": i < self.warmup, "checkpoint_chunks": group["setting"] == "checkpoint",
                "time_s": None, "phases": None}
        host = self._host
        prev = self._prev_end
        if prev is None:  # the first cycle starts at its own hook: the data it waited for came before
            self._data_s = 0.0
        step["time_s"], step["phases"] = _split(host, prev[0] if prev else host["start"], self._data_s)
        if ended is not None and self._cycle_counts is not None:
            step["waits"] = since(self._cycle_counts, ended)
        step["ended_at"] = round(time.time(), 3)  # wall clock: lines the step up with a device log (nvidia-smi's)
        if self._graphs is not None:  # a compile inside a timed micro-batch would be timed with it
            step["graphs_compiled"] = compat.compiled_graphs() - self._graphs
        if device.type == "cuda" and not step["warmup"]:
            self._pending.append((step, dict(self._events), prev[1] if prev else self._events.get("start"), self._data_s))
        self._data_s = 0.0
        if self.bare and not step["warmup"]:
            self._time_bare(trainer, pl_module, batch, step)
        if i == 0:
            self._close_flops(pl_module, batch, group)
        if i == self.warmup - 1:
            group.update(self._memory(device).since(self._base), base_bytes=self._base)
        group.setdefault("_tokens", []).append((tokens, targets))
        self.steps.append(step)
        if self._toggled is not None:
            (cfg, chosen), self._toggled = self._toggled, None
            cfg.checkpoint_chunks = chosen
        if i == self.per_group - 1:
            self._resolve(group)
            if g == len(self.groups) - 1:
                log.info("cost probe: %d groups x (%d warm-up + %d timed) micro-batches measured; training ends here",
                         len(self.groups), self.warmup, self.repeats)
                trainer.should_stop = True
        nxt = divmod(len(self.steps), self.per_group)
        if nxt[0] < len(self.groups) and nxt[1] == self._probe_index:  # the next cycle's operators, from here
            self._ops = torch.profiler.profile(activities=profiler_activities(device))
            self._ops.__enter__()
        # the next cycle starts here: after this micro-batch's bare pair, which it must not pay for (nor the
        # counters' read)
        self._cycle_counts = self._waits.read() if self._waits is not None else None
        self._prev_end = (time.perf_counter(), (step.get("_bare_events") or (None, self._events.get("end")))[1])

    def _time_bare(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, step: dict[str, Any]) -> None:
        """The micro-batch's forward + backward alone, as the step's closure runs them (gradients zeroed, the
        precision's autocast), with no loop, hook, log or optimiser around them: paired with the step it
        follows, the difference is the framework's overhead, and the machine's drift cancels in the pair.
        Its gradients are dropped (the next step zeroes them anyway); it draws from the random state."""
        cuda = pl_module.device.type == "cuda"
        events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None
        t0 = time.perf_counter()
        if events:
            events[0].record()
        pl_module.zero_grad(set_to_none=True)
        with trainer.precision_plugin.train_step_context():
            loss = pl_module(batch)
        loss.backward()
        if events:
            events[1].record()
            step["_bare_events"] = events
        step["bare_s"] = time.perf_counter() - t0
        pl_module.zero_grad(set_to_none=True)

    def _close_flops(self, pl_module: pl.LightningModule, batch: Any, group: dict[str, Any]) -> None:
        self._flops.__exit__(None, None, None)
        group["flops"], self._flops = int(self._flops.get_total_flops()), None
        self._close_eager()
        group["encoder_forward_flops"] = self._stop_counting()
        method = getattr(pl_module, "method", None)
        if not self._scaled and method is not None:  # does the encoder side keep growing?
            n = int(batch["attention_mask"].sum(1).max())  # (cost tables: 64x the input, half as many states)

            def grows(length: Any) -> str:
                return "linear" if length(64 * n) >= 32 * length(n) else "bounded"

            self.scaling, self.train_scaling = grows(method.decoder_length), grows(method.train_length)
            self._scaled = True

    def _resolve(self, group: dict[str, Any]) -> None:
        """The group's token counts and, on a GPU, its timed micro-batches' device times: one sync."""
        if self._pending:
            torch.cuda.synchronize()
            for step, events, prev, data in self._pending:
                step["host_time_s"], step["host_phases"] = step["time_s"], step["phases"]
                elapsed = {k: prev.elapsed_time(e) / 1e3 for k, e in events.items()} if prev is not None else {}
                step["time_s"], step["phases"] = _split({**elapsed, "start": elapsed.get("start", 0.0)}, 0.0, data)
                if "_bare_events" in step:
                    start, end = step.pop("_bare_events")
                    step["host_bare_s"], step["bare_s"] = step["bare_s"], start.elapsed_time(end) / 1e3
            self._pending = []
        counted = group.pop("_tokens")
        group["input_tokens"] = int(counted[-1][0])
        group["target_tokens"] = int(counted[-1][1])
        group["tokens_per_step"] = [int(t) for t, _ in counted]

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

    def _stop_counting(self) -> int | None:
        self._unwrap()
        return self._encoder_flops[0] if self._encoder_flops else None

    def _close_eager(self) -> None:
        if self._eager is not None:
            self._eager.__exit__(None, None, None)
            self._eager = None

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if self._waits is not None:
            self._waits.close()
        if self._flops is not None:  # a failed micro-batch must not leave the counters on
            self._flops.__exit__(None, None, None)
            self._flops = None
            self._stop_counting()
        self._close_eager()
        if self._ops is not None:
            self._ops.__exit__(None, None, None)
            self._ops = None
        if self._syncs is not None:
            with contextlib.suppress(Exception):
                torch.cuda.set_sync_debug_mode(0)
            self._syncs.__exit__(None, None, None)
            self._syncs = None

    def record(self, precision: str) -> dict[str, Any]:
        """What ``metrics.json`` keeps under ``cost``."""
        dev = self._probe.device if self._probe is not None else torch.device("cpu")
        for group in self.groups:  # a group that training ended inside (trainer.max_steps came first)
            if "_tokens" in group:
                self._resolve(group)
        return {"device": str(dev), "precision": precision, "probe": "steady-state",
                "memory": "cuda max_memory_allocated" if dev.type == "cuda" else "process peak RSS (VmHWM)",
                "timer": "cuda events" if dev.type == "cuda" else "host clock",
                "schedule": {"warmup": self.warmup, "repeats": self.repeats, "lengths": self.lengths, "bare": self.bare},
                "matmul_peak": self.peak, "compiled_modules": self.compiled_modules,
                "length_scaling": self.scaling, "train_length_scaling": self.train_scaling,
                "model": self.model, "train_groups": self.groups, "train_steps": self.steps, "generate": self.generate}


def _split(marks: dict[str, float], cycle_start: float, data_s: float) -> tuple[float, dict[str, float]]:
    """A micro-batch's cycle (``cycle_start`` to its end) and its phases from the marks of its hooks; the
    optimiser phase is empty on micro-batches that accumulate (no ``on_before_optimizer_step``)."""
    end = marks["end"]
    fwd = marks.get("forward", end)
    bwd = marks.get("backward", fwd)
    opt = marks.get("optimizer", end)
    cycle = end - cycle_start
    phases = {"data": data_s, "forward": fwd - marks["start"], "backward": bwd - fwd, "optimizer": end - opt}
    phases["other"] = cycle - sum(phases.values())
    return cycle, {k: round(v, 6) for k, v in phases.items()}
