"""The numbers of README.md and docs/*.md, rendered from committed results files (never typed by hand).

    python scripts/render_results.py           # rewrite every results block from results/
    python scripts/render_results.py --check   # exit 1 if a block differs from its files, or a table's
                                               # statistics from its archived scores (a test runs this)

A block is ``<!-- results: NAME -->`` ... ``<!-- /results -->`` in a page; NAME picks a renderer below,
which reads only files under ``results/`` (the default run's, ``scripts/default_results.py``; the tiny tables',
``make table1 PROFILE=tiny`` and friends; the README's front door: ``scripts/results_front.py``) and states where
its numbers come from. Sentences that compare methods are computed too: a re-run that changes an order changes them.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import scaleformer  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(<!-- results: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S)
CEILING = "truncation_ceiling"

from scaleformer.artifacts.scores_archive import recheck_all  # noqa: E402
from scaleformer.artifacts.significance import mark_meaning, seed_spread, seeds_agree  # noqa: E402
from scaleformer.io import atomic_write_bytes, atomic_write_text  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_front import FRONT  # noqa: E402
from results_masformer import (  # noqa: E402
    BENCH,
    render_masformer_ablation,
    render_masformer_continual,
    render_masformer_lm_placement,
    render_masformer_table1,
    render_masformer_table2,
)
from results_runs import (  # noqa: E402
    LABELS,
    MissingResults,
    fmt1,
    read_json,
    render_default,
    render_default_town,
    render_dryrun_costs,
    render_times,
    short_commit,
)

# ---- the tiny tables ----------------------------------------------------------------------------

def _table(artifact: str, sub: str = "") -> tuple[dict[str, Any], list[dict[str, str]]]:
    """An artifact's tiny CSV and spec; ``sub``: a few rows rendered apart (``--out-dir results/tiny/<sub>``)."""
    from scaleformer.artifacts.grid import load_spec
    from scaleformer.resources import experiments_dir

    path = RESULTS / "tiny" / sub / f"{artifact}.csv"
    try:
        rows = list(csv.DictReader(path.open(encoding="utf-8")))
    except OSError as e:
        raise MissingResults(f"{path.relative_to(ROOT)}: {e}") from None
    return load_spec(experiments_dir() / f"{artifact}.yaml"), rows


def _row(rows: list[dict[str, str]], split: str, method: str, dataset: str, metric: str) -> dict[str, Any] | None:
    """A table CSV row with its numbers as numbers (``significant`` as a bool), or None."""
    for r in rows:
        if (r["split"], r["method"], r["dataset"], r["metric"]) == (split, method, dataset, metric) and r["ours"]:
            out: dict[str, Any] = dict(r)
            for k in ("ours", "ci_low", "ci_high", "diff_vs_baseline", "diff_ci_low", "diff_ci_high", "p_value",
                      "p_holm"):
                out[k] = float(r[k]) if r.get(k) else None
            out["significant"] = r.get("significant") == "True"
            return out
    return None


def _value(rows: list[dict[str, str]], split: str, method: str, dataset: str, metric: str) -> float | None:
    r = _row(rows, split, method, dataset, metric)
    return None if r is None else r["ours"]


def _provenance(artifact: str, rows: list[dict[str, str]], sub: str = "") -> str:
    commits = sorted({short_commit(c) for r in rows for c in (r.get("commit") or "").split(";") if c})
    where = f"results/tiny/{sub}/" if sub else "results/tiny/"
    rows_of = (f" METHODS={','.join(dict.fromkeys(r['method'] for r in rows if r['method'] != CEILING))} "
               f"OUT_DIR={where[:-1]}" if sub else "")
    return (f"From `{where}{artifact}.csv` (`make {artifact} PROFILE=tiny{rows_of}`; runs at commit "
            f"{', '.join(commits) or 'unknown'}).")


