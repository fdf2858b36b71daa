"""The backbone side: loading any Hugging Face seq2seq model (or a tiny random one), the offline
tokenizer, the shipped tiny readers' recipes, and the one answer to "is the hub reachable?".

- ``backbone``: configs, weights and the facts methods need; ``spec``: those facts (``BackboneSpec``),
  which methods read and model/ builds;
- ``hf``, ``hf_config``: the Hugging Face model class and config that carry a method (``hf_embeddings``: its
  embedding API; ``hf_inputs``: the checks of its inputs and output flags; ``hf_loading``: an export's
  checks on load); ``wrapping``: ``wrap``; ``autoreg``: their registration with the Auto classes;
- ``tokenizer``: the offline BPE and special-token helpers (``vocab``: their constants and the
  special-token probe, without transformers); ``readers``: the tiny readers' recipes
  (data; the pretraining loop is ``scaleformer.runs.pretrain_reader``);
- ``hub``: one network probe and the local cache, for backbones, data and metrics.
"""
