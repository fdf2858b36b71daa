"""The paper's artifacts from results files: grid expansion, launching, Table 1/2 and Figure 2.

An artifact is one declarative file in experiments/ (grid, columns, the paper's value per cell).
Numbers come only from each run's ``eval/<evaluation>/metrics.json``: a missing or corrupt file is
reported by name and shown as such, never read as zero; a method the framework lacks shows as
"not run". Rows are the spec's methods; ``methods="all"`` adds every other ``conf/method/`` option
(a newly added method appears without editing the spec, with no paper value beside it).
"""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scaleformer.io import atomic_write_bytes, atomic_write_text

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Cell:
    """One run of a grid: a method on a dataset column (both splits come from the same run)."""

    key: str  # dataset column, or sweep name
    method: str
    overrides: list[str]
    value: Any = None  # sweep value (figures)
    available: bool = True
    run_id: str | None = None
    result_dir: Path | None = None  # where the run writes this cell's metrics.json


@dataclass
class Collected:
    results: dict[tuple[str, str, Any], dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def load_spec(path: str | Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _check_profile(spec: dict[str, Any], profile: str) -> dict[str, Any]:
    if profile not in spec["profiles"]:
        raise ValueError(f"PROFILE={profile!r}: {spec['artifact']} has profiles {sorted(spec['profiles'])}")
    return spec["profiles"][profile]


def method_available(option: str) -> bool:
    """A grid's method is runnable when conf/method/<option>.yaml exists (it names a registered method)."""
    return (ROOT / "conf" / "method" / f"{option}.yaml").exists()


def method_options() -> list[str]:
    """Every method option the configs offer (each backed by a registered method)."""
    return sorted(p.stem for p in (ROOT / "conf" / "method").glob("*.yaml") if not p.stem.startswith("_"))


def select_methods(spec: dict[str, Any], methods: str | list[str] | None) -> list[str]:
    """The grid's rows: the spec's (None), those plus every other method option ("all"), or a list."""
    if methods is None:
        return list(spec["methods"])
    if methods == "all":
        return [*spec["methods"], *(m for m in method_options() if m not in spec["methods"])]
    chosen = methods.split(",") if isinstance(methods, str) else list(methods)
    unknown = [m for m in chosen if not method_available(m)]
    if unknown:
        raise ValueError(f"METHODS={','.join(chosen)}: no conf/method/ option {', '.join(unknown)}; "
                         f"available: {', '.join(method_options())}")
    return chosen


def expand_grid(spec: dict[str, Any], profile: str, methods: str | list[str] | None = None) -> list[Cell]:
    """Every run the artifact needs, with the Hydra overrides that produce it."""
    prof = _check_profile(spec, profile)
    base = [f"backbone={spec['backbone'][profile]}", f"tag={spec['artifact']}-{profile}", *prof["overrides"]]
    cells = []
    if "sweeps" in spec:
        data = [f"data={prof['data']}"]
        for name, sweep in spec["sweeps"].items():
            for v in sweep["values"]:
                cells.append(Cell(name, spec["method"], [*base, *data, f"method={spec['method']}",
                                                         f"{sweep['key']}={v}"], value=v))
        return cells
    for ds in spec["datasets"]:
        data = [f"data={prof['data'][ds]}", *prof.get("data_overrides", {}).get(ds, [])]
        for m in select_methods(spec, methods):
            cells.append(Cell(ds, m, [*base, *data, f"method={m}"], available=method_available(m)))
    return cells


def resolve_run_ids(cells: list[Cell], root: Path | None = None) -> None:
    """Fill each available cell's run id and results folder from its composed config."""
    from scaleformer.config import compose_config, to_config
    from scaleformer.identity import expected_eval_dir

    for c in cells:
        if c.available:
            rc = to_config(compose_config([*c.overrides, *([f"paths.root={root}"] if root else [])]))
            c.run_id, c.result_dir = rc.paths.run_id, expected_eval_dir(rc)


def launch(spec: dict[str, Any], profile: str, root: Path, force: bool = False, launcher: str | None = None,
           python: str = sys.executable, methods: str | list[str] | None = None) -> list[list[str]]:
    """Run the grid's missing cells as Hydra multiruns (one per dataset column or sweep).

    Finished cells are skipped by the runs themselves (skip_existing=true) unless `force`, which
    retrains them from scratch. Returns the commands it ran.
    """
    cells = [c for c in expand_grid(spec, profile, methods) if c.available]
    resolve_run_ids(cells, root)
    todo = cells if force else [c for c in cells if not (c.result_dir / "metrics.json").exists()]
    groups: dict[tuple[tuple[str, ...], str], list[Cell]] = {}
    for c in todo:  # cells differing only in the value of their last override form one sweep
        groups.setdefault((tuple(c.overrides[:-1]), c.overrides[-1].split("=", 1)[0]), []).append(c)
    commands = []
    for (common, key), group in groups.items():
        values = ",".join(c.overrides[-1].split("=", 1)[1] for c in group)
        cmd = [python, str(ROOT / "train.py"), "-m", *common, f"{key}={values}", f"paths.root={root}",
               f"skip_existing={'false' if force else 'true'}", *(["trainer.ckpt_path=null"] if force else [])]
        if launcher:
            cmd.append(f"hydra/launcher={launcher}")
        print("+ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
        commands.append(cmd)
    if not todo:
        print(f"{spec['artifact']}: all {len(cells)} runs have results; nothing to launch (FORCE=1 re-runs)")
    return commands


def collect(cells: list[Cell]) -> Collected:
    """Read each cell's metrics.json; report missing and corrupt files by name."""
    out = Collected()
    for c in cells:
        if not c.available:
            continue
        path = Path(str(c.result_dir)) / "metrics.json"
        if not path.exists():
            out.problems.append(f"missing: {path} ({c.method} on {c.key})")
            continue
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
            splits = result["splits"]
            assert isinstance(splits, dict)
        except (ValueError, KeyError, TypeError, AssertionError):
            out.problems.append(f"corrupt: {path} ({c.method} on {c.key}): skipped")
            continue
        out.results[(c.key, c.method, c.value)] = result
    for p in out.problems:
        print(p, file=sys.stderr)
    return out


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) else None


def table_rows(spec: dict[str, Any], cells: list[Cell], got: Collected) -> list[dict[str, Any]]:
    """One row per (split, method, dataset, metric): ours, the paper's, the difference, provenance."""
    rows = []
    for split_label, split in spec["splits"].items():
        for c in cells:
            result = got.results.get((c.key, c.method, None))
            paper = (spec["paper"].get(split_label, {}).get(c.method, {}) or {}).get(c.key)
            m = (result or {}).get("splits", {}).get(split, {}) if result else {}
            status = ("not run (method not implemented)" if not c.available
                      else "missing" if result is None
                      else "no references (leaderboard predictions only)" if m and m.get("scored") is False
                      else "ok" if m else f"no {split} split")
            for i, metric in enumerate(spec["metrics"]):
                ours = _num(m.get(metric)) if status == "ok" else None
                ref = _num(paper[i]) if paper else None
                rows.append({
                    "split": split_label, "method": c.method, "dataset": c.key, "metric": metric,
                    "ours": ours, "paper": ref, "diff": None if ours is None or ref is None else ours - ref,
                    "status": status, "run_id": c.run_id or "",
                    "evaluation": c.result_dir.name if c.result_dir else "",
                    "commit": (result or {}).get("commit", ""),
                })
    return rows


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def render_markdown(spec: dict[str, Any], rows: list[dict[str, Any]], problems: list[str]) -> str:
    """Per cell 'ours (paper, ±diff)'; a provenance table of runs below."""
    datasets, metrics = spec["datasets"], spec["metrics"]
    labels = spec.get("metric_labels", {})
    head = ["split", "method", *[f"{d} {labels.get(m, m)}" for d in datasets for m in metrics]]
    lines = [f"# {spec['title']}", "",
             "Each cell: ours (paper, ours - paper). `–`: no number (see status below). dev = validation "
             "split; test = test split (scored locally only where references are public).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by = {(r["split"], r["method"], r["dataset"], r["metric"]): r for r in rows}
    for split in spec["splits"]:
        for meth in dict.fromkeys(r["method"] for r in rows):
            cells = []
            for d in datasets:
                for m in metrics:
                    r = by[(split, meth, d, m)]
                    diff = "" if r["diff"] is None else f", {r['diff']:+.1f}"
                    cells.append(f"{_fmt(r['ours'])} ({_fmt(r['paper'])}{diff})")
            lines.append(f"| {split} | {spec['method_labels'].get(meth, meth)} | " + " | ".join(cells) + " |")
    lines += ["", "| method | dataset | status | run | evaluation | commit |", "|---|---|---|---|---|---|"]
    seen = set()
    for r in rows:
        k = (r["method"], r["dataset"])
        if k not in seen:
            seen.add(k)
            lines.append(f"| {r['method']} | {r['dataset']} | {r['status']} | {r['run_id']} | {r['evaluation']} "
                         f"| {r['commit'][:12]} |")
    if problems:
        lines += ["", "Problems:", *[f"- {p}" for p in problems]]
    return "\n".join(lines) + "\n"


def render_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["split"])
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def render_latex(spec: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    datasets, metrics = spec["datasets"], spec["metrics"]
    labels = spec.get("metric_labels", {})
    by = {(r["split"], r["method"], r["dataset"], r["metric"]): r for r in rows}
    cols = "ll" + "r" * (len(datasets) * len(metrics))
    out = [r"\begin{tabular}{" + cols + "}", r"\toprule",
           " & & " + " & ".join(rf"\multicolumn{{{len(metrics)}}}{{c}}{{{d}}}" for d in datasets) + r" \\",
           " & Method & " + " & ".join(labels.get(m, m) for _ in datasets for m in metrics) + r" \\", r"\midrule"]
    for split in spec["splits"]:
        for meth in dict.fromkeys(r["method"] for r in rows):
            vals = [_fmt(by[(split, meth, d, m)]["ours"]).replace("–", "--") for d in datasets for m in metrics]
            out.append(f"{split} & {spec['method_labels'].get(meth, meth)} & " + " & ".join(vals) + r" \\")
        out.append(r"\midrule")
    out[-1] = r"\bottomrule"
    out.append(r"\end{tabular}")
    return "\n".join(out) + "\n"


def build_table(spec: dict[str, Any], profile: str, root: Path, out_dir: Path,
                methods: str | list[str] | None = None) -> dict[str, Path]:
    """Write <artifact>.md/.csv/.tex from the results files under ``root``; returns the paths written."""
    cells = expand_grid(spec, profile, methods)
    resolve_run_ids(cells, root)
    got = collect(cells)
    rows = table_rows(spec, cells, got)
    name = spec["artifact"]
    return {
        "md": atomic_write_text(out_dir / f"{name}.md", render_markdown(spec, rows, got.problems)),
        "csv": atomic_write_text(out_dir / f"{name}.csv", render_csv(rows)),
        "tex": atomic_write_text(out_dir / f"{name}.tex", render_latex(spec, rows)),
    }


def build_figure(spec: dict[str, Any], profile: str, root: Path, out_dir: Path,
                 methods: str | list[str] | None = None) -> dict[str, Path]:
    """Write <artifact>.png (one panel per sweep, ours vs the paper's stated points) and its CSV."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = expand_grid(spec, profile)
    resolve_run_ids(cells, root)
    got = collect(cells)
    rows = []
    for c in cells:
        result = got.results.get((c.key, c.method, c.value))
        m = (result or {}).get("splits", {}).get(spec["split"], {})
        paper = (spec.get("paper", {}).get(c.key) or {}).get(c.value)
        rows.append({"sweep": c.key, "key": spec["sweeps"][c.key]["key"], "value": c.value,
                     "ours": _num(m.get(spec["metric"])), "paper": _num(paper),
                     "status": "ok" if _num(m.get(spec["metric"])) is not None else "missing",
                     "run_id": c.run_id, "commit": (result or {}).get("commit", "")})
    fig, axes = plt.subplots(1, len(spec["sweeps"]), figsize=(4.2 * len(spec["sweeps"]), 3.4))
    for ax, (name, sweep) in zip(list(getattr(axes, "flat", [axes])), spec["sweeps"].items()):
        pts = [r for r in rows if r["sweep"] == name]
        ours = [(r["value"], r["ours"]) for r in pts if r["ours"] is not None]
        paper = [(r["value"], r["paper"]) for r in pts if r["paper"] is not None]
        if ours:
            ax.plot(*zip(*ours), "o-", label=f"ours ({profile})")
        if paper:
            ax.plot(*zip(*paper), "s", color="black", fillstyle="none", label="paper (stated in text)")
        ax.set_title(sweep["label"])
        ax.set_xlabel(sweep["key"])
        ax.set_ylabel(spec["metric"])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(spec["title"], fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    name = spec["artifact"]
    return {"png": atomic_write_bytes(out_dir / f"{name}.png", buf.getvalue()),
            "csv": atomic_write_text(out_dir / f"{name}.csv", render_csv(rows))}
