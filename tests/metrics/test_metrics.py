"""Metrics: SCROLLS-style ROUGE, the fallback sentence splitter, BERTScore model resolution and scoring."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from rouge_score import rouge_scorer

from scaleformer import metrics as M
from scaleformer.config import BertScoreConfig, MetricsConfig
from scaleformer.metrics import bertscore
from scaleformer.metrics import sentences as splitter
from scaleformer.model import hub
from scaleformer.model.hub import HubUnreachableError

TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


@pytest.fixture(autouse=True)
def new_run():
    """Each test is its own run: once-per-run notices start unshown."""
    M.reset_notices()


def _cfg(bertscore: bool = False, **bs) -> MetricsConfig:
    return MetricsConfig(sentence_splitter="regex",
                         bertscore=BertScoreConfig(enabled=bertscore, **bs))


def _direct(ref: str, pred: str) -> dict[str, float]:
    """rouge_score called directly, texts pre-split one sentence per line by hand."""
    s = rouge_scorer.RougeScorer(list(TYPES), use_stemmer=False).score(ref, pred)
    return {t: s[t].fmeasure * 100 for t in TYPES}


# ----------------------------------------------------------------------------------------------- ROUGE

def test_rouge_is_mean_of_direct_rouge_score_calls():
    preds = ["The cat sat on the mat. It was happy.", "Stocks fell sharply today."]
    refs = [["A cat sat on a mat. The cat was happy."], ["Stocks rose slightly today. Bonds fell."]]
    d1 = _direct("A cat sat on a mat.\nThe cat was happy.", "The cat sat on the mat.\nIt was happy.")
    d2 = _direct("Stocks rose slightly today.\nBonds fell.", "Stocks fell sharply today.")
    got = M.compute_metrics(preds, refs, _cfg())
    for t in TYPES:
        assert got[t] == pytest.approx((d1[t] + d2[t]) / 2, abs=1e-9), t
    assert got["rouge_geomean"] == pytest.approx(
        (got["rouge1"] * got["rouge2"] * got["rougeL"]) ** (1 / 3))
    assert got["sentence_splitter"] == "regex" and got["scored"] and got["n_scored"] == 2
    assert 0 < got["rouge2"] < got["rouge1"] < 100


def test_stemmer_is_off_by_default_and_configurable():
    preds, refs = ["The dogs were running."], [["The dog runs."]]
    plain = M.compute_metrics(preds, refs, _cfg())
    stemmed = M.compute_metrics(preds, refs, MetricsConfig(use_stemmer=True, sentence_splitter="regex",
                                                           bertscore=BertScoreConfig(enabled=False)))
    assert plain["rouge1"] == pytest.approx(_direct("The dog runs.", "The dogs were running.")["rouge1"])
    assert stemmed["rouge1"] > plain["rouge1"]


def test_multiple_references_take_the_best_per_metric():
    pred = "the quick brown fox jumps over the lazy dog"
    ref_a = "the quick brown fox"                          # wins R-2 and R-L
    ref_b = "dog lazy the over jumps fox brown quick the"  # same words reversed: wins R-1 only
    a, b = _direct(ref_a, pred), _direct(ref_b, pred)
    assert b["rouge1"] > a["rouge1"] and a["rouge2"] > b["rouge2"] and a["rougeL"] > b["rougeL"]
    got = M.compute_metrics([pred], [[ref_a, ref_b]], _cfg())
    for t in TYPES:  # SCROLLS: max per metric, not one "best reference" for all metrics
        assert got[t] == pytest.approx(max(a[t], b[t])), t


def test_lsum_uses_sentence_splitting_and_differs_from_rougeL():
    pred = "Bob went home. Alice stayed at work. The weather was cold."
    ref = "The weather was cold. Alice stayed at work. Bob went home."
    got = M.compute_metrics([pred], [[ref]], _cfg())
    joined = _direct("The weather was cold.\nAlice stayed at work.\nBob went home.",
                     "Bob went home.\nAlice stayed at work.\nThe weather was cold.")
    unsplit = _direct(ref, pred)
    assert got["rougeLsum"] == pytest.approx(joined["rougeLsum"])
    assert got["rougeLsum"] > got["rougeL"]                 # reordered sentences: Lsum forgives
    assert got["rougeLsum"] != pytest.approx(unsplit["rougeLsum"])  # without newlines Lsum == L
    assert got["rougeL"] == pytest.approx(unsplit["rougeL"])


def test_empty_prediction_scores_zero_and_counts_in_mean():
    refs = [["The cat sat."], ["The cat sat."]]
    got = M.compute_metrics(["The cat sat.", ""], refs, _cfg())
    assert got["rouge1"] == pytest.approx(50.0) and got["rougeLsum"] == pytest.approx(50.0)
    assert got["n_empty_predictions"] == 1
    none_pred = M.compute_metrics([None, "   "], refs, _cfg())  # type: ignore[list-item]
    assert none_pred["rouge1"] == 0.0 and none_pred["rouge_geomean"] == 0.0


def test_hidden_references_are_not_scored():
    got = M.compute_metrics(["a summary", "another"], [[], [""]], _cfg(bertscore=True))
    assert got["scored"] is False and got["n_scored"] == 0 and got["n_examples"] == 2
    assert "rouge1" not in got and "bertscore_f1" not in got
    assert got["sentence_splitter"] == "regex"


def test_documents_without_reference_are_left_out_of_the_mean():
    got = M.compute_metrics(["The cat sat.", "nothing matches"], [["The cat sat."], []], _cfg())
    assert got["n_scored"] == 1 and got["rouge1"] == pytest.approx(100.0)


def test_string_reference_and_length_mismatch():
    assert M.compute_metrics(["The cat sat."], ["The cat sat."], _cfg())["rouge1"] == pytest.approx(100)
    with pytest.raises(ValueError, match="2 predictions but 1"):
        M.compute_metrics(["a", "b"], [["a"]], _cfg())


def test_parallel_rouge_matches_sequential():
    preds = [f"Report {i} says costs rose. Agencies disagreed." for i in range(6)]
    refs = [[f"Report {i} found costs rose sharply.", "Agencies agreed."] for i in range(6)]
    seq = M.compute_rouge(preds, refs, sentence_splitter="regex", num_workers=1)
    par = M.compute_rouge(preds, refs, sentence_splitter="regex", num_workers=2)
    for t in TYPES:
        assert seq[t] == pytest.approx(par[t]), t
    assert seq["rouge1"] > 0


def test_progress_bar_only_for_long_sets_and_never_off_a_terminal(monkeypatch, capsys):
    from scaleformer.metrics import rouge

    seen, real_tqdm = [], rouge.tqdm
    monkeypatch.setattr(rouge, "tqdm", lambda it, **kw: seen.append(kw["disable"]) or real_tqdm(it, **kw))
    few = M.compute_rouge(["The cat sat."], [["The cat sat."]], sentence_splitter="regex")
    n = rouge._MANY_PAIRS
    many = M.compute_rouge(["The cat sat."] * n, [["The cat sat."]] * n, sentence_splitter="regex",
                           num_workers=1)
    assert seen == [True, None]  # few: never; many: on a terminal (tqdm's disable=None)
    assert few["rouge1"] == many["rouge1"] == pytest.approx(100.0)
    assert capsys.readouterr().err == ""  # captured output is not a terminal: no bar


# ------------------------------------------------------------------------------------------- splitter

@pytest.mark.parametrize("text, expected", [
    ("Mr. Smith met Dr. Jones. They talked.", ["Mr. Smith met Dr. Jones.", "They talked."]),
    ("Costs rose 3.5 percent. Revenue fell.", ["Costs rose 3.5 percent.", "Revenue fell."]),
    ("The U.S. Army grew. The U.S. The end.", ["The U.S. Army grew.", "The U.S.", "The end."]),
    ("He paused... and went on. Wait... Then he left!", ["He paused... and went on.", "Wait...",
                                                       "Then he left!"]),
    ("See Fig. 3 and No. 5, e.g. The Times. Done?", ["See Fig. 3 and No. 5, e.g. The Times.", "Done?"]),
    ('She said "Stop." Then J. Smith left.', ['She said "Stop."', "Then J. Smith left."]),
    ("no final punctuation", ["no final punctuation"]),
    ("   ", []),
])
def test_regex_splitter(text, expected):
    assert splitter.split_sentences_regex(text) == expected


def test_splitter_selection(monkeypatch):
    assert splitter.get_splitter("regex")[0] == "regex"
    monkeypatch.setattr(splitter, "nltk_available", lambda: False)
    assert splitter.get_splitter("auto")[0] == "regex"
    with pytest.raises(RuntimeError, match="punkt"):
        splitter.get_splitter("nltk")
    monkeypatch.setattr(splitter, "nltk_available", lambda: True)
    assert splitter.get_splitter("auto")[0] == "nltk"


# ------------------------------------------------------------------------------- BERTScore resolution

@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    """An empty HF cache and HF_HUB_OFFLINE=1: the paper model cannot be found."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_unreachable_hub_model_raises_clear_error_fast(no_hub, monkeypatch, network_attempts):
    def no_network(*args, **kwargs):
        raise AssertionError("HF_HUB_OFFLINE=1 must be honoured before any network call")

    monkeypatch.setattr(hub, "_probe", no_network)
    with pytest.raises(M.BertScoreModelError, match="hub cannot be reached.*HF_HUB_OFFLINE") as e:
        M.resolve_bertscore_model(BertScoreConfig(model_type="facebook/bart-large-mnli"))
    assert not network_attempts
    assert isinstance(e.value, HubUnreachableError)  # train.py turns it into one clean line
    assert "metrics.bertscore.model_type" in str(e.value) and "offline" in str(e.value)


