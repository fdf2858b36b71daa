"""Regenerate one of the paper's artifacts: launch the missing runs, then render from results files.

    scaleformer reproduce table1 --profile tiny        # what `make table1 PROFILE=tiny` runs
    scaleformer reproduce table1 --profile smoke       # seconds: grid -> runs -> rendered files
    scaleformer reproduce figure2 --render-only        # re-render from existing results
    scaleformer reproduce table1 --methods all         # the paper's rows plus every other method
    scaleformer reproduce table1 --profile dryrun      # the paper's shapes on this machine: the cost table

Profiles (experiments/*.yaml): ``paper`` launches Hydra multiruns (any launcher, e.g. SLURM);
profiles with ``runner: local`` (``dryrun``, ``tiny``, ``smoke``) run here, one line per run and an
estimate before starting. ``dryrun`` writes results/dryrun/<artifact>.{md,json}, the cost of every cell;
``paper`` prints that estimate first and, above an hour or when it is unknown (no cost table, or one
whose total is missing, not a number, negative, NaN or short of a cell), runs only with ``--yes``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scaleformer.artifacts.figures import build_figure
from scaleformer.artifacts.grid import load_spec, select_methods
from scaleformer.artifacts.gridrun import launch, run_grid
from scaleformer.artifacts.metric_by_cost import build_cost_figure
from scaleformer.artifacts.perplexity_figure import build_perplexity_figure
from scaleformer.artifacts.perplexity_tables import build_perplexity
from scaleformer.artifacts.tables import build_table
from scaleformer.costs.counted_bill import build_bill, counted_floor
from scaleformer.costs.report import build_costs
from scaleformer.costs.table import paper_estimate
from scaleformer.errors import UserError
from scaleformer.ops.host_memory import keep_freed_memory
from scaleformer.resources import experiments_dir


def main(argv: list[str] | None = None) -> int:
    keep_freed_memory()
    ap = argparse.ArgumentParser(prog="scaleformer reproduce", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    specs = ", ".join(sorted(p.stem for p in experiments_dir().glob("*.yaml")))
    ap.add_argument("artifact", help=f"name of a file in experiments/ ({specs})")
    ap.add_argument("--profile", default="paper",
                    help="paper (GPU, real data), dryrun (the paper's shapes, random weights: the cost table), "
                         "tiny (CPU demonstration, synthetic) or smoke (CI, seconds)")
    ap.add_argument("--force", action="store_true", help="re-run cells that already have results")
    ap.add_argument("--render-only", action="store_true", help="do not launch runs; render what exists")
    ap.add_argument("--launcher", default=None,
                    help="conf/hydra/launcher option (slurm, local) or any Hydra launcher plugin")
    ap.add_argument("--launcher-arg", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to every multirun, e.g. hydra.launcher.partition=gpu (repeatable)")
    ap.add_argument("--methods", default=None,
                    help="rows: the spec's (default), 'all' (plus every other conf/method option) or a,b,c")
    ap.add_argument("--root", default=None,
                    help="paths.root of the runs; default: results (paper), results/<profile> (others)")
    ap.add_argument("--out-dir", default=None, help="default: the root")
    ap.add_argument("--yes", action="store_true",
                    help="run the paper profile even when its estimate exceeds an hour or is unknown")
    args = ap.parse_args(argv)

    names = sorted(p.stem for p in experiments_dir().glob("*.yaml"))
    if args.artifact not in names:  # a name, never a path joined to experiments/
        ap.error(f"artifact {args.artifact!r}: not an artifact of experiments/; available: {', '.join(names)}")
    path = experiments_dir() / f"{args.artifact}.yaml"
    spec = load_spec(path)
    if args.profile not in spec["profiles"]:
        ap.error(f"--profile {args.profile!r}: {args.artifact} has profiles {sorted(spec['profiles'])}")
    if args.methods not in (None, "all"):
        try:
            select_methods(spec, args.methods)
        except ValueError as e:
            ap.error(str(e).replace("METHODS=", "--methods ", 1))
    if spec["profiles"][args.profile].get("prices"):  # a counted bill (MASFormer's): nothing runs
        where = Path(args.out_dir) if args.out_dir else Path("results") / "dryrun"
        for kind, p in build_bill(spec, args.profile, where, methods=args.methods).items():
            print(f"wrote bill ({kind}): {p}")
        return 0
    # Only the paper profile's artifacts belong in results/ itself; smoke profiles stay apart.
    base = Path("results") if args.profile == "paper" else Path("results") / args.profile
    problems: list[str] = []
    root = Path(args.root) if args.root else base
    out_dir = Path(args.out_dir) if args.out_dir else root
    local = spec["profiles"][args.profile].get("runner") == "local" and not args.launcher
    costs = bool(spec["profiles"][args.profile].get("cost_table"))
    if (args.profile == "paper" or costs) and not args.render_only:  # the dry run says what it will price
        try:
            counted = counted_floor(args.artifact, Path("results") / "dryrun")  # MASFormer's bills: a floor
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        hours, line = counted or paper_estimate(args.artifact, Path("results") / "dryrun")
        print(line, flush=True)
        if args.profile == "paper" and not args.yes and (hours is None or hours > 1):  # unknown: as if long
            said = (line if hours is None or counted else
                    f"the paper profile of {args.artifact} is estimated at {hours:,.0f} h")
            print(f"error: {said}; pass --yes to run it", file=sys.stderr)
            return 2
    if not args.render_only and local:
        problems = run_grid(spec, args.profile, root, force=args.force, methods=args.methods)
    elif not args.render_only:
        _, problems = launch(spec, args.profile, root, force=args.force, launcher=args.launcher,
                             methods=args.methods, launcher_args=args.launcher_arg)
    if problems:
        print(f"{len(problems)} cell(s) of {args.artifact} failed; finished runs are kept, rerun to continue. "
              "Rendering what exists.", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
    build = {"perplexity": build_perplexity, "perplexity_by_length": build_perplexity_figure,
             "metric_by_cost": build_cost_figure}.get(
        spec.get("kind"), build_figure if "sweeps" in spec else build_table)
    try:
        # A dry run's scores come from random weights: its score table is a check of the path, kept apart.
        for kind, p in build(spec, args.profile, root, out_dir / "scores" if costs else out_dir,
                             methods=args.methods).items():
            print(f"wrote {kind}: {p}")
        if costs:
            for kind, p in build_costs(spec, args.profile, root, out_dir, methods=args.methods).items():
                print(f"wrote cost table ({kind}): {p}")
    except UserError as e:  # e.g. a cost record with a negative time: one line naming the run and the field
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
