"""The offline vocabulary's constants and the special-token probe, without transformers.

Here rather than in :mod:`scaleformer.model.tokenizer` (which loads tokenizers and transformers) so
that the data layer's pure-Python code (the synthetic generator that trains the offline BPE, the
ledgers' fact scoring) can use them while ``scaleformer score`` stays free of those libraries.
"""

from __future__ import annotations

from typing import Any

from scaleformer.resources import assets_dir

ASSET = assets_dir() / "offline_bpe.json"
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
VOCAB_SIZE = 4000


def special_token_ids(tokenizer: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(prefix, suffix) special ids the tokenizer wraps one sequence in, found by diffing encodings.

    Why generic: the same code must serve our offline BPE, `facebook/bart-base` (``[<s>], [</s>]``)
    and `t5-base` (``[], [</s>]``) without per-model tables.
    """
    for probe in ("summary", "hello world", "a"):
        plain = tokenizer(probe, add_special_tokens=False)["input_ids"]
        full = tokenizer(probe, add_special_tokens=True)["input_ids"]
        n = len(plain)
        for i in range(len(full) - n + 1):
            if n and full[i:i + n] == plain:
                return tuple(full[:i]), tuple(full[i + n:])
    raise ValueError(f"cannot locate the special tokens of {type(tokenizer).__name__}: its encoding "
                     "with special tokens does not contain the encoding without them")
