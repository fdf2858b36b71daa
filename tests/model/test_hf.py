"""The Hugging Face model class carries the method: Auto classes, wrap(), save/load, one decoding path."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import CONF, compose

import scaleformer
from scaleformer.export.folder import export_model
from scaleformer.export.summarizer import Summarizer
from scaleformer.model.hf import ScaleformerForConditionalGeneration
from scaleformer.resources import resolve_asset

# The model class sits on transformers internals (post_init, Auto registration, generate): make
# test-compat runs these on other releases too.
pytestmark = pytest.mark.compat
METHODS = sorted(p.stem for p in (CONF / "method").glob("*.yaml"))
BACKBONES = {"tiny_bart_reader": "readers/tiny_bart_reader", "tiny_t5_reader": "readers/tiny_t5_reader"}
# The fast tier covers every family (stock cross-attention, retrieval patches, attention spans) on
# BART and the chunked and retrieval ones on T5; the rest of the grid (minutes: full attention over
# 3.5 windows) runs in the slow tier.
FAST = {("tiny_bart_reader", m) for m in ("truncation", "sled", "scaleformer_middle", "unlimiformer", "memorizing",
                                          "masformer")} | {("tiny_t5_reader", m) for m in ("sled", "unlimiformer")}
CASES = [pytest.param(b, m, id=f"{b}-{m}", marks=() if (b, m) in FAST else pytest.mark.slow)
         for b in sorted(BACKBONES) for m in METHODS]


def _module(backbone: str, method: str):
    """The framework's Lightning module for a backbone and method, as a run builds it (reader weights)."""
    from scaleformer.model.backbone import build_model, prepare
    from scaleformer.runs.context import to_config
    from scaleformer.runs.module import SummarizationModule

    rc = to_config(compose([f"backbone={backbone}", f"method={method}", "generation.max_new_tokens=8"]))
    ready = prepare(rc.backbone, rc.method)
    return SummarizationModule(build_model(rc.backbone, ready.conf), ready.method, ready.tokenizer, rc.optim,
                               rc.generation).eval()


def _reader(name: str = "tiny_bart_reader"):
    from transformers import AutoModelForSeq2SeqLM

    return AutoModelForSeq2SeqLM.from_pretrained(resolve_asset(f"asset:{BACKBONES[name]}"))


def _document(tok, window: int) -> list[int]:
    """A document about 3.5 windows long, deterministic."""
    words = " ".join(f"On day {d} the clerk of Alder counted {d % 13 + 2} crates of salt." for d in range(450))
    ids = tok(words)["input_ids"]
    assert len(ids) > 3 * window, len(ids)
    return ids


@pytest.mark.parametrize(("backbone", "method"), CASES)
def test_auto_class_summarizer_and_run_decode_alike(tmp_path, backbone, method):
    """For every method: the exported folder loaded by AutoModelForSeq2SeqLM, the Summarizer and the
    run's own generation give the same text, greedy and with 4 beams, on a document 3.5x the window."""
    from transformers import AutoModelForSeq2SeqLM

    module = _module(backbone, method)
    folder = export_model(module, tmp_path / "model", {"method": {"option": method},
                                                       "backbone": {"name": backbone}, "step": 0})
    auto = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    assert isinstance(auto, ScaleformerForConditionalGeneration) and type(auto.method) is type(module.method)
    ids = _document(module.tokenizer, module.method.spec.max_positions)
    batch = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
    text = module.tokenizer.decode(ids, skip_special_tokens=True)
    for beams in (1, 4):
        module.gen_cfg = dataclasses.replace(module.gen_cfg, num_beams=beams)
        run = module.generate(batch)[0].strip()
        plain = module.tokenizer.decode(auto.generate(batch["input_ids"], num_beams=beams)[0],
                                        skip_special_tokens=True).strip()
        summarize = Summarizer.from_pretrained(folder, device="cpu", num_beams=beams)
        assert summarize.tokenizer(text)["input_ids"] == ids  # the same document reaches all three
        assert run == plain == summarize(text), (beams, run, plain)


@pytest.mark.parametrize(("backbone", "method"), CASES)
def test_wrap_gives_the_framework_loss(backbone, method):
    """wrap() of a plain from_pretrained backbone is the framework's model: the same teacher-forced loss."""
    module = _module(backbone, method)
    plain = _reader(backbone)
    params = {k: v for k, v in dataclasses.asdict(module.method.cfg).items() if k != "name"}
    wrapped = scaleformer.wrap(plain, method, tokenizer=module.tokenizer,
                               max_positions=module.method.spec.max_positions, **params).eval()
    assert wrapped.backbone is plain  # shared, not copied
    assert wrapped.method.spec == module.method.spec
    ids = _document(module.tokenizer, module.method.spec.max_positions)
    batch = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
             "labels": torch.tensor([module.tokenizer("Alder counted salt.")["input_ids"]])}
    with torch.no_grad():
        want = module(batch)
        got = wrapped(**batch).loss
    torch.testing.assert_close(got, want)


