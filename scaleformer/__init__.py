"""scaleformer: long-context methods for encoder-decoder summarization under one roof.

What lives where (one module per concept):

- configs and names: ``config`` (typed config groups), ``identity`` (training vs evaluation identity,
  run folders), ``hub`` (is the Hugging Face hub reachable, is it cached);
- the model: ``backbone`` (any seq2seq model, or a tiny random one), ``tokenizer`` (the offline BPE),
  ``methods/`` (every long-context method behind one interface) with its tensor machinery
  ``chunking`` (overlapping chunks, micro-batched encoding), ``fusion`` (ScaleFormer's eqs. 2-5),
  ``attention`` (MASFormer's attention spans) and ``retrieval`` (top-k cross-attention);
- data: ``data/`` (sources, examples, tokenized cache, the LightningDataModule, the synthetic set);
- training and evaluation: ``module`` (the LightningModule), ``trainer`` (Trainer, loggers,
  callbacks from configs), ``callbacks``, ``checkpoints`` (atomic, weights-only), ``run`` (one run,
  start to finish), ``runtime`` (ranks, the run lock, gathering predictions), ``sweeps`` (multirun
  failures), ``console`` (what a run prints), ``io`` (atomic files);
- results: ``metrics/`` (ROUGE, BERTScore), ``tables`` (the paper's tables and figure from results
  files), ``bench/`` (speed, memory, scaling);
- using a trained model: ``export`` (the ``model/`` folder), ``summarize`` (CLI and Python API).
"""

__version__ = "0.1.0"