def test_unreachable_hub_without_offline_flag_uses_probe(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "offline_mode", lambda: False)
    monkeypatch.setattr(hub, "_probe", lambda host, port: "ConnectError: no route")
    with pytest.raises(M.BertScoreModelError, match="no route"):
        M.resolve_bertscore_model(BertScoreConfig())
    monkeypatch.setattr(hub, "_probe", lambda host, port: None)
    m = M.resolve_bertscore_model(BertScoreConfig())
    assert (m.name, m.path, m.num_layers, m.source) == ("facebook/bart-large-mnli",) * 2 + (11, "hub")


def test_auto_falls_back_to_offline_with_warning(no_hub, caplog):
    with caplog.at_level(logging.WARNING, logger="scaleformer.metrics"):
        m = M.resolve_bertscore_model(BertScoreConfig(model_type="auto"))
    assert m.source == "offline" and m.num_layers == 6 and m.name == M.OFFLINE_MODEL_NAME
    assert "not comparable" in caplog.text


def test_cached_model_is_used_from_the_cache(no_hub, tmp_path):
    snap = tmp_path / "hf" / "models--facebook--bart-large-mnli" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap / "model.safetensors").write_text("")
    refs = tmp_path / "hf" / "models--facebook--bart-large-mnli" / "refs"
    refs.mkdir()
    (refs / "main").write_text("abc123")
    m = M.resolve_bertscore_model(BertScoreConfig())
    assert m.source == "hf-cache" and Path(m.path) == snap and m.name == "facebook/bart-large-mnli"
    (snap / "model.safetensors").unlink()  # config without weights: a partial download is not cached
    with pytest.raises(M.BertScoreModelError):
        M.resolve_bertscore_model(BertScoreConfig())


