"""Speed, memory and scaling of every long-context method, side by side.

Why: users choose a method by time and memory as much as by ROUGE, and the paper's claims (linear
cost, a far shorter decoder input than SLED) are claims about these numbers. One run measures every
method of a profile on the same random-weight backbone (speed does not depend on weight values) over
growing input lengths N: encoder time, decoder-input length, generation time for a fixed number of
new tokens, one training step, peak memory, tokens/s and (on GPU) the encoder's achieved FLOP/s.

Where things live:

- ``profile``: :class:`Profile`, loaded and validated from ``conf/bench/<name>.yaml`` (the grid,
  caps, repeats, comparisons and targets are data);
- ``shapes``: backbone shapes (configs without weights) and the seeded random-weight model;
- ``rows``: what is benchmarked: ``conf/method`` options via the method registry (``all`` = every
  option, so a new method needs no change here) and the built-in peers ``full_baseline`` and ``led``;
- ``measure``: timing (>= 3 runs at every size; min, median, IQR) and CPU/GPU peak-memory probes;
- ``probes``: encoder FLOPs, the device's peak, the test document and its input-coverage markers
  (how truncated inputs are detected);
- ``cell``: the phases of one (method, N): encode, generate per beam count, training step;
- ``floor``: the bytes a decoding step must read, its floor at the measured copy bandwidth;
- ``runner``: the grid, ``resume``, out-of-memory handling, atomic results writing;
- ``summary``: scaling exponents (truncated sizes excluded), comparisons, targets;
- ``report`` and ``plot``: the markdown and the PNG; ``cli``: ``scripts/bench.py``;
- beside the grid, one CPU benchmark each: ``step`` (a training step's framework overhead),
  ``compare_memory`` (``scaleformer compare`` at scale), ``batched_eval`` (documents per second, one at a
  time vs batched) and ``decode_overhead`` (ms and operators per token, dynamic vs static cache).
"""

from scaleformer.bench.cli import main
from scaleformer.bench.profile import Profile, load_profile
from scaleformer.bench.runner import SCHEMA, problems, run_profile

__all__ = ["SCHEMA", "Profile", "load_profile", "main", "problems", "run_profile"]
