"""The MASFormer blocks of README.md and docs/results.md, rendered from ``results/tiny/masformer_table1.{csv,md}``
and its ``-tests.csv`` (``make masformer_table1 PROFILE=tiny``): the tiny Table 1 beside the paper's values, and in
words whether the paper's ordering holds at tiny scale; and the MASFormer benches' blocks of docs/performance.md
(:data:`BENCH`). Imported by ``scripts/render_results.py``."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from results_runs import MissingResults, read_json

ALPHA = 0.05


def _read(path: Path) -> list[dict[str, str]]:
    try:
        return list(csv.DictReader(path.open(encoding="utf-8")))
    except OSError as e:
        raise MissingResults(f"{path}: {e}") from None


def _spec() -> dict[str, Any]:
    from scaleformer.artifacts.grid import load_spec
    from scaleformer.resources import experiments_dir

    return load_spec(experiments_dir() / "masformer_table1.yaml")


def _seeds(rows: list[dict[str, str]]) -> str:
    counts = sorted({r["seeds"] for r in rows if r["status"] == "ok"})
    docs = sorted({r["docs"] for r in rows if r["status"] == "ok"})
    return f"{'/'.join(counts)} {'seed' if counts == ['1'] else 'seeds'} pooled, {'/'.join(docs)} test documents"


def render_masformer_table1(results: Path, column: str = "arxiv") -> str:
    """The tiny Table 1 (one column) beside the paper's ArXiv column, then the reading."""
    spec, rows = _spec(), _read(results / "tiny" / "masformer_table1.csv")
    labels = spec["method_labels"]
    paper = spec["paper"]
    full_paper = paper["cost_millions"]["full"]
    lines = [f"From `results/tiny/masformer_table1.csv` (`make masformer_table1 PROFILE=tiny`): the tiny decoder-only "
             f"reader after continual training at n = 1,024 ({_seeds(rows)}; 95% interval over documents), beside "
             "the paper's ArXiv column (GPT-3 XL at n = 8,192). `C / full`: the share of full attention's cost, which "
             "the tiny rows keep from the paper's.", "",
             "| row | ours | C / full | ppl [95% CI] | paper: C / full | paper: ppl |", "|---|---|---|---|---|---|"]
    for r in (r for r in rows if r["dataset"] == column):
        share = f"{100 * float(r['cost_share']):.0f}%" if r["cost_share"] else "–"
        ppl = f"{float(r['ppl']):.2f} [{float(r['low']):.2f}, {float(r['high']):.2f}]" if r["status"] == "ok" \
            else r["status"]
        p_cost = paper["cost_millions"].get(r["method"])
        lines.append(f"| {labels.get(r['method'], r['method'])} | {r['setting'] or '–'} | {share} | {ppl} | "
                     f"{f'{100 * p_cost / full_paper:.0f}%' if p_cost else '–'} | {r['paper_ppl'] or '–'} |")
    return "\n".join(lines) + "\n\n" + reading(results, column)


def reading(results: Path, column: str = "arxiv") -> str:
    """Each of the spec's comparisons: the paper's direction (its ArXiv values) against ours, as the paired test
    on per-document log-perplexity says it (Holm-adjusted); then how many agree."""
    spec, tests = _spec(), _read(results / "tiny" / "masformer_table1-tests.csv")
    labels, paper = spec["method_labels"], spec["paper"]["test"]
    agree, against, unshown = [], [], []
    for t in (t for t in tests if t["dataset"] == column):
        a, b = t["row"], t["against"]
        want = "below" if paper[a][column] < paper[b][column] else "above"
        diff, p = float(t["diff"]), float(t["p_holm"])
        ours = "below" if diff < 0 else "above"
        text = (f"{labels[a]} {want} {labels[b]} in the paper ({paper[a][column]} vs {paper[b][column]}); ours "
                f"{diff:+.3f} [{float(t['low']):+.3f}, {float(t['high']):+.3f}] nats per token, p = {p:.2g}")
        (unshown if p >= ALPHA else agree if ours == want else against).append(text)
    n = len(agree) + len(against) + len(unshown)
    parts = [f"**Does the paper's ordering hold at tiny scale?** In {len(agree)} of the paper's {n} comparisons "
             f"(each paired on documents and seeds, Holm-corrected, p < {ALPHA}); against it in {len(against)}."]
    for name, group in (("As the paper", agree), ("Against the paper", against), ("No difference shown", unshown)):
        if group:
            parts.append(f"{name}: " + "; ".join(group) + ".")
    return " ".join(parts)


