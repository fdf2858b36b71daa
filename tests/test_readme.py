"""The documentation's commands work as written, and its numbers are its results files' (litgpt's test_readme).

Every command line of a ``bash`` block in README.md and docs/*.md is covered by exactly one rule of
``COVERAGE``: run here (training commands in fast mode, ``debug=default``, under a temporary
``paths.root``; ``summarize`` and ``score`` on a model a README command trained), composed here (runs
for hardware this machine lacks), stopping here with one ``error:`` line (the hub is needed), run by
the named test, or named as needing a GPU or the network. A new command without a rule fails
``test_every_documented_command_is_covered``. The pages' numbers are checked against ``results/``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
HUB_ONLY = ("backbone=bart_base", "backbone=t5_base", "data=govreport", "data=summscreen", "data=booksum",
            "backbone.pretrained=google/")
# Commands for hardware this machine lacks (several GPUs, nodes, a SLURM cluster): composed, not run.
CLUSTER = re.compile(r"trainer\.devices=([2-9]|\d\d)|trainer\.num_nodes=|hydra/launcher=slurm")
TRAIN = re.compile(r"^(\.venv/bin/python train\.py|python train\.py|make run$|.*scaleformer train)")

# (pattern, kind, detail). kinds: run / compose / hub (this file runs or composes them), test (the named
# test runs this command's path), long (CPU runs of many minutes: they produced the committed results
# these pages render, checked by test_results_blocks_match_results_files; their grids compose in
# test_tiny_profiles_compose), gpu (needs a GPU, a cluster or the network to PyTorch's index).
COVERAGE: list[tuple[str, str, str]] = [
    (r"^make test$|^make test-kernels$|^make test-all$|^make lint$", "test",
     "the test tiers themselves (.ci/run runs make test and make test-kernels)"),
    (r"^make setup TORCH_INDEX=", "gpu", "a CUDA build of torch from PyTorch's index"),
    (r"^make wheels( |$)|^make gpu-check ", "gpu", "the GPU tier's machine (scripts/gpu_check.py)"),
    (r"^make bench PROFILE=gpu-base$|scaleformer bench --profile gpu-base", "gpu", "bart-base shapes in bf16"),
    (r"scaleformer bench --profile my\.yaml", "test", "tests/bench/test_bench.py::test_cli_runs_a_profile_file"),
    (r"^make bench$", "test", "tests/bench/test_bench.py::test_results_file_structure"),
    (r"^make bench-step$", "long", "results/bench/step-overhead.md"),
    (r"^make bench-step-compiled$", "long", "results/bench/step-compiled.md"),
    (r"^make bench-bucketed$", "long", "results/bench/bucketed-training-cpu.md"),
    (r"^make bench-compare$|scripts/bench_compare\.py", "test",
     "tests/bench/test_compare_memory.py::test_the_benchmark_writes_its_results"),
    (r"^make bench-eval$|scaleformer\.bench\.batched_eval", "test",
     "tests/bench/test_batched_eval.py::test_the_benchmark_writes_its_results"),
    (r"^make bench-decode$|scaleformer\.bench\.decode_overhead", "test",
     "tests/bench/test_decode_overhead.py::test_records_and_table"),
    (r"^make gpu-perf$", "gpu", "table1's cells at the paper's length in bf16 (scaleformer/costs/gpu_perf.py)"),
    (r'^(GPU_\w+=("[^"]*"|\S+) )*bash scripts/gpu_window\.sh ', "gpu", "a lent GPU window: make gpu-check's tier, then gpu_perf.py"),
    (r"scripts/gpu_perf\.py --tiny ", "test",
     "tests/costs/test_gpu_perf.py::test_gpu_perf_runs_every_cell_before_and_after_and_rebuilds_the_cost_table"),
    (r"^make (table1|table2|figure2|table_qa) PROFILE=smoke$", "test",
     "tests/artifacts/test_tables.py::test_smoke_profile_runs_the_grid_and_renders_it"),
    (r"^make (table1|table2|figure2|table_qa|masformer_(table1|figure3|table2|figure4|ablation|lm_placement|continual)) "
     r"PROFILE=tiny$", "long",
     "results/tiny/"),
    (r"^make masformer_table1 PROFILE=dryrun$", "test",
     "tests/costs/test_counted_bill.py::test_the_bill_counts_each_cell_from_its_own_spans"),
    (r"^make masformer_table2 PROFILE=dryrun$", "test", "tests/costs/test_counted_bill.py::"
     "test_table2_bill_prices_its_own_continual_runs_fine_tuning_and_generation"),
    (r"^make masformer_(continual|ablation) PROFILE=dryrun$", "test", "tests/costs/test_counted_bill.py::"
     "test_tables_3_and_4_bills_price_only_the_runs_table2_does_not_have"),
    (r"^make masformer_table2 PROFILE=smoke$", "test", "tests/artifacts/test_perplexity_tables.py::"
     "test_masformer_table2_smoke_renders_rouge_rows_on_the_profiles_own_column"),
    (r"^make masformer_(table1|table2) PROFILE=rehearsal$", "test", "tests/artifacts/test_masformer_rehearsal.py::"
     "test_masformer_rehearsal_reads_every_paper_source_through_its_real_loader"),
    (r"^make masformer_figure4 PROFILE=smoke$", "test", "tests/artifacts/test_perplexity_tables.py::"
     "test_masformer_figure4_draws_table2s_runs_against_their_share_of_full_attentions_cost"),
    (r"^make masformer_ablation PROFILE=smoke$", "test", "tests/artifacts/test_perplexity_tables.py::"
     "test_the_placement_ablation_reuses_table2s_runs_and_moves_only_the_full_layers"),
    (r"^make masformer_continual PROFILE=smoke$", "test", "tests/artifacts/test_perplexity_tables.py::"
     "test_continual_training_rows_start_from_their_own_continued_models"),
    (r"^make masformer_(table1|figure3) PROFILE=smoke$", "test", "tests/artifacts/test_perplexity_tables.py::"
     "test_smoke_profile_runs_and_renders_with_cost_shares_and_paired_tests"),
    (r"^make table_qa METHODS=truncation,sled OUT_DIR=results/tiny/table_qa_seeds$", "long",
     "results/tiny/table_qa_seeds/"),
    (r"^make (table1|table2|figure2|table_qa) PROFILE=dryrun$", "test",
     "tests/costs/test_dryrun.py::test_one_dryrun_cell_at_bart_base_shape"),
    (r"^make (table1|table2|table_qa) PROFILE=rehearsal$", "test",
     "tests/artifacts/test_rehearsal.py::test_the_rehearsal_renders_every_table_through_the_real_loaders"),
    (r"^make rehearsal$", "long", "results/rehearsal_full/: the rehearsal at the real lengths, hours on 2 cores"),
    (r"scripts/restate_costs\.py", "test",
     "tests/costs/test_bill.py::test_the_committed_tables_and_bill_are_the_restatement_of_the_committed_measurements"),
    (r"^make table1 LAUNCHER=slurm", "gpu", "a SLURM cluster of GPUs"),
    (r"^make (table1|table2|figure2)( FORCE=1| METHODS=all)?$", "gpu", "the paper's profile: real data, one GPU"),
    (r"^python -m venv ~/sf", "test", "tests/test_package.py::test_pip_install_then_train_and_summarize_from_an_empty_directory"),
    (r"^mkdir -p /tmp/try .*scaleformer train debug=default$", "test",
     "tests/test_package.py::test_pip_install_then_train_and_summarize_from_an_empty_directory"),
    (r"scripts/scrolls_submission\.py", "test", "tests/data/test_scrolls_tasks.py::test_the_submission_covers_all_seven_tasks"),
    (r"scripts/qa_by_window\.py", "test", "tests/scripts/test_qa_by_window.py::test_the_parts_add_up_to_the_runs_own_scores"),
    (r"scripts/input_blind\.py", "test",
     "tests/runs/test_lifecycle.py::test_input_blind_baselines_score_the_model_without_its_input"),
    (r"scripts/hf_trainer\.py --output /tmp/hf-run$", "test",
     "tests/model/test_hf_trainer.py::test_the_example_script_trains_offline_and_saves_an_auto_loadable_model"),
    (r"scripts/hf_trainer\.py --model facebook/", "gpu", "bart-base from the hub, 2,000 steps"),
    (r"^scaleformer lm-eval --model hf ", "test",
     "tests/cli/test_lm_eval.py::test_the_command_line_loads_an_export_and_its_perplexity_is_the_projects"),
    (r"^\.venv/bin/scaleformer compare ", "test",
     "tests/metrics/test_stats.py::test_compare_reports_a_known_difference_and_refuses_unpaired_runs"),
    (r"^\.venv/bin/scaleformer (summarize|score) ", "run", "test_readme_summarize_and_score_commands"),
    (r"scaleformer train --config-dir \./my_conf method=my_method$", "test",
     "tests/test_method_plugin.py::test_a_method_from_its_own_package_trains_exports_generates_and_benches"),
    (TRAIN.pattern, "train", "test_readme_train_command"),
]


def _commands() -> list[tuple[str, str]]:
    """(page, command) for every command line of every bash block, comments dropped."""
    out = []
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S):
            for line in block.splitlines():
                line = line.split(" #", 1)[0].strip()
                if line:
                    out.append((page.relative_to(ROOT).as_posix(), line))
    return out


def _rule(command: str) -> tuple[str, str, str] | None:
    return next((r for r in COVERAGE if re.search(r[0], command)), None)


def _train_commands() -> list[str]:
    """Each distinct training command once (``make run`` is ``train.py`` with no arguments)."""
    seen: dict[tuple[str, ...], str] = {}
    for _, c in _commands():
        if (r := _rule(c)) and r[1] == "train":
            seen.setdefault(tuple(_words(c)), c)
    return list(seen.values())


def _words(command: str) -> list[str]:
    """The arguments a training command passes to train.py."""
    words = shlex.split(command)
    if command == "make run":
        return []
    return words[words.index("train.py") + 1:] if "train.py" in words else words[words.index("train") + 1:]


def test_every_documented_command_is_covered():
    uncovered = [f"{page}: {cmd}" for page, cmd in _commands() if _rule(cmd) is None]
    assert not uncovered, "commands no test runs and no rule names:\n" + "\n".join(uncovered)
    for _, kind, detail in COVERAGE:
        if kind == "test" and "::" in detail:
            path, name = detail.split("::")
            assert f"def {name}(" in (ROOT / path).read_text(), f"{detail}: no such test"
    assert len(_train_commands()) >= 8


def test_the_front_page_is_short_and_links_every_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in readme, f"README does not link docs/{page.name}"
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.name}: broken link {target}"


def test_results_blocks_match_results_files():
    """No number on these pages is typed by hand: each results block equals what its files render."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import render_results

    blocks = [m["name"] for page in PAGES for m in render_results.BLOCK.finditer(page.read_text(encoding="utf-8"))]
    assert {"default", "default-town", "table1-tiny-dev", "table1-tiny-reading"} <= set(blocks)
    assert render_results.main(["--check"]) == 0, "run python scripts/render_results.py"


