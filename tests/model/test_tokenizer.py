"""The offline BPE: shipped asset == rebuilt, flavours' special tokens, generic special-token diffing."""

from __future__ import annotations

import pytest
from tokenizers import processors
from transformers import PreTrainedTokenizerFast

from scaleformer.data.synthetic import build_offline_bpe
from scaleformer.model.tokenizer import (
    ASSET,
    load_offline_tokenizer,
    special_token_ids,
    tokenizer_fingerprint,
)

TEXT = "On day 41, Mara Quill repaired 17 lanterns at Harbor Gate."


@pytest.fixture(scope="module")
def bart() -> PreTrainedTokenizerFast:
    return load_offline_tokenizer("bart")


@pytest.fixture(scope="module")
def t5() -> PreTrainedTokenizerFast:
    return load_offline_tokenizer("t5")


def test_shipped_asset_equals_rebuilt() -> None:
    # Guards determinism of the build and that the asset was regenerated after generator changes.
    assert ASSET.read_text(encoding="utf-8") == build_offline_bpe().to_str(pretty=True) + "\n"


def test_special_token_ids_fixed(bart: PreTrainedTokenizerFast) -> None:
    assert [bart.convert_tokens_to_ids(t) for t in ("<pad>", "<s>", "</s>", "<unk>")] == [0, 1, 2, 3]
    assert (bart.pad_token_id, bart.bos_token_id, bart.eos_token_id, bart.unk_token_id) == (0, 1, 2, 3)
    assert 1000 < len(bart) <= 4000


def test_flavour_templates(bart: PreTrainedTokenizerFast, t5: PreTrainedTokenizerFast) -> None:
    plain = bart(TEXT, add_special_tokens=False)["input_ids"]
    assert bart(TEXT)["input_ids"] == [1, *plain, 2]
    assert t5(TEXT)["input_ids"] == [*plain, 2]
    assert special_token_ids(bart) == ((1,), (2,))
    assert special_token_ids(t5) == ((), (2,))
    # Synthetic words are single tokens: compact documents.
    assert len(plain) <= len(TEXT.split()) + 6


def test_round_trip_and_byte_fallback(bart: PreTrainedTokenizerFast) -> None:
    assert bart.decode(bart(TEXT)["input_ids"], skip_special_tokens=True) == TEXT
    odd = "Zürich — naïve 😀 text never seen"
    ids = bart(odd, add_special_tokens=False)["input_ids"]
    assert bart.unk_token_id not in ids
    assert bart.decode(ids) == odd


def test_special_token_ids_is_generic() -> None:
    tok = load_offline_tokenizer("bart")
    backend = tok.backend_tokenizer
    backend.post_processor = processors.TemplateProcessing(
        single="</s> $A <s> </s>", pair="$A $B", special_tokens=[("<s>", 1), ("</s>", 2)]
    )
    custom = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>")
    assert special_token_ids(custom) == ((2,), (1, 2))


def test_fingerprint(bart: PreTrainedTokenizerFast, t5: PreTrainedTokenizerFast) -> None:
    assert tokenizer_fingerprint(bart) == tokenizer_fingerprint(load_offline_tokenizer("bart"))
    assert tokenizer_fingerprint(bart) != tokenizer_fingerprint(t5)


def test_unknown_flavour() -> None:
    with pytest.raises(ValueError, match="flavour"):
        load_offline_tokenizer("gpt2")
