"""Local mirrors of the paper's data sources: their exact layout, filled with generated text at the real lengths.

The paper profile reads SCROLLS and BookSum from the hub; a rehearsal reads these instead, through the very
same loaders (``data.files_base=<root>/scrolls``, ``data.hub_id=<root>/booksum-fullbooks``), so everything but
the download is exercised offline:

- SCROLLS (``tau/scrolls``): ``scrolls/<task>.zip`` holding ``<task>/<split>.jsonl``, rows ``{id, pid, input,
  output}``. Train and validation repeat an input once per reference (the evaluation groups rows by id); test
  outputs are empty, as SCROLLS hides them for its leaderboard. Query tasks write ``<query>\\n\\n<document>``
  (QuALITY: the question, a blank line, its options "(A) ... (D)", a blank line, the story); NarrativeQA asks
  several questions about one book, each row carrying the whole book. Queries run to their real lengths, some
  past SLED's caps (64 tokens, QuALITY's 160), so the caps are exercised.
- BookSum (``abertsch/booksum-fullbooks``): ``booksum-fullbooks/data/<split>-00000-of-00001.parquet`` with
  ``bid, source, title, summary, book``, a book once per summary source.
- ArXiv and PubMed (Cohan et al. 2018; ``ccdv/arxiv-summarization``, ``ccdv/pubmed-summarization``, MASFormer's
  perplexity and summarization data): ``<name>/{document,section}/<split>-00000-of-00001.parquet`` with
  ``article, abstract``, the two configurations declared in the dataset card's ``configs`` (``README.md``), as
  the hub's Parquet conversion lays them out; ``section`` separates the article's sections by newlines.

- The Pile (``monology/pile-uncopyrighted``, MASFormer's continual-training corpus): ``train/00.jsonl.zst``,
  ``train/01.jsonl.zst`` (the hub copy has 30), ``val.jsonl.zst`` and ``test.jsonl.zst``, zstandard-compressed
  JSON lines ``{text, meta: {pile_set_name}}``; documents of Pile-CC's mean size (Gao et al. 2020, Table 1:
  4.33 KiB, about 700 words) times ``scale``.

Lengths: each task's average input words from the SCROLLS paper (Shaham et al., 2022, Table 1), BookSum's
from the ScaleFormer paper ("averaging over 140,000 tokens": 120,700 words, as ``data=dryrun_booksum``) and
ArXiv's and PubMed's articles and abstracts from Cohan et al. (2018, Table 1: 4,938 and 3,016 words; 220 and 203),
times ``scale``. The text is the synthetic town ledgers (:mod:`scaleformer.data.synthetic`): its numbers mean
nothing; the layout, lengths and loaders are the rehearsal's point.
"""

from __future__ import annotations

import io
import json
import random
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaleformer.data.synthetic import FIRST, LAST, make_ledger, stream_seed
from scaleformer.io import atomic_dir

SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class Task:
    """One SCROLLS task as its files lay it out."""

    name: str  # the zip's and folder's name in tau/scrolls
    words: int  # average input words (SCROLLS, Table 1)
    query: str | None = None  # None (summarization), "question", "options" (QuALITY), "hypothesis", "query"
    questions: int = 1  # questions per document (NarrativeQA asks many about one book)


TASKS = {t.name: t for t in (
    Task("gov_report", 7886), Task("summ_screen_fd", 5598), Task("qmsum", 9497, "query"),
    Task("qasper", 3629, "question"), Task("narrative_qa", 51653, "question", questions=3),
    Task("quality", 4193, "options"), Task("contract_nli", 1706, "hypothesis"),
)}
BOOKSUM_WORDS = 120_700
BOOKSUM_SOURCES = ("sparknotes", "cliffnotes", "gradesaver", "shmoop")
LABELS = ("Entailment", "Contradiction", "Not mentioned")


def _words(rng: random.Random, n: int) -> str:
    """``n`` words of a query's padding: names and small words, as a long question's clauses."""
    pool = [*FIRST, *LAST, "the", "ledger", "records", "which", "town", "when", "day", "event", "volume"]
    return " ".join(rng.choice(pool) for _ in range(n))


