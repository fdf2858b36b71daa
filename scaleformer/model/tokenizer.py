"""The offline tokenizer and tokenizer helpers that work the same for hub BART/T5 tokenizers.

Why: the embedded default must run with no hub access, so it cannot download `facebook/bart-base`'s
vocabulary. We ship a small byte-level BPE (``assets/offline_bpe.json``) trained deterministically on
the bundled synthetic text; :func:`scaleformer.data.synthetic.build_offline_bpe` rebuilds it bit for bit
(``python -m scaleformer.data.synthetic``). Byte-level means any
UTF-8 text still tokenizes (no `<unk>`), so users' own files work with it too, just less compactly.

Special tokens: ``<pad>`` = 0, ``<s>`` = 1, ``</s>`` = 2, ``<unk>`` = 3. Two flavours differ only in
how one sequence is wrapped: "bart" (and "gpt2") gives ``<s> ... </s>``, "t5" gives ``... </s>``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tokenizers import Tokenizer, processors
from transformers import PreTrainedTokenizerFast
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

# The constants and the special-token probe live in vocab (no transformers there); their names stay here.
from scaleformer.model.vocab import ASSET, SPECIAL_TOKENS, VOCAB_SIZE, special_token_ids  # noqa: F401

FLAVOURS = ("bart", "t5", "gpt2")  # gpt2 (a decoder-only backbone) wraps a document as bart does
# transformers' own "no limit" (int(1e30)): the methods read whole documents, so a saved tokenizer must not
# claim the encoder's window (it would warn "sequence length is longer than ..." on every long document).
NO_LIMIT = VERY_LARGE_INTEGER


def _with_template(tok: Tokenizer, flavour: str) -> Tokenizer:
    if flavour not in FLAVOURS:
        raise ValueError(f"tokenizer flavour {flavour!r}: must be one of {', '.join(FLAVOURS)}")
    ids = {t: tok.token_to_id(t) for t in ("<s>", "</s>")}
    if flavour in ("bart", "gpt2"):
        single, pair = "<s> $A </s>", "<s> $A </s> </s> $B </s>"
    else:
        single, pair = "$A </s>", "$A </s> $B </s>"
    tok.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=list(ids.items())
    )
    return tok


def load_offline_tokenizer(flavour: str = "bart") -> PreTrainedTokenizerFast:
    """The shipped offline BPE wrapped for transformers, with the flavour's special-token template."""
    tok = _with_template(Tokenizer.from_str(ASSET.read_text(encoding="utf-8")), flavour)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        name_or_path=f"scaleformer-offline-bpe-{flavour}",
        padding_side="right",
        truncation_side="right",
        # Byte-level BPE decodes spaces exactly; WordPiece-style cleanup would corrupt it.
        clean_up_tokenization_spaces=False,
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, folder: str | Path) -> None:
    """``tokenizer.save_pretrained(folder)`` with no length limit, so ``AutoTokenizer.from_pretrained(folder)``
    gives the same ids and never warns that a long document is "longer than the maximum"; a user who wants
    a cut asks for one (``tokenizer(text, truncation=True, max_length=N)``)."""
    tokenizer.save_pretrained(folder)
    f = Path(folder) / "tokenizer_config.json"
    conf = json.loads(f.read_text(encoding="utf-8"))
    conf["model_max_length"] = NO_LIMIT
    f.write_text(json.dumps(conf, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerFast) -> str:
    """A short hash that changes whenever tokenization could change (vocab, merges, template)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        payload = backend.to_str()
    else:  # slow tokenizers: no serialization, fall back to identity and vocabulary
        payload = json.dumps([type(tokenizer).__name__, tokenizer.name_or_path, len(tokenizer),
                              sorted(tokenizer.get_vocab().items())])
    extra = json.dumps([tokenizer.pad_token_id, special_token_ids(tokenizer)])
    return hashlib.sha256((payload + extra).encode("utf-8")).hexdigest()[:16]
