"""``scaleformer summarize``: summaries of your own documents with an exported model.

    scaleformer summarize --model results/runs/<run>/model --input report.txt
    scaleformer summarize --model DIR --input docs.jsonl --field document --output out.jsonl
    scaleformer summarize --model org/name --input book.txt --method scaleformer --set middle_tokens=100

``--model`` is any folder ``AutoModelForSeq2SeqLM`` loads, with its tokenizer: an exported folder, the
output of ``scripts/hf_trainer.py``, or a Hugging Face Hub id. The model's method (config.json's) is
used unless ``--method`` names another option of ``conf/method/`` (same backbone weights, another way
of reading the document; a plain backbone needs one); ``--set key=value`` changes one of its
parameters. A ``.txt`` file is one document; a ``.jsonl`` file has one per line (``--field``), and the
summaries go to a jsonl file (``id``, ``summary``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scaleformer.errors import ConfigError, redact
from scaleformer.io import atomic_write_jsonl, atomic_write_text, iter_jsonl, refuse_overwrite
from scaleformer.model.hub import HubUnreachableError
from scaleformer.ops.host_memory import keep_freed_memory
from scaleformer.resources import group_options
from scaleformer.runs.console import quiet


def _parse_set(items: list[str]) -> dict[str, Any]:
    import yaml

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --set {item!r}: expected key=value (a method parameter)")
        out[key] = yaml.safe_load(value)
    return out


def _read_text(path: Path) -> str:
    """The file's text, strictly UTF-8: a Latin-1 file decoded loosely would be summarized as mojibake."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SystemExit(f"error: --input {path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                         f"convert it first, e.g. iconv -f latin1 -t utf-8 {path} > {path.stem}.utf8.txt") from None
    if not text.strip():
        raise SystemExit(f"error: --input {path}: the document is empty")
    return text


def _read_jsonl(path: Path, field: str, id_field: str) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    try:
        for n, row in iter_jsonl(path):
            if not isinstance(row, dict):
                raise SystemExit(f"error: {path}:{n}: each line must be a JSON object like {{\"{field}\": \"...\"}}, "
                                 f"got a {type(row).__name__}")
            if not isinstance(row.get(field), str):
                raise SystemExit(f"error: {path}:{n}: field {field!r} missing or not a string (--field names it)")
            if not row[field].strip():
                raise SystemExit(f"error: {path}:{n}: field {field!r} is empty: nothing to summarize")
            ids.append(str(row.get(id_field, n)))
            texts.append(row[field])
    except (ValueError, UnicodeDecodeError) as e:  # malformed JSON or not UTF-8: the reader names file:line
        raise SystemExit(f"error: {str(e).splitlines()[0]}") from None
    if not texts:
        raise SystemExit(f"error: --input {path}: no documents (the file has no non-empty line)")
    return ids, texts


def _check_device(device: str | None) -> None:
    """cpu, cuda or cuda:N that exists here: checked before the model is loaded."""
    import re

    if device is None:
        return
    m = re.fullmatch(r"(cpu|cuda|mps)(?::(\d+))?", device)
    if m is None:
        raise SystemExit(f"error: --device {device!r}: expected cpu, cuda or cuda:N")
    import torch

    if m.group(1) == "cuda":
        count = torch.cuda.device_count()
        index = int(m.group(2) or 0)
        if index >= count:
            raise SystemExit(f"error: --device {device!r}: this machine has {count} CUDA device(s)"
                             + (f"; use cuda:0 ... cuda:{count - 1}" if count else "; use --device cpu"))
    if m.group(1) == "mps" and not torch.backends.mps.is_available():
        raise SystemExit(f"error: --device {device!r}: MPS is not available here; use --device cpu")


def _check_method(option: str | None) -> None:
    if option is not None and option not in (options := group_options("method")):
        raise SystemExit(f"error: --method {option!r}: not a method option; choose one of {', '.join(options)}")


