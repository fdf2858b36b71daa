"""Where rows come from: a local file or folder, the bundled synthetic set, or the Hugging Face hub.

Each source has a cheap :meth:`Source.check` that fails in seconds (files exist, header fields
present, hub reachable) and :meth:`Source.rows`, the raw rows of one role; turning rows into
examples is the same for every source (:func:`scaleformer.data.examples.to_rows`).

Hub failures are fast: offline (``HF_HUB_OFFLINE=1``) or with the hub unreachable (a 3 s connection
probe), a hub load stops at once with a message saying how to use a local copy, instead of
`datasets`' retry loop (about 25 s).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scaleformer.config import DataConfig
from scaleformer.data import synthetic
from scaleformer.data.errors import DataError, HubUnavailableError, check_fields, required_fields
from scaleformer.data.examples import RawSplit
from scaleformer.data.files import EXTENSIONS, file_records, header_fields
from scaleformer.errors import redact
from scaleformer.model.hub import offline_mode as hub_offline
from scaleformer.model.hub import unreachable_reason

log = logging.getLogger(__name__)

ROLES = ("train", "validation", "test")
_ROWS_BATCH = 1000  # hub rows are read this many at a time


def configured_roles(cfg: DataConfig) -> list[str]:
    """The roles whose split name is not null."""
    return [r for r in ROLES if getattr(cfg.splits, r) is not None]


def check_size(cfg: DataConfig, role: str, stats: dict[str, Any]) -> None:
    """A split read whole whose documents (distinct ids) differ from ``data.expected_docs``: logged, and the
    summary records both (``expected_docs``), so a table built on another release of the data says so."""
    want = cfg.expected_docs.get(role)
    capped = (cfg.max_train_examples if role == "train" else cfg.max_eval_examples) is not None
    if want is None or capped:
        return
    stats["expected_docs"] = want
    if stats["n_ids"] != want:
        log.warning("data=%s split %r: %d documents where the release it stands for has %d (data.expected_docs): "
                    "its scores are not on the same documents", cfg.name, role, stats["n_ids"], want)


def split_name(cfg: DataConfig, role: str) -> str:
    """The role's split name in the source; a clear error for an unknown or unconfigured role."""
    if role not in ROLES:
        raise ValueError(f"unknown split {role!r}; expected one of {', '.join(ROLES)}")
    name = getattr(cfg.splits, role)
    if name is None:
        raise DataError(f"data.splits.{role} is null: the {role} split is not configured for data={cfg.name}")
    return name


class Source(ABC):
    """One data source, addressed by role ("train", "validation", "test")."""

    def __init__(self, cfg: DataConfig) -> None:
        self.cfg = cfg
        self.roles = configured_roles(cfg)

    @abstractmethod
    def check(self) -> None:
        """Cheap pre-flight for every configured role: raise DataError before any heavy work."""

    @abstractmethod
    def rows(self, role: str) -> RawSplit:
        """The raw rows of one role (validated as they are read)."""

    @abstractmethod
    def identity(self, role: str) -> dict[str, Any]:
        """What names this role's data for the tokenization cache (changes when the data may have)."""


