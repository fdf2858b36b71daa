"""`python scripts/bench_step.py` = `make bench-step`: the training step's framework overhead on the CPU
(scaleformer/bench/step.py)."""

import sys

from scaleformer.bench.step import main

if __name__ == "__main__":
    sys.exit(main())
