"""scaleformer: long-context methods for encoder-decoder summarization under one roof.

Subpackages by layer; imports point down this list only (``tests/test_layout.py`` checks it):

- ``errors``, ``io`` (the one atomic writer), ``resources`` (configs and assets inside the package);
- ``config``: the typed config groups;
- ``ops/``: tensor kernels and the one seam into transformers (``compat``): chunking, fusion,
  packing, spans, the kept-positions layer, beam-shared decoding, retrieval attention;
- ``methods/``: every long-context method behind one interface, and their registry;
- ``model/``: backbones, the Hugging Face model class that carries a method (``wrap``, Auto
  registration), the offline tokenizer, the shipped tiny readers, hub access;
- ``data/``, ``metrics/``: examples and the tokenized cache; ROUGE, BERTScore, fact recall;
- ``export/``: the exported model folder, its model card, the Hub, the ``Summarizer``;
- ``runs/``: one run start to finish (context, steps, trainer, module, callbacks, checkpoints,
  results schema); ``bench/``: speed, memory and scaling;
- ``artifacts/``: the paper's tables and figure (grids, runs, rendering), the reader pretraining;
- ``cli/``: the console commands (``scaleformer train|summarize|score|compare|reproduce|bench|push``).
"""

from __future__ import annotations

from typing import Any

from scaleformer import progress as _progress
from scaleformer.model import autoreg as _autoreg

__version__ = "0.2.0"
__all__ = ["ScaleformerConfig", "ScaleformerForConditionalGeneration", "Summarizer", "__version__", "verbose", "wrap"]

# AutoConfig / AutoModelForSeq2SeqLM learn model_type "scaleformer" (when transformers loads them).
_autoreg.install()
# Quiet by default: no weight-loading bars or absl INFO lines (SCALEFORMER_VERBOSE=1 or verbose() keeps them).
_progress.quiet_libraries()


def verbose(on: bool = True) -> None:
    """Bring back (or silence again) transformers' weight-loading bars and absl's INFO lines, which
    ``import scaleformer`` silences."""
    _progress.quiet_libraries(verbose=on)

_LAZY = {"Summarizer": "scaleformer.export.summarizer", "wrap": "scaleformer.model.wrapping",
         "ScaleformerForConditionalGeneration": "scaleformer.model.hf",
         "ScaleformerConfig": "scaleformer.model.hf_config"}


def __getattr__(name: str) -> Any:
    """``from scaleformer import Summarizer, wrap`` without importing torch at ``import scaleformer``."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'scaleformer' has no attribute {name!r}")
