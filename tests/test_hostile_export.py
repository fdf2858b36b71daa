"""Hostile exports, ``wrap`` arguments and model inputs: one table, one row per case.

The exported model is checked as one record where the model class is built, so the Auto path
(``AutoModelForSeq2SeqLM``), ``summarize`` and ``wrap`` refuse alike: config.json's method and spec,
the backbone's config against the weights' keys, config.json's method against scaleformer.json's.
The class's ``generate`` and ``forward`` refuse inputs that would be read wrongly or fail deep inside.
Each row stops with one clear line (``message``: a regex) or checks what must happen (``message=None``).
Rows marked ``export`` get a fresh copy of the Memorizing export of ``test_hostile_table``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

# export and memorizing_export are the earlier table's fixtures: pytest finds them by these names here.
from test_hostile_table import (  # noqa: F401
    Case,
    Trigger,
    _drop_gate,
    _edit_json,
    check_table,
    export,
    memorizing_export,
    one_line,
    run_case,
    summarize,
)

from scaleformer.errors import ConfigError
from scaleformer.resources import resolve_asset

READERS = {"bart": "asset:readers/tiny_bart_reader", "t5": "asset:readers/tiny_t5_reader"}


# ---- tampering --------------------------------------------------------------------------------------


def _config(change: Callable[[dict], None]) -> Callable[[Path], None]:
    return _edit_json("config.json", change)


def _record(change: Callable[[dict], None]) -> Callable[[Path], None]:
    return _edit_json("scaleformer.json", change)


def _both(*edits: Callable[[Path], None]) -> Callable[[Path], None]:
    def go(folder: Path) -> None:
        for edit in edits:
            edit(folder)
    return go


def _t5_backbone(conf: dict) -> None:
    """config.json's backbone becomes the tiny T5 reader's config; the weights stay BART's."""
    conf["backbone"] = json.loads((Path(resolve_asset(READERS["t5"])) / "config.json").read_text())


@cache
def _method_option(name: str) -> dict[str, Any]:
    from omegaconf import OmegaConf

    from scaleformer.compose import compose_config

    return OmegaConf.to_container(compose_config([f"method={name}"]).method, resolve=True)


def _as_method(name: str) -> Callable[[dict], None]:
    """A whole, valid method section of another option (config.json's or scaleformer.json's)."""
    def go(data: dict) -> None:
        from scaleformer.methods import method_config

        cfg = dataclasses.asdict(method_config(_method_option(name)))
        if "method" in data and "config" in data["method"]:  # scaleformer.json
            data["method"].update(config=cfg, option=name)
        else:
            data["method"] = cfg
    return go


# ---- triggers ---------------------------------------------------------------------------------------


def auto(edit: Callable[[Path], None]) -> Trigger:
    """``AutoModelForSeq2SeqLM.from_pretrained`` of the tampered export (after ``import scaleformer``)."""
    def go(tmp: Path, folder: Path | None) -> Any:
        from transformers import AutoModelForSeq2SeqLM

        import scaleformer  # noqa: F401  (registers the Auto classes)

        edit(folder)
        return AutoModelForSeq2SeqLM.from_pretrained(folder)
    return go


def tampered(edit: Callable[[Path], None], *args: str) -> Trigger:
    """`scaleformer summarize` (with ``args``) of the tampered export: its one line, nothing else on stderr."""
    def go(tmp: Path, folder: Path | None) -> Any:
        edit(folder)
        return one_line(lambda: summarize(*args)(tmp, folder))
    return go


@cache
def _reader(arch: str) -> Any:
    from transformers import AutoModelForSeq2SeqLM

    return AutoModelForSeq2SeqLM.from_pretrained(resolve_asset(READERS[arch])).eval()


@cache
def _wrapped() -> Any:
    """SLED over a fresh BART reader: the model class whose generate and forward the rows call."""
    from transformers import AutoModelForSeq2SeqLM

    import scaleformer

    return scaleformer.wrap(AutoModelForSeq2SeqLM.from_pretrained(resolve_asset(READERS["bart"])), "sled").eval()


def wrap(arch: str, *args: Any, **kwargs: Any) -> Trigger:
    def go(tmp: Path, _: Path | None) -> Any:
        import scaleformer

        return scaleformer.wrap(_reader(arch), *args, **kwargs)
    return go


