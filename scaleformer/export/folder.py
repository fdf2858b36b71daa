"""A trained model outside the framework: ``<run>/model/`` as a plain Hugging Face folder.

What the folder holds (written at the end of every training, atomically: built beside, then swapped in):

- ``config.json`` + ``model.safetensors``: the backbone, loadable with plain
  ``AutoModelForSeq2SeqLM.from_pretrained(DIR)``; ``tokenizer.json`` etc.: ``AutoTokenizer.from_pretrained(DIR)``;
- ``method_state.safetensors``: parameters the method added to the model (e.g. Memorizing's gate),
  absent when it added none;
- ``scaleformer.json``, the method record: the method (option, class, config), the backbone facts
  the method needs, the generation settings, the data and metric settings, the run it came from (id,
  step, training identity, commit, command, seed) and the package versions, so
  :class:`scaleformer.export.summarizer.Summarizer` can rebuild the exact long-context model;
- ``README.md``, the model card (:mod:`scaleformer.export.card`), rewritten with the scores once the
  run has evaluated.

Plain Hugging Face code gets the backbone only, without the method: on an input longer than its
positions BART fails and T5 attends over all of it. The long-context method needs the Summarizer (or
the framework).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import torch

from scaleformer.errors import redact_all
from scaleformer.export.card import CARD_FILE, model_card
from scaleformer.io import atomic_dir, atomic_write_text

log = logging.getLogger("scaleformer")
FORMAT = 1
META_FILE = "scaleformer.json"
METHOD_STATE = "method_state.safetensors"


def split_state(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(the backbone's own weights, the parameters a method added), by the backbone class's keys."""
    from transformers import AutoModelForSeq2SeqLM

    with torch.device("meta"):  # names only: no memory, no init cost
        base_keys = set(AutoModelForSeq2SeqLM.from_config(model.config).state_dict())
    state = model.state_dict()
    return ({k: v for k, v in state.items() if k in base_keys},
            {k: v.detach().contiguous().cpu() for k, v in state.items() if k not in base_keys})


def method_record(module: Any, run: dict[str, Any]) -> dict[str, Any]:
    """``scaleformer.json``: the method as built (its dataclass) plus what the run says about itself."""
    from scaleformer.ops import compat

    spec = module.method.spec
    described = run.get("method", {})
    return redact_all({
        "format": FORMAT,
        "method": {"option": described.get("option", module.method.cfg.name),
                   "class": described.get("class", type(module.method).__name__),
                   "config": dataclasses.asdict(module.method.cfg)},
        "backbone": {**run.get("backbone", {}), "max_positions": spec.max_positions,
                     "model_type": getattr(module.model.config, "model_type", None)},
        "generation": run.get("generation") or dataclasses.asdict(module.gen_cfg),
        "max_input_tokens": run.get("max_input_tokens"),
        "data": run.get("data"),
        "metrics": run.get("metrics"),
        "run": {k: run.get(k) for k in ("run_id", "training_hash", "step", "seed", "commit", "command")},
        "versions": {d: compat.installed(d) for d in ("scaleformer", "torch", "transformers", "lightning")},
        "config": run.get("config"),
    })


def export_model(module: Any, out: Path, run: dict[str, Any]) -> Path:
    """Write the model folder ``out`` from the trained module and the run's record; returns ``out``."""
    from safetensors.torch import save_file

    record = method_record(module, run)
    with atomic_dir(out) as tmp:
        base, extra = split_state(module.model)
        module.model.save_pretrained(tmp, state_dict=base)
        module.tokenizer.save_pretrained(tmp)
        if extra:
            save_file(extra, str(tmp / METHOD_STATE))
        (tmp / META_FILE).write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
        (tmp / CARD_FILE).write_text(model_card(record), encoding="utf-8")
    log.info("exported the trained model (step %s) to %s", record["run"]["step"], out)
    return out


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
    try:
        meta = json.loads(f.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{f}: not a readable method record ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(f"{f}: format {got!r}, this version reads format {FORMAT}")
    return meta
