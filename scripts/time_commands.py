"""Wall time of the README's two commands on a fresh clone of this repository, for the README to state.

    .venv/bin/python scripts/time_commands.py            # idle: nothing else should run (about 30 minutes on 2 cores)
    .venv/bin/python scripts/time_commands.py --load 2   # busy: 2 CPU-bound processes beside it, as another job would be

Clones HEAD (committed work only) into a temporary folder, then times, one after another: ``make setup`` (a fresh ``.venv`` from
the lock; pip's cache and this machine's wheels make it faster than a first download), ``make run`` with its
output piped (as in CI or ``| tee``: the first progress line, ``train: step ...``, and the whole run), the
first progress line of ``make run`` in a terminal (a pseudo-terminal; stopped once the bar is drawn), and
``make test``. The machine's load is sampled every 5 s during each command: a row says how busy the
machine was, not only how long it took. Rows go to ``results/times/times.json`` under ``--label`` (``idle``,
or ``busy`` with ``--load``), replacing that label's earlier rows; ``scripts/render_results.py`` renders
the README's sentence from it.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scaleformer.io import atomic_write_json, read_json_record  # noqa: E402
from scaleformer.runs.runtime import machine  # noqa: E402

OUT = ROOT / "results" / "times" / "times.json"
PIPE_PROGRESS = re.compile(r"^train: step \d+/\d+")  # LogProgress's line (scaleformer/progress.py)
BAR = re.compile(r"\d+/\d+ \[")  # a drawn bar's counter, ``12/800 [00:31<...``


class Load:
    """The 1-minute load average sampled every ``every`` seconds while a command runs: its mean and maximum."""

    def __init__(self, every: float = 5.0) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)

    def _run(self, every: float) -> None:
        while not self._stop.wait(every):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float | None]:
        s = self.samples or [os.getloadavg()[0]]
        return {"load_mean": round(sum(s) / len(s), 2), "load_max": round(max(s), 2)}


def piped(command: list[str], cwd: Path, log: Path, first: re.Pattern[str] | None = None,
          env: dict[str, str] | None = None, limit_s: float | None = None) -> dict[str, Any]:
    """``command`` with its output to a pipe (read here, written to ``log``): its wall time, its exit status
    and the seconds to the first line matching ``first``. Past ``limit_s`` it is stopped (its process group
    SIGTERMed) and the row says so (``stopped_at_s``): a measurement that would never end is a finding too."""
    t0 = time.perf_counter()
    first_s = None
    with Load() as load, open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env, start_new_session=True)
        timer = threading.Timer(limit_s, os.killpg, (proc.pid, signal.SIGTERM)) if limit_s else None
        if timer is not None:
            timer.start()
        for line in proc.stdout:  # type: ignore[union-attr]
            out.write(line)
            if first is not None and first_s is None and first.search(line):
                first_s = round(time.perf_counter() - t0, 1)
        rc = proc.wait()
        stopped = timer is not None and timer.finished.is_set()
        if timer is not None:
            timer.cancel()
    row = {"command": " ".join(command), "rc": rc, "wall_s": round(time.perf_counter() - t0, 1), **load.summary()}
    if first is not None:
        row["first_progress_s"] = first_s
    if stopped:
        row["stopped_at_s"] = limit_s
        return row
    if rc != 0:
        raise SystemExit(f"error: {row['command']} exited {rc}; its output is in {log}")
    return row


def terminal_first_line(command: list[str], cwd: Path, limit_s: float = 600.0, rows: int = 40,
                        columns: int = 120, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``command`` in a pseudo-terminal until its progress bar is first drawn (then stopped): the seconds to it."""
    t0 = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, its stdout a terminal of a real one's size (tqdm draws nothing at 0 columns)
        fcntl.ioctl(pty.STDOUT_FILENO, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        os.chdir(cwd)
        os.execvpe(command[0], command, env if env is not None else os.environ)
    seen, first_s = "", None
    try:
        while time.perf_counter() - t0 < limit_s:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 4096).decode("utf-8", "replace")
            except OSError:  # the command ended
                break
            seen = (seen + chunk)[-4096:]
            if BAR.search(seen) or PIPE_PROGRESS.search(seen.replace("\r", "\n").split("\n")[-1]):
                first_s = round(time.perf_counter() - t0, 1)
                break
    finally:
        if _alive(pid):
            os.killpg(pid, signal.SIGTERM)  # pty.fork made the child a session leader: its group is its pid
        os.waitpid(pid, 0)
        os.close(fd)
    return {"command": " ".join(command) + " (in a terminal, stopped at the first bar)", "first_progress_s": first_s}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def read_out(path: Path) -> dict[str, Any]:
    """The times file the rows join (``{"runs": {label: ...}}``; a new one when there is none), or one line
    naming what it is instead: a folder, not JSON, no ``runs`` mapping."""
    if path.is_dir():
        raise SystemExit(f"error: --out={path}: is a folder; give the JSON file the rows are written to")
    if not path.exists():
        return {"runs": {}}
    try:
        doc = read_json_record(path, "times file")
    except ValueError as e:
        raise SystemExit(f"error: --out={path}: {e}") from None
    if not isinstance(doc.get("runs"), dict):
        raise SystemExit(f"error: --out={path}: has no \"runs\" mapping (label -> rows): not a times file; give "
                         "another --out")
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--load", type=int, default=0, help="CPU-bound processes to run beside the commands")
    ap.add_argument("--label", default=None, help="the rows' label (default: idle, or busy with --load)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--skip-test", action="store_true", help="time setup and run only")
    ap.add_argument("--threads", type=int, default=None,
                    help="OMP_NUM_THREADS for the commands (default: unset, torch's own choice of a thread per core)")
    ap.add_argument("--logs", type=Path, default=None, help="keep the commands' output here (default: discarded)")
    ap.add_argument("--limit-s", type=float, default=None, help="stop a command after this many seconds (and say so)")
    args = ap.parse_args(argv)
    if args.load < 0:
        raise SystemExit(f"error: --load={args.load}: must be >= 0")
    if args.threads is not None and args.threads < 1:
        raise SystemExit(f"error: --threads={args.threads}: must be >= 1")
    if args.limit_s is not None and not (math.isfinite(args.limit_s) and args.limit_s > 0):
        raise SystemExit(f"error: --limit-s={args.limit_s}: must be a finite number of seconds > 0")
    if args.logs is not None and args.logs.exists() and not args.logs.is_dir():
        raise SystemExit(f"error: --logs={args.logs}: is a file; give a folder for the commands' logs")
    read_out(args.out)  # before the half hour of measuring: an --out that cannot take the rows stops here
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)  # the commands as a user types them, unless --threads says otherwise
    if args.threads is not None:
        env["OMP_NUM_THREADS"] = str(args.threads)
    label = args.label or ("busy" if args.load else "idle")
    host = machine()  # before the half hour of measuring: an environment that cannot describe the machine stops here
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="time-commands-") as tmp:
            clone = Path(tmp) / "scaleformer"
            logs = args.logs or Path(tmp)
            logs.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
            steps: list[tuple[str, Any]] = [
                ("setup", lambda: piped(["make", "setup"], clone, logs / "setup.log", env=env)),
                ("run", lambda: piped(["make", "run"], clone, logs / "run.log", PIPE_PROGRESS, env, args.limit_s)),
                ("run_terminal", lambda: terminal_first_line(["make", "run"], clone, min(args.limit_s or 300.0, 300.0), env=env)),
            ]
            if not args.skip_test:
                steps.append(("test", lambda: piped(["make", "test"], clone, logs / "test.log", env=env,
                                                    limit_s=args.limit_s)))
            for name, step in steps:
                if name == "run_terminal":  # a fresh run folder: the piped run's results would be re-used
                    subprocess.run(["rm", "-rf", str(clone / "results" / "runs")], check=True)
                print(f"{label}: {name} ...", flush=True)
                rows.append({"step": name, **step()})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        for h in hogs:
            h.kill()
    doc = read_out(args.out)
    doc["runs"][label] = {"commit": commit[:12], "machine": host,
                          "cores": os.cpu_count(), "load_processes": args.load, "omp_threads": args.threads,
                          "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "rows": rows}
    atomic_write_json(args.out, doc)
    print(f"wrote {args.out} ({label})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
