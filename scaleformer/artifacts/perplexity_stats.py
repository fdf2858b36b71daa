"""The numbers of MASFormer's perplexity artifacts, from per-document scores: a cell's pooled perplexity with its
interval over documents, the paired comparisons of rows, C's share of full attention's, the paper's values and
Figure 3's length buckets. :mod:`scaleformer.artifacts.perplexity_tables` and ``perplexity_figure`` render them;
:mod:`scaleformer.artifacts.perplexity_recheck` recomputes them from the archived scores alone, through the same
functions."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from scaleformer.metrics.perplexity import bucket_label, ratio_ci
from scaleformer.metrics.stats import holm, paired, seeds_paired


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


SETTINGS = (("full_layers", "l"), ("block_size", "b"), ("window", "w"), ("placement", ""))


def setting(described: dict[str, Any]) -> str:
    """The sizes a run used, as the paper writes them (``l=1, b=128``), from its method record."""
    kind = described.get("name")
    keep = {"full_attention": (), "block_attention": ("block_size",), "sliding_window": ("window",)}.get(
        kind, ("full_layers", "block_size", "placement"))
    return ", ".join(f"{short}={described[k]}" if short else str(described[k]) for k, short in SETTINGS
                     if k in keep and described.get(k) is not None)


def comparisons(spec: dict[str, Any], scores: dict[tuple[str, str], list[dict[str, dict[str, Any]]]]
                ) -> list[dict[str, Any]]:
    """Every listed pair on every column both rows have, Holm-adjusted over all of them."""
    out = []
    for a, b in spec.get("comparisons", []):
        for (method, key), per_seed in scores.items():
            if method != a or not per_seed or not scores.get((b, key)):
                continue
            r = compare(per_seed, scores[(b, key)])
            if r is not None:
                out.append({"row": a, "against": b, "dataset": key, **r})
    for r, adj in zip(out, holm([r["p"] for r in out]) if out else []):
        r["p_holm"] = adj
    return out


def paper_values(spec: dict[str, Any], split: str, method: str, key: str) -> dict[str, Any]:
    """The paper's perplexity and C (millions) for a row and column, as the spec records them."""
    paper = spec.get("paper", {})
    return {"paper_ppl": (paper.get(split, {}).get(method) or {}).get(key),
            "paper_cost_millions": (paper.get("cost_millions") or {}).get(method)}


def cost_shares(spec: dict[str, Any], costs: dict[tuple[str, str], Any]) -> dict[tuple[str, str], float | None]:
    """Each (row, column)'s C as a share of the full-attention row's C on that column."""
    full_row = spec.get("full_row", "full")
    full = {key: c for (m, key), c in costs.items() if m == full_row and c}
    return {(m, key): c / full[key] if c and full.get(key) else None for (m, key), c in costs.items()}


def bucket_values(per_seed: list[dict[str, dict[str, Any]]], width: int) -> list[dict[str, Any]]:
    """A cell's documents grouped by length in ``((k - 1) B, k B]`` buckets (the first seed's lengths), each
    bucket pooled over the seeds: Figure 3's points."""
    labels: dict[str, list[str]] = {}
    for doc, r in per_seed[0].items():
        labels.setdefault(bucket_label(int(r["length"]), width), []).append(doc)
    out = []
    for label, ids in sorted(labels.items(), key=lambda kv: int(kv[0][1:].split(",")[0])):
        value = pooled([{i: s[i] for i in ids if i in s} for s in per_seed])
        if value is not None:
            out.append({"bucket": label, "upper": int(label.rstrip("]").split(", ")[1]),
                        **{k: value[k] for k in ("ppl", "low", "high", "docs", "seeds")}})
    return out

