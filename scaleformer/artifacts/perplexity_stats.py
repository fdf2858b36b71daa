"""The numbers of MASFormer's perplexity artifacts, from per-document scores: a cell's pooled perplexity with its
interval over documents, the paired comparison of two rows, and the recheck of a rendered table against the
scores archived beside it (:mod:`scaleformer.artifacts.perplexity_tables` renders them; apart from it so that the
archive's recheck, :mod:`scaleformer.artifacts.scores_archive`, reads them without the renderer)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from scaleformer.metrics.perplexity import ratio_ci
from scaleformer.metrics.stats import paired, seeds_paired


def read_doc_scores(result_dir: Path | None, split: str) -> dict[str, dict[str, Any]] | None:
    """Per-document rows of one run's split (``scores_<split>.jsonl``: nll, tokens, length), by document id."""
    path = Path(str(result_dir)) / f"scores_{split}.jsonl"
    if result_dir is None or not path.is_file():
        return None
    return {r["id"]: r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if r.get("tokens")}


def pooled(per_seed: list[dict[str, dict[str, Any]]], key: str = "nll", tokens: str = "tokens"
           ) -> dict[str, Any] | None:
    """The cell's perplexity over its seeds on the documents every seed scored, and each seed's own."""
    ids = sorted(set.intersection(*(set(s) for s in per_seed))) if per_seed else []
    ids = [i for i in ids if all(s[i].get(tokens) for s in per_seed)]
    if not ids:
        return None
    nll = [sum(s[i][key] for s in per_seed) for i in ids]
    tok = [sum(s[i][tokens] for s in per_seed) for i in ids]
    ci = ratio_ci(nll, tok)
    each = [math.exp(sum(s[i][key] for i in ids) / sum(s[i][tokens] for i in ids)) for s in per_seed]
    return {"ppl": ci.mean, "low": ci.low, "high": ci.high, "docs": len(ids), "seeds": len(per_seed),
            "seed_ppl": each}


def log_ppl_grid(per_seed: list[dict[str, dict[str, Any]]], ids: list[str]) -> list[list[float]]:
    """``[seeds, docs]``: each document's mean NLL per token (its log-perplexity), in ``ids``' order."""
    return [[s[i]["nll"] / s[i]["tokens"] for i in ids] for s in per_seed]


def compare(a: list[dict[str, dict[str, Any]]], b: list[dict[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """Row A minus row B in per-document log-perplexity, paired on documents (and seeds, where both have them)."""
    n = min(len(a), len(b))
    if n == 0:
        return None
    a, b = a[:n], b[:n]
    ids = sorted(set.intersection(*(set(s) for s in [*a, *b])))
    if not ids:
        return None
    x, y = log_ppl_grid(a, ids), log_ppl_grid(b, ids)
    if n == 1 or len(ids) < 2:
        r = paired(x[0], y[0])
    else:
        r = seeds_paired(x, y)
    return {"diff": r.diff, "low": r.low, "high": r.high, "p": r.p_value, "docs": len(ids), "seeds": n,
            "test": r.test_method}


def recheck(spec: dict[str, Any], table: Path, folder: Path) -> list[str]:
    """Each row of a rendered perplexity table recomputed from the per-document scores archived beside it
    (``scores/<artifact>/<run>/``): the problems, none when every number agrees."""
    split = next(iter(spec["splits"].values()))
    problems = []
    for r in csv.DictReader(table.open(encoding="utf-8")):
        if r["status"] != "ok":
            continue
        per_seed = [read_doc_scores(folder / run, split) for run in r["run_ids"].split()]
        if any(s is None for s in per_seed):
            problems.append(f"{table}: {r['method']} on {r['dataset']}: a run's archived scores are missing")
            continue
        got = pooled(per_seed)  # type: ignore[arg-type]
        for k in ("ppl", "low", "high"):
            if got is None or not math.isclose(got[k], float(r[k]), rel_tol=1e-9):
                problems.append(f"{table}: {r['method']} on {r['dataset']}: {k}={r[k]}, the archived scores give "
                                f"{got[k] if got else None}")
    return problems
