"""Summarize your own documents with an exported model, from Python or the command line.

    python -m scaleformer.summarize --model results/runs/<run>/model --input report.txt
    python -m scaleformer.summarize --model DIR --input docs.jsonl --field document --output out.jsonl
    python -m scaleformer.summarize --model DIR --input book.txt --method scaleformer --set middle_tokens=100

    from scaleformer.summarize import Summarizer
    summarize = Summarizer.from_pretrained("results/runs/<run>/model")
    print(summarize(open("report.txt").read()))

The exported method (``scaleformer.json``) is used unless ``--method`` names another option of
``conf/method/`` (same backbone weights, another way of reading the document); ``--set key=value``
changes one of its parameters. A ``.txt`` file is one document; a ``.jsonl`` file has one per line
(``--field``), and the summaries go to a jsonl file (``id``, ``summary``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch


class Summarizer:
    """An exported model with its long-context method: ``summarizer(text) -> summary``."""

    def __init__(self, module: Any, max_input_tokens: int | None = None) -> None:
        self.module = module.eval()
        self.tokenizer = module.tokenizer
        self.max_input_tokens = max_input_tokens

    @classmethod
    def from_pretrained(cls, path: str | Path, method: str | None = None, overrides: dict[str, Any] | None = None,
                        device: str | None = None, **generation: Any) -> Summarizer:
        """Load ``path`` (an exported ``model/`` folder); ``method``/``overrides`` change the method,
        ``generation`` keywords the decoding (e.g. ``num_beams=1``)."""
        from safetensors.torch import load_file
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        from scaleformer.backbone import backbone_spec
        from scaleformer.config import BackboneConfig, GenerationConfig, OptimConfig
        from scaleformer.export import METHOD_STATE, read_meta
        from scaleformer.methods import build_method, method_config
        from scaleformer.module import SummarizationModule

        meta = read_meta(path)
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model = AutoModelForSeq2SeqLM.from_pretrained(str(path), use_safetensors=True)  # data, never code
        mcfg = _method_config(meta, method, overrides or {})
        bcfg = BackboneConfig(name=meta["backbone"]["name"], pretrained=str(path),
                              max_positions=meta["backbone"]["max_positions"])
        spec = backbone_spec(bcfg, tokenizer, model.config)
        gen = GenerationConfig(**{**meta["generation"], **generation})
        module = SummarizationModule(model, build_method(method_config(mcfg), spec), tokenizer, OptimConfig(), gen)
        extra = Path(path) / METHOD_STATE
        if extra.exists() and (method is None or mcfg["name"] == meta["method"]["config"]["name"]):
            missing, unexpected = module.model.load_state_dict(load_file(str(extra)), strict=False)
            assert not unexpected, f"{extra}: parameters the method does not have: {unexpected}"
        dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
        return cls(module.to(dev), meta.get("max_input_tokens"))

    def __call__(self, text: str | Sequence[str]) -> str | list[str]:
        if isinstance(text, str):
            return self.summarize([text])[0]
        return self.summarize(list(text))

    def summarize(self, texts: list[str], progress: bool = False) -> list[str]:
        """One summary per document, one document at a time (long inputs are the point)."""
        from tqdm import tqdm

        out = []
        for text in tqdm(texts, desc="summarize", unit="doc", disable=not progress or None):
            out.append(self._one(text))
        return out

    def _one(self, text: str) -> str:
        from scaleformer.data.encode import truncate_ids

        if not text.strip():
            raise ValueError("cannot summarize an empty document")
        ids = self.tokenizer(text, add_special_tokens=True, verbose=False)["input_ids"]
        ids, _ = truncate_ids(list(ids), self.max_input_tokens, self.module.method.spec.suffix_ids)
        dev = next(self.module.parameters()).device
        input_ids = torch.tensor([ids], device=dev)
        batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        return self.module.generate(batch)[0].strip()


def _method_config(meta: dict[str, Any], option: str | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """The exported method's config, or another option's (from conf/method/), with overrides."""
    if option is None:
        cfg = dict(meta["method"]["config"])
    else:
        from omegaconf import OmegaConf

        from scaleformer.config import compose_config

        cfg = OmegaConf.to_container(compose_config([f"method={option}"]).method, resolve=True)
    return {**cfg, **overrides}


def _parse_set(items: list[str]) -> dict[str, Any]:
    import yaml

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --set {item!r}: expected key=value (a method parameter)")
        out[key] = yaml.safe_load(value)
    return out


def _read_jsonl(path: Path, field: str, id_field: str) -> tuple[list[str], list[str]]:
    from scaleformer.io import read_jsonl

    ids, texts = [], []
    for n, row in enumerate(read_jsonl(path), 1):
        if not isinstance(row.get(field), str):
            raise SystemExit(f"error: {path}:{n}: field {field!r} missing or not a string (--field names it)")
        ids.append(str(row.get(id_field, n)))
        texts.append(row[field])
    return ids, texts


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scaleformer.summarize", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="an exported folder: results/runs/<run>/model")
    ap.add_argument("--input", required=True, help="a .txt file (one document) or .jsonl (one per line)")
    ap.add_argument("--output", help="where summaries go (.txt input: default stdout; .jsonl: <input>.summaries.jsonl)")
    ap.add_argument("--field", default="input", help="jsonl field holding the document (default: input)")
    ap.add_argument("--id-field", default="id", help="jsonl field copied to the output (default: id)")
    ap.add_argument("--method", help="another conf/method option to read the document with")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a method parameter")
    ap.add_argument("--num-beams", type=int, help="beam count (default: the exported setting)")
    ap.add_argument("--max-new-tokens", type=int, help="summary length cap (default: the exported setting)")
    ap.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    args = ap.parse_args(argv)

    from scaleformer.console import quiet
    from scaleformer.io import atomic_write_jsonl, atomic_write_text

    quiet()
    src = Path(args.input)
    if src.suffix not in (".txt", ".jsonl"):
        raise SystemExit(f"error: --input {src}: must be a .txt or .jsonl file")
    if not src.is_file():
        raise SystemExit(f"error: --input {src}: no such file")
    gen = {k: v for k, v in (("num_beams", args.num_beams), ("max_new_tokens", args.max_new_tokens)) if v}
    try:
        summarizer = Summarizer.from_pretrained(args.model, method=args.method, overrides=_parse_set(args.set),
                                                device=args.device, **gen)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None
    if src.suffix == ".txt":
        summary = summarizer.summarize([src.read_text(encoding="utf-8")], progress=True)[0]
        if args.output:
            atomic_write_text(args.output, summary + "\n")
        else:
            print(summary)
        return 0
    ids, texts = _read_jsonl(src, args.field, args.id_field)
    summaries = summarizer.summarize(texts, progress=True)
    out = Path(args.output) if args.output else src.with_suffix(".summaries.jsonl")
    atomic_write_jsonl(out, [{"id": i, "summary": s} for i, s in zip(ids, summaries)])
    print(f"wrote {len(summaries)} summaries to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