def _query(kind: str, rng: random.Random, fact: dict[str, Any], long: bool) -> tuple[str, str]:
    """(query text, answer) of a query task about one event; ``long``: a query past SLED's caps."""
    pad = f" Context: {_words(rng, 110 if kind == 'options' else 70)}." if long else ""
    if kind == "question":
        return f"What happened on day {fact['day']}?{pad}", (
            f"On day {fact['day']}, {fact['who']} {fact['verb']} {fact['n']} {fact['obj']} at {fact['where']}.")
    if kind == "query":
        return f"Summarize what {fact['who']} did in the ledger.{pad}", (
            f"{fact['who']} {fact['verb']} {fact['n']} {fact['obj']} at {fact['where']}.")
    if kind == "hypothesis":
        label = rng.choice(LABELS)
        return f"The ledger says {fact['who']} {fact['verb']} goods at {fact['where']}.{pad}", label
    counts = rng.sample([fact["n"], fact["n"] + 3, max(1, fact["n"] - 2), fact["n"] * 2], 4)
    options = " ".join(f"({c}) {n} {fact['obj']}" for c, n in zip("ABCD", counts))
    return f"How many {fact['obj']} did {fact['who']} handle on day {fact['day']}?{pad}\n\n{options}", \
        f"{fact['n']} {fact['obj']}"


def task_rows(task: Task, split: str, n_docs: int, scale: float, seed: int = 0) -> list[dict[str, Any]]:
    """One split of a SCROLLS task as its jsonl rows."""
    rng = random.Random(stream_seed(seed, f"mirror-{task.name}-{split}"))
    rows: list[dict[str, Any]] = []
    for d in range(n_docs):
        doc, ref, ref2, facts = make_ledger(rng, max(60, round(task.words * scale)))
        if task.query is None:  # summarization: a second reference on every other document
            refs = [ref, ref2] if d % 2 and split != "test" else [ref]
            rows += [{"id": f"{task.name}-{split}-{d}", "pid": f"{task.name}-{split}-{d}_{k}", "input": doc,
                      "output": "" if split == "test" else r} for k, r in enumerate(refs)]
            continue
        for q in range(task.questions):
            fact = facts[(d + q) % len(facts)]
            query, answer = _query(task.query, rng, fact, long=(d + q) % 2 == 1)
            qid = f"{task.name}-{split}-{d}-{q}"
            answers = [answer, answer.rstrip(".")] if task.query == "question" and split == "train" else [answer]
            rows += [{"id": qid, "pid": f"{qid}_{k}", "input": f"{query}\n\n{doc}",
                      "output": "" if split == "test" else a} for k, a in enumerate(answers)]
    return rows


