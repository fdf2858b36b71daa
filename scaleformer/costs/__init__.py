"""What a paper profile costs, and how it was measured or counted: the cost wing, above the artifacts it prices.

- the dry-run cost tables of the summarization artifacts: ``measured`` (what each dry-run cell measured, scaled to
  the paper's length), ``plan`` (the paper profile's micro-batches, validations and documents of a cell),
  ``validation`` (validation during training's cost), ``table`` (the full profile's hours and the cost table's
  rows), ``check`` (a cost record checked before it is read), ``report`` (the table rendered), ``restate`` (a
  committed table restated under the current recipe);
- the bills: ``bill`` (the summarization tables' on one GPU, from measurements) and ``counted_bill`` (MASFormer's,
  counted from each cell's spans and shape);
- the GPU window's measurements: ``gpu_perf`` (the assembly, ``make gpu-perf``), ``gpu_train`` (its training
  cells), ``gpu_decode`` and ``gpu_generate`` (its generation rows).

It reads an artifact's spec and grid (``scaleformer.artifacts``), the in-run probes' records (``scaleformer.runs.cost``
and its fits, which stay in ``runs/``: they run inside a run, below the artifacts) and the benchmarks' helpers; only
the commands (``scaleformer.cli``) and ``scripts/`` import it.
"""