def _load(name: str) -> dict[str, Any]:
    from scaleformer.artifacts.grid import load_spec
    from scaleformer.resources import experiments_dir

    return load_spec(experiments_dir() / f"{name}.yaml")


def _point(r: dict[str, str] | None) -> str:
    if not r or not r.get("ours"):
        return (r or {}).get("status") or "–"
    return f"{float(r['ours']):.1f} [{float(r['ci_low']):.1f}, {float(r['ci_high']):.1f}]"


def _paired(t: dict[str, str] | None) -> str:
    if not t or not t.get("p_holm"):
        return "–"
    return (f"{float(t['diff_vs_baseline']):+.1f} [{float(t['diff_ci_low']):+.1f}, {float(t['diff_ci_high']):+.1f}], "
            f"p = {float(t['p_holm']):.2g}")


def ordering(spec: dict[str, Any], pairs: list[tuple[str, str, dict[str, str]]], paper_column: str, at: int) -> str:
    """Each (row, against, its paired test) as the paper orders the two (its validation values, ``at`` in its
    [R-1, R-2, R-L]) beside ours (the paired test on the held-out test split, Holm-adjusted); then the count."""
    labels, paper = spec["method_labels"], spec["paper"]["dev"]
    agree, against, unshown = [], [], []
    for method, base, t in pairs:
        theirs = [(paper.get(m) or {}).get(paper_column) for m in (method, base)]
        if not t.get("p_holm") or any(v is None or v[at] is None for v in theirs):
            continue
        a, b = theirs[0][at], theirs[1][at]  # type: ignore[index]
        want, diff, p = "above" if a > b else "below", float(t["diff_vs_baseline"]), float(t["p_holm"])
        text = (f"{labels[method]} {want} {labels[base]} in the paper ({a} vs {b}); ours {diff:+.1f} "
                f"[{float(t['diff_ci_low']):+.1f}, {float(t['diff_ci_high']):+.1f}], p = {p:.2g}")
        (unshown if p >= ALPHA else agree if (diff > 0) == (want == "above") else against).append(text)
    n = len(agree) + len(against) + len(unshown)
    parts = [f"**Does the paper's ordering hold at tiny scale?** As the paper in {len(agree)} of {n} comparisons, "
             f"against it in {len(against)}, no difference shown in {len(unshown)} (R-2, paired on the test "
             f"documents, Holm-corrected, p < {ALPHA})."]
    for name, group in (("As the paper", agree), ("Against the paper", against), ("No difference shown", unshown)):
        if group:
            parts.append(f"{name}: " + "; ".join(group) + ".")
    return " ".join(parts)


def _paired_from_archive(results: Path, artifact: str, rows: dict[str, dict[str, str]], method: str, base: str,
                         column: str) -> dict[str, Any]:
    """``method`` against ``base`` (R-2, test), paired on the documents from the scores archived beside the table:
    for a comparison the table's one baseline does not make (Every 2 against Bottom 12)."""
    from scaleformer.artifacts.scores_archive import read_archived
    from scaleformer.artifacts.significance import annotate

    scores, fresh = {}, []
    for m in (method, base):
        r = rows[m]
        scores[("test", m, column)] = [
            read_archived(results / "tiny" / "scores" / artifact / run / ev / "scores_test.jsonl")
            for run, ev in zip(r["run_id"].split(";"), r["evaluation"].split(";"), strict=True)]
        fresh.append({"split": "test", "method": m, "dataset": column, "metric": "rouge2", "ours": float(r["ours"])})
    annotate(fresh, scores, base)
    return {k: "" if v is None else str(v) for k, v in fresh[0].items()}


def _slope(points: dict[str, dict[str, str]], low: str, high: str) -> float | None:
    """R-2 gained per 10 points of C's share between two rows of one kind (descriptive: no test)."""
    a, b = points.get(low), points.get(high)
    if not a or not b or not a.get("ours") or not b.get("ours"):
        return None
    return 10 * (float(b["ours"]) - float(a["ours"])) / (100 * (float(b["cost_share"]) - float(a["cost_share"])))


