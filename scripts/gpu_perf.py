"""`python scripts/gpu_perf.py` = `make gpu-perf`: table1's training cells on one GPU, optimisations off and
on, then the generation rows: decoding ms per token (dynamic vs static cache, against the floor) and batched
documents per second (scaleformer/costs/gpu_perf.py, gpu_generate.py)."""

import sys

from scaleformer.costs.gpu_perf import main

if __name__ == "__main__":
    sys.exit(main())