def test_cache_check_without_weights_for_tokenizers_and_configs(no_hub, tmp_path):
    snap = tmp_path / "hf" / "models--org--tok" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (tmp_path / "hf" / "models--org--tok" / "refs").mkdir()
    (tmp_path / "hf" / "models--org--tok" / "refs" / "main").write_text("abc123")
    assert hub.cached_snapshot("org/tok") is None  # a model needs its weights
    assert hub.cached_snapshot("org/tok", weights=False) == snap
    assert hub.cached_snapshot("not a valid id!") is None


def test_one_hub_probe_with_one_timeout(monkeypatch, tmp_path):
    """Backbone, data and metrics share hub.py's TCP probe; nothing else in the package probes."""
    sources = {p.relative_to(ROOT).as_posix(): p.read_text() for p in (ROOT / "scaleformer").rglob("*.py")}
    probing = sorted(f for f, text in sources.items()
                     if any(w in text for w in ("create_connection", "model_info(", "PROBE_TIMEOUT_S =")))
    assert probing == ["scaleformer/model/hub.py"]

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.setattr(hub, "offline_mode", lambda: False)
    monkeypatch.setattr(hub.urllib.request, "getproxies", dict)
    calls = []

    def refuse(address, timeout):
        calls.append((address, timeout))
        raise ConnectionRefusedError("refused")

    monkeypatch.setattr(hub.socket, "create_connection", refuse)
    with pytest.raises(M.BertScoreHubError, match="huggingface.co:443: refused"):
        M.resolve_bertscore_model(BertScoreConfig(model_type=M.PAPER_BERTSCORE_MODEL))
    assert calls == [(("huggingface.co", 443), hub.PROBE_TIMEOUT_S)]