def write_task(name: str, path: Path, docs: dict[str, int], scale: float) -> Path:
    """One SCROLLS task's zip at ``path``: ``<task>/<split>.jsonl`` inside, written whole or not at all."""
    task = TASKS[name]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for split in SPLITS:
            rows = task_rows(task, split, docs.get(split, 0), scale)
            z.writestr(f"{name}/{split}.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(path)
    return path


def write_scrolls(root: Path, docs: dict[str, int], scale: float, tasks: list[str] | None = None) -> dict[str, Path]:
    """``root/scrolls/<task>.zip`` for each task (all seven by default)."""
    return {name: write_task(name, root / "scrolls" / f"{name}.zip", docs, scale) for name in tasks or list(TASKS)}


def booksum_rows(split: str, n_books: int, scale: float, seed: int = 0) -> list[dict[str, Any]]:
    """One split of abertsch/booksum-fullbooks: a row per (book, summary source)."""
    rng = random.Random(stream_seed(seed, f"mirror-booksum-{split}"))
    rows = []
    for b in range(n_books):
        book, ref, ref2, _ = make_ledger(rng, max(200, round(BOOKSUM_WORDS * scale)), (20, 40))
        for k, source in enumerate(BOOKSUM_SOURCES[: 2 + b % 3]):  # 2-4 summaries a book (BookSum: 1-4)
            rows.append({"bid": str(27000 + 100 * SPLITS.index(split) + b), "source": source,
                         "title": f"Ledger {b} ({split})", "summary": ref if k % 2 == 0 else ref2, "book": book})
    return rows


def write_booksum(folder: Path, docs: dict[str, int], scale: float) -> Path:
    """``folder/data/<split>-00000-of-00001.parquet``, as the hub repository lays them out."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic_dir(folder) as tmp:
        (tmp / "data").mkdir()
        for split in SPLITS:
            rows = booksum_rows(split, docs.get(split, 0), scale)
            pq.write_table(pa.Table.from_pylist(rows), tmp / "data" / f"{split}-00000-of-00001.parquet")
    return folder


COHAN = {"arxiv-summarization": (4938, 220), "pubmed-summarization": (3016, 203)}  # article, abstract words
COHAN_DATA = {"arxiv": "arxiv-summarization", "arxiv_lm": "arxiv-summarization", "pubmed_lm": "pubmed-summarization"}


def cohan_rows(name: str, split: str, n_docs: int, scale: float, seed: int = 0) -> list[dict[str, Any]]:
    """One split of ArXiv or PubMed: an article (sections on their own lines) and its abstract."""
    words, summary_words = COHAN[name]
    rng = random.Random(stream_seed(seed, f"mirror-{name}-{split}"))
    rows = []
    for _ in range(n_docs):
        article, abstract, _, _ = make_ledger(rng, max(200, round(words * scale)), (8, 16))
        sentences = article.split(". ")
        sections = "\n".join(". ".join(sentences[i:i + 12]) for i in range(0, len(sentences), 12))
        rows.append({"article": sections,
                     "abstract": " ".join(abstract.split()[: max(20, round(summary_words * scale))])})
    return rows


def _card(configs: tuple[str, ...]) -> str:
    """The dataset card's YAML header: each configuration's files per split, as the hub's conversion writes it."""
    lines = ["---", "configs:"]
    for c in configs:
        lines += [f"- config_name: {c}", "  data_files:"]
        lines += [f"  - split: {s}\n    path: {c}/{s}-*" for s in SPLITS]
    return "\n".join([*lines, "---", ""])


def write_cohan(folder: Path, docs: dict[str, int], scale: float) -> Path:
    """``folder/{document,section}/<split>-00000-of-00001.parquet`` and the card declaring both configurations;
    ``folder``'s name says which data set (``arxiv-summarization``, ``pubmed-summarization``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic_dir(folder) as tmp:
        (tmp / "README.md").write_text(_card(("document", "section")))
        for config in ("document", "section"):
            (tmp / config).mkdir()
            for split in SPLITS:
                rows = cohan_rows(folder.name, split, docs.get(split, 0), scale)
                if config == "document":  # the whole article on one line
                    rows = [{**r, "article": " ".join(r["article"].split("\n"))} for r in rows]
                pq.write_table(pa.Table.from_pylist(rows), tmp / config / f"{split}-00000-of-00001.parquet")
    return folder


PILE = "pile-uncopyrighted"
PILE_WORDS = 700
PILE_SETS = ("Pile-CC", "PubMed Central", "ArXiv", "FreeLaw", "Github", "Wikipedia (en)")


def _zst_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    import zstandard

    path.write_bytes(zstandard.ZstdCompressor().compress("".join(json.dumps(r) + "\n" for r in rows).encode()))


def write_pile(folder: Path, docs: dict[str, int], scale: float) -> Path:
    """``folder/train/{00,01}.jsonl.zst``, ``val.jsonl.zst``, ``test.jsonl.zst`` and a card without ``configs``."""
    def rows(split: str, n: int) -> list[dict[str, Any]]:
        rng = random.Random(stream_seed(0, f"mirror-pile-{split}"))
        # at least 400 words: a rehearsal's few documents still fill the rows its steps read
        return [{"text": make_ledger(rng, max(400, round(PILE_WORDS * scale)), (4, 8))[0],
                 "meta": {"pile_set_name": PILE_SETS[i % len(PILE_SETS)]}} for i in range(n)]

    with atomic_dir(folder) as tmp:
        (tmp / "README.md").write_text("---\nlicense: other\n---\n")
        (tmp / "train").mkdir()
        train = rows("train", docs.get("train", 0))
        half = (len(train) + 1) // 2
        _zst_jsonl(tmp / "train" / "00.jsonl.zst", train[:half])
        _zst_jsonl(tmp / "train" / "01.jsonl.zst", train[half:])
        _zst_jsonl(tmp / "val.jsonl.zst", rows("validation", docs.get("validation", 0)))
        _zst_jsonl(tmp / "test.jsonl.zst", rows("test", docs.get("test", 0)))
    return folder


def write_mirrors(root: str | Path, docs: dict[str, int] | None = None, scale: float = 1.0,
                  tasks: list[str] | None = None, booksum: bool = True, cohan: bool = True) -> dict[str, Path]:
    """Every mirror under ``root`` (``docs``: documents per split, default 4 / 2 / 2; ``scale``: of the real
    lengths); returns each source's path (SCROLLS tasks by name, ``booksum``, ArXiv's and PubMed's folders)."""
    root = Path(root)
    docs = docs or {"train": 4, "validation": 2, "test": 2}
    out: dict[str, Path] = dict(write_scrolls(root, docs, scale, tasks))
    if booksum:
        out["booksum"] = write_booksum(root / "booksum-fullbooks", docs, scale)
    if cohan:
        out.update({name: write_cohan(root / name, docs, scale) for name in COHAN})
        out["pile"] = write_pile(root / PILE, docs, scale)
    return out


def ensure(data: Any, docs: dict[str, int], scale: float) -> list[Path]:
    """The local mirror a data config reads, written where it is missing: the SCROLLS zips its ``data_files``
    name under a local ``files_base``, or a BookSum folder at a local ``hub_id``. A config that reads the hub
    writes nothing. Returns what was written."""
    written = []
    base = data.get("files_base")
    if base and "://" not in str(base):
        for url in {str(u) for u in (data.get("data_files") or {}).values()}:
            zip_path = Path(url.split("::", 1)[1]) if "::" in url else None
            if zip_path is not None and zip_path.stem in TASKS and not zip_path.is_file():
                written.append(write_task(zip_path.stem, zip_path, docs, scale))
    hub = str(data.get("hub_id") or "")
    local = hub.startswith((".", "/", "~")) and not Path(hub).expanduser().exists()  # a folder, never a hub id
    if local and data.get("name") == "booksum":
        written.append(write_booksum(Path(hub).expanduser(), docs, scale))
    elif local and Path(hub).name in COHAN and data.get("name") in COHAN_DATA:
        written.append(write_cohan(Path(hub).expanduser(), docs, scale))
    corpus = str(data.get("corpus") or "")
    if corpus.startswith((".", "/", "~")) and Path(corpus).name == PILE and not Path(corpus).expanduser().exists():
        written.append(write_pile(Path(corpus).expanduser(), docs, scale))
    return written


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Write local mirrors of SCROLLS, BookSum, ArXiv, PubMed and the Pile (their real layout, "
                                 "generated text) for a rehearsal of the paper profile offline.")
    ap.add_argument("root", type=Path)
    ap.add_argument("--scale", type=float, default=1.0, help="of the real document lengths (default 1)")
    ap.add_argument("--docs", type=int, nargs=3, default=[4, 2, 2], metavar=("TRAIN", "VALIDATION", "TEST"))
    args = ap.parse_args(argv)
    if not 0 < args.scale <= 1 or min(args.docs) < 1:
        raise SystemExit(f"error: --scale {args.scale} must be in (0, 1] and --docs {args.docs} at least 1 each")
    for name, path in write_mirrors(args.root, dict(zip(SPLITS, args.docs)), args.scale).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
