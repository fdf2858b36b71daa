"""Peak memory of reading one split as the split grows: a NarrativeQA-like file, questions that each carry their
whole book (SCROLLS' layout), read by the data module (streaming: every row checked, then tokenized as it comes,
each book stored once) against the whole split in memory (its rows and examples: how splits were read before;
the tokens stored once per book in both).

    python -m scaleformer.bench.read_memory --out results/bench/read-memory.json   (~3 min on 2 cores)

Each reading runs in a process of its own; the peak is the growth of its resident set (VmHWM) over what it held
before reading (this module's imports, torch and transformers among them, done), so allocator state from another reading cannot
leak in. Time: the reading's wall time, tokenization included.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from scaleformer.config import DataConfig, SplitNames
from scaleformer.data.datamodule import SummarizationDataModule
from scaleformer.data.encode import encode
from scaleformer.data.examples import build_examples, to_rows
from scaleformer.data.sources import LocalSource
from scaleformer.data.synthetic import make_ledger, stream_seed
from scaleformer.io import atomic_write_json, atomic_write_text
from scaleformer.model.tokenizer import load_offline_tokenizer, special_token_ids
from scaleformer.ops.measure import MemoryProbe
from scaleformer.runs.runtime import machine

WAYS = ("streaming", "in_memory")


def write_split(path: Path, questions: int, books: int, words: int) -> Path:
    """``questions`` rows over ``books`` books of ``words`` words, ``question\\n\\nbook`` each (NarrativeQA's
    layout in SCROLLS), a book's questions in a row."""
    rng = random.Random(stream_seed(0, "read-memory"))
    texts = [make_ledger(rng, words)[0] for _ in range(books)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for q in range(questions):
            book = q * books // questions
            f.write(json.dumps({"id": f"q{q}", "input": f"What happened in part {q}?\n\n{texts[book]}",
                                "output": f"Answer {q}."}) + "\n")
    return path


def read_once(way: str, path: Path, cache: Path) -> dict[str, Any]:
    """One reading of ``path`` (as the train split) in this process: its peak growth and time."""
    tok = load_offline_tokenizer("bart")
    cfg = DataConfig(name="reads", source="local", path=str(path), cache_dir=str(cache), query_split="blank_line",
                     max_input_tokens=16384, max_target_tokens=64, splits=SplitNames("x", None, None))
    probe = MemoryProbe(torch.device("cpu"))
    base = probe.start()
    t0 = time.perf_counter()
    if way == "streaming":
        dm = SummarizationDataModule(cfg, tok)
        dm.setup()
        n = len(dm.datasets["train"])
    else:
        examples, _ = build_examples(to_rows(LocalSource(cfg).rows("train"), cfg), train=True, cap=None)
        arrays, _ = encode(examples, tok, max_input_tokens=16384, max_target_tokens=64,
                           suffix_special=special_token_ids(tok)[1], with_prefix=True)
        n = len(arrays["input_index"])
    seconds = time.perf_counter() - t0
    peak = probe.peak()
    return {"way": way, "examples": n, "peak_growth_mb": round((peak - base) / 1e6, 1), "seconds": round(seconds, 2)}


def measure(way: str, path: Path, cache: Path) -> dict[str, Any]:
    """:func:`read_once` in a fresh process (its own allocator, nothing left from another reading)."""
    code = ("import json, sys; from pathlib import Path; from scaleformer.bench.read_memory import read_once; "
            "print(json.dumps(read_once(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))))")
    out = subprocess.run([sys.executable, "-c", code, way, str(path), str(cache)], check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(sizes: list[int], books: int, words: int, work: Path) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        path = write_split(work / f"split-{n}" / "x.jsonl", n, books, words)
        file_mb = path.stat().st_size / 1e6
        for way in WAYS:
            r = measure(way, path, work / f"cache-{n}-{way}")
            rows.append({"questions": n, "books": books, "words": words, "file_mb": round(file_mb, 1), **r})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = ["# Peak memory of reading a NarrativeQA-like split", "",
             f"{meta['books']} books of {meta['words']:,} words; each question a row carrying its whole book, as SCROLLS' "
             "NarrativeQA does; inputs cut to 16,384 tokens. Peak: the growth of the reading process's resident set "
             "(VmHWM) over what it held before reading; one process per reading. "
             f"`python -m scaleformer.bench.read_memory` ({meta['machine']}).", "",
             "| questions | file MB | streaming peak MB | streaming s | in memory peak MB | in memory s |",
             "|---|---|---|---|---|---|"]
    by = {(r["questions"], r["way"]): r for r in rows}
    for n in dict.fromkeys(r["questions"] for r in rows):
        s, m = by[(n, "streaming")], by[(n, "in_memory")]
        lines.append(f"| {n:,} | {s['file_mb']:,.0f} | {s['peak_growth_mb']:,.0f} | {s['seconds']:.1f} "
                     f"| {m['peak_growth_mb']:,.0f} | {m['seconds']:.1f} |")
    lines += ["", "Streaming (the data module since the paper profile's recipe) checks every row, then tokenizes as "
              "rows come, each book once, its ids written to the cache as they are made: its peak does not follow the "
              "file. In memory (the reading before): every row's text and every example at once (their tokens stored "
              "once per book, as now: the reading before also held a copy per question, so its peak was higher)."
              " A NarrativeQA split holds every book once per question: the in-memory reading grows with the file, "
              "streaming holds a batch of books."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,400,1600", help="questions per split, comma-separated")
    ap.add_argument("--books", type=int, default=8)
    ap.add_argument("--words", type=int, default=40000, help="words a book (NarrativeQA averages 51,653)")
    ap.add_argument("--work", type=Path, default=Path(".cache/scaleformer/bench-read-memory"))
    ap.add_argument("--out", type=Path, default=Path("results/bench/read-memory.json"))
    args = ap.parse_args(argv)
    rows = run([int(x) for x in args.sizes.split(",")], args.books, args.words, args.work)
    meta = {"books": args.books, "words": args.words, "machine": machine()}
    atomic_write_json(args.out, {**meta, "rows": rows})
    atomic_write_text(args.out.with_suffix(".md"), render(rows, meta))
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
