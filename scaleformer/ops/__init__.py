"""Tensor kernels and the one seam into transformers' internals.

- ``compat``: every reach into transformers/Lightning internals (bound by name, checked, fallbacks);
  ``binding``: its calls by argument role, whatever a release names the argument (re-exported there);
- ``padding``: each row's tokens where its mask is 1, moved to the front (any padding read as right padding);
- ``chunking``: overlapping chunks and micro-batched chunk encoding; ``packing``: chunk states into
  one padded decoder input; ``fusion``: ScaleFormer's cumulative fusion (eqs. 2-5);
- ``kept_layer``: the encoder's last layer at kept positions only; ``spans``: per-layer attention
  spans (full, block, sliding window) for MASFormer, an encoder's and a decoder's causal ones;
  ``span_cost``: MASFormer's attention cost C (the paper's formulas, counted pairs) and the sizes a budget gives;
- ``decoding``: generation with beam-shared cross-attention; ``retrieval``: top-k cross-attention
  layers (Unlimiformer, Memorizing Transformers); ``host_memory``: the CPU heap under tensors (keep freed
  blocks for reuse, or hand them back).

Imports nothing above ``errors`` and ``config``.
"""
