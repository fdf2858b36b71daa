"""docs/reproducing.md's table of the paper profile's recipe is what the profile composes to: each row's key, for
each data option it names, has the row's value, and every row names its source. A change to a config that the
table does not follow (or the reverse) fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from scaleformer.artifacts.grid import load_spec
from scaleformer.compose import compose_config
from scaleformer.resources import experiments_dir

DOC = Path(__file__).resolve().parents[1] / "docs" / "reproducing.md"
TASKS = ["govreport", "summscreen", "booksum", "qasper", "quality", "narrative_qa", "qmsum", "contract_nli"]


def recipe_rows() -> list[dict[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    body = re.search(r"<!-- recipe -->\n(.*?)<!-- /recipe -->", text, re.S)
    assert body, "docs/reproducing.md has no <!-- recipe --> table"
    lines = [line for line in body.group(1).splitlines() if line.startswith("| `")]
    rows = []
    for line in lines:
        key, value, where, source = (c.strip() for c in line.strip("|").split("|", 3))
        rows.append({"key": key.strip("`"), "value": value, "where": where, "source": source.strip(" |")})
    return rows


def value(text: str):
    """A table cell as YAML reads it, numbers such as ``1e-5`` included (YAML 1.1 would keep them strings)."""
    v = yaml.safe_load(text)
    try:
        return float(v) if isinstance(v, str) else v
    except ValueError:
        return v


def paper_config(data: str):
    """`make table1`'s paper profile for a column of table1, else `trainer=paper optim=paper data=<option>`."""
    spec = load_spec(experiments_dir() / "table1.yaml")
    prof = spec["profiles"]["paper"]
    extra = list(prof["overrides"]) if data in prof["data"].values() else ["trainer=paper", "optim=paper"]
    return compose_config([f"backbone={spec['backbone']['paper']}", f"data={data}", *extra])


@pytest.mark.parametrize("data", TASKS)
def test_the_paper_profile_composes_to_the_documented_recipe(data):
    cfg = OmegaConf.create(OmegaConf.to_container(paper_config(data), resolve=True))
    checked = 0
    for row in recipe_rows():
        options = TASKS if row["where"] == "all" else [w.strip() for w in row["where"].split(",")]
        if data not in options:
            continue
        got = OmegaConf.select(cfg, row["key"], default="<absent>")
        got = OmegaConf.to_container(got) if OmegaConf.is_config(got) else got
        assert got == value(row["value"]), f"{row['key']} for data={data}: composes to {got!r}, the table says {row['value']}"
        checked += 1
    assert checked >= 20


def test_every_setting_names_its_source_and_every_option_is_covered():
    rows = recipe_rows()
    assert all(r["source"] and len(r["source"]) > 10 for r in rows)
    ours = [r for r in rows if r["source"].startswith("ours")]
    assert all(":" in r["source"] for r in ours), "an 'ours' setting says why"
    for key in ("trainer.max_epochs", "data.max_input_tokens", "data.max_target_tokens"):
        named = [w.strip() for r in rows if r["key"] == key for w in r["where"].split(",")]
        assert sorted(named) == sorted(TASKS), (key, named)
