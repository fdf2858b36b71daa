"""Benchmark every long-context method's speed, memory and scaling (see scaleformer/bench/).

    python scripts/bench.py --profile cpu-tiny [--methods a,b] [--sizes 1k,4096] [--out results/bench] [--resume]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scaleformer.bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