def render_masformer_table2(results: Path) -> str:
    """The tiny Table 2 (and Figure 4's numbers): R-2 on validation and test against C's share, each row paired
    against block attention at MASFormer l = 4's cost on the test split, the paper's QMSUM column beside."""
    from scaleformer.artifacts.grid import profile_datasets

    spec, figure = _load("masformer_table2"), _read(results / "tiny" / "masformer_figure4.csv")
    column = profile_datasets(spec, "tiny")[0]
    points = {(r["split"], r["method"]): r for r in figure if r["dataset"] == column}
    tests = {r["method"]: r for r in _read(results / "tiny" / "masformer_table2.csv")
             if (r["split"], r["dataset"], r["metric"]) == ("test", column, "rouge2")}
    labels, base = spec["method_labels"], spec["baseline"]
    docs = sorted({r["n_docs"] for r in figure if r.get("n_docs")})
    counts = sorted({int(r["n_seeds"]) for r in figure if r.get("n_seeds")})
    seeds = "one seed" if counts == [1] else f"{' or '.join(map(str, counts))} seeds a row, pooled"
    lines = [f"From `results/tiny/masformer_table2.csv` and `masformer_figure4.csv` (`make masformer_table2 "
             f"PROFILE=tiny`, then `masformer_figure4`): the decoder-only reader fine-tuned for summarization as "
             f"language modeling at n = 1,024 ({seeds}; {'/'.join(docs)} documents a split; 95% interval over "
             f"documents), beside the paper's QMSUM column (validation). `vs {labels[base]}`: R-2 minus its, paired "
             "on the test documents, Holm-corrected.", "",
             f"| row | ours | C / full | R-2 dev | R-2 test | vs {labels[base]} (test) | paper: C / full | paper: R-2 |",
             "|---|---|---|---|---|---|---|---|"]
    for method in spec["methods"]:
        dev, test = points.get(("dev", method)), points.get(("test", method))
        if dev is None and test is None:
            continue
        r = test or dev
        share = f"{100 * float(r['cost_share']):.0f}%" if r and r.get("cost_share") else "–"
        p_share = f"{100 * float(r['paper_cost_share']):.0f}%" if r and r.get("paper_cost_share") else "–"
        lines.append(f"| {labels.get(method, method)} | {(r or {}).get('setting') or '–'} | {share} | {_point(dev)} | "
                     f"{_point(test)} | {'baseline' if method == base else _paired(tests.get(method))} | {p_share} | "
                     f"{(dev or {}).get('paper') or '–'} |")
    test_points = {m: r for (s, m), r in points.items() if s == "test"}
    slopes = {k: _slope(test_points, a, b) for k, (a, b) in
              {"MASFormer": ("masformer_l4", "masformer_l12"), "block": ("block_2048", "block_4096"),
               "window": ("window_1024", "window_2048")}.items()}
    steep = ", ".join(f"{k} {v:+.1f}" for k, v in slopes.items() if v is not None)
    pairs = [(m, base, t) for m, t in tests.items() if m != base]
    return ("\n".join(lines) + "\n\n" + ordering(spec, pairs, "qmsum", 1)
            + (f" Figure 4's slope (R-2 on test per 10 points of C's share, from its lowest to its highest row; "
               f"descriptive, no test): {steep}." if steep else ""))


def render_masformer_ablation(results: Path) -> str:
    """The tiny Table 4: where the full layers sit, each placement against the bottom one of its own l (the table's
    baseline for l = 8; for l = 12 paired from the archived scores) on the test split."""
    from scaleformer.artifacts.grid import profile_datasets

    spec = _load("masformer_ablation")
    column = profile_datasets(spec, "tiny")[0]
    rows = [r for r in _read(results / "tiny" / "masformer_ablation.csv") if r["dataset"] == column]
    by = {(r["split"], r["method"], r["metric"]): r for r in rows}
    labels, base = spec["method_labels"], spec["baseline"]
    tests = {m: r for (s, m, metric), r in by.items() if s == "test" and metric == "rouge2" and r.get("ours")}
    like = {m: (spec["rows"][m].get("like") or m) for m in tests}
    paired = {m: tests[m] if like[m] == base else _paired_from_archive(results, "masformer_ablation", tests, m,
                                                                        like[m], column)
              for m in tests if like[m] != m and like[m] in tests}
    lines = ["From `results/tiny/masformer_ablation.csv` (`make masformer_ablation PROFILE=tiny`; its bottom rows are "
             "Table 2's runs): R-2 with its 95% interval over documents; each placement minus the bottom one of its "
             "own l, paired on the test documents, Holm-corrected; the paper's QMSUM column beside.", "",
             "| placement | ours | R-2 dev | R-2 test | vs the bottom l (test) | paper: R-2 |", "|---|---|---|---|---|---|"]
    for method in spec["methods"]:
        dev, test = by.get(("dev", method, "rouge2")), by.get(("test", method, "rouge2"))
        if dev is None and test is None:
            continue
        paper = ((spec["paper"]["dev"].get(method) or {}).get("qmsum") or [None, None])[1]
        lines.append(f"| {labels.get(method, method)} | {_setting(spec, dev or test)} | {_point(dev)} | {_point(test)} | "
                     f"{_paired(paired[method]) if method in paired else 'the bottom one'} | "
                     f"{paper if paper is not None else '–'} |")
    pairs = [(m, like[m], t) for m, t in paired.items()]
    return "\n".join(lines) + "\n\n" + ordering(spec, pairs, "qmsum", 1)


