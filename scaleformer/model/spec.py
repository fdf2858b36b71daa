"""What a method needs to know about a backbone, without the model: :class:`BackboneSpec`.

It describes the backbone, so it lives with the backbone side; methods only read it (they name it for
type checkers alone, which keeps ``methods`` below ``model`` in the layers). No imports beyond the
standard library: the Auto-class config and the benchmark's shapes build one without loading a model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackboneSpec:
    """A backbone's facts that decide how a method cuts and pads its inputs."""

    max_positions: int
    pad_id: int
    # Special tokens the tokenizer puts around one sequence (BART: [<s>], [</s>]; T5: [], [</s>]).
    prefix_ids: tuple[int, ...] = ()
    suffix_ids: tuple[int, ...] = ()
    d_model: int = 0
    n_encoder_layers: int = 0
    n_decoder_layers: int = 0
    # A causal LM (no encoder): only methods that set spans on its self-attention run on it.
    decoder_only: bool = False
