"""`python scripts/bench_compare.py` = `make bench-compare`: memory and time of `scaleformer compare` up to
100,000 documents, and of the scipy path it replaced (scaleformer/bench/compare_memory.py)."""

import sys

from scaleformer.bench.compare_memory import main

if __name__ == "__main__":
    sys.exit(main())