def _setting(spec: dict[str, Any], r: dict[str, str] | None) -> str:
    """A row's sizes from its spec row (the CSV has none): ``l=2, top`` and the like."""
    from scaleformer.artifacts.grid import row_overrides

    if not r:
        return "–"
    own = row_overrides(spec, spec["profiles"]["tiny"], r["method"])
    got = dict(o.split("=", 1) for o in own)
    return f"l={got['method.full_layers']}, {got.get('method.placement', 'bottom')}"


def render_masformer_lm_placement(results: Path, column: str = "arxiv") -> str:
    """The placement question on language modeling: each row's pooled perplexity, then each comparison the spec
    lists (per-document log-perplexity paired on documents and seeds, Holm-adjusted), in words."""
    spec = _load("masformer_lm_placement")
    rows = [r for r in _read(results / "tiny" / "masformer_lm_placement.csv") if r["dataset"] == column]
    tests = [t for t in _read(results / "tiny" / "masformer_lm_placement-tests.csv") if t["dataset"] == column]
    labels = spec["method_labels"]
    lines = [f"From `results/tiny/masformer_lm_placement.csv` (`make masformer_lm_placement PROFILE=tiny`; its "
             f"bottom, block and full rows are Table 1's runs): {_seeds(rows)}; 95% interval over documents.", "",
             "| row | ours | C / full | ppl [95% CI] |", "|---|---|---|---|"]
    for r in rows:
        share = f"{100 * float(r['cost_share']):.0f}%" if r["cost_share"] else "–"
        ppl = f"{float(r['ppl']):.2f} [{float(r['low']):.2f}, {float(r['high']):.2f}]" if r["status"] == "ok" \
            else r["status"]
        lines.append(f"| {labels.get(r['method'], r['method'])} | {r['setting'] or '–'} | {share} | {ppl} |")
    said = []
    for t in tests:
        diff, p = float(t["diff"]), float(t["p_holm"])
        verdict = "no difference shown" if p >= ALPHA else "lower perplexity" if diff < 0 else "higher perplexity"
        said.append(f"{labels[t['row']]} against {labels[t['against']]}: {verdict} ({diff:+.3f} "
                    f"[{float(t['low']):+.3f}, {float(t['high']):+.3f}] nats per token, p = {p:.2g})")
    return "\n".join(lines) + "\n\n" + ("Paired, Holm-corrected over the " + str(len(said)) + " comparisons: "
                                        + "; ".join(said) + "." if said else "No comparison has both rows yet.")


def render_masformer_continual(results: Path) -> str:
    """The tiny Table 3: MASFormer l = 2 of 6 fine-tuned without continual training, after a short one and after one
    at the fine-tuning length, each continued row against the one without (R-2, test, paired, Holm)."""
    from scaleformer.artifacts.grid import profile_datasets

    spec = _load("masformer_continual")
    column = profile_datasets(spec, "tiny")[0]
    rows = [r for r in _read(results / "tiny" / "masformer_continual.csv") if r["dataset"] == column]
    by = {(r["split"], r["method"], r["metric"]): r for r in rows}
    labels, base = spec["method_labels"], spec["baseline"]
    lines = ["From `results/tiny/masformer_continual.csv` (`make masformer_continual PROFILE=tiny`; its first row is "
             "Table 2's runs): R-1 / R-2 / R-L on the test split with R-2's 95% interval over documents; each continued "
             "row minus the row without, paired on the test documents, Holm-corrected; the paper's QMSUM R-2 beside.",
             "", "| row | seeds | R-1 / R-2 / R-L test | R-2 test [95% CI] | vs w.o. C.T. (R-2, test) | paper: R-2 |",
             "|---|---|---|---|---|---|"]
    pairs = []
    for method in spec["methods"]:
        test = {m: by.get(("test", method, m)) for m in ("rouge1", "rouge2", "rougeL")}
        if not test["rouge2"] or not test["rouge2"].get("ours"):
            continue
        three = " / ".join(f"{float(r['ours']):.1f}" if r and r.get("ours") else "–" for r in test.values())
        paper = ((spec["paper"]["dev"].get(method) or {}).get("qmsum") or [None, None])[1]
        if method != base:
            pairs.append((method, base, test["rouge2"]))
        lines.append(f"| {labels[method]} | {test['rouge2'].get('n_seeds') or '–'} | {three} | {_point(test['rouge2'])} | "
                     f"{_paired(test['rouge2']) if method != base else 'the baseline'} | "
                     f"{paper if paper is not None else '–'} |")
    return "\n".join(lines) + "\n\n" + ordering(spec, pairs, "qmsum", 1)