def test_local_folder_needs_num_layers(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(M.BertScoreModelError, match="num_layers"):
        M.resolve_bertscore_model(BertScoreConfig(model_type=str(tmp_path), num_layers=None))
    m = M.resolve_bertscore_model(BertScoreConfig(model_type=str(tmp_path), num_layers=3))
    assert (m.source, m.num_layers) == ("local", 3)
    with pytest.raises(M.BertScoreModelError, match="no such local folder"):
        M.resolve_bertscore_model(BertScoreConfig(model_type=str(tmp_path / "missing")))


def test_rescaling_without_a_baseline_is_refused():
    cfg = BertScoreConfig(model_type="offline", rescale_with_baseline=True)
    with pytest.raises(M.BertScoreModelError, match="baseline"):
        M.get_bertscorer(M.offline_model(), cfg, "cpu")


# --------------------------------------------------------------------------- BERTScore, real MiniLM

def test_bertscore_offline_model_identical_vs_unrelated():
    cfg = _cfg(bertscore=True, model_type="offline")
    same = M.compute_metrics(["The committee approved the budget on Monday."],
                             [["The committee approved the budget on Monday."]], cfg)
    other = M.compute_metrics(["Penguins live in cold coastal regions."],
                              [["The committee approved the budget on Monday."]], cfg)
    assert same["bertscore_f1"] == pytest.approx(100.0, abs=0.01)
    assert other["bertscore_f1"] < 60.0
    assert same["bertscore_model"] == M.OFFLINE_MODEL_NAME and same["bertscore_num_layers"] == 6
    assert same["bertscore_hash"].startswith("sentence-transformers/all-MiniLM-L6-v2_L6_no-idf")
    assert same["bertscore_model_source"] == "offline"


def test_bertscore_multi_reference_empty_prediction_and_caching():
    bs = BertScoreConfig(model_type="offline")
    ref = "The committee approved the budget on Monday."
    unrelated = "Penguins live in cold coastal regions."
    one = M.compute_bertscore([ref], [[unrelated]], bs)
    for order in ([unrelated, ref], [ref, unrelated]):
        best = M.compute_bertscore([ref], [order], bs)
        assert best["bertscore_f1"] == pytest.approx(100.0, abs=0.01)
        assert best["bertscore_precision"] == pytest.approx(100.0, abs=0.01)
    assert one["bertscore_f1"] < 60.0
    mixed = M.compute_bertscore([ref, ""], [[ref], [ref]], bs)
    assert mixed["bertscore_f1"] == pytest.approx(50.0, abs=0.01)  # empty prediction: 0, no crash
    n_cached = len(bertscore._SCORERS)
    M.compute_bertscore([ref], [[ref]], bs)
    assert n_cached >= 1 and len(bertscore._SCORERS) == n_cached  # the model is loaded once per process
    model = M.offline_model()
    assert M.get_bertscorer(model, bs, "cpu") is M.get_bertscorer(model, bs, "cpu")


def test_bertscore_idf_weights_change_partial_matches_only():
    preds = ["the budget passed on monday", "penguins swim in the cold sea", "it rained"]
    refs = [["the budget passed on monday"], ["penguins swim in the sea"], ["rain fell all day long"]]
    plain = M.compute_bertscore(preds, refs, BertScoreConfig(model_type="offline"))
    idf = M.compute_bertscore(preds, refs, BertScoreConfig(model_type="offline", idf=True))
    assert "_idf" in idf["bertscore_hash"] and "_no-idf" in plain["bertscore_hash"]
    assert idf["bertscore_f1"] != pytest.approx(plain["bertscore_f1"], abs=0.01)
    exact = M.compute_bertscore(preds[:1], refs[:1], BertScoreConfig(model_type="offline", idf=True))
    assert exact["bertscore_f1"] == 0.0  # bert-score's idf from one reference: every weight log(2/2)=0
    assert 0.0 < idf["bertscore_f1"] < 100.0


def test_auto_fallback_notice_once_per_run(no_hub, caplog):
    cfg = _cfg(bertscore=True, model_type="auto")
    pred, ref = ["The committee approved the budget."], [["The committee approved the budget."]]
    with caplog.at_level(logging.WARNING, logger="scaleformer.metrics"):
        first = M.compute_metrics(pred, ref, cfg)   # e.g. the validation split
        second = M.compute_metrics(pred, ref, cfg)  # the test split of the same run
    notices = [r for r in caplog.records if "offline stand-in" in r.getMessage()]
    assert len(notices) == 1 and "not comparable" in notices[0].getMessage()
    assert first["bertscore_model"] == second["bertscore_model"] == M.OFFLINE_MODEL_NAME
    assert first["bertscore_model_requested"] == "auto" and second["bertscore_model_source"] == "offline"
    caplog.clear()
    M.reset_notices()  # the next run of a multirun in the same process is told again
    with caplog.at_level(logging.WARNING, logger="scaleformer.metrics"):
        M.resolve_bertscore_model(cfg.bertscore)
    assert sum("offline stand-in" in r.getMessage() for r in caplog.records) == 1


# ------------------------------------------------------------------------------------------ score.py

def test_score_script_defaults_are_train_py_and_work_offline(tmp_path):
    """The README's command as is: train.py's BERTScore default (the offline MiniLM) needs no network and says
    nothing of a fallback: none happened."""
    from omegaconf import OmegaConf

    train_bs = OmegaConf.load(ROOT / "conf" / "config.yaml").metrics.bertscore
    assert train_bs.model_type == "offline"
    pred_file = tmp_path / "predictions_validation.jsonl"
    pred_file.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "a", "prediction": "The committee approved the budget.", "reference": "The budget was approved."},
        {"id": "b", "prediction": "Penguins swim.", "reference": "Penguins live in cold seas."}]))
    out = tmp_path / "rescored.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hf")}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "score.py"), str(pred_file), "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(out.read_text())
    assert got["bertscore_model_requested"] == train_bs.model_type
    assert (got["bertscore_model"], got["bertscore_model_source"]) == (M.OFFLINE_MODEL_NAME, "offline")
    assert 0.0 < got["bertscore_f1"] <= 100.0 and got["bertscore_num_layers"] == 6
    settings = got["score_settings"]
    assert settings["metrics"]["bertscore"]["model_type"] == "offline" and settings["device"] == "cpu"
    assert settings["defaults_from"] == "conf/config.yaml" and settings["versions"]["rouge-score"]
    assert got["sentence_splitter"] in ("nltk", "regex") and got["predictions_file"] == str(pred_file)
    assert "offline stand-in" not in proc.stderr and "Loading weights" not in proc.stderr