def render_table(artifact: str, split: str, metrics: list[str], sub: str = "") -> str:
    from scaleformer.artifacts.grid import baseline, column_label, profile_datasets, seeds

    spec, rows = _table(artifact, sub)
    columns = profile_datasets(spec, "tiny")
    cols = [(ds, m) for ds in columns for m in metrics]
    head = [f"{column_label(spec, 'tiny', ds).removeprefix('synthetic ')} {LABELS[m]}" if len(columns) > 1
            else LABELS[m] for ds, m in cols]
    from scaleformer.artifacts.significance import cell_text, seed_counts, table_caption

    lines = [f"| {split} | {' | '.join(head)} |", "|---|" + "---|" * len(cols)]
    for method in (m for m in spec["methods"] if any(r["method"] == m for r in rows)):
        lines.append(f"| {spec['method_labels'].get(method, method)} | "
                     + " | ".join(cell_text(_row(rows, split, method, ds, m) or {}) for ds, m in cols) + " |")
    ceiling = spec.get("ceiling_metric", "fact_recall")
    if any(r["method"] == CEILING for r in rows):
        label = spec.get("ceiling_label", "Trunc. ceiling (events in 1st window)")
        lines.append(f"| {label} | " + " | ".join(fmt1(_value(rows, split, CEILING, ds, m)) if m == ceiling else ""
                                                  for ds, m in cols) + " |")
    base = baseline(spec)
    n_docs = sorted({r["n_docs"] for r in rows if r["split"] == split and r.get("n_docs")})
    # the seeds the committed cells rest on (the spec may list more than were run when the CSV was written)
    counts = seed_counts([r for r in rows if r["method"] != CEILING])
    text = table_caption(base, spec["method_labels"].get(base, base) if base else "", counts, spec["method_labels"],
                         len(seeds(spec, "tiny")))
    return (_provenance(artifact, rows, sub) + f" {text}"
            + (f" {'/'.join(n_docs)} documents per cell." if n_docs else "") + "\n\n" + "\n".join(lines))


def _signed(x: float) -> str:
    return f"{x:+.1f}"


def render_table1_reading() -> str:
    """Past the first window, on the held-out test ledgers: each method's R-1 and Parts against truncation's,
    with the table's paired tests deciding the words (a difference without its mark is not called one)."""
    from scaleformer.artifacts.grid import column_label
    from scaleformer.artifacts.significance import MARK

    spec, rows = _table("table1")
    long_cols = spec["datasets"][1:]
    cols = {ds: column_label(spec, "tiny", ds).removeprefix("synthetic ") for ds in long_cols}
    groups: dict[str, list[str]] = {"higher": [], "lower": [], "mixed": []}
    for method in spec["methods"]:
        if method == spec.get("baseline", "truncation"):
            continue
        said, signs = [], []
        for ds in long_cols:
            got = [_row(rows, "test", method, ds, m) for m in ("rouge1", "fact_field_recall")]
            if None in got or any(r["diff_vs_baseline"] is None for r in got):
                continue
            said.append(" / ".join(f"{_signed(r['diff_vs_baseline'])}{MARK if r['significant'] else ''}" for r in got)
                        + f" on {cols[ds]}")
            signs += [(r["diff_vs_baseline"] > 0) - (r["diff_vs_baseline"] < 0) if r["significant"] else 0 for r in got]
        if not said:
            continue
        kind = "higher" if signs and all(x > 0 for x in signs) else "lower" if signs and all(x < 0 for x in signs) else "mixed"
        groups[kind].append(f"{spec['method_labels'][method]} ({'; '.join(said)})")
    held = " and ".join(fmt1(_value(rows, "test", CEILING, ds, "fact_recall")) + "%" for ds in long_cols)
    n = sorted({r["n_docs"] for r in rows if r["split"] == "test" and r["dataset"] in long_cols and r.get("n_docs")})
    return (f"Held-out test ledgers ({'/'.join(n)} per column), the {' and '.join(cols.values())} columns, where truncation's window "
            f"holds {held} of the events: R-1 / Parts minus truncation's, `{MARK}` {mark_meaning(rows)}."
            f"{seed_spread(rows, 'rouge1', LABELS['rouge1'])} Higher on both scores and both columns: "
            f"{'; '.join(groups['higher']) or 'none'}. Lower on all four: {'; '.join(groups['lower']) or 'none'}. "
            f"Neither (some difference not shown, or mixed): {'; '.join(groups['mixed']) or 'none'}."
            + seeds_agree(rows, "rouge1", LABELS["rouge1"], spec["method_labels"], cols, spec["baseline"]))