def render_summary_head(results: Path) -> str:
    """The output head of decoder-only summarization fine-tuning on every position against the summary's, from
    ``results/bench/summary-head-cpu.json`` (``python -m scaleformer.bench.summary_head``)."""
    import json

    path = results / "bench" / "summary-head-cpu.json"
    try:
        r = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise MissingResults(f"{path}: {e}") from None
    every, *only = r["paper_shape"]
    peak = r["matmul_peak_gflops"] * 1e9

    def mb(row: dict[str, Any]) -> str:
        return f"{row['mem_growth_bytes'] / 1e6:,.0f} MB" if row.get("mem_growth_bytes") is not None else "n/a"

    parts = [f"{o['variant'].split('(')[1].split(':')[0]}'s ({o['positions']:,} positions) {o['time_s']:.3f} s, "
             f"{every['time_s'] / o['time_s']:.0f}x less, {mb(o)}" for o in only]
    a, b = r["reader"]
    return (f"At the paper's shape (n = {r['n']:,}, width {r['width']:,}, vocabulary {r['vocab']:,}, fp32, forward and "
            f"backward, median of {r['repeats']} on {r['threads']} CPU threads), the head and the loss on every "
            f"position take {every['time_s']:.2f} s (IQR {every['time_iqr_s']:.2f}; floor {every['flops'] / peak:.1f} s "
            f"at the measured matmul rate) and grow the peak by {mb(every)}; on the summary's positions only: "
            f"{'; '.join(parts)}. On the tiny reader (vocabulary 1,738) the whole training step is "
            f"{a['time_s']:.3f} s against {b['time_s']:.3f} s (IQR {a['time_iqr_s']:.3f} / {b['time_iqr_s']:.3f}): "
            "its head is too small a part of the step to show.\n")


def render_causal_peers(results: Path) -> str:
    """The causal kernels against sdpa's dense mask and compiled flex, each phase, from
    ``results/bench/causal-peers-cpu.json`` (``python -m scaleformer.bench.causal_peers``): the bench's own table."""
    from scaleformer.bench.causal_peers import render

    return render(read_json(results / "bench" / "causal-peers-cpu.json")).split("\n", 2)[2]  # less its title


def render_masformer_cpu(results: Path) -> str:
    """One layer's attention per pattern at the paper's shape and MASFormer's sum of its layers, from
    ``results/bench/masformer-cpu.json`` (``python -m scaleformer.bench.causal_spans``)."""
    r = read_json(results / "bench" / "masformer-cpu.json")
    by, m = {row["pattern"]: row for row in r["layer"]}, r["masformer_model"]

    def mb(row: dict[str, Any]) -> str:
        return "n/a" if row.get("mem_growth_bytes") is None else f"{row['mem_growth_bytes'] / 2**20:,.0f} MB"

    return (f"At the paper's shape (16 heads of 128, n = {r['n']:,}, fp32, forward and backward of one layer's "
            f"attention on {r['threads']} CPU threads), full causal attention takes {by['full']['time_s']:.3f} s, "
            f"blocks of 1,024 take {by['block 1024']['time_s']:.3f} s and a window of 512 takes "
            f"{by['window 512']['time_s']:.3f} s; MASFormer's l = 4 of 24 full layers sums to {m['time_s']:.2f} s "
            f"against {m['full_time_s']:.2f} s for full attention everywhere: {m['time_share']:.0%} of the time at "
            f"{m['cost_share']:.0%} of the paper's C, and the time "
            f"{'falls' if r['layer_falls_with_cost'] else 'does not fall'} with C across the patterns. Peak growth "
            f"over the inputs: {mb(by['full'])} for full attention, {mb(by['block 1024'])} for blocks of 1,024, "
            f"{mb(by['window 512'])} for a window of 512 (no pattern builds an n x n matrix).\n")


BENCH = {"summary-head-cpu": render_summary_head, "causal-peers-cpu": render_causal_peers,
         "masformer-cpu": render_masformer_cpu}  # the benches' blocks of docs/performance.md