def wrap_twice(tmp: Path, _: Path | None) -> Any:
    import scaleformer

    return scaleformer.wrap(_wrapped(), "sled", max_positions=512)


def wrap_a_loaded_export(tmp: Path, folder: Path | None) -> Any:
    import scaleformer

    return scaleformer.wrap(auto(lambda f: None)(tmp, folder), "sled")


def _ids(*shape: int) -> torch.Tensor:
    return torch.randint(3, 1000, shape, generator=torch.Generator().manual_seed(0))


def call(method: str, ids: Any, **kwargs: Any) -> Trigger:
    """``model.generate`` / ``model(...)`` (forward) of the wrapped reader."""
    def go(tmp: Path, _: Path | None) -> Any:
        model = _wrapped()
        if method == "generate":
            return model.generate(ids, max_new_tokens=2, **kwargs)
        return model(input_ids=ids, labels=_ids(1, 4), **kwargs)
    return go


def zero_beams_in_generation_config(tmp: Path, _: Path | None) -> Any:
    import copy

    model = _wrapped()
    gen = copy.deepcopy(model.generation_config)
    gen.num_beams = 0
    return model.generate(_ids(1, 300), generation_config=gen, max_new_tokens=2)


def a_matching_mask_reads_the_whole_document(tmp: Path, _: Path | None) -> None:
    """The checks let well-formed inputs through: a full mask decodes as no mask, and a mask of the ids'
    shape with a shorter document reads that document alone (as the ids cut to it)."""
    model = _wrapped()
    ids = _ids(1, 3000)
    plain = model.generate(ids, max_new_tokens=3, num_beams=1)
    assert torch.equal(plain, model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, num_beams=1))
    mask = torch.ones_like(ids)
    mask[:, 2000:] = 0
    assert torch.equal(model.generate(ids, attention_mask=mask, max_new_tokens=3, num_beams=1),
                       model.generate(ids[:, :2000], max_new_tokens=3, num_beams=1))


def set_batching_keeps_the_loaded_method(tmp: Path, folder: Path | None) -> None:
    """`--set encoder_batch_size=4` changes that knob of the method config.json loads, nothing else: a
    runtime setting the record holds otherwise (a run may decide one late) neither blocks the load nor
    comes back, and Memorizing keeps its own trained gate."""
    from scaleformer.export.summarizer import Summarizer

    _record(lambda d: d["method"]["config"].update(checkpoint_chunks=True))(folder)
    loaded = json.loads((folder / "config.json").read_text())["method"]
    s = Summarizer.from_pretrained(folder, overrides={"encoder_batch_size": 4}, device="cpu")
    assert type(s.model.method).__name__ == "Memorizing"
    assert s.model.method.cfg.encoder_batch_size == 4
    assert s.model.method.cfg.checkpoint_chunks == loaded["checkpoint_chunks"] is None
    assert s.model.method.cfg.k == loaded["k"]
    from safetensors.torch import load_file

    gate = next(v for k, v in load_file(str(folder / "model.safetensors")).items() if k.endswith("retrieval_gate"))
    mine = next(p for n, p in s.model.named_parameters() if n.endswith("retrieval_gate"))
    assert torch.equal(mine.detach().cpu(), gate)
    assert isinstance(s("The ledger of Alder."), str)