def test_benchmark_paragraphs_quote_their_results_files():
    """A paragraph that links a benchmark's results quotes them: every decimal it prints is in those files
    (the .md it links or the .json beside it), so a rerun that changes them shows here."""
    checked = 0
    for page in PAGES:
        for para in re.split(r"\n\s*\n", page.read_text(encoding="utf-8")):
            links = re.findall(r"\]\(([^)#]*results/bench/[^)#]+\.md)\)", para)
            if not links:
                continue
            files = [(page.parent / link).resolve() for link in links]
            source = "".join(f.read_text() + (f.with_suffix(".json").read_text() if f.with_suffix(".json").exists()
                                              else "") for f in files)
            numbers = set(re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", para))
            missing = sorted(n for n in numbers if n not in source)
            assert not missing, f"{page.name}: {missing} not in {links}"
            checked += len(numbers)
    assert checked >= 20


@pytest.mark.parametrize("artifact", ["table1", "table2", "figure2", "table_qa", "masformer_table1",
                                      "masformer_figure3", "masformer_table2", "masformer_figure4",
                                      "masformer_ablation", "masformer_lm_placement", "masformer_continual"])
def test_tiny_profiles_compose(artifact):
    """The long ``make <artifact> PROFILE=tiny`` commands: every cell's config composes and validates."""
    from conftest import compose

    from scaleformer.artifacts.grid import expand_grid, load_spec
    from scaleformer.resources import experiments_dir
    from scaleformer.runs.context import to_config

    cells = expand_grid(load_spec(experiments_dir() / f"{artifact}.yaml"), "tiny")
    assert cells
    for cell in cells:
        to_config(compose(list(cell.overrides)))


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}