def test_score_script_on_saved_predictions(tmp_path):
    rows = [
        {"id": "a", "prediction": "The cat sat on the mat.", "reference": "The cat sat on the mat."},
        {"id": "b", "prediction": "Dogs bark loudly.", "reference": ["Cats meow.", "Dogs bark loudly."]},
        {"id": "c", "prediction": "Birds fly.", "reference": "Fish swim."},
        {"id": "c", "prediction": "Birds fly.", "reference": "Birds fly south."},  # SCROLLS-style dup id
        {"id": "d", "prediction": "hidden", "reference": []},
    ]
    pred_file = tmp_path / "predictions_test.jsonl"
    pred_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "scored" / "metrics.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "score.py"), str(pred_file),
                           "--out", str(out), "--no-bertscore", "--sentence-splitter", "regex"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(out.read_text())
    assert got["n_examples"] == 4 and got["n_scored"] == 3 and "bertscore_f1" not in got
    c = _direct("Birds fly south.", "Birds fly.")["rouge1"]
    assert got["rouge1"] == pytest.approx((100 + 100 + c) / 3)
    head, row = proc.stdout.splitlines()[:2]  # the table: the split's row, its mean as the record's
    assert head.split()[:3] == ["split", "n", "R-1"] and row.split()[:3] == ["test", "3", f"{got['rouge1']:.1f}"]
    per_doc = [json.loads(line) for line in (tmp_path / "scored" / "metrics.scores.jsonl").read_text().splitlines()]
    assert [r["id"] for r in per_doc] == ["a", "b", "c"], "one row per scored document (d's references are hidden)"
    assert sum(r["rouge1"] for r in per_doc) / 3 == pytest.approx(got["rouge1"])
    assert per_doc[2]["rouge1"] == pytest.approx(c)


