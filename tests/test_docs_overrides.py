"""Every override the pages print as code (`key=value`) composes and validates as printed, in the context its
paragraph gives: a spelling Hydra refuses (``trainer.cost_lengths=...`` where the key needs ``+``) fails here.
Spans with placeholders (``DIR``, ``...``) and docs/reliability.md's refusals (it shows bad values on purpose)
are not runs."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT, compose

from scaleformer.runs.context import to_config

SPAN = re.compile(r"`((?:\+\+|\+|~)?[a-z_]+(?:\.[A-Za-z_0-9]+)+=[^`]+)`")
PLACEHOLDER = re.compile(r"\.\.\.|\bDIR\b|\bPATH\b|[|:]")
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
# What a span's paragraph says it goes with (the option or key it is an option of).
CONTEXT = {"generation.compile=true": ["generation.static_cache=true"], "method.keep_rule=sled": ["method=sled"],
           "logger.wandb.log_model=true": ["logger=wandb"], "logger.wandb.offline=false": ["logger=wandb"],
           "method.cost=2500000": ["experiment=masformer_lm"], "data.task_metric=perplexity": ["data=synthetic_lm"],
           "method.block_size=1024": ["method=masformer"],
           "data.corpus=monology/pile-uncopyrighted": ["experiment=masformer_lm"]}


def spans() -> list[tuple[str, str]]:
    out = {}
    for page in PAGES:
        if page == "docs/reliability.md":
            continue
        for m in SPAN.finditer((ROOT / page).read_text(encoding="utf-8")):
            if not PLACEHOLDER.search(m.group(1)):
                out.setdefault(m.group(1), page)
    return sorted(out.items())


def test_the_pages_print_overrides():
    assert len(spans()) >= 15


@pytest.mark.parametrize("span, page", spans())
def test_every_printed_override_composes_and_validates(span, page):
    to_config(compose([*CONTEXT.get(span, []), *span.split()]))
