"""An artifact's grid: its spec (``experiments/*.yaml``), the cells it expands to, and where each
cell's results are.

A cell is one run (a method on a dataset column, or one point of a sweep) with the Hydra overrides
that produce it; :func:`resolve_run_ids` composes each cell's config to find its run folder and the
evaluation folder its ``metrics.json`` will be in. The truncation ceiling of fact recall is computed
here from the very data files the cells read. Running cells: :mod:`scaleformer.artifacts.gridrun`;
rendering them: :mod:`scaleformer.artifacts.tables`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from scaleformer.compose import compose_config
from scaleformer.data.ledger_facts import window_answer_ceiling, window_ceiling
from scaleformer.data.sources import SyntheticSource
from scaleformer.model.backbone import load_tokenizer, max_positions, model_config
from scaleformer.resources import conf_dir, experiments_dir, group_options
from scaleformer.runs.context import RunContext, to_config


@dataclass
class Cell:
    """One run of a grid: a method on a dataset column (both splits come from the same run)."""

    key: str  # dataset column, or sweep name
    method: str
    overrides: list[str]
    value: Any = None  # sweep value (figures)
    seed: int | None = None  # one of the spec's seeds (None: the config's)
    available: bool = True
    run_id: str | None = None
    result_dir: Path | None = None  # where the run writes this cell's metrics.json
    run_dir: Path | None = None
    train_from: Cell | None = None  # shared training: the cell whose weights this one evaluates
    skipped: str | None = None  # why the profile runs no such row (its ``skip_rows``): no equivalent at its size
    pretrain_from: Cell | None = None  # the continual-training run whose exported model this cell starts from

    @property
    def checkpoint(self) -> Path | None:
        """The checkpoint a shared-training cell starts from (its source's newest)."""
        src = self.train_from
        return None if src is None or src.run_dir is None else src.run_dir / "checkpoints" / "last.ckpt"

    def identity_overrides(self) -> list[str]:
        """The overrides that name this cell's run: a cell fine-tuning a continually trained model starts from
        that run's export (``backbone.pretrained``, before the last override, the value a multirun sweeps)."""
        src = self.pretrain_from
        if src is None:
            return list(self.overrides)
        if src.run_dir is None:
            raise ValueError(f"{self.method} on {self.key}: its continual-training run is not resolved yet")
        return [*self.overrides[:-1], f"backbone.pretrained={src.run_dir / 'model'}", self.overrides[-1]]

    def run_overrides(self) -> list[str]:
        """The overrides that run this cell; a shared-training cell starts from its source's weights."""
        ov = self.identity_overrides()
        if self.train_from is None:
            return ov
        return [*ov[:-1], f"trainer.ckpt_path={self.checkpoint}", ov[-1]]


def load_spec(path: str | Path) -> dict[str, Any]:
    """An artifact's spec; with ``same_runs_as: <artifact>``, that artifact's grid (rows, profiles, backbones,
    columns) under this one's own keys, so one set of runs serves both (MASFormer's Figure 3 reads Table 1's); the
    other artifact's paper values as ``runs_paper``."""
    with open(path, encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    if spec.get("same_runs_as"):
        parent = load_spec(Path(path).with_name(f"{spec['same_runs_as']}.yaml"))
        own = ("artifact", "title", "kind", "paper", "comparisons", "same_runs_as")
        spec = {**{k: v for k, v in parent.items() if k not in own}, "runs_paper": parent.get("paper", {}), **spec}
    return spec


def check_profile(spec: dict[str, Any], profile: str) -> dict[str, Any]:
    if profile not in spec["profiles"]:
        raise ValueError(f"PROFILE={profile!r}: {spec['artifact']} has profiles {sorted(spec['profiles'])}")
    return spec["profiles"][profile]


def backbone_option(spec: dict[str, Any], profile: str) -> str:
    """The backbone option of a profile (the spec's ``backbone`` map: profile -> conf/backbone option)."""
    check_profile(spec, profile)
    if profile not in spec["backbone"]:
        raise ValueError(f"{spec['artifact']}: no backbone for profile {profile!r} (backbone: {spec['backbone']})")
    return spec["backbone"][profile]


def profile_metrics(spec: dict[str, Any], profile: str) -> list[str]:
    """The spec's metrics plus the profile's ``extra_metrics`` (e.g. fact recall on synthetic data)."""
    base = spec["metrics"] if "metrics" in spec else [spec["metric"]]  # tables list several; figures one
    return [*base, *check_profile(spec, profile).get("extra_metrics", [])]


def seeds(spec: dict[str, Any], profile: str, method: str | None = None) -> list[int | None]:
    """The seeds each cell runs with: the profile's ``method_seeds`` for ``method`` (a few rows trained
    several times, where a whole table's would cost too much), else the profile's ``seeds``, else the
    spec's, else the config's one."""
    prof = check_profile(spec, profile)
    listed = prof.get("method_seeds", {}).get(method) if method is not None else None
    listed = listed or prof.get("seeds", spec.get("seeds"))
    return list(listed) if listed else [None]


def profile_datasets(spec: dict[str, Any], profile: str) -> list[str]:
    """The columns a profile fills: its own ``datasets`` (fewer than the paper's, e.g. one synthetic stand-in), else
    the spec's."""
    return list(check_profile(spec, profile).get("datasets", spec["datasets"]))


def baseline(spec: dict[str, Any]) -> str | None:
    """The row every other method is tested against (the spec's ``baseline``), if it names one."""
    return spec.get("baseline")


def column_label(spec: dict[str, Any], profile: str, key: str) -> str:
    """A column's name: the profile's label for it (a synthetic stand-in names what it is), else the key."""
    return check_profile(spec, profile).get("labels", {}).get(key, key)


def title(spec: dict[str, Any], profile: str) -> str:
    """The artifact's title: the profile's own where it plots other data than the paper's."""
    return str(check_profile(spec, profile).get("title", spec["title"]))


def row_method(spec: dict[str, Any], row: str) -> str:
    """The method option a row runs: the spec's ``rows`` map (a row of one method at one size, e.g. ``block_2048:
    {method: block_attention}`` with the size in the profile's ``method_overrides``), else the row is the option."""
    return str((spec.get("rows") or {}).get(row, {}).get("method", row))


def row_overrides(spec: dict[str, Any], prof: dict[str, Any], row: str) -> list[str]:
    """A row's own settings in a profile: the profile's ``method_overrides`` for it, else for the row it is
    ``like`` (its sizes), then the row's own ``overrides`` (e.g. ``method.placement=top``: an ablation of a row)."""
    spec_row = (spec.get("rows") or {}).get(row, {})
    sizes = prof.get("method_overrides", {})
    return [*sizes.get(row, sizes.get(spec_row.get("like"), [])), *spec_row.get("overrides", [])]


def check_cell_overrides(spec: dict[str, Any], profile: str) -> None:
    """Every row and column a profile's ``cell_overrides`` names is one of the grid's: a typo would drop the
    paper's setting of that cell (its Table 7 learning rate) without a word."""
    table = check_profile(spec, profile).get("cell_overrides") or {}
    rows = [*spec.get("methods", []), *(spec.get("rows") or {})]
    columns = list(spec.get("datasets", []))
    if spec.get("same_runs_as"):  # the profiles are that artifact's: its rows' settings are named there too
        parent = load_spec(experiments_dir() / f"{spec['same_runs_as']}.yaml")
        rows += [*parent.get("methods", []), *(parent.get("rows") or {})]
        columns += [c for c in parent.get("datasets", []) if c not in columns]
    where = f"{spec['artifact']}: profiles.{profile}.cell_overrides"
    if not isinstance(table, dict):
        raise ValueError(f"{where}: must map rows to {{column: [overrides]}}")
    for row, cols in table.items():
        if row not in rows:
            raise ValueError(f"{where}.{row}: no such row; the rows are {', '.join(dict.fromkeys(rows))}")
        if not isinstance(cols, dict):
            raise ValueError(f"{where}.{row}: must map columns to lists of overrides")
        for col, given in cols.items():
            if col not in columns:
                raise ValueError(f"{where}.{row}.{col}: no such column; the columns are {', '.join(columns)}")
            if not isinstance(given, list) or not all(isinstance(o, str) for o in given):
                raise ValueError(f"{where}.{row}.{col}: must be a list of overrides (key=value)")


def cell_overrides(spec: dict[str, Any], prof: dict[str, Any], row: str, column: str) -> list[str]:
    """One cell's own settings (the profile's ``cell_overrides: {row: {column: [...]}}``, else the ``like`` row's):
    what a paper chose per method and data set, e.g. MASFormer's fine-tuning learning rates (its Table 7)."""
    table = prof.get("cell_overrides", {})
    like = (spec.get("rows") or {}).get(row, {}).get("like")
    return list(table.get(row, table.get(like, {})).get(column, []))


def method_available(option: str) -> bool:
    """A grid's method is runnable when conf/method/<option>.yaml exists (it names a registered method)."""
    return (conf_dir() / "method" / f"{option}.yaml").exists()


def method_options() -> list[str]:
    """Every method option the configs offer (each backed by a registered method)."""
    return group_options("method")


def select_methods(spec: dict[str, Any], methods: str | list[str] | None) -> list[str]:
    """The grid's rows: the spec's (None), those plus every other method option ("all"), or a list."""
    if methods is None:
        return list(spec["methods"])
    if methods == "all":
        return [*spec["methods"], *(m for m in method_options() if m not in spec["methods"])]
    chosen = methods.split(",") if isinstance(methods, str) else list(methods)
    unknown = [m for m in chosen if m not in spec["methods"] and not method_available(m)]
    if unknown:
        raise ValueError(f"METHODS={','.join(chosen)}: no conf/method/ option {', '.join(unknown)}; "
                         f"available: {', '.join(method_options())}")
    return chosen


def expand_grid(spec: dict[str, Any], profile: str, methods: str | list[str] | None = None) -> list[Cell]:
    """Every run the artifact needs, with the Hydra overrides that produce it.

    With ``share_training: <column>`` the profile's columns differ only in their evaluation data:
    each method trains once, on that column, and the other columns' cells evaluate those weights
    (``train_from``; they resume from its checkpoint with nothing left to train).
    """
    prof = check_profile(spec, profile)
    base = profile_base(spec, profile)
    cells = []
    if "sweeps" in spec:
        data = [f"data={prof['data']}", *prof.get("data_overrides", [])]
        for name, sweep in spec["sweeps"].items():
            for v in prof.get("values", {}).get(name, sweep["values"]):
                for seed in seeds(spec, profile):  # the sweep's value stays the last override (multiruns sweep it)
                    cells.append(Cell(name, spec["method"], [*base, *data, f"method={spec['method']}",
                                                             *([f"seed={seed}"] if seed is not None else []),
                                                             f"{sweep['key']}={v}"], value=v, seed=seed))
        return cells
    check_cell_overrides(spec, profile)
    shared = prof.get("share_training")
    if shared is not None and shared not in spec["datasets"]:
        raise ValueError(f"profiles.{profile}.share_training={shared!r}: not one of the columns {spec['datasets']}")
    for ds in profile_datasets(spec, profile):
        data = column_overrides(prof, profile, ds)
        rows = select_methods(spec, methods)
        for seed in dict.fromkeys(s for m in rows for s in seeds(spec, profile, m)):
            for m in (m for m in rows if seed in seeds(spec, profile, m)):
                # A method's own settings go before its group choice, which stays last (multiruns sweep it);
                # Hydra applies value overrides after the group choices whatever their order.
                own = [*([f"seed={seed}"] if seed is not None else []), *row_overrides(spec, prof, m),
                       *cell_overrides(spec, prof, m, ds)]
                option, skipped = row_method(spec, m), (prof.get("skip_rows") or {}).get(m)
                cells.append(Cell(ds, m, [*base, *data, *own, f"method={option}"],
                                  available=method_available(option) and not skipped, seed=seed, skipped=skipped))
    if shared is not None:
        source = {(c.method, c.seed): c for c in cells if c.key == shared}
        for c in cells:
            if c.key != shared:
                c.train_from = source[(c.method, c.seed)]
    stage: dict[tuple[str, int | None], Cell] = {}
    for c in cells:
        cont = row_continual(spec, profile, c.method)
        if cont and c.available and c.train_from is None:  # a shared cell reads its source's weights
            key = (c.method, c.seed)
            c.pretrain_from = stage.setdefault(key, continual_cell(spec, prof, cont, c.method, c.seed))
    return cells


def row_continual(spec: dict[str, Any], profile: str, row: str) -> dict[str, Any] | None:
    """The continual training a row's runs start from: the row's own ``continual`` for this profile where the row
    has one (``{}``: none, e.g. a "without continual training" row), else the profile's ``continual``."""
    spec_row = (spec.get("rows") or {}).get(row, {})
    if "continual" in spec_row:
        return (spec_row["continual"] or {}).get(profile)
    return check_profile(spec, profile).get("continual")


def profile_base(spec: dict[str, Any], profile: str) -> list[str]:
    """The overrides every cell of a profile starts with: its backbone, tag and own overrides (a rehearsal's
    SCROLLS mirror too)."""
    prof = check_profile(spec, profile)
    base = [f"backbone={backbone_option(spec, profile)}", f"tag={spec['artifact']}-{profile}", *prof["overrides"]]
    if prof.get("mirrors"):  # a rehearsal: the real data options read local mirrors (scaleformer.data.mirrors)
        base.append(f"data.files_base={mirror_root(profile)}/scrolls")
    return base


def column_overrides(prof: dict[str, Any], profile: str, ds: str) -> list[str]:
    """A column's data option and its own overrides (a rehearsal: the local mirror it reads)."""
    data = [f"data={prof['data'][ds]}", *prof.get("data_overrides", {}).get(ds, [])]
    mirror = prof.get("mirrors")
    if mirror and prof["data"][ds] in mirror.get("hub", {}):
        data.append(f"data.hub_id={mirror_root(profile)}/{mirror['hub'][prof['data'][ds]]}")
    return data


def continual_cell(spec: dict[str, Any], prof: dict[str, Any], cont: dict[str, str], row: str,
                   seed: int | None) -> Cell:
    """The continual training a row's fine-tuning starts from (a profile's ``continual: {artifact, profile,
    column}``, MASFormer's chain: "we obtain the continually trained models for each method and fine-tune
    them", Appendix B): that artifact's profile's run of that column, with this row's method and sizes. Where
    the row is one of that artifact's rows at the same sizes, the overrides, hence the run, are its own:
    trained once for both tables. The stage's own ``overrides`` come last (e.g. a shorter continual training)."""
    other, oprof = continual_source(spec, cont)
    own = [*([f"seed={seed}"] if seed is not None else []), *row_overrides(spec, prof, row), *cont.get("overrides", [])]
    return Cell("continual", row, [*profile_base(other, cont["profile"]),
                                   *column_overrides(oprof, cont["profile"], cont["column"]), *own,
                                   f"method={row_method(spec, row)}"], seed=seed)


def continual_source(spec: dict[str, Any], cont: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The spec and profile a ``continual: {artifact, profile, column}`` entry names, each checked: one line
    naming the entry and what exists (a typo was a FileNotFoundError or a KeyError)."""
    where = f"{spec['artifact']}: continual={cont!r}"
    if not isinstance(cont, dict) or not all(isinstance(cont.get(k), str) for k in ("artifact", "profile", "column")):
        raise ValueError(f"{where}: must name an artifact, a profile and a column")
    path = experiments_dir() / f"{cont['artifact']}.yaml"
    if not path.is_file() or "/" in cont["artifact"]:
        have = sorted(p.stem for p in experiments_dir().glob("*.yaml"))
        raise ValueError(f"{where}: no artifact {cont['artifact']!r}; the artifacts are {', '.join(have)}")
    other = load_spec(path)
    if cont["profile"] not in other["profiles"]:
        raise ValueError(f"{where}: {cont['artifact']} has no profile {cont['profile']!r}; its profiles are "
                         f"{', '.join(sorted(other['profiles']))}")
    oprof = other["profiles"][cont["profile"]]
    columns = list(oprof.get("data") or {})
    if cont["column"] not in columns:
        raise ValueError(f"{where}: {cont['artifact']}'s {cont['profile']} profile has no column "
                         f"{cont['column']!r}; its columns are {', '.join(columns)}")
    return other, oprof


def continual_stage(cells: list[Cell]) -> list[Cell]:
    """The continual-training runs ``cells`` start from, each once."""
    return list({id(c.pretrain_from): c.pretrain_from for c in cells if c.pretrain_from is not None}.values())


def mirror_root(profile: str) -> str:
    """Where a rehearsal profile's mirrors are (``${paths.cache}``: resolved as each run composes it)."""
    return "${paths.cache}/mirrors/" + profile


def resolve_run_ids(cells: list[Cell], root: Path | None = None) -> None:
    """Fill each available cell's run id and results folder from its composed config (the continual-training
    runs cells start from first: their folders are in those cells' overrides)."""
    for c in [*continual_stage(cells), *cells]:
        if c.available:
            overrides = [*c.identity_overrides(), *([f"paths.root={root}"] if root else [])]
            ctx = RunContext.create(to_config(compose_config(overrides)))
            c.run_id, c.result_dir, c.run_dir = ctx.run_id, ctx.expected_eval_dir, ctx.run_dir


def truncation_ceilings(spec: dict[str, Any], profile: str, cells: list[Cell],
                        root: Path | None = None) -> dict[tuple[str, str], float]:
    """(split label, column) -> the share (x100) of the evaluated ledgers' events (QA ledgers: of their
    answers) inside the first window truncation keeps, from the very files the runs read; synthetic
    columns only."""
    out: dict[tuple[str, str], float] = {}
    for key in dict.fromkeys(c.key for c in cells):
        cell = next(c for c in cells if c.key == key)
        rc = to_config(compose_config([*cell.overrides, *([f"paths.root={root}"] if root else [])]))
        if rc.data.source != "synthetic":
            continue
        tok = load_tokenizer(rc.backbone)
        window = max_positions(rc.backbone, model_config(rc.backbone, tok))
        source = SyntheticSource(rc.data)
        for label, split in spec["splits"].items():
            if split not in rc.trainer.eval_splits or not rc.data.synthetic_docs.get(split):
                continue
            docs: dict[str, dict[str, str]] = {}
            for line in source.file(split).read_text(encoding="utf-8").splitlines():
                row = json.loads(line)
                docs.setdefault(row["id"], row)
            rows = list(docs.values())[: rc.data.max_eval_examples or None]
            if rc.data.synthetic_task == "qa":  # the answers inside the window, after the query
                out[(label, key)] = window_answer_ceiling(rows, tok, window)
            else:
                out[(label, key)] = window_ceiling([r["input"] for r in rows], tok, window)["fact_ceiling"]
    return out
