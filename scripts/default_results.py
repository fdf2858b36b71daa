"""The embedded default's results files, from which the README's first table is rendered.

    python scripts/default_results.py                 # make default-results (about 8 minutes on 2 CPU cores)
    python scripts/default_results.py --out DIR ARGS  # another folder; Hydra overrides for the run

Trains and evaluates the embedded default (``python train.py``; a finished run is only re-evaluated),
then scores its exported model against input-blind baselines of itself on the validation and test
splits (``scripts/input_blind.py``), and writes ``metrics.json``, ``input_blind_validation.json`` and
``input_blind_test.json`` into ``--out`` (default ``results/default/``). The README never types
these numbers: ``scripts/render_results.py`` renders them from these files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

try:
    import scaleformer  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("results/default"), help="where the files go")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for the run (none: the embedded default)")
    args = ap.parse_args(argv)

    import input_blind

    from scaleformer.compose import compose_config
    from scaleformer.io import atomic_write_bytes
    from scaleformer.runs.run import run

    cfg = compose_config(args.overrides)
    result = run(cfg)
    run_dir = Path(str(cfg.paths.runs)) / result["run_id"]
    evaluation = next((run_dir / "eval").glob(f"step_{result['step']}-{result['evaluation_hash']}"))
    args.out.mkdir(parents=True, exist_ok=True)
    for split in ("validation", "test"):
        if input_blind.main([str(run_dir), "--split", split, "--out", str(args.out / f"input_blind_{split}.json")]):
            return 1
    atomic_write_bytes(args.out / "metrics.json", (evaluation / "metrics.json").read_bytes())
    print(f"wrote {args.out}/metrics.json, input_blind_validation.json, input_blind_test.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
