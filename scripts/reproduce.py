"""`python scripts/reproduce.py ...` = `scaleformer reproduce ...` (see scaleformer/cli/reproduce.py)."""

from scaleformer.cli.reproduce import main

if __name__ == "__main__":
    raise SystemExit(main())