def test_save_and_load_round_trip_every_weight(tmp_path):
    """save_pretrained -> AutoModelForSeq2SeqLM.from_pretrained: no missing or unexpected keys, the
    method's own parameter (Memorizing's gate, trained away from its start) and the settings kept."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    model = scaleformer.wrap(_reader(), "memorizing", k=8)
    gate = next(p for n, p in model.named_parameters() if n.endswith("retrieval_gate"))
    with torch.no_grad():
        gate.add_(0.25)
    model.generation_config.num_beams = 3
    model.save_pretrained(tmp_path)
    conf = json.loads((tmp_path / "config.json").read_text())
    assert conf["model_type"] == "scaleformer" and conf["method"]["k"] == 8
    assert conf["backbone"]["model_type"] == "bart"
    assert type(AutoConfig.from_pretrained(tmp_path)).__name__ == "ScaleformerConfig"
    loaded, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    assert loaded.method.cfg == model.method.cfg and loaded.generation_config.num_beams == 3
    mine, theirs = model.state_dict(), loaded.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)


class FakeHubApi:
    """What transformers' push_to_hub asks of the Hub, answered on disk: the commit's files land in ``remote``."""

    def __init__(self, remote: Path) -> None:
        self.remote = remote

    def create_repo(self, repo_id: str, **kw):
        from types import SimpleNamespace

        return SimpleNamespace(repo_id=repo_id)

    def create_commit(self, repo_id: str, operations, **kw):
        import shutil

        for op in operations:
            dest = self.remote / op.path_in_repo
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(op.path_or_fileobj, dest)
        return f"https://huggingface.co/{repo_id}"


def test_push_to_hub_round_trips_through_a_faked_client(tmp_path, monkeypatch):
    """transformers' own push_to_hub sends what from_pretrained needs: loaded back, every weight is there."""
    import transformers.utils.hub as hf_hub
    from huggingface_hub import ModelCard, ModelCardData
    from transformers import AutoModelForSeq2SeqLM

    monkeypatch.setattr(hf_hub, "hf_api", lambda: FakeHubApi(tmp_path / "remote"))
    monkeypatch.setattr(hf_hub, "create_and_tag_model_card", lambda repo_id, tags=None, token=None:
                        ModelCard.from_template(ModelCardData(library_name="transformers"), model_description="x"))
    model = scaleformer.wrap(_reader(), "memorizing", k=8)
    model.push_to_hub("me/tiny-memorizing")
    assert (tmp_path / "remote" / "config.json").is_file()
    loaded, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "remote", output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    mine, theirs = model.state_dict(), loaded.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_wrap_refuses_what_it_cannot_serve_in_one_line():
    from scaleformer.errors import ConfigError

    t5 = _reader("tiny_t5_reader")
    with pytest.raises(ConfigError, match=r"^wrap\(max_positions=None\): t5 uses relative positions"):
        scaleformer.wrap(t5, "sled")
    with pytest.raises(ConfigError, match=r"^wrap\(model=Linear\): needs a loaded Hugging Face encoder-decoder"):
        scaleformer.wrap(torch.nn.Linear(2, 2), "sled")
    with pytest.raises(ConfigError, match=r"^method\.chunk_size=2048: must be <= the backbone's max positions"):
        scaleformer.wrap(t5, "sled", max_positions=1024, chunk_size=2048)


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_import_scaleformer_registers_without_importing_torch(tmp_path):
    """`import scaleformer` stays instant (no torch); the Auto classes still know the model type the
    moment transformers loads, and without `import scaleformer` transformers names the unknown type."""
    scaleformer.wrap(_reader(), "sled").save_pretrained(tmp_path / "m")
    code = ("import sys, scaleformer; assert 'torch' not in sys.modules, 'torch imported';"
            "from transformers import AutoModelForSeq2SeqLM as A;"
            f"print(type(A.from_pretrained({str(tmp_path / 'm')!r})).__name__)")
    done = _python(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ScaleformerForConditionalGeneration")
    bare = _python(f"from transformers import AutoModelForSeq2SeqLM as A; A.from_pretrained({str(tmp_path / 'm')!r})",
                   tmp_path)
    assert bare.returncode != 0 and "model type `scaleformer`" in bare.stderr



def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_the_recorded_commit_is_the_packages_own_wherever_the_command_runs(tmp_path, monkeypatch):
    """Runs, exports and benchmarks record this package's commit, not the working directory's; a copy
    of the package inside someone else's repository records 'unknown'."""
    from scaleformer import resources

    other = tmp_path / "their-project"
    (other / "lib" / "scaleformer").mkdir(parents=True)
    _git(other, "init", "-q")
    _git(other, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "theirs")
    theirs = _git(other, "rev-parse", "HEAD")
    monkeypatch.chdir(other)
    root = Path(scaleformer.__file__).resolve().parents[1]
    try:
        ours = _git(root, "rev-parse", "HEAD") if Path(_git(root, "rev-parse", "--show-toplevel")) == root else None
    except subprocess.CalledProcessError:
        ours = None
    resources.package_commit.cache_clear()  # asked once per process: ask afresh here
    got = resources.package_commit()
    assert theirs not in got
    assert got == "unknown" if ours is None else got.removesuffix("-dirty") == ours
    monkeypatch.setattr(resources, "package_dir", lambda: other / "lib" / "scaleformer")
    resources.package_commit.cache_clear()
    try:
        assert resources.package_commit() == "unknown"
    finally:
        resources.package_commit.cache_clear()


def test_checkpoints_from_before_the_model_class_still_load(tmp_path):
    """A Lightning checkpoint whose weights sit under ``model.`` (the backbone before the model class held
    it) loads into today's module, where they sit under ``model.backbone.``; today's pass through."""
    from scaleformer.runs.checkpoints import load, upgrade_state

    module = _module("tiny_bart_reader", "sled")
    state = module.state_dict()
    assert all(k.startswith("model.backbone.") for k in state)
    old = {"model." + k[len("model.backbone."):]: v for k, v in state.items()}
    assert upgrade_state(state) is state
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": old, "global_step": 3}, path)
    loaded = load(path)["state_dict"]
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)
    fresh = _module("tiny_bart_reader", "sled")
    fresh.load_state_dict(loaded)