class LocalSource(Source):
    """`data.path`: a folder with one <split>.jsonl/.json/.parquet/.csv per role, or one file for all."""

    def __init__(self, cfg: DataConfig) -> None:
        super().__init__(cfg)
        self._warned_single_file = False

    def file(self, role: str) -> Path:
        """The file holding `role`; a clear error naming the folder's contents when there is none."""
        path = Path(self.cfg.path).expanduser()
        if path.is_file():
            if "train" in self.roles and len(self.roles) > 1 and not self._warned_single_file:
                self._warned_single_file = True
                log.warning("data.path=%s is one file: it serves every configured split (%s), so evaluation "
                            "sees the training examples; use a folder with one file per split, or set the "
                            "unused data.splits.* to null", path, ", ".join(self.roles))
            return path
        if path.is_dir():
            name = split_name(self.cfg, role)
            for ext in EXTENSIONS:
                if (path / f"{name}.{ext}").is_file():
                    return path / f"{name}.{ext}"
            have = sorted(p.name for p in path.iterdir())
            raise DataError(f"data.path={path}: no {name}.jsonl/.json/.parquet/.csv for the {role} split "
                            f"(the folder has {have}); add it, or set data.splits.{role}=null to skip it")
        if path.exists():  # a FIFO, a device (/dev/zero), a socket: never read (it may block or never end)
            raise DataError(f"data.path={path}: not a regular file or folder ({_kind(path)}); point data.path at "
                            "a .jsonl/.json/.parquet/.csv file or a folder of them")
        raise DataError(f"data.path={path}: no such file or directory")

    def check(self) -> None:
        for role in self.roles:
            path = self.file(role)
            fields = header_fields(path)
            if fields:  # a .json file needs a full parse: rows() checks it
                check_fields(str(path), fields, self.cfg)

    def rows(self, role: str) -> RawSplit:
        path = self.file(role)
        return RawSplit(str(path), path.stem, file_records(path, self.cfg))

    def identity(self, role: str) -> dict[str, Any]:
        """The file's path and a hash of its bytes: a file replaced by another of the same size and
        modification time (``cp -p``, ``rsync -a``) is a new entry, never a stale one."""
        path = self.file(role).resolve()
        return {"path": str(path), "size": path.stat().st_size, "sha256": content_hash(path)}


class SyntheticSource(LocalSource):
    """The bundled synthetic ledgers, generated once into `data.cache_dir` and then read as jsonl files."""

    def __init__(self, cfg: DataConfig) -> None:
        super().__init__(cfg)
        self._paths: dict[str, Path] | None = None

    def file(self, role: str) -> Path:
        """The generated `<role>.jsonl`; the first call generates the set (or finds it already there)."""
        if self._paths is None:
            t0 = time.perf_counter()
            docs = {r: int(self.cfg.synthetic_docs.get(r, 0)) for r in ROLES}
            self._paths = synthetic.generate(Path(self.cfg.cache_dir), docs, self.cfg.synthetic_words,
                                             split_words=dict(self.cfg.synthetic_split_words),
                                             split_seeds=dict(self.cfg.synthetic_split_seeds),
                                             spread=float(self.cfg.synthetic_words_spread),
                                             n_events=tuple(self.cfg.synthetic_events),
                                             task=self.cfg.synthetic_task)
            log.debug("synthetic data ready in %.2fs", time.perf_counter() - t0)
        return self._paths[role]


