"""lm-evaluation-harness on a scaleformer export, offline on local tasks: ``scaleformer lm-eval`` (lm-eval's own
command line after the Auto registration) and the Python route (``HFLM(pretrained=model)``). Its rolling
log-likelihood equals the project's own next-token NLL on the same tokens (lm-eval puts its prefix token, here
``<s>``, before the tokenizer's encoding of the text, ``<s> text </s>`` with the project's tokenizers, and scores
every token of that encoding; the project scores a document's ``<s> text </s>`` after its first token), a document
longer than the method's sequence is read in windows of it (it crashed on the position table),
and a multiple-choice task scores the same at batch 1 and batch 8."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT

pytest.importorskip("lm_eval")  # in the dev environment (the lock); an optional extra for users: scaleformer[lmeval]

N = 256  # the export's sequence: twice the reader's 128 pretrained positions
WORDS = "the ledger of alder keeps three lanterns mara quill repaired a harbour bell in".split()


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    """The tiny reader wrapped with MASFormer at n = 256, saved as an export (with its tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scaleformer.model.wrapping import wrap
    from scaleformer.resources import resolve_asset

    src = resolve_asset("asset:readers/tiny_gpt2_reader")
    tok = AutoTokenizer.from_pretrained(src)
    folder = tmp_path_factory.mktemp("lmeval") / "export"
    model = wrap(AutoModelForCausalLM.from_pretrained(src), "masformer", tokenizer=tok, max_length=N, full_layers=1)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _docs(n_words: tuple[int, ...]) -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(n)) for n in n_words]


def _project_nll(model, ids: list[int]) -> float:
    """The project's perplexity numerator (scaleformer.runs.lm_module.token_nll) of one token sequence."""
    from scaleformer.runs.lm_module import token_nll

    x = torch.tensor([ids])
    with torch.no_grad():
        return float(token_nll(model(input_ids=x).logits, x).sum())


def test_the_rolling_log_likelihood_is_the_projects_nll_on_the_same_tokens(export):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(export).eval()
    lm = HFLM(pretrained=model, tokenizer=AutoTokenizer.from_pretrained(export), batch_size=2)
    assert lm.max_length == N  # the config's context (it fell back to 2,048 and crashed past 1,024 positions)
    short, long = _docs((20, 60)), _docs((700,))
    got = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(short + long)])
    for text, ll in zip(short, got):
        ids = [lm.prefix_token_id, *lm.tok_encode(text)]
        assert len(ids) <= N
        assert -ll == pytest.approx(_project_nll(model, ids), rel=1e-5)
    assert len(lm.tok_encode(long[0])) > 2 * N and math.isfinite(got[-1]) and got[-1] < 0  # windows of n, no crash


def _task(folder: Path, name: str, body: str, rows: list[dict]) -> None:
    data = folder / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / f"{name}.yaml").write_text(f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                                         f"    test: {data}\ntest_split: test\n{body}")


def test_the_command_line_loads_an_export_and_its_perplexity_is_the_projects(export, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    texts = _docs((15, 40, 90))
    _task(tmp_path, "tiny_ppl", 'output_type: loglikelihood_rolling\ndoc_to_text: ""\ndoc_to_target: "{{text}}"\n'
          "metric_list:\n  - metric: word_perplexity\n", [{"text": t} for t in texts])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "scaleformer.cli", "lm-eval", "--model", "hf", "--model_args",
                           f"pretrained={export}", "--tasks", "tiny_ppl", "--include_path", str(tmp_path),
                           "--device", "cpu", "--batch_size", "2", "--output_path", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())
    word_ppl = result["results"]["tiny_ppl"]["word_perplexity,none"]
    model, tok = AutoModelForCausalLM.from_pretrained(export).eval(), AutoTokenizer.from_pretrained(export)
    # lm-eval's tokens: its prefix token (<s>), then the tokenizer's encoding of the text (<s> text </s> here)
    nll = sum(_project_nll(model, [tok.bos_token_id, *tok.encode(t)]) for t in texts)
    assert word_ppl == pytest.approx(math.exp(nll / sum(len(t.split()) for t in texts)), rel=1e-4)


def test_a_multiple_choice_task_scores_the_same_at_batch_1_and_8(export, tmp_path):
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rng = random.Random(1)
    rows = [{"question": " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40))),
             "choices": [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))) for _ in range(4)],
             "answer": rng.randint(0, 3)} for _ in range(10)]
    _task(tmp_path, "tiny_mc", "output_type: multiple_choice\ndoc_to_text: \"{{question}}\"\n"
          "doc_to_choice: \"{{choices}}\"\ndoc_to_target: answer\nmetric_list:\n  - metric: acc\n", rows)
    model, tok = AutoModelForCausalLM.from_pretrained(export).eval(), AutoTokenizer.from_pretrained(export)
    scores = {}
    for size in (1, 8):
        out = simple_evaluate(model=HFLM(pretrained=model, tokenizer=tok, batch_size=size), tasks=["tiny_mc"],
                              task_manager=TaskManager(include_path=str(tmp_path)), log_samples=True)
        scores[size] = [[float(r[0][0]) for r in s["resps"]] for s in out["samples"]["tiny_mc"]]
    assert len(scores[1]) == 10 and all(len(s) == 4 for s in scores[1])
    for a, b in zip(scores[1], scores[8]):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-5)
