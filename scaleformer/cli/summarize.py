"""``scaleformer summarize``: summaries of your own documents with an exported model.

    scaleformer summarize --model results/runs/<run>/model --input report.txt
    scaleformer summarize --model DIR --input docs.jsonl --field document --output out.jsonl
    scaleformer summarize --model org/name --input book.txt --method scaleformer --set middle_tokens=100

The exported method (``scaleformer.json``) is used unless ``--method`` names another option of
``conf/method/`` (same backbone weights, another way of reading the document); ``--set key=value``
changes one of its parameters. ``--model`` is an exported folder or a Hugging Face Hub id. A ``.txt``
file is one document; a ``.jsonl`` file has one per line (``--field``), and the summaries go to a
jsonl file (``id``, ``summary``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scaleformer.export.summarizer import Summarizer


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
    ap = argparse.ArgumentParser(prog="python -m scaleformer.export.summarizer", description=__doc__,
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

    from scaleformer.io import atomic_write_jsonl, atomic_write_text
    from scaleformer.runs.console import quiet

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