def test_score_writes_rows_that_compare_reads(tmp_path):
    """`score --scores` on two prediction files of the same documents: compare's paired difference equals
    the difference of the two scores' means."""
    from scaleformer.cli import compare, score

    refs = ["The cat sat on the mat.", "Dogs bark loudly.", "Birds fly south."]
    for name, preds in (("a", ["The cat sat on the mat.", "Dogs bark.", "Birds fly."]),
                        ("b", ["A cat.", "Dogs bark.", "Fish swim."])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps({"id": i, "prediction": p, "reference": r}) + "\n"
                                                        for i, (p, r) in enumerate(zip(preds, refs))))
        score.main([str(tmp_path / f"{name}.jsonl"), "--no-bertscore", "--sentence-splitter", "regex",
                    "--scores", str(tmp_path / f"{name}.scores.jsonl")])
    got = compare.compare(tmp_path / "a.scores.jsonl", tmp_path / "b.scores.jsonl", ["rouge1"])
    m = got["metrics"]["rouge1"]
    assert got["n_documents"] == 3 and m["diff"] == pytest.approx(m["mean_a"] - m["mean_b"]) and m["diff"] > 0


def test_score_script_rejects_conflicting_predictions(tmp_path):
    from scaleformer.cli import score
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": 1, "prediction": "x", "reference": "y"}\n{"id": 1, "prediction": "z", "reference": "y"}\n')
    with pytest.raises(ValueError, match="different prediction"):
        score.load_predictions(f)


# --------------------------------------------------------------------------------- ROUGE tokenizers

NON_LATIN = {
    "arabic": "قررت اللجنة الموافقة على الميزانية يوم الاثنين. وصوت الأعضاء بالإجماع.",
    "hebrew": "הוועדה אישרה את התקציב ביום שני. החברים הצביעו פה אחד.",
    "japanese": "委員会は月曜日に予算を承認した。委員は全会一致で賛成した。",
}