def render_table_qa_reading(sub: str = "") -> str:
    """The held-out QA test: each method's EM and F1 minus truncation's with their paired intervals. The
    table's Holm-corrected paired tests decide the words, metric by metric: a method is grouped by what
    the test found on each ("higher", "lower" or "no difference shown"), never by a sign alone."""
    from scaleformer.artifacts.significance import MARK

    spec, rows = _table("table_qa", sub)
    (ds,) = spec["datasets"]
    base = spec.get("baseline", "truncation")
    metrics = ("exact_match", "f1")
    groups: dict[tuple[str, ...], list[str]] = {}
    for method in spec["methods"]:
        got = [_row(rows, "test", method, ds, m) for m in metrics]
        if method == base or None in got or any(r["diff_vs_baseline"] is None for r in got):
            continue
        said = "; ".join(f"{LABELS[m]} {_signed(r['diff_vs_baseline'])}{MARK if r['significant'] else ''} "
                         f"[{_signed(r['diff_ci_low'])}, {_signed(r['diff_ci_high'])}]"
                         for m, r in zip(metrics, got))
        verdict = tuple("no difference shown" if not r["significant"] else "higher" if r["diff_vs_baseline"] > 0
                        else "lower" for r in got)
        groups.setdefault(verdict, []).append(f"{spec['method_labels'][method]} ({said})")
    trunc = [_row(rows, "test", base, ds, m) for m in metrics]
    n = sorted({r["n_docs"] for r in rows if r["split"] == "test" and r.get("n_docs")})
    found = " ".join(
        ", ".join(f"{LABELS[m]} {v}" for m, v in zip(metrics, verdict)) + ": " + "; ".join(names) + "."
        for verdict, names in groups.items())
    return (f"Held-out test questions ({'/'.join(n)}): truncation answers {fmt1(trunc[0]['ours'])} EM / "
            f"{fmt1(trunc[1]['ours'])} F1. Each method minus truncation, with the paired 95% interval, `{MARK}` "
            f"{mark_meaning(rows)}; an interval that misses zero without its mark did not survive the "
            f"correction. {found}")


def render_detectable(artifact: str, metric: str, sub: str = "") -> str:
    """The power sentence of a tiny table's test split (scaleformer.artifacts.power)."""
    from scaleformer.artifacts.power import detectable

    _, rows = _table(artifact, sub)
    try:
        return detectable(rows, metric, LABELS.get(metric, metric), f"results/tiny/{sub}{'/' * bool(sub)}{artifact}.csv")
    except ValueError as e:
        raise MissingResults(str(e)) from None


def render_selector_picks() -> str:
    data = read_json(RESULTS / "tiny" / "selector_picks.json")
    head = "| middles | " + " | ".join(f"{10 * i}-{10 * i + 10}%" for i in range(10)) + " | in next chunk | answer tokens kept |"
    lines = [head, "|---|" + "---|" * 12]
    for name in ("random", "query", "query_lift"):
        if name not in data:
            continue
        d = data[name]
        lines.append(f"| {name} | " + " | ".join(f"{x:.1f}" for x in d["by_tenth_of_interior"])
                     + f" | {d['in_next_chunk']:.1f} | {d['answer_tokens_kept']:.1f} |")
    return (f"From `results/tiny/selector_picks.json` (`scripts/selector_picks.py`): {data['backbone']} as "
            f"shipped, the {data['documents']} {data['split']} ledgers of `data=ledgers_qa`, chunks of "
            f"{data['chunk_size']} with overlap {data['overlap']}, k={data['boundary_tokens']}, "
            f"m={data['middle_tokens']}. Share (%) of the middle picks per tenth of the chunk's interior, of "
            "those also inside the next chunk, and of the answer's tokens among all kept states.\n\n"
            + "\n".join(lines))


