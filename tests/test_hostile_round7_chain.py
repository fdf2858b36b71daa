"""Hostile inputs, seventh round, second half: MASFormer's chain and exports, resuming, its tables, its bills and the
retrieval methods' window. An export whose duplicated positions pass for pretrained ones, a BART export under the
decoder-only option, a language model given to ``summarize``, a resume with another attention pattern, a typo in a
profile, an edited table file, a bill of no cells or of another artifact. One row per case (the ``Case`` rows of
test_hostile_table); the security, corpus and run cases are the first half (``test_hostile_round7``)."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, compose
from test_hostile_table import Case, check_table, one_line, run_case

from scaleformer.errors import ConfigError

LM = ["experiment=masformer_lm", "backbone=tiny_gpt2_reader", "method.max_length=256", "trainer.max_steps=2",
      "trainer.enable_progress_bar=false", "data.synthetic_docs.train=8", "data.synthetic_docs.validation=0",
      "data.splits.validation=null", "data.synthetic_docs.test=2", "data.synthetic_words=150",
      "trainer.eval_splits=[test]", "metrics.perplexity_bucket=64"]


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory) -> Path:
    """A continually trained tiny reader (MASFormer l = 1, n = 256: twice its 128 positions), its run folder."""
    from scaleformer.runs.run import run

    tmp = tmp_path_factory.mktemp("lm")
    out = run(compose([*LM, f"paths.root={tmp}/results", f"paths.cache={tmp}/cache"]))
    return tmp / "results" / "runs" / out["run_id"]


@pytest.fixture
def export(request, tmp_path) -> Path:
    """A fresh copy of the language-model run (its folder: ``model/`` and ``checkpoints/``)."""
    folder = tmp_path / "run"
    shutil.copytree(request.getfixturevalue("lm_run"), folder, symlinks=True)
    return folder


def _prepare(*overrides: str) -> Any:
    from scaleformer.model.backbone import prepare
    from scaleformer.runs.context import to_config

    rc = to_config(compose(list(overrides)))
    return prepare(rc.backbone, rc.method), rc


# ---- the chain and exports ------------------------------------------------------------------------------------


def chain_keeps_the_spans(tmp: Path, run_dir: Path | None) -> None:
    """Block attention with no block_size from a continually trained export: blocks of the reader's pretrained 128
    positions, as without the chain (it read the export's table duplicated to n = 256: full attention)."""
    model = run_dir / "model"
    base = ["experiment=masformer_summarization", "backbone=tiny_gpt2_reader", "method=block_attention",
            "method.max_length=256", "data.max_target_tokens=64"]
    for method in ("method=block_attention", "method=masformer", "method=sliding_window"):
        (plain, _), (chained, _) = _prepare(*base, method), _prepare(*base, method, f"backbone.pretrained={model}")
        assert chained.spec.max_positions == plain.spec.max_positions == 128, method
        assert chained.method.layer_spans(6) == plain.method.layer_spans(6), method
    (again, _) = _prepare(*base, f"backbone.pretrained={model}")
    assert {s.size for s in again.method.layer_spans(6)} == {128}


def seq2seq_export_under_a_decoder_only_option(tmp: Path, _: Path | None) -> Any:
    from scaleformer.export.folder import export_model
    from scaleformer.model.backbone import build_model, prepare
    from scaleformer.runs.context import to_config
    from scaleformer.runs.module import SummarizationModule

    rc = to_config(compose(["backbone=tiny_bart_reader", "method=truncation"]))
    ready = prepare(rc.backbone, rc.method)
    module = SummarizationModule(build_model(rc.backbone, ready.conf), ready.method, ready.tokenizer, rc.optim,
                                 rc.generation)
    folder = export_model(module, tmp / "bart", {"method": {"option": "truncation"}, "backbone": {"name": "tiny_bart"},
                                                 "step": 0})
    return _prepare("experiment=masformer_summarization", "backbone=tiny_gpt2_reader", f"backbone.pretrained={folder}")


def summarize(*args: str, edit: Any = None) -> Any:
    """``scaleformer summarize`` of a short document with the language model's export (``edit``: changed first)."""
    def trigger(tmp: Path, run_dir: Path | None) -> Any:
        from scaleformer.cli import summarize as cli

        model = run_dir / "model"
        if edit is not None:
            record = json.loads((model / "scaleformer.json").read_text())
            edit(record)
            (model / "scaleformer.json").write_text(json.dumps(record))
        (tmp / "doc.txt").write_text("Mara Quill repaired three lanterns in Alder. " * 10)
        return one_line(lambda: cli.main(["--model", str(model), "--input", str(tmp / "doc.txt"), "--device", "cpu",
                                          *args]))
    return trigger


def _as_summarizer(record: dict[str, Any]) -> None:
    record["task"], record["summary_tokens"] = "summarization", 64


def damaged_weights(how: str, loader: str) -> Any:
    """An export's ``model.safetensors`` cut in half, 64 zero bytes or missing, read through the chain
    (``backbone.pretrained``) or ``AutoModelForCausalLM``: one line naming the file."""
    def trigger(tmp: Path, run_dir: Path | None) -> Any:
        model = run_dir / "model"
        weights = model / "model.safetensors"
        if how == "missing":
            weights.unlink()
        else:
            weights.write_bytes(b"\x00" * 64 if how == "zeros" else weights.read_bytes()[: weights.stat().st_size // 2])
        if loader == "auto":
            from transformers import AutoModelForCausalLM

            import scaleformer  # noqa: F401 (registers the Auto classes)

            return AutoModelForCausalLM.from_pretrained(model)
        from scaleformer.model.backbone import build_model

        ready, rc = _prepare("experiment=masformer_summarization", "backbone=tiny_gpt2_reader",
                             f"backbone.pretrained={model}")
        return build_model(rc.backbone, ready.conf)
    return trigger


def resume_with(*changed: str) -> Any:
    """The language-model run's checkpoint continued with another attention pattern: refused at start-up."""
    def trigger(tmp: Path, run_dir: Path | None) -> Any:
        from scaleformer.runs.run import run

        ckpt = next(iter(sorted((run_dir / "checkpoints").glob("step_*.ckpt"))))
        return run(compose([*LM, f"paths.root={tmp}/results", f"paths.cache={tmp}/cache", "trainer.max_steps=3",
                            f"trainer.ckpt_path={ckpt}", *changed]))
    return trigger


# ---- tables, figures and bills --------------------------------------------------------------------------------


def _spec(name: str) -> dict[str, Any]:
    from scaleformer.artifacts.grid import load_spec
    from scaleformer.resources import experiments_dir

    return load_spec(experiments_dir() / f"{name}.yaml")


def cell_override_typo(where: str) -> Any:
    def trigger(tmp: Path, _: Path | None) -> Any:
        from scaleformer.artifacts.grid import expand_grid

        spec = _spec("masformer_table2")
        table = spec["profiles"]["paper"]["cell_overrides"]
        row = next(iter(table))
        if where == "row":
            table["masformr_l4"] = table.pop(row)
        else:
            table[row]["arxvi"] = table[row].pop(next(iter(table[row])))
        return expand_grid(spec, "paper")
    return trigger


def continual_typo(key: str, value: str) -> Any:
    def trigger(tmp: Path, _: Path | None) -> Any:
        from scaleformer.artifacts.grid import expand_grid

        spec = _spec("masformer_table2")
        spec["profiles"]["paper"]["continual"] = {**spec["profiles"]["paper"]["continual"], key: value}
        return expand_grid(spec, "paper")
    return trigger


def edited_table(artifact: str, file: str, field: str, change: Any) -> Any:
    """A committed MASFormer file with one number edited (row 1): ``render_results --check`` recomputes it from the
    spec and the archived scores, and names it."""
    def trigger(tmp: Path, _: Path | None) -> None:
        from scaleformer.artifacts.perplexity_recheck import recheck_figure, recheck_table

        tiny = tmp / "tiny"
        (tiny / "scores").mkdir(parents=True)
        source = _spec(artifact).get("same_runs_as") if file.endswith("figure3.csv") else artifact
        shutil.copytree(ROOT / "results" / "tiny" / "scores" / source, tiny / "scores" / source)
        for name in (f"{artifact}.csv", f"{artifact}-tests.csv"):
            if (ROOT / "results" / "tiny" / name).is_file():
                shutil.copy(ROOT / "results" / "tiny" / name, tiny / name)
        check = recheck_figure if file.endswith("figure3.csv") else recheck_table
        assert check(_spec(artifact), tiny / f"{artifact}.csv", tiny / "scores" / source) == []  # as committed
        rows = list(csv.DictReader((tiny / file).open()))
        rows[1][field] = change(rows[1][field])
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
        (tiny / file).write_text(buf.getvalue())
        problems = check(_spec(artifact), tiny / f"{artifact}.csv", tiny / "scores" / source)
        assert len(problems) == 1 and f"{field} is {rows[1][field]!r} in the file" in problems[0], problems
    return trigger


def bill(change: Any) -> Any:
    """``counted_floor`` (what a paper launch quotes) of a changed copy of a committed bill."""
    def trigger(tmp: Path, _: Path | None) -> Any:
        from scaleformer.costs.counted_bill import counted_floor

        change(tmp)
        return counted_floor("masformer_table2", tmp)
    return trigger


def _empty_bill(tmp: Path) -> None:
    record = json.loads((ROOT / "results" / "dryrun" / "masformer_table2.json").read_text())
    record["cells"], record["continual"], record["floor_h100_hours"] = [], [], 0.4
    (tmp / "masformer_table2.json").write_text(json.dumps(record))


def _table1_bill(tmp: Path) -> None:
    shutil.copy(ROOT / "results" / "dryrun" / "masformer_table1.json", tmp / "masformer_table2.json")


def bill_shape_without_vocab(tmp: Path, _: Path | None) -> Any:
    from scaleformer.bench.gpt_shape import parameters

    return parameters({"layers": 24, "width": 2048, "heads": 16, "positions": 2048})


def unlimiformer_window(tmp: Path, _: Path | None) -> None:
    """Unlimiformer's and Memorizing's local window: the input's first W tokens as the reference cuts them."""
    import dataclasses

    import torch

    from scaleformer.methods import build_method, method_config
    from scaleformer.model.spec import BackboneSpec

    spec = BackboneSpec(max_positions=1024, pad_id=1, prefix_ids=(0,), suffix_ids=(2,), d_model=32,
                        n_encoder_layers=2, n_decoder_layers=2)
    ids = torch.randint(5, 100, (1, 1025))
    for name in ("unlimiformer", "memorizing"):
        got, _ = build_method(method_config({"name": name}), dataclasses.replace(spec)).local_window.truncate(
            ids, torch.ones_like(ids))
        assert torch.equal(got, ids[:, :1024]), name


CASES = [
    # the chain and exports
    Case("chain-keeps-a-rows-spans", chain_keeps_the_spans, None, export=True),
    Case("seq2seq-export-under-the-decoder-only-option", seq2seq_export_under_a_decoder_only_option,
         r"^backbone\.pretrained='.*/bart': holds an encoder-decoder \(bart\), but backbone=tiny_gpt2_reader "
         r"\(backbone\.arch=gpt2\) is a decoder-only causal LM", ConfigError),
    Case("summarize-a-language-model", summarize(),
         r"^.*/model: holds a language model \(continually trained for perplexity: scaleformer\.json's task is "
         r"'language_modeling'\), not a summarizer", SystemExit, True),
    Case("summarize-with-no-room-for-the-document", summarize("--set", "max_length=40", edit=_as_summarizer),
         r"^max_length=40: the decoder-only model reads the document and its summary in one sequence, and the "
         r"summary takes 64 tokens of it", SystemExit, True),
    Case("chain-from-weights-cut-in-half", damaged_weights("cut", "chain"),
         r"^backbone\.pretrained='.*/model': .*/model\.safetensors: its weights cannot be read", ConfigError, True),
    Case("chain-from-weights-of-zero-bytes", damaged_weights("zeros", "chain"),
         r"^backbone\.pretrained='.*/model': .*/model\.safetensors: its weights cannot be read", ConfigError, True),
    Case("chain-from-an-export-without-weights", damaged_weights("missing", "chain"),
         r"^backbone\.pretrained='.*/model': .*/model: has no model\.safetensors", ConfigError, True),
    Case("auto-class-on-weights-cut-in-half", damaged_weights("cut", "auto"),
         r"^.*/model/model\.safetensors: its weights cannot be read \(.*\); the file is damaged", ConfigError, True),
    Case("auto-class-on-an-export-without-weights", damaged_weights("missing", "auto"),
         r"^.*/model: has no model\.safetensors \(the export's weights\)", ConfigError, True),
    # resuming
    Case("resume-with-more-full-layers", resume_with("method.full_layers=2"),
         r"^trainer\.ckpt_path='.*': trained with the spans \['full:0', 'block:128', .*\] \(layer 1: block:128\), but "
         r"this run's are \['full:0', 'full:0', .*\(full:0\): another attention pattern is another run", ConfigError,
         True),
    Case("resume-with-the-full-layer-on-top", resume_with("method.placement=top"),
         r"^trainer\.ckpt_path='.*': trained with the spans \['full:0', 'block:128'.*\(layer 0: full:0\).*another "
         r"attention pattern", ConfigError, True),
    # tables, figures and bills
    Case("cell-overrides-row-typo", cell_override_typo("row"),
         r"^masformer_table2: profiles\.paper\.cell_overrides\.masformr_l4: no such row; the rows are ", ValueError),
    Case("cell-overrides-column-typo", cell_override_typo("column"),
         r"^masformer_table2: profiles\.paper\.cell_overrides\.\w+\.arxvi: no such column; the columns are qmsum, "
         r"arxiv, govreport", ValueError),
    Case("continual-artifact-typo", continual_typo("artifact", "masformer_tabel1"),
         r"^masformer_table2: continual=.*: no artifact 'masformer_tabel1'; the artifacts are .*masformer_table1",
         ValueError),
    Case("continual-column-typo", continual_typo("column", "arxvi"),
         r"^masformer_table2: continual=.*: masformer_table1's paper profile has no column 'arxvi'; its columns are "
         r"arxiv", ValueError),
    Case("continual-profile-typo", continual_typo("profile", "tinny"),
         r"^masformer_table2: continual=.*: masformer_table1 has no profile 'tinny'; its profiles are ", ValueError),
    Case("check-an-edited-cost-share", edited_table("masformer_table1", "masformer_table1.csv", "cost_share",
                                                    lambda v: "0.5"), None),
    Case("check-an-edited-holm-p", edited_table("masformer_table1", "masformer_table1-tests.csv", "p_holm",
                                                lambda v: "0.9"), None),
    Case("check-a-negated-difference", edited_table("masformer_lm_placement", "masformer_lm_placement-tests.csv",
                                                    "diff", lambda v: repr(-float(v))), None),
    Case("check-a-doubled-figure-point", edited_table("masformer_figure3", "masformer_figure3.csv", "ppl",
                                                      lambda v: repr(2 * float(v))), None),
    Case("bill-with-no-cells", bill(_empty_bill),
         r"masformer_table2\.json: prices no cells .*so its 0\.4 h is no floor; count it again: make masformer_table2 "
         r"PROFILE=dryrun", ValueError),
    Case("bill-of-another-artifact", bill(_table1_bill),
         r"masformer_table2\.json: is the bill of 'masformer_table1', not of masformer_table2", ValueError),
    Case("bill-shape-without-vocab", bill_shape_without_vocab,
         r"^the bill's model shape .*: has no vocab \(a shape names layers, width, heads, positions and vocab\)",
         ValueError),
    # a deviation from the reference's code
    Case("retrieval-window-is-the-references", unlimiformer_window, None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_hostile_round7_chain(case: Case, request, tmp_path: Path) -> None:
    run_case(case, tmp_path, request)


def test_the_table_has_one_row_per_case_and_both_outcomes() -> None:
    check_table(CASES)