@pytest.mark.parametrize("script", sorted(NON_LATIN))
def test_non_latin_prediction_equal_to_reference(script, caplog):
    text = NON_LATIN[script]
    with caplog.at_level(logging.WARNING, logger="scaleformer.metrics"):
        scrolls = M.compute_metrics([text, text], [[text], [text]], _cfg())
    assert scrolls["rouge1"] == 0.0 and scrolls["rougeLsum"] == 0.0  # rouge_score keeps a-z0-9 only
    assert scrolls["rouge_tokenizer"] == "scrolls"
    warnings = [r.getMessage() for r in caplog.records if "not meaningful" in r.getMessage()]
    assert len(warnings) == 1, "once per run, not per document or split"
    assert "0% of the predictions' and 0% of the references'" in warnings[0]
    assert "metrics.rouge_tokenizer=unicode" in warnings[0] and scrolls["rouge_warning"] == warnings[0]
    unicode = M.compute_metrics([text], [[text]], MetricsConfig(sentence_splitter="regex", rouge_tokenizer="unicode",
                                                                bertscore=BertScoreConfig(enabled=False)))
    for t in TYPES:
        assert unicode[t] == pytest.approx(100.0), t
    assert unicode["rouge_tokenizer"] == "unicode" and "rouge_warning" not in unicode


def test_warning_once_per_run_and_again_in_the_next_run(caplog):
    text = NON_LATIN["hebrew"]
    with caplog.at_level(logging.WARNING, logger="scaleformer.metrics"):
        M.compute_metrics([text], [[text]], _cfg())  # validation
        M.compute_metrics([text], [[text]], _cfg())  # test, same run
        M.reset_notices()                            # the next run of a multirun
        M.compute_metrics([text], [[text]], _cfg())
    assert sum("not meaningful" in r.getMessage() for r in caplog.records) == 2


def test_latin_text_gets_no_warning_and_unicode_equals_scrolls_on_ascii(caplog):
    preds = ["The committee approved the budget on Monday, 3 May.", "Costs rose 3.5% (don't panic)."]
    refs = [["A committee approved a budget on Monday."], ["Costs rose sharply; don't panic!"]]
    with caplog.at_level(logging.WARNING, logger="scaleformer.metrics"):
        scrolls = M.compute_metrics(preds, refs, _cfg())
        accented = M.compute_metrics(["Le comité a approuvé le budget."], [["Le comité a voté le budget."]], _cfg())
    assert "not meaningful" not in caplog.text and "rouge_warning" not in accented
    for stem in (False, True):
        a = M.compute_rouge(preds, refs, sentence_splitter="regex", use_stemmer=stem)
        b = M.compute_rouge(preds, refs, sentence_splitter="regex", use_stemmer=stem, tokenizer="unicode")
        for t in TYPES:
            assert a[t] == pytest.approx(b[t]), (stem, t)
    assert scrolls["rouge1"] == pytest.approx(M.compute_rouge(preds, refs, sentence_splitter="regex")["rouge1"])


def test_unicode_tokens():
    from scaleformer.metrics.rouge import unicode_tokens

    assert unicode_tokens("Hello, WORLD! café 3.5") == ["hello", "world", "café", "3", "5"]
    assert unicode_tokens("委員会は月曜日") == list("委員会は月曜日")  # one token per Han/kana character
    assert unicode_tokens("שלום, עולם") == ["שלום", "עולם"]
    assert unicode_tokens("हिन्दी भाषा") == ["हिन्दी", "भाषा"]  # combining vowel signs stay in the word
    assert unicode_tokens("ＡＢＣ ﬁle") == ["abc", "file"]  # NFKC: full-width letters, ligatures


def test_partial_japanese_overlap_scores_between_0_and_100():
    pred, ref = "委員会は予算を承認した。", "委員会は月曜日に予算を承認した。"
    got = M.compute_rouge([pred], [[ref]], sentence_splitter="regex", tokenizer="unicode")
    assert 0.0 < got["rouge2"] < got["rouge1"] < 100.0


def test_rouge_tokenizer_setting_is_validated_and_recorded(tmp_path):
    from scaleformer.errors import ConfigError

    with pytest.raises(ConfigError, match=r"metrics\.rouge_tokenizer='words': must be scrolls .* or unicode"):
        MetricsConfig(rouge_tokenizer="words")
    pred_file = tmp_path / "p.jsonl"
    text = NON_LATIN["arabic"]
    pred_file.write_text(json.dumps({"id": "a", "prediction": text, "reference": text}, ensure_ascii=False) + "\n")
    got = _score_main([str(pred_file), "--no-bertscore", "--sentence-splitter", "regex", "--rouge-tokenizer",
                       "unicode", "--out", str(tmp_path / "m.json")])
    saved = json.loads((tmp_path / "m.json").read_text())
    assert got["rouge1"] == saved["rouge1"] == pytest.approx(100.0)
    assert saved["rouge_tokenizer"] == "unicode" and saved["score_settings"]["metrics"]["rouge_tokenizer"] == "unicode"


