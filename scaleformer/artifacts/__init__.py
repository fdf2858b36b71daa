"""The paper's artifacts: grids of runs, their launching, and the tables and figure rendered from results.

- ``grid``: an artifact's spec, its cells and where their results are; ``gridrun``: running the
  cells here or as Hydra multiruns; ``tables``: Table 1/2 and Figure 2 from results files;
  ``sweeps``: failed cells of a multirun; ``pretrain_reader``: the recipe that builds the shipped
  tiny readers the tiny tables fine-tune.
"""
