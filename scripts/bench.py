"""`python scripts/bench.py ...` = `scaleformer bench ...` (see scaleformer/bench/)."""

import sys

from scaleformer.bench import main

if __name__ == "__main__":
    sys.exit(main())
