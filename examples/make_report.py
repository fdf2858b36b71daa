"""Writes the example document the README's snippets read: one synthetic ledger and its reference summary.

Why generated: the offline world has no real reports to ship, and the project's own generator makes the
same ledger on every machine (a fixed, named seed), of the embedded default's length (4,000 words, about
4,600 tokens: four windows of the shipped readers). Rewrite with ``python examples/make_report.py``;
``tests/test_readme.py`` checks the committed files are what this writes.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from scaleformer.data.synthetic import DEFAULT_SEED, make_document, stream_seed

HERE = Path(__file__).resolve().parent
WORDS = 4000


def example() -> dict[str, str]:
    """File name -> text: the ledger and its reference summary."""
    ledger, summary, _ = make_document(random.Random(stream_seed(DEFAULT_SEED, "example-report")), WORDS)
    return {"report.txt": ledger + "\n", "report.summary.txt": summary + "\n"}


def main(argv: list[str] | None = None) -> int:
    out = Path(argv[0]) if argv else HERE
    for name, text in example().items():
        (out / name).write_text(text, encoding="utf-8")
        print(out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