def render_figure2() -> str:
    spec, rows = _table("figure2")
    extra = next((k for k in rows[0] if k in LABELS and k not in ("ours",)), None) if rows else None
    lines = [f"| sweep | value | {LABELS[spec['metric']]} |" + (f" {LABELS[extra]} |" if extra else ""),
             "|---|---|---|" + ("---|" if extra else "")]
    for r in rows:
        lines.append(f"| {r['sweep']} | {r['value']} | {_point(r, 'ours', 'ci')} |"
                     + (f" {_point(r, extra, extra + '_ci')} |" if extra else ""))
    commits = sorted({short_commit(r["commit"]) for r in rows if r.get("commit")})
    n = sorted({r["n_docs"] for r in rows if r.get("n_docs")})
    ci = (f" Each value with its 95% interval over the {'/'.join(n)} dev ledgers (one training per point, so "
          "the documents' noise only, not a seed's; `±h` its half-width, `[lo, hi]` where its sides differ)."
          if n else " No intervals: these runs wrote no per-document scores.")
    return (f"From `results/tiny/figure2.csv` (`make figure2 PROFILE=tiny`; runs at commit {', '.join(commits)}): "
            f"ScaleFormer + Middle on the synthetic 2.5k dev ledgers, one training per point, the other settings at "
            f"their defaults.{ci}\n\n" + "\n".join(lines))


def _point(r: dict[str, str], col: str, ci: str) -> str:
    """A figure point's value with its interval where the CSV has one."""
    from scaleformer.artifacts.significance import interval_text

    if not r.get(col):
        return fmt1(None)
    if not r.get(f"{ci}_low"):
        return fmt1(float(r[col]))
    return f"{fmt1(float(r[col]))} {interval_text(float(r[col]), float(r[f'{ci}_low']), float(r[f'{ci}_high']))}"


def render_qa_by_window() -> str:
    from qa_by_window import window_markdown

    return ("From `results/tiny/table_qa_by_window.json` (`scripts/qa_by_window.py` on the table's runs).\n\n"
            + window_markdown(read_json(RESULTS / "tiny" / "table_qa_by_window.json")))


def render_qa_seeds_by_window() -> str:
    """The paired tests of ``qa_by_window.py --paired`` on the three-seed rows: inside and past the window."""
    from qa_by_window import paired_markdown

    data = read_json(RESULTS / "tiny" / "table_qa_seeds" / "by_window.json")
    return (f"From `results/tiny/table_qa_seeds/by_window.json` (`scripts/qa_by_window.py "
            f"results/tiny/runs/ledgersqa-{{truncation,sled}}-* --paired {data['paired']['base']}`): "
            + paired_markdown(data["paired"]))


RENDERERS: dict[str, Callable[[], str]] = {
    "default": lambda: render_default(RESULTS),
    "default-town": lambda: render_default_town(RESULTS),
    "times": lambda: render_times(RESULTS),
    "table1-tiny-dev": lambda: render_table("table1", "dev", ["rouge1", "fact_recall", "fact_field_recall"]),
    "table1-tiny-test": lambda: render_table("table1", "test", ["rouge1", "fact_recall", "fact_field_recall"]),
    "table1-tiny-reading": render_table1_reading,
    "table2-tiny-dev": lambda: render_table("table2", "dev", ["rouge1", "fact_recall", "fact_field_recall"]),
    "table2-tiny-test": lambda: render_table("table2", "test", ["rouge1", "fact_recall", "fact_field_recall"]),
    "figure2-tiny": render_figure2,
    "table_qa-tiny-dev": lambda: render_table("table_qa", "dev", ["exact_match", "f1"]),
    "table_qa-tiny-test": lambda: render_table("table_qa", "test", ["exact_match", "f1"]),
    "table_qa-by-window": render_qa_by_window,
    "table_qa-tiny-reading": render_table_qa_reading,
    "table_qa-seeds-test": lambda: render_table("table_qa", "test", ["exact_match", "f1"], "table_qa_seeds"),
    "table_qa-seeds-reading": lambda: render_table_qa_reading("table_qa_seeds"),
    "table_qa-seeds-by-window": render_qa_seeds_by_window,
    "table1-tiny-power": lambda: render_detectable("table1", "rouge1"),
    "table_qa-tiny-power": lambda: render_detectable("table_qa", "exact_match"),
    "table_qa-seeds-power": lambda: render_detectable("table_qa", "exact_match", "table_qa_seeds"),
    "table2-tiny-power": lambda: render_detectable("table2", "rouge1"),
    "selector-picks": render_selector_picks,
    "dryrun-costs": lambda: render_dryrun_costs(RESULTS),
    "masformer_table1-tiny": lambda: render_masformer_table1(RESULTS),
    "masformer_table2-tiny": lambda: render_masformer_table2(RESULTS),
    "masformer_ablation-tiny": lambda: render_masformer_ablation(RESULTS),
    "masformer_lm_placement-tiny": lambda: render_masformer_lm_placement(RESULTS),
    "masformer_continual-tiny": lambda: render_masformer_continual(RESULTS),
    **{name: (lambda f=f: f(RESULTS)) for name, f in FRONT.items()},  # the README's front door
    **{name: (lambda f=f: f(RESULTS)) for name, f in BENCH.items()},  # the benches' (docs/performance.md)
}