def content_hash(path: Path, block: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes, streamed (any size, constant memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


def _kind(path: Path) -> str:
    mode = path.stat().st_mode
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


# ---- the hub -------------------------------------------------------------------------------------


def _libraries_offline() -> bool:
    """Whether `datasets` and `huggingface_hub` themselves will stay off the network (read at import)."""
    import datasets.config as dc
    import huggingface_hub.constants as hc

    return bool(dc.HF_HUB_OFFLINE) and bool(hc.HF_HUB_OFFLINE)


def _flat_strings(x: Any) -> list[str]:
    if isinstance(x, str):
        return [x]
    if isinstance(x, dict):
        return [s for v in x.values() for s in _flat_strings(v)]
    if isinstance(x, (list, tuple)):
        return [s for v in x for s in _flat_strings(v)]
    return []


# A file inside a hub dataset repository: <endpoint>/datasets/<org>/<name>/resolve/<revision>/<path>.
_HUB_FILE = re.compile(r"^https?://[^/]+/datasets/([^/]+/[^/]+)/resolve/")


def _builders() -> set[str]:
    """datasets' generic loaders (json, csv, parquet, ...): a hub_id naming one reads ``data_files``."""
    try:
        from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES as builders
    except ImportError:  # private name; the common builders suffice as a fallback
        return {"json", "csv", "parquet", "text", "arrow", "pandas"}
    return set(builders)


def _records(split: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Rows of a `datasets.Dataset`, read in column batches (row-by-row access is slow)."""
    i = 0
    for batch in split.iter(batch_size=_ROWS_BATCH):
        for values in zip(*batch.values()):
            yield f"row {i}", dict(zip(batch, values))
            i += 1


class HubSource(Source):
    """`data.hub_id` (+ config, revision, data_files) through `datasets.load_dataset`."""

    def __init__(self, cfg: DataConfig) -> None:
        super().__init__(cfg)
        self._reachable = False
        self._dataset: Any = None
        self._files: str | None = local_fingerprint(cfg.hub_id)  # once: identity (each role) and the load read it

    def describe(self) -> str:
        """What the user asked for, by its name: ``data=govreport: hub dataset 'tau/scrolls' (file
        gov_report.zip)``, not the generic loader (``json``) that reads those files."""
        c = self.cfg
        files = list(dict.fromkeys(u.split("::")[-1] for u in _flat_strings(c.data_files or {})))
        if c.hub_id in _builders() and files:
            repos = {m.group(1) if (m := _HUB_FILE.match(u)) else None for u in files}
            if len(repos) == 1 and None not in repos:  # all inside one hub dataset repository
                names = list(dict.fromkeys(u.rsplit("/", 1)[-1] for u in files))
                what = f"hub dataset {repos.pop()!r} ({'file' if len(names) == 1 else 'files'} {', '.join(names)})"
            else:
                what = f"{c.hub_id} files {', '.join(files)}"
        else:
            kind = "local dataset folder" if Path(c.hub_id).expanduser().exists() else "hub dataset"
            what = " ".join([f"{kind} {c.hub_id!r}"] + [f"{k}={v!r}" for k, v in (
                ("config", c.hub_config), ("revision", c.revision)) if v is not None])
            urls = [u for u in files if "://" in u]
            if urls:
                what += f" on {', '.join(urls)}"
        return redact(f"data={c.name}: {what}")

    def _urls(self) -> list[str]:
        urls = [u for u in _flat_strings(self.cfg.data_files or {}) if "://" in u and _local_member(u) is None]
        if self.cfg.hub_id not in _builders() and not Path(self.cfg.hub_id).exists():
            import huggingface_hub.constants as hc

            urls.append(hc.ENDPOINT)
        return urls

    def _error(self, reason: str) -> HubUnavailableError:
        c = self.cfg
        fields = ", ".join(f for f in (c.input_field, c.target_field, c.id_field) if f)
        names = "/".join(f"{getattr(c.splits, r)}.jsonl" for r in self.roles)
        return HubUnavailableError(
            f"cannot load {self.describe()}: the Hugging Face hub cannot be reached ({reason}). "
            f"To use a local copy instead: data.source=local data.path=/path/to/folder (holding {names}, "
            f"or .json/.parquet/.csv, with fields {fields}) or data.path=/path/to/file. If the dataset is "
            "already in your datasets cache, set HF_HUB_OFFLINE=1 to read it from there."
        )

    def check(self) -> None:
        """Probe the hub (or the data_files hosts); offline, leave it to the load: cached data may load."""
        urls = self._urls()
        if self._reachable or hub_offline() or not urls:  # no URL: every file is local (a mirror)
            return
        reason = unreachable_reason(urls)
        if reason:
            raise self._error(reason)
        self._reachable = True

    def _load(self) -> Any:
        if self._dataset is not None:
            return self._dataset
        import datasets

        c = self.cfg
        if hub_offline() and not _libraries_offline():
            # Offline was requested after `datasets` was imported: it would still try the network.
            raise self._error("offline mode is enabled (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)")
        self.check()
        data_files = _extract_local(json.loads(json.dumps(c.data_files)), Path(c.cache_dir)) if c.data_files else None
        folder = self._files
        # a local folder's arrow cache keyed by its files: datasets keys a folder whose card declares `configs` by
        # the card alone, so rewritten files would load stale (huggingface/datasets#2956, #6465)
        where = {"cache_dir": str(Path(c.cache_dir) / "local_datasets" / folder)} if folder else {}
        t0 = time.perf_counter()
        try:
            ds = datasets.load_dataset(c.hub_id, c.hub_config, revision=c.revision, data_files=data_files, **where)
        except Exception as e:
            msg = "; ".join(f"{type(x).__name__}: {str(x).splitlines()[0] if str(x) else ''}"
                            for x in dict.fromkeys(x for x in (e, e.__cause__) if x is not None))
            network = isinstance(e, (ConnectionError, TimeoutError)) or any(
                w in type(e).__name__ for w in ("Connect", "Timeout", "Offline")) or "reach" in str(e).lower()
            local = not self._urls() and (Path(c.hub_id).expanduser().exists() or c.hub_id in _builders())
            if (hub_offline() or network) and not local:  # local files (a mirror) fail for what is in them
                raise self._error(msg) from None
            raise DataError(f"cannot load {self.describe()}: {msg}") from e
        log.info("loaded %s in %.1fs", self.describe(), time.perf_counter() - t0)
        self._dataset = ds
        return ds

    def rows(self, role: str) -> RawSplit:
        name = split_name(self.cfg, role)
        ds = self._load()
        if name not in ds:
            raise DataError(f"{self.describe()}: no split {name!r} (it has {sorted(ds)}); "
                            f"set data.splits.{role}=<name> or null to skip it")
        split = ds[name]
        where = f"{self.describe()} split {name!r}"
        check_fields(where, split.column_names, self.cfg)
        return RawSplit(where, name, _records(split.select_columns(required_fields(self.cfg))))

    def identity(self, role: str) -> dict[str, Any]:
        c, folder = self.cfg, self._files
        return {"hub_id": c.hub_id, "config": c.hub_config, "revision": c.revision,
                "data_files": json.loads(json.dumps(c.data_files, sort_keys=True, default=str)),
                **({"files": folder} if folder else {})}  # a local folder: its contents, not only its path


def local_fingerprint(hub_id: str) -> str | None:
    """A digest of (relative path, size, modification time) of every file under a local dataset folder (None for a
    hub id): changes when a file does, without reading gigabytes."""
    root = Path(hub_id).expanduser()
    if not root.is_dir():
        return None
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and ".cache" not in p.relative_to(root).parts:
            st = p.stat()
            h.update(f"{p.relative_to(root).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:20]


# A file inside a local archive, as fsspec chains it: zip://<member>::<path of the .zip>.
_CHAINED = re.compile(r"^zip://(?P<member>[^:]+)::(?P<archive>.+)$")


def _local_member(url: str) -> tuple[str, Path] | None:
    """(member, archive) of a ``zip://<member>::<archive>`` whose archive is a local file (a mirror of a hub
    dataset's zips), else None."""
    m = _CHAINED.match(url)
    if m is None or "://" in m["archive"]:
        return None
    return m["member"], Path(m["archive"]).expanduser()


def _extract_local(files: Any, cache: Path) -> Any:
    """``data_files`` with each member of a local archive extracted (once, keyed by the archive's bytes) and
    named by its path: `datasets` treats a chained URL as remote and refuses it offline, so a local mirror of
    SCROLLS' zips would need the network it stands in for. Hub URLs pass through unchanged."""
    if isinstance(files, dict):
        return {k: _extract_local(v, cache) for k, v in files.items()}
    if isinstance(files, list):
        return [_extract_local(v, cache) for v in files]
    local = _local_member(files) if isinstance(files, str) else None
    if local is None:
        return files
    member, archive = local
    if not archive.is_file():
        raise DataError(f"{archive}: no such archive (data_files {files!r})")
    import zipfile

    out = cache / "archives" / content_hash(archive)[:20] / member
    if not out.is_file():
        try:
            with zipfile.ZipFile(archive) as z:
                if member not in z.namelist():
                    raise DataError(f"{archive}: no member {member!r} (it holds {sorted(z.namelist())[:8]})")
                out.parent.mkdir(parents=True, exist_ok=True)
                tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
                with z.open(member) as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                tmp.replace(out)
        except zipfile.BadZipFile as e:
            raise DataError(f"{archive}: not a zip archive ({e})") from None
    return str(out)


def make_source(cfg: DataConfig) -> Source:
    """The source `data.source` names."""
    kinds: dict[str, type[Source]] = {"synthetic": SyntheticSource, "local": LocalSource, "hub": HubSource}
    return kinds[cfg.source](cfg)
