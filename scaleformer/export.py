"""A trained model outside the framework: ``<run>/model/`` as a plain Hugging Face folder.

What the folder holds (written at the end of every training, atomically: built beside, then swapped in):

- ``config.json`` + ``model.safetensors``: the backbone, loadable with plain
  ``AutoModelForSeq2SeqLM.from_pretrained(DIR)``; ``tokenizer.json`` etc.: ``AutoTokenizer.from_pretrained(DIR)``;
- ``method_state.safetensors``: parameters the method added to the model (e.g. Memorizing's gate),
  absent when it added none;
- ``scaleformer.json``: the method (option, class, config), the backbone facts the method needs, the
  generation settings and the run it came from, so :class:`scaleformer.summarize.Summarizer` can
  rebuild the exact long-context model.

Plain Hugging Face code gets the backbone only: it reads the first ``max_positions`` tokens, as
truncation does; the long-context method needs the Summarizer (or the framework).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from scaleformer import identity
from scaleformer.io import current_umask

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


def export_model(module: Any, rc: Any, described: dict[str, Any], step: int) -> Path:
    """Write ``<run>/model/`` from the trained module; returns the folder."""
    from safetensors.torch import save_file

    out = identity.run_dir(rc) / "model"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".model."))
    try:
        base, extra = split_state(module.model)
        module.model.save_pretrained(tmp, state_dict=base)
        module.tokenizer.save_pretrained(tmp)
        if extra:
            save_file(extra, str(tmp / METHOD_STATE))
        spec = module.method.spec
        meta = {
            "format": FORMAT,
            "method": {"option": described["option"], "class": described["class"],
                       "config": dataclasses.asdict(module.method.cfg)},
            "backbone": {"name": rc.backbone.name, "max_positions": spec.max_positions},
            "generation": dataclasses.asdict(rc.generation),
            "max_input_tokens": rc.data.max_input_tokens,
            "run_id": rc.paths.run_id, "step": step,
        }
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        umask = current_umask()
        for p in tmp.iterdir():  # as if created in place: mkdtemp makes the folder 0700
            os.chmod(p, 0o666 & ~umask)
        os.chmod(tmp, 0o777 & ~umask)
        old = out.with_name(".model.old")
        if out.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("exported the trained model (step %d) to %s", step, out)
    return out


def read_meta(path: str | Path) -> dict[str, Any]:
    """``scaleformer.json`` of an exported folder; a clear error when the folder is not one."""
    f = Path(path) / META_FILE
    if not f.is_file():
        raise FileNotFoundError(f"{path}: not an exported scaleformer model (no {META_FILE}); export folders "
                                "are results/runs/<run>/model/")
    meta = json.loads(f.read_text(encoding="utf-8"))
    if meta.get("format") != FORMAT:
        raise ValueError(f"{f}: format {meta.get('format')!r}, this version reads format {FORMAT}")
    return meta