def main(argv: Sequence[str] | None = None) -> int:
    keep_freed_memory()
    ap = argparse.ArgumentParser(prog="scaleformer summarize", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a model folder (results/runs/<run>/model, hf_trainer.py's --output) or Hub id")
    ap.add_argument("--input", required=True, help="a .txt file (one document) or .jsonl (one per line)")
    ap.add_argument("--output", help="where summaries go (.txt input: default stdout; .jsonl: <input>.summaries.jsonl)")
    ap.add_argument("--field", default="input", help="jsonl field holding the document (default: input)")
    ap.add_argument("--id-field", default="id", help="jsonl field copied to the output (default: id)")
    ap.add_argument("--method", help="another conf/method option to read the document with")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a method parameter")
    ap.add_argument("--num-beams", type=int, help="beam count (default: the exported setting)")
    ap.add_argument("--max-new-tokens", type=int, help="summary length cap (default: the exported setting)")
    ap.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--batch-size", type=int, help="documents decoded together (default: what the memory model "
                    "says fits; a document's summary does not depend on it)")
    ap.add_argument("-v", "--verbose", action="store_true", help="the libraries' progress bars and INFO lines too")
    args = ap.parse_args(argv)

    quiet(verbose=args.verbose or None)
    src = Path(args.input)
    if src.suffix not in (".txt", ".jsonl"):
        raise SystemExit(f"error: --input {src}: must be a .txt or .jsonl file")
    if not src.is_file():
        raise SystemExit(f"error: --input {src}: no such file")
    out = args.output or (src.with_suffix(".summaries.jsonl") if src.suffix == ".jsonl" else None)
    try:  # before the model loads: summaries must not replace the documents or the model's own files
        refuse_overwrite({"--output": out}, {"the --input file": src}, {"the --model folder": args.model})
    except ConfigError as e:
        raise SystemExit(f"error: {e}") from None
    if out is not None and Path(out).is_dir():  # the summaries are one file: a folder cannot take them
        raise SystemExit(f"error: --output {out}: is a folder; give a file (.txt for a .txt input, .jsonl for a "
                         ".jsonl one)")
    _check_device(args.device)
    _check_method(args.method)
    text = _read_text(src) if src.suffix == ".txt" else None
    ids, texts = _read_jsonl(src, args.field, args.id_field) if text is None else ([], [])
    for flag, v in (("--num-beams", args.num_beams), ("--max-new-tokens", args.max_new_tokens),
                    ("--batch-size", args.batch_size)):
        if v is not None and v < 1:  # given means used or refused, never silently dropped
            raise SystemExit(f"error: {flag}={v}: must be >= 1")
    gen = {k: v for k, v in (("num_beams", args.num_beams), ("max_new_tokens", args.max_new_tokens))
           if v is not None}
    overrides = _parse_set(args.set)
    # deferred: the arguments and input file are checked above before transformers (and torch) load
    from scaleformer.export.summarizer import Summarizer

    try:
        summarizer = Summarizer.from_pretrained(args.model, method=args.method, overrides=overrides,
                                                device=args.device, batch_size=args.batch_size, **gen)
    except (FileNotFoundError, ValueError, ConfigError, HubUnreachableError) as e:
        raise SystemExit(f"error: {redact(str(e).splitlines()[0])}") from None
    if text is not None:
        summary = summarizer.summarize([text], progress=True)[0]
        if args.output:
            atomic_write_text(args.output, summary + "\n")
        elif summary:
            print(summary)
        warn_if_empty([summary], [str(src)], summarizer.trained_steps, summarizer.generation.max_new_tokens)
        return 0
    summaries = summarizer.summarize(texts, progress=True)
    atomic_write_jsonl(out, [{"id": i, "summary": s} for i, s in zip(ids, summaries)])
    print(f"wrote {len(summaries)} summaries to {out}", file=sys.stderr)
    warn_if_empty(summaries, [f"id {i}" for i in ids], summarizer.trained_steps,
                  summarizer.generation.max_new_tokens)
    return 0


def warn_if_empty(summaries: list[str], names: list[str], steps: int | None, max_new_tokens: int) -> None:
    """One stderr line when the model wrote nothing (or only special tokens) for some document: an empty
    line on stdout alone looks like a bug, while a model trained for a few steps has often not learned
    to write yet."""
    empty = [n for n, s in zip(names, summaries) if not s.strip()]
    if not empty:
        return
    which = empty[0] if len(empty) == 1 else f"{empty[0]} and {len(empty) - 1} more"
    trained = f"{steps} step{'s' if steps != 1 else ''}" if steps is not None else "an unrecorded number of steps"
    print(f"warning: the model wrote no text for {len(empty)} of {len(summaries)} document(s) ({which}): it was "
          f"trained for {trained} (train longer, e.g. trainer.max_steps=800, the default run's length) and may "
          f"write {max_new_tokens} new tokens at most (--max-new-tokens)", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
