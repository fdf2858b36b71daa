"""Exports worth publishing: model card, method record, Hub ids, the opt-in push, load_from_checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from conftest import compose
from helpers import transformers_warnings

from scaleformer.export.folder import META_FILE, read_meta
from scaleformer.export.hub import push_to_hub
from scaleformer.export.summarizer import Summarizer
from scaleformer.model.hub import HubUnreachableError
from scaleformer.runs.run import run


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[dict, Path, Path]:
    tmp = tmp_path_factory.mktemp("export")
    result = run(compose([f"paths.root={tmp}/results", f"paths.cache={tmp}/cache", "seed=5",
                          "method=scaleformer_middle", "data.synthetic_docs.train=3",
                          "data.synthetic_docs.validation=2", "data.synthetic_docs.test=0", "data.splits.test=null",
                          "trainer.max_steps=2", "trainer.eval_splits=[validation]",
                          "trainer.enable_progress_bar=false", "generation.num_beams=2",
                          "generation.max_new_tokens=10", "metrics.bertscore.enabled=false"]))
    run_dir = tmp / "results" / "runs" / result["run_id"]
    return result, run_dir, tmp


def _front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_the_folder_holds_a_method_record_and_a_model_card_with_the_scores(trained):
    result, run_dir, _ = trained
    model = run_dir / "model"
    meta = read_meta(model)
    assert meta["method"]["option"] == "scaleformer_middle" and meta["method"]["config"]["middle_tokens"] > 0
    assert meta["run"]["run_id"] == result["run_id"] and meta["run"]["step"] == 2
    assert meta["run"]["training_hash"] == result["training_hash"] and meta["run"]["command"]
    assert meta["data"] == "synthetic" and meta["metrics"]["rouge_tokenizer"] == "scrolls"
    assert set(meta["versions"]) >= {"scaleformer", "torch", "transformers", "lightning"}
    assert meta["evaluation"]["splits"]["validation"]["rouge1"] == result["splits"]["validation"]["rouge1"]
    card = (model / "README.md").read_text()
    front = _front_matter(card)
    # transformers 5 has no summarization pipeline: the card must not send the Hub's widget to one
    assert "pipeline_tag" not in front and "scaleformer_middle" in front["tags"]
    scores = front["model-index"][0]["results"][0]["metrics"]
    assert {"type": "rouge1", "value": round(result["splits"]["validation"]["rouge1"], 2)} in scores
    for text in ("## Method", "`middle_tokens`", "## Evaluation", "## How it was made", "Summarizer.from_pretrained",
                 "import scaleformer", "AutoModelForSeq2SeqLM.from_pretrained"):
        assert text in card, text
    head = card.split("## Method")[0]  # what to install comes first, from the source that exists
    assert "pip install scaleformer" not in card and "not on PyPI" in head
    assert "pip install -c requirements.lock ." in head and "pip install git+" in head


def test_the_folder_loads_with_the_auto_classes_and_decodes_as_the_run_did(trained):
    """config.json names the model class, generation_config.json the run's decoding settings (beams 2,
    10 new tokens), the tokenizer cuts at the backbone's window, and a plain generate() gives the
    Summarizer's tokens."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import scaleformer  # noqa: F401  (registers the Auto classes)
    from scaleformer.model.hf import ScaleformerForConditionalGeneration

    _, run_dir, _ = trained
    folder = run_dir / "model"
    assert json.loads((folder / "config.json").read_text())["model_type"] == "scaleformer"
    gen = json.loads((folder / "generation_config.json").read_text())
    assert gen["num_beams"] == 2 and gen["max_new_tokens"] == 10
    model, info = AutoModelForSeq2SeqLM.from_pretrained(folder, output_loading_info=True)
    assert isinstance(model, ScaleformerForConditionalGeneration)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.method.cfg.name == "scaleformer" and model.method.cfg.middle_tokens > 0
    tokenizer = AutoTokenizer.from_pretrained(folder)
    window = read_meta(folder)["backbone"]["max_positions"]
    text = " ".join(f"word{i % 97}" for i in range(3 * window))
    assert len(tokenizer(text, truncation=True, max_length=window).input_ids) == window  # a cut when asked
    with transformers_warnings() as said:  # the method reads the whole document: no window is claimed
        ids = tokenizer(text, return_tensors="pt").input_ids
    assert ids.shape[1] > 2 * window and tokenizer.model_max_length > ids.shape[1]
    assert not said, said
    summarize = Summarizer.from_pretrained(folder, device="cpu")
    plain = tokenizer.decode(model.eval().generate(ids)[0], skip_special_tokens=True).strip()
    assert plain == summarize(text)


