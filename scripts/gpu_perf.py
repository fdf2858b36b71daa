"""`python scripts/gpu_perf.py` = `make gpu-perf`: table1's training cells on one GPU, optimisations off and
on (scaleformer/artifacts/gpu_perf.py)."""

import sys

from scaleformer.artifacts.gpu_perf import main

if __name__ == "__main__":
    sys.exit(main())