def an_export_loads_clean_through_every_path(tmp: Path, folder: Path | None) -> None:
    """The untampered export: config.json and scaleformer.json agree to the setting, and it loads through
    the Auto class (no missing, unused or reshaped weight) and the Summarizer as the same method."""
    from transformers import AutoModelForSeq2SeqLM

    import scaleformer  # noqa: F401
    from scaleformer.export.summarizer import Summarizer

    conf = json.loads((folder / "config.json").read_text())["method"]
    assert conf == json.loads((folder / "scaleformer.json").read_text())["method"]["config"]
    model, info = AutoModelForSeq2SeqLM.from_pretrained(folder, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    assert Summarizer.from_pretrained(folder, device="cpu").model.method.cfg == model.method.cfg


# ---- the table --------------------------------------------------------------------------------------

NO_METHOD = r'^config\.json: no "method" section, so nothing says how the model reads long inputs'
GARBLED = r"^config\.json: method='garbled': must be a mapping of the method's settings with its name"
PAD_X = r"^config\.json: spec\.pad_id='x': must be an integer token id$"
T5_OVER_BART = (r"^config\.json: backbone\.model_type='t5' does not fit .*model\.safetensors: \d+ of its weights are "
                r"not there \(e\.g\. backbone\.\S+\) and \d+ there have no place in it \(e\.g\. backbone\.\S+\); "
                r"scaleformer\.json records a 'bart' backbone; the config does not belong to these weights$")
DISAGREE = (r"^config\.json and scaleformer\.json disagree on the method: method\.name is 'sled' in config\.json, "
            r"'scaleformer' in scaleformer\.json; config\.json is what loads")

CASES = [
    # silently wrong: a default method, another family's config over the weights, the record's method
    # instead of the loaded one, a mask shorter than the ids
    Case("config-without-method-auto", auto(_config(lambda d: d.pop("method"))), NO_METHOD, ConfigError, export=True),
    Case("config-without-method-summarize", tampered(_config(lambda d: d.pop("method"))), NO_METHOD, export=True),
    Case("t5-config-over-bart-weights-auto", auto(_config(_t5_backbone)), T5_OVER_BART, ConfigError, export=True),
    Case("t5-config-over-bart-weights-summarize", tampered(_config(_t5_backbone)), T5_OVER_BART, export=True),
    Case("reshaped-weights-auto", auto(_config(lambda d: d["backbone"].update(vocab_size=2000))),
         r"model\.safetensors: 2 weights have other shapes than config\.json's backbone gives them \(e\.g\. "
         r"backbone\.final_logits_bias: \[1, 1738\] there, \[1, 2000\] in the config\)", ConfigError, export=True),
    Case("gate-missing-auto", auto(_drop_gate),
         r"model\.safetensors: 1 weights missing \(e\.g\. .*retrieval_gate\); the export is incomplete", ConfigError,
         export=True),
    Case("sled-config-over-memorizing-weights", auto(_both(_config(_as_method("sled")), _record(_as_method("sled")))),
         r"model\.safetensors: 1 weights have no place in the model config\.json describes \(e\.g\. "
         r"\S+retrieval_gate; its method is 'sled'\)", ConfigError, export=True),
    Case("record-disagrees-on-the-method-auto",
         auto(_both(_config(_as_method("sled")), _record(_as_method("scaleformer")))), DISAGREE, ConfigError,
         export=True),
    Case("record-disagrees-summarize-set-batching",
         tampered(_both(_config(_as_method("sled")), _record(_as_method("scaleformer"))), "--set",
                  "encoder_batch_size=4"), DISAGREE, export=True),
    Case("record-disagrees-on-a-setting", auto(_record(lambda d: d["method"]["config"].update(k=8))),
         r"^config\.json and scaleformer\.json disagree on the method: method\.k is 32 in config\.json, 8 in "
         r"scaleformer\.json;", ConfigError, export=True),
    Case("summarize-set-batching-keeps-the-loaded-method", set_batching_keeps_the_loaded_method, None, export=True),
    Case("an-export-loads-clean", an_export_loads_clean_through_every_path, None, export=True),
    Case("generate-mask-shorter-than-ids", call("generate", _ids(1, 4520), attention_mask=torch.ones(1, 3).long()),
         r"^generate\(attention_mask\.shape=\[1, 3\]\): must equal input_ids\.shape=\[1, 4520\]", ConfigError),
    Case("forward-mask-shorter-than-ids", call("forward", _ids(1, 4520), attention_mask=torch.ones(1, 3).long()),
         r"^forward\(attention_mask\.shape=\[1, 3\]\): must equal input_ids\.shape=\[1, 4520\]", ConfigError),
    Case("generate-a-matching-mask", a_matching_mask_reads_the_whole_document, None),
    # tracebacks: a garbled or mistyped config.json, wrap's arguments, generate's inputs
    Case("config-method-garbled-auto", auto(_config(lambda d: d.update(method="garbled"))), GARBLED, ConfigError,
         export=True),
    Case("config-method-garbled-summarize", tampered(_config(lambda d: d.update(method="garbled"))), GARBLED,
         export=True),
    Case("config-method-unknown-name", auto(_config(lambda d: d["method"].update(name="nosuch"))),
         r"^config\.json: method\.name='nosuch': unknown method; available: .*memorizing", ConfigError, export=True),
    Case("config-method-setting-mistyped", auto(_config(lambda d: d["method"].update(k="many"))),
         r"^config\.json: method\.k: Value 'many' .* could not be converted to Integer", ConfigError, export=True),
    Case("config-spec-pad-id-string-auto", auto(_config(lambda d: d["spec"].update(pad_id="x"))), PAD_X, ConfigError,
         export=True),
    Case("config-spec-pad-id-string-summarize", tampered(_config(lambda d: d["spec"].update(pad_id="x"))), PAD_X,
         export=True),
    Case("config-spec-suffix-outside-vocabulary", auto(_config(lambda d: d["spec"].update(suffix_ids=[99999]))),
         r"^config\.json: spec\.suffix_ids=\[99999\]: 99999 is not a token id of the backbone's 1738-token "
         r"vocabulary", ConfigError, export=True),
    Case("config-without-spec", auto(_config(lambda d: d.pop("spec"))),
         r"^config\.json: spec=None: must be a mapping of the backbone's facts", ConfigError, export=True),
    Case("config-backbone-unknown-type", auto(_config(lambda d: d["backbone"].update(model_type="nosuchmodel"))),
         r"^config\.json: backbone\.model_type='nosuchmodel': transformers cannot build this config \(Unrecognized "
         r"model identifier: nosuchmodel\)$", ConfigError, export=True),
    Case("wrap-max-positions-string", wrap("t5", "sled", max_positions="512"),
         r"^wrap\(max_positions='512'\): must be a positive integer", ConfigError),
    Case("wrap-max-positions-zero", wrap("t5", "sled", max_positions=0),
         r"^wrap\(max_positions=0\): must be a positive integer", ConfigError),
    Case("wrap-tokenizer-name", wrap("bart", "sled", tokenizer="facebook/bart-base"),
         r"^wrap\(tokenizer='facebook/bart-base'\): a tokenizer object is expected, not its name: pass "
         r"tokenizer=AutoTokenizer\.from_pretrained\('facebook/bart-base'\)$", ConfigError),
    Case("wrap-tokenizer-not-a-tokenizer", wrap("bart", "sled", tokenizer=3),
         r"^wrap\(tokenizer=int\): a tokenizer object is expected", ConfigError),
    Case("wrap-method-typo", wrap("bart", "sledd"),
         r"^wrap\(method='sledd'\): not an option of conf/method/; choose one of .*\bsled\b", ConfigError),
    Case("wrap-method-not-a-name", wrap("bart", 5), r"^wrap\(method=5\): names an option of conf/method/",
         ConfigError),
    Case("wrap-already-wrapped", wrap_twice,
         r"^wrap\(model=ScaleformerForConditionalGeneration\): already wrapped \(method 'sled'\)", ConfigError),
    Case("wrap-a-loaded-export", wrap_a_loaded_export,
         r"^wrap\(model=ScaleformerForConditionalGeneration\): already wrapped \(method 'memorizing'\)", ConfigError,
         export=True),
    Case("generate-1d-ids", call("generate", _ids(4520)),
         r"^generate\(input_ids\.shape=\[4520\]\): must be 2-D \[batch, tokens\]; one document is input_ids\[None\]",
         ConfigError),
    Case("forward-1d-ids", call("forward", _ids(4520)), r"^forward\(input_ids\.shape=\[4520\]\): must be 2-D",
         ConfigError),
    Case("generate-float-ids", call("generate", _ids(1, 300).float()),
         r"^generate\(input_ids\.dtype=torch\.float32\): token ids are integers", ConfigError),
    Case("generate-ids-as-a-list", call("generate", [[5, 6, 7]]),
         r"^generate\(input_ids=list\): must be a torch\.Tensor of token ids", ConfigError),
    Case("generate-a-query-per-document", call("generate", _ids(1, 300), prefix_ids=_ids(2, 5)),
         r"^generate\(prefix_ids\.shape=\[2, 5\]\): needs one query per document of input_ids\.shape=\[1, 300\]",
         ConfigError),
    Case("generate-zero-beams", call("generate", _ids(1, 300), num_beams=0),
         r"^generate\(num_beams=0\): must be >= 1", ConfigError),
    Case("generation-config-zero-beams", zero_beams_in_generation_config,
         r"^generation_config\.num_beams=0: must be >= 1", ConfigError),
]


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_hostile_export_case(case: Case, request, tmp_path: Path) -> None:
    run_case(case, tmp_path, request)


def test_the_table_has_one_row_per_case_and_both_outcomes() -> None:
    check_table(CASES)