def test_the_exported_generation_config_suits_any_beam_count(trained):
    """The run decoded with 2 beams (early stopping on); a greedy ``generate(num_beams=1)`` from the folder
    warns about no flag, and a greedy run's folder sets no beam-only flag."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

    import scaleformer  # noqa: F401  (registers the Auto classes)
    from scaleformer.export.folder import run_generation_config

    _, run_dir, _ = trained
    folder = run_dir / "model"
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    ids = AutoTokenizer.from_pretrained(folder)("On day 3, Mara Quill repaired 3 lanterns. " * 40,
                                                return_tensors="pt").input_ids
    with transformers_warnings() as said:
        greedy = model.generate(ids, num_beams=1, max_new_tokens=4)
        model.generate(ids, max_new_tokens=4)  # the folder's own 2 beams
    assert greedy.shape[1] > 1 and not said, said

    class Module:  # what run_generation_config reads of a greedy run's module
        model = type("M", (), {"generation_config": GenerationConfig(pad_token_id=0, early_stopping=True)})()
        gen_cfg = type("G", (), {"num_beams": 1, "max_new_tokens": 8, "min_new_tokens": 0, "length_penalty": 0.8,
                                 "no_repeat_ngram_size": 3})()

    gen = run_generation_config(Module())
    assert gen.num_beams == 1 and gen.early_stopping in (None, False) and gen.length_penalty in (None, 1.0)
    with transformers_warnings() as said:
        gen.validate()
    assert not said, said


def test_load_from_checkpoint_rebuilds_the_module_and_its_predictions(trained):
    from scaleformer.runs.module import SummarizationModule

    result, run_dir, _ = trained
    module = SummarizationModule.load_from_checkpoint(run_dir / "checkpoints" / "last.ckpt", weights_only=True,
                                                      map_location="cpu")
    assert module.method.cfg.name == "scaleformer" and module.hparams["run_config"]["seed"] == 5
    rows = [json.loads(line) for line in next(run_dir.glob("eval/step_2-*/predictions_validation.jsonl"))
            .read_text().splitlines()]
    summarize = Summarizer.from_pretrained(run_dir / "model", device="cpu")
    from transformers import AutoModelForSeq2SeqLM

    import scaleformer  # noqa: F401  (registers the Auto classes)

    auto = AutoModelForSeq2SeqLM.from_pretrained(run_dir / "model").eval()
    for r in rows:  # the rebuilt module, the Summarizer and plain generate() give the run's own predictions
        text = _document(trained, r["id"])
        ids = module.tokenizer(text, add_special_tokens=True)["input_ids"]
        batch = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
        module.eval()
        plain = module.tokenizer.decode(auto.generate(batch["input_ids"])[0], skip_special_tokens=True).strip()
        assert module.generate(batch)[0].strip() == r["prediction"] == summarize(text) == plain


def _document(trained, doc_id: str) -> str:
    _, _, tmp = trained
    for f in (tmp / "cache").rglob("validation.jsonl"):
        for line in f.read_text().splitlines():
            row = json.loads(line)
            if row["id"] == doc_id:
                return row["input"]
    raise KeyError(doc_id)


class FakeHub:
    """Records what huggingface_hub.HfApi would be asked to do; nothing leaves the machine."""

    def __init__(self):
        self.calls = []

    def create_repo(self, **kw):
        self.calls.append(("create_repo", kw))
        return f"https://huggingface.co/{kw['repo_id']}"

    def upload_folder(self, **kw):
        self.calls.append(("upload_folder", {**kw, "files": sorted(p.name for p in Path(kw["folder_path"]).iterdir())}))


def test_push_sends_the_whole_folder_through_the_hub_api(trained, tmp_path):
    _, run_dir, _ = trained
    api = FakeHub()
    url = push_to_hub(run_dir / "model", "me/tiny-scaleformer", private=True, api=api)
    assert url == "https://huggingface.co/me/tiny-scaleformer"
    (c1, create), (c2, upload) = api.calls
    assert (c1, c2) == ("create_repo", "upload_folder")
    assert create["private"] is True and create["exist_ok"] is True and create["repo_type"] == "model"
    assert upload["repo_id"] == "me/tiny-scaleformer"
    assert {"README.md", META_FILE, "config.json", "model.safetensors"} <= set(upload["files"])
    assert "scaleformer_middle" in upload["commit_message"]
    not_export = tmp_path / "plain"
    not_export.mkdir()
    with pytest.raises(FileNotFoundError, match="not an exported scaleformer model"):
        push_to_hub(not_export, "me/x", api=FakeHub())


def test_push_command_uses_the_same_path(trained, monkeypatch, capsys):
    from scaleformer.cli import push

    _, run_dir, _ = trained
    api = FakeHub()
    monkeypatch.setattr("huggingface_hub.HfApi", lambda token=None: api)
    assert push.main(["--model", str(run_dir / "model"), "--repo", "me/tiny"]) == 0
    assert [c for c, _ in api.calls] == ["create_repo", "upload_folder"]
    assert "pushed" in capsys.readouterr().err


def test_a_hub_id_offline_is_one_line_and_a_cached_copy_loads(trained, tmp_path, monkeypatch):
    _, run_dir, _ = trained
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(HubUnreachableError) as e:
        Summarizer.from_pretrained("me/not-cached", device="cpu")
    assert "\n" not in str(e.value) and "me/not-cached" in str(e.value)
    # a snapshot in the local cache (as `hf download` leaves it) is found by its id
    snap = tmp_path / "hub" / "models--me--cached" / "snapshots" / "abc"
    snap.parent.mkdir(parents=True)
    import shutil

    shutil.copytree(run_dir / "model", snap)
    (tmp_path / "hub" / "models--me--cached" / "refs").mkdir()
    (tmp_path / "hub" / "models--me--cached" / "refs" / "main").write_text("abc")
    summarize = Summarizer.from_pretrained("me/cached", device="cpu", num_beams=1)
    assert summarize.folder == snap and isinstance(summarize("The ledger of Ash Crossing."), str)
