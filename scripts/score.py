"""`python scripts/score.py ...` = `scaleformer score ...` (see scaleformer/cli/score.py)."""

from scaleformer.cli.score import main

if __name__ == "__main__":
    main()
