"""Hostile inputs on the extension points and the training scripts: one table, one row per case.

Plugins (a method or span kind of another package taking a built-in name, a method requiring a patch
nobody registered), broken YAML in ``--config-dir`` and ``scripts/hf_trainer.py``'s arguments and
files. Each row stops with one clear line (``message``, a regex) or checks the right outcome itself
(``message=None``). The rows and helpers are those of ``test_hostile_table``.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from test_bad_inputs import jsonl
from test_hostile_table import Case, Trigger, check_table, one_line, run_case

from scaleformer.errors import ConfigError

sys.path.insert(0, str(ROOT / "scripts"))

PKG = "hostile_pkg"
CLASHING_METHOD = "from scaleformer.methods.truncation import Truncation\n\n\nclass MySled(Truncation):\n" \
                  "    name = 'sled'\n"
CLASHING_SPAN = "from scaleformer.ops.spans import Full, register_span_kind\n\n\nclass MyFull(Full):\n" \
                "    '''Inherits the name full.'''\n\n\nregister_span_kind(MyFull())\n"
TWICE = "from scaleformer.methods.truncation import Truncation, TruncationConfig\n" \
        "from scaleformer.ops.spans import Full, register_span_kind\n\n\n" \
        "class Again(Truncation):\n    name = 'hostile_again'\n\n\n" \
        "class AgainSpan(Full):\n    name = 'hostile_again'\n\n\nregister_span_kind(AgainSpan())\n"


@contextlib.contextmanager
def installed(tmp: Path, module: str, source: str, entry_point: bool = False) -> Iterator[Path]:
    """``hostile_pkg.<module>`` written into ``tmp/site`` (with a dist-info naming it in the
    ``scaleformer.methods`` group when ``entry_point``) and put on the path; afterwards the module,
    the path and whatever it registered are gone, and the built-ins are checked to be untouched."""
    from scaleformer.methods import REGISTRY
    from scaleformer.methods.sled import Sled
    from scaleformer.ops.spans import SPAN_KINDS, Full

    site = tmp / "site"
    (site / PKG).mkdir(parents=True, exist_ok=True)
    (site / PKG / "__init__.py").write_text("")
    (site / PKG / f"{module}.py").write_text(source)
    if entry_point:
        info = site / "hostile_pkg-0.1.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hostile-pkg\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[scaleformer.methods]\nmine = {PKG}.{module}\n")
    methods, kinds = set(REGISTRY), set(SPAN_KINDS)
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        for name in [m for m in sys.modules if m.split(".")[0] in (PKG, module)]:
            del sys.modules[name]
        for name in set(REGISTRY) - methods:
            del REGISTRY[name]
        for name in set(SPAN_KINDS) - kinds:
            del SPAN_KINDS[name]
        assert REGISTRY["sled"] is Sled and type(SPAN_KINDS["full"]) is Full, "a built-in was replaced"


# ---- triggers ---------------------------------------------------------------------------------------


def plugin(module: str, source: str) -> Trigger:
    """Import a plugin module directly (a researcher's own script does)."""
    def go(tmp: Path, _: Path | None) -> Any:
        with installed(tmp, module, source):
            importlib.import_module(f"{PKG}.{module}")
    return go


def plugin_through_entry_point(tmp: Path, _: Path | None) -> None:
    """Discovery through the entry point: the clashing plugin is left out with one warning naming both
    packages, and every other method still works (a broken plugin must not take the commands down)."""
    import scaleformer.methods as methods

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    log = logging.getLogger("scaleformer")
    log.addHandler(handler)
    try:
        with installed(tmp, "mine", CLASHING_METHOD, entry_point=True):
            assert methods.load_plugins() == []
    finally:
        log.removeHandler(handler)
    lines = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert re.search(r"method 'sled' of hostile_pkg\.mine \(package hostile[-_]pkg\) would replace the built-in one "
                     r"of scaleformer\.methods\.sled \(package scaleformer\)", lines[0]), lines[0]


def same_definition_twice(tmp: Path, _: Path | None) -> None:
    """The same object again, a fresh instance of the same kind, a module reloaded or imported under two
    names: harmless, no error, and the name keeps working."""
    from scaleformer.methods import REGISTRY
    from scaleformer.ops import spans

    spans.register_span_kind(spans.SPAN_KINDS["full"])
    spans.register_span_kind(spans.Full())
    with installed(tmp, "twice", TWICE) as site:
        mod = importlib.import_module(f"{PKG}.twice")
        importlib.reload(mod)
        assert REGISTRY["hostile_again"] is mod.Again and spans.Span("hostile_again").pairs(4) == 16
        sys.path.insert(0, str(site / PKG))  # the same file as a top-level module "twice"
        try:
            importlib.import_module("twice")
        finally:
            sys.path.remove(str(site / PKG))


def requires_unknown_patch(tmp: Path, _: Path | None) -> Any:
    """A method whose ``requires`` names a patch patches.PATCHES does not register, built as a run does."""
    from dataclasses import dataclass

    from scaleformer.methods import REGISTRY, build_method, method_config
    from scaleformer.methods.truncation import Truncation, TruncationConfig
    from scaleformer.model.spec import BackboneSpec

    @dataclass
    class NeedsConfig(TruncationConfig):
        name: str = "hostile_needs_patch"

    class Needs(Truncation):
        name = "hostile_needs_patch"
        Config = NeedsConfig
        requires = ("layer_spanz",)

    try:
        spec = BackboneSpec(max_positions=64, pad_id=1, prefix_ids=(0,), suffix_ids=(2,), d_model=16)
        return build_method(method_config({"name": "hostile_needs_patch"}), spec)
    finally:
        REGISTRY.pop("hostile_needs_patch", None)


def config_dir(files: dict[str, bytes], *args: str) -> Trigger:
    """The start-up check of ``train`` (the same composition Hydra then makes) on a --config-dir."""
    def go(tmp: Path, _: Path | None) -> Any:
        from scaleformer.cli.train import check_composed_targets

        for name, content in files.items():
            (tmp / "my_conf" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / "my_conf" / name).write_bytes(content)
        one_line(lambda: check_composed_targets(["--config-dir", str(tmp / "my_conf"), *args]))
    return go


def train_with_broken_yaml(tmp: Path, _: Path | None) -> None:
    """The whole command, as a researcher runs it: one line, exit 1, nothing written."""
    (tmp / "my_conf" / "method").mkdir(parents=True)
    (tmp / "my_conf" / "method" / "broken.yaml").write_text("name: sled\nchunk_size: [1, 2\n")
    done = subprocess.run([sys.executable, "train.py", "--config-dir", str(tmp / "my_conf"), "method=broken",
                           "debug=default", f"paths.root={tmp}/results"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(err) == 1, done.stderr
    assert re.search(r"^error: .*/my_conf/method/broken\.yaml:3:1: not readable YAML: expected ',' or ']', but got "
                     r"'<stream end>' \(while parsing a flow sequence at line 2, column 13\)$", err[0]), err[0]
    assert not (tmp / "results").exists()


def hf_trainer(*args: str, files: dict[str, bytes] | None = None) -> Trigger:
    """``scripts/hf_trainer.py`` with ``{tmp}`` in its arguments; every refusal comes before the model loads."""
    def go(tmp: Path, _: Path | None) -> Any:
        import hf_trainer as script

        for name, content in (files or {}).items():
            (tmp / name).write_bytes(content)
        argv = ["--output", str(tmp / "out"), *(a.replace("{tmp}", str(tmp)) for a in args)]
        try:
            one_line(lambda: script.main(argv))
        finally:
            assert not (tmp / "out").exists()
    return go


ROWS = {"train.jsonl": jsonl({"input": "Alder paid the toll.", "output": "Alder"},
                             {"input": "Birch paid the toll twice.", "output": "Birch"}),
        "dev.jsonl": jsonl({"input": "Cedar paid nothing.", "output": "Cedar"})}


def hf_trainer_reads_the_files_it_is_given(tmp: Path, _: Path | None) -> None:
    """--train and --validation are the rows trained and evaluated on (the generated ledgers stand in
    for neither); the trainer itself is a stand-in here, the real one is tests/model/test_hf_trainer."""
    from unittest import mock

    import hf_trainer as script

    for name, content in ROWS.items():
        (tmp / name).write_bytes(content)
    seen: dict[str, Any] = {}

    class Stub:
        def train(self) -> None: ...

        def save_model(self, out: str) -> None: ...

        def evaluate(self) -> dict[str, float]:
            return {"eval_loss": 0.0}

    def build(model: Any, tok: Any, train: list, val: list, *a: Any, **kw: Any) -> Stub:
        seen.update(model=model, texts=[tok.decode(r["input_ids"], skip_special_tokens=True) for r in train + val])
        return Stub()

    with mock.patch.object(script, "build_trainer", build):
        assert script.main(["--output", str(tmp / "out"), "--set", "middle_tokens=50",
                            "--train", str(tmp / "train.jsonl"), "--validation", str(tmp / "dev.jsonl")]) == 0
    assert seen["texts"] == ["Alder paid the toll.", "Birch paid the toll twice.", "Cedar paid nothing."]
    assert seen["model"].method.cfg.middle_tokens == 50


# ---- the table --------------------------------------------------------------------------------------

CASES = [
    # a plugin takes a built-in's name; the same definition twice stays harmless
    Case("plugin-method-named-sled", plugin("mine", CLASHING_METHOD),
         r"^method 'sled' of hostile_pkg\.mine \(package hostile_pkg\) would replace the built-in one of "
         r"scaleformer\.methods\.sled \(package scaleformer\): a plugin cannot replace a registered method", ConfigError),
    Case("plugin-method-named-sled-entry-point", plugin_through_entry_point, None),
    Case("plugin-span-kind-named-full", plugin("span", CLASHING_SPAN),
         r"^span kind 'full' of hostile_pkg\.span \(package hostile_pkg\) would replace the built-in one of "
         r"scaleformer\.ops\.spans \(package scaleformer\): a plugin cannot replace a registered span kind",
         ConfigError),
    Case("plugin-registered-twice", same_definition_twice, None),
    Case("method-requires-unknown-patch", requires_unknown_patch,
         r"^method=hostile_needs_patch: requires patch 'layer_spanz', which is not registered; known patches: "
         r"beam_shared_cross_attention, kept_layer, layer_spans, retrieval_layers$", ConfigError),
    # broken YAML under --config-dir: the file and line, before Hydra runs anything
    Case("config-dir-broken-yaml-train", train_with_broken_yaml, None),
    Case("config-dir-tab-indent", config_dir({"method/tabs.yaml": b"name: sled\n\tchunk_size: 3\n"}, "method=tabs"),
         r"^.*/method/tabs\.yaml:2:1: not readable YAML: found character '\\t' that cannot start any token"),
    Case("config-dir-duplicate-key", config_dir({"method/dup.yaml": b"name: sled\noverlap: 3\noverlap: 4\n"},
                                                "method=dup"),
         r"^.*/method/dup\.yaml:3:1: not readable YAML: found duplicate key overlap \(while constructing a mapping "
         r"at line 1, column 1\)$"),
    Case("config-dir-not-utf8", config_dir({"method/latin.yaml": "name: sled  # café\n".encode("latin-1")},
                                           "method=latin"),
         r"^.*/method/latin\.yaml: not UTF-8 text \(byte 0xe9 at offset \d+\); config files are read as UTF-8$"),
    Case("config-dir-broken-experiment-in-a-sweep",
         config_dir({"experiment/fine.yaml": b"# @package _global_\nseed: 3\n",
                     "experiment/bad.yaml": b"# @package _global_\nseed: [3\n"}, "-m", "experiment=fine,bad"),
         r"^.*/experiment/bad\.yaml:3:1: not readable YAML: expected ',' or ']'"),
    # scripts/hf_trainer.py: every mistake one line, before the model loads
    Case("hf-trainer-set-without-equals", hf_trainer("--set", "middle_tokens"),
         r"^--set='middle_tokens': expected KEY=VALUE \(a method parameter"),
    Case("hf-trainer-unknown-method", hf_trainer("--method", "nosuch"),
         r"^--method='nosuch': not an option of conf/method/; choose one of .*scaleformer_middle, .*sled"),
    Case("hf-trainer-unknown-parameter", hf_trainer("--set", "chunk_sise=5"),
         r"^--set chunk_sise=5: method scaleformer_middle has no parameter 'chunk_sise' \(did you mean "
         r"chunk_size\?\); its parameters: chunk_size, "),
    Case("hf-trainer-model-folder-missing", hf_trainer("--model", "/nonexistent"),
         r"^--model='/nonexistent': no such folder \(give a model folder or a Hub id"),
    Case("hf-trainer-rows-without-input",
         hf_trainer("--train", "{tmp}/train.jsonl",
                    files={"train.jsonl": jsonl({"input": "Alder.", "output": "a"}, {"output": "b"})}),
         r"/train\.jsonl:2: field 'input' missing or not a string \(--input-field names it; the row's fields: "
         r"'output'\)$"),
    Case("hf-trainer-validation-without-train",
         hf_trainer("--validation", "{tmp}/notes.txt", files={"notes.txt": b"not json at all\n"}),
         r"^--validation='.*/notes\.txt': needs --train"),
    Case("hf-trainer-validation-not-json",
         hf_trainer("--train", "{tmp}/train.jsonl", "--validation", "{tmp}/notes.txt",
                    files={"train.jsonl": ROWS["train.jsonl"], "notes.txt": b"not json at all\n"}),
         r"/notes\.txt:1: malformed JSON line"),
    Case("hf-trainer-reads-the-files-it-is-given", hf_trainer_reads_the_files_it_is_given, None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_hostile_plugin_case(case: Case, tmp_path: Path) -> None:
    run_case(case, tmp_path)


def test_the_table_has_one_row_per_case_and_both_outcomes() -> None:
    check_table(CASES)