# ------------------------------------------------------------------------------- score.py bad input

def _score_main(argv):
    from scaleformer.cli import score
    return score.main(argv)


@pytest.mark.parametrize(("content", "message"), [
    (b"", r"p\.jsonl: no prediction rows \(the file is empty or blank\)"),
    (b"\n  \n", r"p\.jsonl: no prediction rows"),
    (b'{"id": "a", "prediction": "x", "reference": "y"}\n{"id": "b", "prediction": "caf\xe9", "reference": "y"}\n',
     r"p\.jsonl:2: line is not valid UTF-8 \(invalid continuation byte at byte 30\)"),
    (b'{"id": "a", "prediction": "x", "reference": "y"}\n\n{"id": "b", "prediction": \n',
     r"p\.jsonl:3: malformed JSON line"),
    (b'{"id": "a", "reference": "y"}\n', r"p\.jsonl:1: row has no 'prediction' \(it has \['id', 'reference'\]\)"),
    (b'{"id": "a", "prediction": "x"}\n', r"p\.jsonl:1: row has no 'reference' .*use \[\] for a document whose"),
    (b'{"id": "a", "prediction": 3, "reference": "y"}\n', r"p\.jsonl:1: 'prediction' must be a string, got an int"),
    (b'{"id": "a", "prediction": "x", "reference": {"t": "y"}}\n',
     r"p\.jsonl:1: 'reference' must be a string or a list of strings, got a dict"),
    (b'{"id": "a", "prediction": "x", "references": ["y", 2]}\n',
     r"p\.jsonl:1: 'references' must be a string or a list of strings, got a list containing int"),
    (b'["a", "x", "y"]\n', r"p\.jsonl:1: expected a JSON object with id, prediction, reference; got a list"),
    (b'{"id": {"k": 1}, "prediction": "x", "reference": "y"}\n', r"p\.jsonl:1: 'id' must be a string or an integer"),
    (b'{"id": "a", "prediction": "x", "reference": "y"}\n{"id": "a", "prediction": "z", "reference": "y"}\n',
     r"p\.jsonl:2: id 'a' appears again \(first at line 1\) with a different prediction"),
])
def test_score_script_bad_files_exit_with_one_line(tmp_path, content, message):
    f = tmp_path / "p.jsonl"
    f.write_bytes(content)
    with pytest.raises(SystemExit) as e:
        _score_main([str(f), "--no-bertscore"])
    msg = str(e.value.code)
    assert re.match(r"error: " + re.escape(str(tmp_path)) + "/" + message, msg), msg
    assert "\n" not in msg


def test_score_script_bad_file_from_the_command_line(tmp_path):
    """As a user runs it: non-zero exit status, one line on stderr, no traceback."""
    f = tmp_path / "p.jsonl"
    f.write_bytes(b"")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "score.py"), str(f), "--no-bertscore"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip() == f"error: {f}: no prediction rows (the file is empty or blank); expected one JSON " \
                                  "object per line with id, prediction, reference"


def test_score_script_missing_file_folder_and_unwritable_out(tmp_path):
    for arg, message in ((str(tmp_path / "none.jsonl"), "no such file"), (str(tmp_path), "is a folder, not a file")):
        with pytest.raises(SystemExit, match=f"predictions file .*: {message}"):
            _score_main([arg, "--no-bertscore"])
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "a", "prediction": "x y", "reference": "x y"}\n')
    (tmp_path / "blocker").write_text("a file, not a folder")
    with pytest.raises(SystemExit, match=r"^error: --out .*blocker/m\.json: cannot write"):
        _score_main([str(f), "--no-bertscore", "--sentence-splitter", "regex", "--out",
                     str(tmp_path / "blocker" / "m.json")])
