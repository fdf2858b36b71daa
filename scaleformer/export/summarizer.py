"""Summarize your own documents with an exported model, from Python or the command line.

    scaleformer summarize --model results/runs/<run>/model --input report.txt
    scaleformer summarize --model DIR --input docs.jsonl --field document --output out.jsonl
    scaleformer summarize --model DIR --input book.txt --method scaleformer --set middle_tokens=100

    from scaleformer.export.summarizer import Summarizer
    summarize = Summarizer.from_pretrained("results/runs/<run>/model")
    print(summarize(open("report.txt").read()))

The exported method (``scaleformer.json``) is used unless ``--method`` names another option of
``conf/method/`` (same backbone weights, another way of reading the document); ``--set key=value``
changes one of its parameters. A ``.txt`` file is one document; a ``.jsonl`` file has one per line
(``--field``), and the summaries go to a jsonl file (``id``, ``summary``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from scaleformer.ops import decoding


class Summarizer:
    """An exported model with its long-context method: ``summarizer(text) -> summary``."""

    def __init__(self, model: Any, method: Any, tokenizer: Any, generation: Any,
                 max_input_tokens: int | None = None, folder: Path | None = None,
                 record: dict[str, Any] | None = None) -> None:
        self.model = method.wrap(model).eval()
        self.method = method
        self.tokenizer = tokenizer
        self.generation = generation
        self.max_input_tokens = max_input_tokens
        self.folder = folder
        self.record = record or {}  # the exported method record (scaleformer.json)

    @property
    def trained_steps(self) -> int | None:
        """Optimiser steps of the run that exported this model (None when the record does not say)."""
        step = (self.record.get("run") or {}).get("step")
        return step if isinstance(step, int) else None

    @classmethod
    def from_pretrained(cls, path: str | Path, method: str | None = None, overrides: dict[str, Any] | None = None,
                        device: str | None = None, revision: str | None = None, **generation: Any) -> Summarizer:
        """Load ``path``: an exported ``model/`` folder or a Hub id (``org/name``, offline: from the local
        cache, else one clear error); ``method``/``overrides`` change the method, ``generation``
        keywords the decoding (e.g. ``num_beams=1``)."""
        from safetensors.torch import load_file
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        from scaleformer.config import BackboneConfig, GenerationConfig
        from scaleformer.export.folder import METHOD_STATE, read_meta
        from scaleformer.export.hub import locate
        from scaleformer.methods import build_method, method_config
        from scaleformer.model.backbone import backbone_spec

        path = locate(path, revision)
        meta = read_meta(path)
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model = AutoModelForSeq2SeqLM.from_pretrained(str(path), use_safetensors=True)  # data, never code
        mcfg = _method_config(meta, method, overrides or {})
        bcfg = BackboneConfig(name=meta["backbone"]["name"], pretrained=str(path),
                              max_positions=meta["backbone"]["max_positions"])
        spec = backbone_spec(bcfg, tokenizer, model.config)
        gen = GenerationConfig(**{**meta["generation"], **generation})
        out = cls(model, build_method(method_config(mcfg), spec), tokenizer, gen, meta.get("max_input_tokens"),
                  Path(path), meta)
        extra = Path(path) / METHOD_STATE
        if extra.exists() and (method is None or mcfg["name"] == meta["method"]["config"]["name"]):
            _, unexpected = out.model.load_state_dict(load_file(str(extra)), strict=False)
            if unexpected:
                raise ValueError(f"{extra}: parameters the method does not have: {', '.join(unexpected)}")
        out.model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        return out

    def push_to_hub(self, repo_id: str, **kwargs: Any) -> str:
        """Publish the folder this Summarizer was loaded from (see :func:`scaleformer.export.hub.push_to_hub`)."""
        from scaleformer.export.hub import push_to_hub

        return push_to_hub(self.folder, repo_id, **kwargs)

    def __call__(self, text: str | Sequence[str]) -> str | list[str]:
        if isinstance(text, str):
            return self.summarize([text])[0]
        return self.summarize(list(text))

    def summarize(self, texts: list[str], progress: bool = False) -> list[str]:
        """One summary per document, one document at a time (long inputs are the point). ``progress``: a bar
        on a terminal's stderr, else a plain line about every tenth of the documents."""
        import sys

        from tqdm import tqdm

        from scaleformer.progress import Lines, is_terminal

        bar = progress and is_terminal(sys.stderr)
        lines = Lines("summarize", len(texts), "doc", write=lambda line: print(line, file=sys.stderr, flush=True)) \
            if progress and not bar and len(texts) > 1 else None
        out = []
        for text in tqdm(texts, desc="summarize", unit="doc", disable=not bar):
            out.append(self._one(text))
            if lines is not None:
                lines.update(len(out))
        return out

    def _one(self, text: str) -> str:
        from scaleformer.data.encode import truncate_ids

        if not text.strip():
            raise ValueError("cannot summarize an empty document")
        ids = self.tokenizer(text, add_special_tokens=True, verbose=False)["input_ids"]
        ids, _ = truncate_ids(list(ids), self.max_input_tokens, self.method.spec.suffix_ids)
        input_ids = torch.tensor([ids], device=next(self.model.parameters()).device)  # [1, N]
        with torch.no_grad():
            enc = self.method.encode(self.model.get_encoder(), input_ids, torch.ones_like(input_ids), training=False)
            return decoding.generate_text(self.model, enc.hidden, enc.mask, self.tokenizer, self.generation)[0].strip()


def _method_config(meta: dict[str, Any], option: str | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """The exported method's config, or another option's (from conf/method/), with overrides."""
    if option is None:
        cfg = dict(meta["method"]["config"])
    else:
        from omegaconf import OmegaConf

        from scaleformer.config import compose_config

        cfg = OmegaConf.to_container(compose_config([f"method={option}"]).method, resolve=True)
    return {**cfg, **overrides}
