"""The offline BPE: shipped asset == rebuilt, flavours' special tokens, generic special-token diffing."""

from __future__ import annotations

import pytest
from tokenizers import processors
from transformers import PreTrainedTokenizerFast

from scaleformer.data.synthetic import build_offline_bpe
from scaleformer.model.readers import RECIPES, asset_dir
from scaleformer.model.tokenizer import (
    ASSET,
    NO_LIMIT,
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
        load_offline_tokenizer("gpt")


@pytest.mark.parametrize("name", [r.name for r in RECIPES.values()])
def test_each_shipped_reader_carries_the_tokenizer_it_was_trained_with(name: str) -> None:
    """``AutoTokenizer.from_pretrained(reader folder)`` is the offline BPE of the reader's flavour (not a
    fallback that maps any text to two ids), ids identical on a whole ledger, and it claims no window:
    a ledger longer than 1024 tokens tokenizes whole without the "longer than the maximum" warning."""
    import random

    from helpers import transformers_warnings
    from transformers import AutoTokenizer

    from scaleformer.data.synthetic import make_document

    recipe = next(r for r in RECIPES.values() if r.name == name)
    ours = load_offline_tokenizer(recipe.arch)
    ledger, summary, _ = make_document(random.Random(7), 1500)
    with transformers_warnings() as said:
        folder = AutoTokenizer.from_pretrained(asset_dir(name))
        ids = folder(ledger).input_ids
    assert len(ids) > 1024 and not [s for s in said if "maximum sequence length" in s], said
    assert ids == ours(ledger).input_ids and folder(summary).input_ids == ours(summary).input_ids
    assert folder.decode(ids, skip_special_tokens=True) == ledger
    assert tokenizer_fingerprint(folder) == tokenizer_fingerprint(ours)
    assert folder.model_max_length >= NO_LIMIT
    assert len(folder(ledger, truncation=True, max_length=1024).input_ids) == 1024  # a cut when asked for


def test_wrap_stops_the_tokenizer_claiming_the_window() -> None:
    """A hub tokenizer says ``model_max_length=1024`` (bart-base's); given to ``wrap``, whose model reads
    whole documents, it tokenizes a long ledger without the "longer than the maximum" warning."""
    import random

    from helpers import transformers_warnings
    from transformers import AutoModelForSeq2SeqLM

    import scaleformer
    from scaleformer.data.synthetic import make_document

    tok = load_offline_tokenizer("bart")
    tok.model_max_length = 1024
    scaleformer.wrap(AutoModelForSeq2SeqLM.from_pretrained(asset_dir("tiny_bart_reader")), "sled", tokenizer=tok)
    with transformers_warnings() as said:
        ids = tok(make_document(random.Random(3), 1500)[0]).input_ids
    assert len(ids) > 1024 and tok.model_max_length == NO_LIMIT and not said, said


def test_the_decoder_only_flavour_wraps_a_document_as_bart_does() -> None:
    """gpt2 (a decoder-only backbone's documents): <s> ... </s>, the ids bart gives."""
    text = "On day 3, Mara Quill sold 5 lanterns."
    assert load_offline_tokenizer("gpt2")(text)["input_ids"] == load_offline_tokenizer("bart")(text)["input_ids"]