def _run_train(args: list[str], root: Path, cache: Path) -> subprocess.CompletedProcess:
    # Command-line values win over the debug group: keep a README's training length, but tiny.
    args = ["trainer.max_steps=4" if a.startswith("trainer.max_steps=") else a for a in args]
    fast = ["debug=default", f"paths.root={root}", f"paths.cache={cache}"]
    return subprocess.run([sys.executable, "train.py", *args, *fast], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=600)


def _args(command: str, tmp_path: Path) -> list[str]:
    out = []
    for a in _words(command):
        if a == "data.path=my_data":  # the page's own data folder, made here
            folder = tmp_path / "my_data"
            folder.mkdir()
            for split in ("train", "validation", "test"):
                rows = [{"id": f"{split}{i}", "document": f"word{i} " * 60, "summary": f"word{i}"} for i in range(3)]
                (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            a = f"data.path={folder}"
        out.append(a)
    return out


@pytest.mark.parametrize("command", _train_commands())
def test_readme_train_command(command, tmp_path, tmp_path_factory):
    args = _args(command, tmp_path)
    cache = tmp_path_factory.getbasetemp() / "readme_cache"
    if CLUSTER.search(command):  # compose the command's config as Hydra would, without running it
        args = [a.split(",")[0] for a in args if a != "-m"]
        proc = subprocess.run([sys.executable, "train.py", *args, "--cfg", "job"], cwd=ROOT, env=_env(),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "trainer:" in proc.stdout, (proc.stdout + proc.stderr)[-3000:]
        return
    proc = _run_train(args, tmp_path, cache)
    out = proc.stdout + proc.stderr
    if any(a.startswith(HUB_ONLY) for a in args):
        errors = [line for line in out.splitlines() if line.startswith("error:")]
        assert proc.returncode != 0 and len(errors) == 1, out[-3000:]
        assert "hub" in errors[0] and "Traceback" not in out
        assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir()), "no run folder left"
        return
    assert proc.returncode == 0, out[-3000:]
    assert "results: " in proc.stdout
    assert "Traceback" not in out and "\r" not in proc.stdout


def test_readme_summarize_and_score_commands(tmp_path, tmp_path_factory):
    proc = _run_train([], tmp_path, tmp_path_factory.getbasetemp() / "readme_cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    model = next(tmp_path.rglob("scaleformer.json")).parent
    text = "The ledger of Ash Crossing records 2 events. " * 200
    (tmp_path / "report.txt").write_text(text)
    (tmp_path / "book.txt").write_text(text * 3)
    (tmp_path / "docs.jsonl").write_text(json.dumps({"id": "a", "document": text}) + "\n")
    commands = list(dict.fromkeys(c for _, c in _commands() if c.startswith(".venv/bin/scaleformer summarize")))
    assert len(commands) >= 3
    for line in commands:
        args = [str(model) if a in ("DIR", "results/runs/<run>/model") else
                str(ROOT / a) if a.startswith("examples/") else  # the shipped example document
                str(tmp_path / a) if a.endswith((".txt", ".jsonl")) else a for a in shlex.split(line)[2:]]
        proc = subprocess.run([sys.executable, "-m", "scaleformer.cli", "summarize", *args], cwd=ROOT,
                              env=_env(), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (line, proc.stderr[-3000:])
        out = args[args.index("--output") + 1] if "--output" in args else None
        if out:
            assert Path(out).read_text().strip(), line
        elif "docs.jsonl" in line:
            assert (tmp_path / "docs.summaries.jsonl").read_text().strip(), line
        else:
            assert proc.stdout.strip() or "warning: the model wrote no text" in proc.stderr, (line, proc.stderr)
    for marker, page in (('AutoModelForSeq2SeqLM.from_pretrained("results/runs/<run>/model")', "README.md"),
                         ("Summarizer.from_pretrained(", "docs/using.md")):  # on the model trained here
        out = _run_snippet(_snippet(marker, page).replace("results/runs/<run>/model", str(model)))
        assert out.strip() and not SPECIAL_TEXT.search(out), (page, out)
    preds = next(tmp_path.rglob("predictions_validation.jsonl"))
    for line in dict.fromkeys(c for _, c in _commands() if c.startswith(".venv/bin/scaleformer score")):
        args = [preds if "<run>" in a else a for a in shlex.split(line)[2:]]
        score = subprocess.run([sys.executable, "-m", "scaleformer.cli", "score", *map(str, args)], cwd=ROOT,
                               env=_env(), capture_output=True, text=True, timeout=300)
        assert score.returncode == 0, score.stderr[-3000:]
        head, row = score.stdout.splitlines()[:2]  # the table: its header, the split's row with intervals
        assert head.split()[:3] == ["split", "n", "R-1"] and row.split()[0] == "validation", score.stdout


SPECIAL_TEXT = re.compile(r"</?s>|<pad>|<unk>")
# Every python block of these pages is run, as printed (paths aside), by the test named beside the text that
# picks it out, or is marked as a sketch on the line above (``<!-- sketch: PATH -->``) naming its runnable twin.
PYTHON_BLOCKS: list[tuple[str, str, str]] = [
    ("README.md", 'AutoModelForSeq2SeqLM.from_pretrained("results/runs/<run>/model")',
     "test_readme_summarize_and_score_commands"),
    ("docs/using.md", 'reader = "scaleformer/assets/readers/', "test_the_offline_wrap_snippet_summarizes_the_example_document"),
    ("docs/using.md", "Seq2SeqTrainer(", "test_the_trainer_snippet_trains_offline_and_loads_back"),
    ("docs/using.md", "Summarizer.from_pretrained(", "test_readme_summarize_and_score_commands"),
]
SKETCH = re.compile(r"<!-- sketch: (\S+) -->\n```python\n")


def _python_blocks(page: str) -> list[tuple[str, bool]]:
    """(code, marked as a sketch) for each python block of ``page``."""
    text = (ROOT / page).read_text(encoding="utf-8")
    return [(m[2], bool(m[1])) for m in re.finditer(r"(<!-- sketch: \S+ -->\n)?```python\n(.*?)```", text, flags=re.S)]


def _snippet(marker: str, page: str = "README.md") -> str:
    """The one python block of ``page`` containing ``marker``."""
    blocks = [code for code, _ in _python_blocks(page) if marker in code]
    assert len(blocks) == 1, f"{len(blocks)} python blocks of {page} contain {marker!r}"
    return blocks[0]


def test_every_python_block_is_run_or_marked():
    """A new snippet needs a row of ``PYTHON_BLOCKS`` (and the test it names), or a sketch mark whose twin exists."""
    problems = []
    for page in [p.relative_to(ROOT).as_posix() for p in PAGES]:
        for code, sketch in _python_blocks(page):
            rows = [r for r in PYTHON_BLOCKS if r[0] == page and r[1] in code]
            if not sketch and len(rows) != 1:
                problems.append(f"{page}: a python block run by {len(rows)} tests, not marked as a sketch:\n{code}")
        for twin in SKETCH.findall((ROOT / page).read_text(encoding="utf-8")):
            if not (ROOT / twin.split("::")[0]).exists():
                problems.append(f"{page}: sketch's twin {twin} does not exist")
    assert not problems, "\n".join(problems)
    this = Path(__file__).read_text(encoding="utf-8")
    for page, marker, test in PYTHON_BLOCKS:
        assert f"def {test}(" in this, f"{test}: no such test"
        assert marker in this.split(f"def {test}(")[1].split("\ndef ")[0], f"{test} does not run {marker!r}"
        _snippet(marker, page)  # exactly one block


def _run_snippet(code: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (code, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "maximum sequence length" not in proc.stderr, proc.stderr[-3000:]
    assert "not valid and may be ignored" not in proc.stderr, proc.stderr[-3000:]
    return proc.stdout


def test_the_offline_wrap_snippet_summarizes_the_example_document():
    """The offline ``wrap`` of docs/using.md (a shipped reader, its own tokenizer, examples/report.txt) runs as
    written, with no tokenizer or generation warning, and prints text without special tokens."""
    out = _run_snippet(_snippet('reader = "scaleformer/assets/readers/', "docs/using.md"))
    assert out.strip() and not SPECIAL_TEXT.search(out), out


def test_the_trainer_snippet_trains_offline_and_loads_back(tmp_path):
    """docs/using.md's Seq2SeqTrainer block, its output folder moved to ``tmp_path``: two steps on generated
    ledgers, and the saved folder loads with the Auto class as the method's model."""
    code = re.sub(r'"out(/model)?"', lambda m: repr(str(tmp_path / "out") + (m[1] or "")),
                  _snippet("Seq2SeqTrainer(", "docs/using.md"))
    assert code.count(str(tmp_path)) == 2, code
    _run_snippet(code)
    out = _run_snippet("import scaleformer, sys\nfrom transformers import AutoModelForSeq2SeqLM\n"
                       "m = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1])\n"
                       "print(type(m).__name__, m.config.method['name'], m.config.method['middle_tokens'])", str(tmp_path / "out" / "model"))
    assert out.split() == ["ScaleformerForConditionalGeneration", "scaleformer", "300"], out


def test_the_example_document_is_the_generators():
    """examples/report.txt and its summary are what examples/make_report.py writes (deterministic)."""
    sys.path.insert(0, str(ROOT / "examples"))
    import make_report

    files = make_report.example()
    assert set(files) == {"report.txt", "report.summary.txt"}
    for name, text in files.items():
        assert (ROOT / "examples" / name).read_text(encoding="utf-8") == text, "run python examples/make_report.py"
    assert files["report.summary.txt"].startswith("The ledger of ")
