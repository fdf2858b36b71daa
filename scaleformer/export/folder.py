"""A trained model outside the framework: ``<run>/model/`` as a plain Hugging Face folder.

What the folder holds (written at the end of every training, atomically: built beside, then swapped in):

- ``config.json`` (``model_type: scaleformer``) + ``model.safetensors``: the backbone and its method
  together (:class:`scaleformer.model.hf.ScaleformerForConditionalGeneration`, the parameters a method
  adds included), loadable with ``AutoModelForSeq2SeqLM.from_pretrained(DIR)`` after ``import
  scaleformer``; ``generation_config.json``: the run's decoding settings, so a plain ``generate()``
  decodes as the run did; ``tokenizer.json`` etc.: ``AutoTokenizer.from_pretrained(DIR)``, with no
  ``model_max_length`` limit (the method reads whole documents; the window would only warn);
- ``scaleformer.json``, the method record: the method (option, class, config), the backbone facts
  the method needs, the generation settings, the data and metric settings, the run it came from (id,
  step, training identity, commit, command, seed) and the package versions, so
  :class:`scaleformer.export.summarizer.Summarizer` can rebuild the exact long-context model;
- ``README.md``, the model card (:mod:`scaleformer.export.card`), rewritten with the scores once the
  run has evaluated.

Without ``import scaleformer``, transformers refuses the folder (unknown model type ``scaleformer``)
rather than loading a backbone that would ignore the method. Folders of format 1 (the backbone alone,
the method's own parameters in ``method_state.safetensors``) still load in the Summarizer.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

from scaleformer.errors import redact_all
from scaleformer.export.card import CARD_FILE, model_card
from scaleformer.io import atomic_dir, atomic_write_text, read_json_record
from scaleformer.model.tokenizer import save_tokenizer
from scaleformer.ops.decoding import BEAM_ONLY, generation_kwargs
from scaleformer.resources import installed

log = logging.getLogger("scaleformer")
FORMAT = 2
FORMATS = (1, 2)  # 1: the backbone alone + method_state.safetensors; 2: the model class with its method
META_FILE = "scaleformer.json"
METHOD_STATE = "method_state.safetensors"  # format 1 only


def method_record(module: Any, run: dict[str, Any]) -> dict[str, Any]:
    """``scaleformer.json``: the method as built (its dataclass) plus what the run says about itself."""
    spec = module.method.spec
    described = run.get("method", {})
    return redact_all({
        "format": FORMAT,
        "method": {"option": described.get("option", module.method.cfg.name),
                   "class": described.get("class", type(module.method).__name__),
                   "config": dataclasses.asdict(module.method.cfg)},
        "backbone": {**run.get("backbone", {}), "max_positions": spec.max_positions,
                     "model_type": getattr(module.model.backbone.config, "model_type", None)},
        "generation": run.get("generation") or dataclasses.asdict(module.gen_cfg),
        "max_input_tokens": run.get("max_input_tokens"),
        # what the model was trained for: summarization (seq2seq, or document and summary as one sequence) or
        # language modeling (continual training), and whether it is a causal LM (what the card's usage says)
        "task": getattr(module, "task", "summarization"), "decoder_only": bool(spec.decoder_only),
        # a decoder-only model reads document and summary as one sequence: the summary's share of it
        **({"summary_tokens": module.room} if getattr(module, "decoder_only", False) else {}),
        "data": run.get("data"),
        "metrics": run.get("metrics"),
        "run": {k: run.get(k) for k in ("run_id", "training_hash", "step", "selection", "seed", "commit", "command")},
        "versions": {d: installed(d) for d in ("scaleformer", "torch", "transformers", "lightning")},
        "config": run.get("config"),
    })


def export_model(module: Any, out: Path, run: dict[str, Any], state_dict: dict[str, Any] | None = None) -> Path:
    """Write the model folder ``out`` from the trained module and the run's record; returns ``out``.
    ``state_dict``: the weights to write instead of the module's own (a sharded module's, gathered whole)."""
    record = method_record(module, run)
    if hasattr(module.model.config, "method"):  # the method as it ran (a run may decide a runtime setting late),
        module.model.config.method = dataclasses.asdict(module.method.cfg)  # so config.json and the record agree
    with atomic_dir(out) as tmp:
        module.model.save_pretrained(tmp, state_dict=state_dict)
        run_generation_config(module).save_pretrained(tmp)
        save_tokenizer(module.tokenizer, tmp)
        (tmp / META_FILE).write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
        (tmp / CARD_FILE).write_text(model_card(record), encoding="utf-8")
    log.info("exported the trained model (step %s) to %s", record["run"]["step"], out)
    return out


def selection_kind(selection: dict[str, Any]) -> str:
    """Which weights a run's selection chose: ``best`` (validation's best checkpoint) or ``last`` (the last
    weights, asked for or fallen back to)."""
    return "best" if selection.get("rule") == "best" else "last"


def export_target(folder: Path, selection: dict[str, Any]) -> Path:
    """Where a run exports: ``folder`` (``<run>/model``), unless it holds the export of other weights than this
    selection's kind (the best checkpoint's, where a rerun whose best checkpoint is gone falls back to the last
    weights): that export stays, and this one goes beside it with its selection in the name
    (``model-last-step20``), said once in the log. An export of the same kind (a continued run's new best) is
    replaced, as is a folder with no readable record."""
    try:
        old = read_meta(folder).get("run") or {}
    except (OSError, ValueError):
        return folder
    kind = selection_kind(selection)
    if old.get("selection") == kind or (old.get("selection") is None and old.get("step") == selection.get("step")):
        return folder
    beside = folder.with_name(f"{folder.name}-{kind}-step{selection.get('step')}")
    log.warning("%s holds the export of the %s weights (step %s); this run's %s weights (step %s, %s) are exported "
                "beside it, to %s", folder, old.get("selection") or "earlier", old.get("step"), kind,
                selection.get("step"), selection.get("rule"), beside)
    return beside


def run_generation_config(module: Any) -> Any:
    """The model's generation config with the run's decoding settings (beams, lengths, n-gram blocking).

    A greedy run's folder holds the beam-only flags at their defaults (its own or its backbone's values
    would make each ``generate()`` warn that they are not valid flags; greedy search never reads them)."""
    gen = copy.deepcopy(module.model.generation_config)
    kwargs = generation_kwargs(module.gen_cfg)
    if kwargs["num_beams"] == 1:
        kwargs = {**kwargs, **{k: v for k, v in BEAM_ONLY.items() if getattr(gen, k, None) is not None or k in kwargs}}
    gen.update(**kwargs)
    return gen


def add_results(folder: Path, results: dict[str, Any]) -> None:
    """After evaluation: the scores join the method record and the model card (each written atomically)."""
    record = read_meta(folder)
    record["evaluation"] = {"splits": results.get("splits", {}), "evaluation_hash": results.get("evaluation_hash"),
                            "step": results.get("step")}
    atomic_write_text(Path(folder) / META_FILE, json.dumps(record, indent=2, default=str) + "\n")
    atomic_write_text(Path(folder) / CARD_FILE, model_card(record))


def read_meta(path: str | Path) -> dict[str, Any]:
    """``scaleformer.json`` of an exported folder; a clear error when the folder is not one."""
    f = Path(path) / META_FILE
    if not f.is_file():
        raise FileNotFoundError(f"{path}: not an exported scaleformer model (no {META_FILE}); export folders "
                                "are results/runs/<run>/model/")
    meta = read_json_record(f, "method record")
    if meta.get("format") not in FORMATS:
        raise ValueError(f"{f}: format {meta.get('format')!r}, this version reads formats {', '.join(map(str, FORMATS))}")
    return meta
