"""``python scripts/bench.py --profile cpu-tiny [--methods a,b] [--sizes 1k,4096] [--out DIR] [--resume]``.

Flags override the profile file's keys for one run; the merged profile is validated the same way,
so a bad flag fails before any model is built.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scaleformer.bench.profile import ALL, load_profile, profile_names
from scaleformer.bench.rows import PEERS, option_names
from scaleformer.bench.runner import problems, run_profile
from scaleformer.errors import ConfigError
from scaleformer.methods import REGISTRY
from scaleformer.ops.host_memory import keep_freed_memory


def unknown_methods(profile: Any) -> list[str]:
    """The profile's rows that name nothing: not a method option, a registered method or a peer row."""
    known = {ALL, *PEERS, *option_names(profile.conf_root), *REGISTRY}
    return [m for m in profile.methods if m not in known]


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_sizes(text: str) -> list[int]:
    """``1k,4096,1M`` -> [1024, 4096, 1048576] (k = 1024, M = 1048576), sorted and unique."""
    def one(x: str) -> int:
        x = x.lower()
        mult = 1048576 if x.endswith("m") else 1024 if x.endswith("k") else 1
        try:
            return int(float(x.rstrip("km")) * mult)
        except ValueError:
            raise argparse.ArgumentTypeError(f"size {x!r}: not a number (1k = 1024, 1M = 1048576)") from None

    return sorted({one(x) for x in _csv(text)})


def main(argv: Sequence[str] | None = None) -> int:
    keep_freed_memory()
    ap = argparse.ArgumentParser(prog="scaleformer bench", description="Speed, memory and scaling of every long-context method.",
                                 epilog=f"profiles (conf/bench): {', '.join(profile_names())}")
    ap.add_argument("--profile", default="cpu-tiny", help="a conf/bench profile name or a yaml path")
    ap.add_argument("--methods", type=_csv, help="comma-separated rows replacing the profile's (names, 'all', "
                    "full_baseline, led)")
    ap.add_argument("--sizes", type=parse_sizes, help="comma-separated N (1k = 1024, 1M = 1048576)")
    ap.add_argument("--backbones", type=_csv, help="comma-separated backbones (e.g. bart_base)")
    ap.add_argument("--out", default=str(Path("results") / "bench"), help="output folder")
    ap.add_argument("--resume", action="store_true",
                    help="keep cells already measured in <out>/<profile>.json (run a long grid in pieces)")
    ap.add_argument("--threads", type=int, help="torch threads (default: the profile's)")
    ap.add_argument("--attn", choices=("auto", "sdpa", "eager", "flash_attention_2"),
                    help="attention implementation (default: the profile's; auto = flash for BART on CUDA)")
    args = ap.parse_args(argv)
    if args.threads is not None and args.threads < 1:  # given means used or refused, never dropped
        print(f"error: --threads={args.threads}: must be >= 1", file=sys.stderr)
        return 2
    for flag in ("methods", "sizes", "backbones"):
        if getattr(args, flag) == []:
            print(f"error: --{flag}: empty; give at least one (comma-separated)", file=sys.stderr)
            return 2
    changes: dict[str, Any] = {k: getattr(args, k) for k in ("methods", "sizes", "backbones", "threads", "attn")
                               if getattr(args, k) is not None}
    try:
        profile = load_profile(args.profile, **changes)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if unknown := unknown_methods(profile):  # a typo measures nothing: stop before the results file is touched
        print(f"error: method {unknown[0]!r}: not a row this benchmark knows; rows are the options of "
              f"conf/method/, 'all', {', '.join(PEERS)}", file=sys.stderr)
        return 2
    doc = run_profile(profile, args.out, resume=args.resume, log=lambda s: print(s, flush=True))
    print(f"wrote {Path(args.out) / profile.name}.{{json,md,png}} in {doc['wall_time_s']:.0f} s")
    bad = problems(doc)
    for b in bad:
        print(f"PROBLEM: {b}", file=sys.stderr)
    return 1 if bad else 0