def render_page(text: str, page: str) -> str:
    def one(m: re.Match[str]) -> str:
        name = m["name"]
        if name not in RENDERERS:
            raise SystemExit(f"error: {page}: unknown results block {name!r}; known: {', '.join(RENDERERS)}")
        return f"{m.group(1)}{RENDERERS[name]().rstrip()}\n{m.group(4)}"

    return BLOCK.sub(one, text)


def restate_checked(target: str) -> None:
    """``--restate [SUB/]ARTIFACT``: the table restated into a copy of ``results/``, every page's blocks rendered
    from that copy, and only then the table's three files put in place: a restatement that a block cannot
    render (a table cut to its header, an unknown name) writes nothing."""
    import shutil
    import tempfile

    from scaleformer.artifacts.grid import load_spec

    global RESULTS
    sub, _, name = target.rpartition("/")  # table_qa_seeds/table_qa: a table rendered apart
    names = sorted(p.stem for p in (ROOT / "experiments").glob("*.yaml"))
    if name not in names or any(part in ("", ".", "..") for part in Path(sub).parts if sub):
        raise ValueError(f"must be [SUB/]ARTIFACT, an artifact of {', '.join(names)} below results/tiny/")
    folder = (RESULTS / "tiny" / sub).resolve()
    if not folder.is_relative_to((RESULTS / "tiny").resolve()) or not (folder / f"{name}.csv").is_file():
        raise ValueError(f"no {name}.csv in {folder}")
    from scaleformer.artifacts.figures import restate_figure
    from scaleformer.artifacts.restate import restate

    spec = load_spec(ROOT / "experiments" / f"{name}.yaml")
    real = RESULTS
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "results"
        shutil.copytree(RESULTS, staged, symlinks=True)
        written = (restate_figure if "sweeps" in spec else restate)(spec, "tiny", staged / "tiny" / sub)
        RESULTS = staged
        try:
            for page in PAGES:  # every block must render from the restated table
                render_page((ROOT / page).read_text(encoding="utf-8"), page)
        finally:
            RESULTS = real
        for path in written.values():
            atomic_write_bytes(real / path.relative_to(staged), path.read_bytes())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="report blocks that differ from their files, and "
                    "statistics that differ from the archived per-document scores; write nothing")
    ap.add_argument("--restate", metavar="[SUB/]ARTIFACT", help="rewrite results/tiny/[SUB/]ARTIFACT.{md,csv,tex} "
                    "under the current statistics rules (scaleformer.artifacts.restate), then render the blocks")
    args = ap.parse_args(argv)
    if args.restate is not None:
        try:
            restate_checked(args.restate)
        except (MissingResults, ValueError, OSError) as e:
            print(f"error: --restate {args.restate}: {e}; nothing was written", file=sys.stderr)
            return 1
    try:
        problems = recheck_all(RESULTS / "tiny") if args.check else []
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if problems:  # one line each, the table or file named in it
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        return 1
    stale = []
    for page in PAGES:
        path = ROOT / page
        text = path.read_text(encoding="utf-8")
        try:
            new = render_page(text, page)
        except MissingResults as e:
            print(f"error: {page}: {e}", file=sys.stderr)
            return 1
        if new != text:
            stale.append(page)
            if not args.check:
                atomic_write_text(path, new)
    if args.check and stale:
        print(f"error: results blocks differ from results/ in {', '.join(stale)}: run "
              "python scripts/render_results.py", file=sys.stderr)
        return 1
    print(f"{'stale' if args.check else 'rendered'}: {', '.join(stale) or 'nothing'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
