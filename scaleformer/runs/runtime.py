"""One run, several processes: who writes, who waits, and how evaluation rows come together.

- Only global rank 0 writes a run's files (config, logs, results) and prints the summary; the rank is
  read from the launcher's environment, before Lightning starts, so the same answer holds from the
  first line of a run (a DDP child re-executes the whole script).
- One process per run folder at a time: rank 0 holds an exclusive ``flock`` on ``<run>/.lock`` for
  the run's whole life (released by the kernel if the process dies), so a second launch of the same
  run stops with a message instead of racing the first to the same checkpoints and results.
- Evaluation under DDP: each rank generates for its share of the examples (Lightning's distributed
  sampler pads the last share with repeats); the rows are gathered, de-duplicated by example id and
  put back in the dataset's order, so the predictions file equals a single process's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from scaleformer.errors import UserError
from scaleformer.ops.host_memory import heap


class RunInUseError(UserError, RuntimeError):
    """Another process is running the same run folder."""


def global_rank() -> int:
    """This process's global rank as the launcher (torchrun, SLURM, Lightning's DDP) set it; 0 alone."""
    env = os.environ
    for var in ("RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if env.get(var, "").isdigit() and (var != "SLURM_PROCID" or int(env.get("SLURM_NTASKS", "1")) > 1):
            return int(env[var])
    local, node = int(env.get("LOCAL_RANK", "0") or 0), int(env.get("NODE_RANK", env.get("GROUP_RANK", "0")) or 0)
    return local + node * 10_000  # any nonzero local or node rank is not rank 0


def is_rank_zero() -> bool:
    return global_rank() == 0


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``<run_dir>/.lock`` (rank 0 only); a second holder gets :class:`RunInUseError` at once."""
    if not is_rank_zero():
        yield
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / ".lock"
    with open(path, "a+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise RunInUseError(f"run folder {run_dir} is in use ({holder}): wait for that run to finish, or set "
                                "run_name=<another name> to run this config beside it") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        f.flush()
        try:
            yield
        finally:
            f.seek(0)
            f.truncate()
            fcntl.flock(f, fcntl.LOCK_UN)


def gather_rows(rows: list[dict[str, Any]], order: Sequence[str], world_size: int) -> list[dict[str, Any]]:
    """All ranks' prediction rows, one per example id, in the dataset's order (``order``: its ids)."""
    if world_size > 1:
        import torch.distributed as dist

        shards: list[Any] = [None] * world_size
        dist.all_gather_object(shards, rows)
        rows = [r for shard in shards for r in shard]
    first: dict[str, dict[str, Any]] = {}
    for r in rows:
        first.setdefault(r["id"], r)
    position = {doc_id: i for i, doc_id in enumerate(order)}
    return sorted(first.values(), key=lambda r: position.get(r["id"], len(position)))


SIGTERM_STATUS = 143  # 128 + SIGTERM, what a shell reports for a process the signal ended


def is_sigterm(error: BaseException) -> bool:
    """Lightning turns SIGTERM into a ``SystemExit`` subclass with no code: seen by scripts as success."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    return isinstance(error, SIGTERMException)


def sigterm_status() -> int:
    """Exit status of a run stopped by SIGTERM: 143, so schedulers and scripts see the failure; 0 where
    Lightning requeues the job under SLURM (the requeued job resumes from the run's last checkpoint)."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    return 0 if SLURMEnvironment.detect() else SIGTERM_STATUS


def device_name(device: Any) -> str:
    """The accelerator's or the CPU's model name: results and benchmarks say what they ran on."""
    if getattr(device, "type", str(device)) == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    import platform

    return platform.processor() or "cpu"


def machine() -> str:
    """This machine as a run's results record it: the device a run computes on, cores, torch threads and
    the CPU heap (:func:`scaleformer.ops.host_memory.heap`), all of which a CPU timing depends on."""
    import torch

    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    return (f"{device_name(device)}; {os.cpu_count()} CPU cores, {torch.get_num_threads()} torch threads; "
            f"CPU heap: {heap()}")


def running_elsewhere(samples: int = 5, every: float = 0.05) -> int | None:
    """How many tasks are running or waiting for a core besides this process's, now: the median of a few reads
    of ``/proc/loadavg``'s running count (which counts the reading thread itself). None where there is no such
    file. Why not the load average: it lags a minute, so the command that ran just before reads as load."""
    counts = []
    for i in range(samples):
        try:
            running = Path("/proc/loadavg").read_text().split()[3].split("/")[0]
        except (OSError, IndexError):
            return None
        counts.append(int(running) - 1)
        if i + 1 < samples:
            time.sleep(every)
    return max(0, sorted(counts)[len(counts) // 2])


def busy_note(others: int | None, cores: int | None, threads: int) -> str | None:
    """One line when other work leaves this CPU run fewer free cores than torch has threads, else None.

    Why: torch takes a thread per core whatever else runs, and its OpenMP threads wait for each other at every
    operator; on a taken core they spin while the one they wait for is descheduled. Measured on 2 cores beside
    two CPU-bound processes: results/times/times.json, torch's default threads against ``OMP_NUM_THREADS=1``."""
    if others is None or not cores or others == 0:
        return None
    free = max(1, cores - others)
    if threads <= free:
        return None
    return (f"note: {others} other task(s) are running on this machine's {cores} cores and torch has {threads} "
            f"threads, which wait on each other when a core is taken; OMP_NUM_THREADS={free} before the command "
            f"gives it one thread per free core")


def command_line() -> str:
    """The command that started this process, as a user would type it again."""
    argv = list(sys.argv)
    if argv and argv[0].endswith(".py"):
        argv = ["python", Path(argv[0]).name, *argv[1:]]
    elif argv and Path(argv[0]).name.startswith("scaleformer"):
        argv = [Path(argv[0]).name, *argv[1:]]
    return shlex.join(argv)
