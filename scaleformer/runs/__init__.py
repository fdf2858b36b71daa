"""One run, start to finish, and what it needs from Lightning.

- ``run_config``: the typed run config; ``context``: its validation (``to_config``) and the run
  context computed once (hashes, folders); ``identity``: what names a run and an evaluation;
- ``run``: the steps (prepare, build, train or load, evaluate, export, results);
- ``module`` (the LightningModule), ``trainer``, ``callbacks``, ``checkpoints`` (atomic, weights-only),
  ``runtime`` (ranks, the run lock, gathering predictions), ``console`` (what a run prints);
- ``results``: the ``metrics.json`` schema its writer and every reader share.
"""
