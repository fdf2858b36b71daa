"""How the model class loads an export: config.json, scaleformer.json and the weights checked as one record.

Its own module so :mod:`scaleformer.model.hf` holds the class alone. ``from_pretrained`` calls
:func:`check_record` (config.json's method against scaleformer.json's) and :func:`check_weights` (the weights
fill the model config.json describes, exactly), each refusing in one line.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scaleformer.errors import ConfigError
from scaleformer.model.hf_config import CONFIG_FILE, ScaleformerConfig

# The export's method record (scaleformer.export.folder.META_FILE), read here only to compare methods.
RECORD_FILE = "scaleformer.json"


@contextlib.contextmanager
def quiet_loading(quiet: bool) -> Iterator[None]:
    """transformers' warnings held back (errors still shown) while ``quiet``, restored after."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    if quiet and before < hf_logging.ERROR:
        hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


def local_folder(path: Any, subfolder: str | None) -> Path | None:
    """The folder ``from_pretrained`` reads, when it is one on disk (a Hub id: None)."""
    if not isinstance(path, str | os.PathLike):
        return None
    folder = Path(path) / (subfolder or "")
    return folder if folder.is_dir() else None


def weights_name(path: Any, folder: Path | None) -> str:
    """What messages call the weights: the file in a local folder, else the id they came from."""
    for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"):
        if folder is not None and (folder / name).is_file():
            return str(folder / name)
    return f"the weights of {path}"


def unreadable_weights(folder: Path, e: BaseException) -> str:
    """One line for an export whose weights cannot be read: missing, cut short or not safetensors."""
    weights = folder / "model.safetensors"
    if not weights.is_file():
        return (f"{folder}: has no model.safetensors (the export's weights); export or copy the model again "
                f"(only safetensors are read)")
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return (f"{weights}: its weights cannot be read ({first[:160]}); the file is damaged or incomplete: export or "
            "copy the model again")


def check_model_type(folder: Path | None) -> None:
    """A local folder's config.json is a scaleformer model's, or one line says what it is instead (a plain
    backbone's folder would otherwise fail deep in building the config from another family's fields)."""
    found = _record(folder, CONFIG_FILE).get("model_type")
    if isinstance(found, str) and found != ScaleformerConfig.model_type:
        raise ConfigError(f"{CONFIG_FILE}: model_type={found!r}: {folder} holds a plain {found} model, not a "
                          "scaleformer export; load it with AutoModelForSeq2SeqLM and give it a method with "
                          "scaleformer.wrap(model, method=...)")


def _record(folder: Path | None, name: str = RECORD_FILE) -> dict[str, Any]:
    """The folder's ``name`` (scaleformer.json) when it has a readable one, else {} (the Summarizer reads it
    first and names what is wrong with it; a model saved with save_pretrained has none)."""
    f = None if folder is None else folder / name
    if f is None or not f.is_file():
        return {}
    try:
        record = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def recorded_family(folder: Path | None) -> str | None:
    backbone = _record(folder).get("backbone")
    family = backbone.get("model_type") if isinstance(backbone, dict) else None
    return family if isinstance(family, str) else None


def check_record(config: ScaleformerConfig, folder: Path | None) -> None:
    """config.json's method (what loads and runs) and scaleformer.json's (the record of how the model was
    trained and scored) are one method, or one line names their first difference. Runtime settings
    (``RUNTIME_KEYS``: batching, recomputation), which a run may decide after the model is built, may differ."""
    method = _record(folder).get("method")
    recorded = method.get("config") if isinstance(method, dict) else None
    if not isinstance(recorded, dict) or not isinstance(config.method, dict):
        return
    diff = method_difference(config.method, recorded)
    if diff is not None:
        raise ConfigError(f"{CONFIG_FILE} and {RECORD_FILE} disagree on the method: {diff}; {CONFIG_FILE} is what "
                          f"loads and {RECORD_FILE} says what was trained and scored: export the model again (or "
                          "make the two agree)")


def method_difference(loaded: dict[str, Any], recorded: dict[str, Any]) -> str | None:
    """The first setting (the name first) whose value differs, as ``method.<key> is <a> in config.json, <b>
    in scaleformer.json``; None when they agree on every setting but the runtime ones."""
    # deferred: the methods import ops, which the Auto registration can find half-built (scaleformer.model.hf)
    from scaleformer.methods import REGISTRY

    def shown(d: dict[str, Any], key: str) -> str:
        return repr(d[key]) if key in d else "absent"

    name = loaded.get("name")
    if name != recorded.get("name"):  # two methods: their other settings need not be compared
        return f"method.name is {shown(loaded, 'name')} in {CONFIG_FILE}, {shown(recorded, 'name')} in {RECORD_FILE}"
    runtime = set(getattr(getattr(REGISTRY.get(name), "Config", None), "RUNTIME_KEYS", ()))
    keys = sorted((set(loaded) | set(recorded)) - runtime)
    differ = [k for k in keys if (k in loaded, loaded.get(k)) != (k in recorded, recorded.get(k))]
    if not differ:
        return None
    more = f" (and {len(differ) - 1} more)" if len(differ) > 1 else ""
    return (f"method.{differ[0]} is {shown(loaded, differ[0])} in {CONFIG_FILE}, {shown(recorded, differ[0])} in "
            f"{RECORD_FILE}{more}")


def check_weights(config: ScaleformerConfig, info: dict[str, Any], weights: str, recorded_family: str | None,
                  strict_shapes: bool = True) -> None:
    """The weights fill the model config.json describes, exactly: what transformers would otherwise
    initialise at random and name only in its loading report is refused in one line."""
    missing = sorted(info.get("missing_keys") or [])
    unexpected = sorted(info.get("unexpected_keys") or [])
    mismatched = sorted(info.get("mismatched_keys") or []) if strict_shapes else []
    family = getattr(config.backbone, "model_type", None)
    if missing and unexpected:  # another architecture's names: the backbone config is another family's
        noted = f"; {RECORD_FILE} records a {recorded_family!r} backbone" \
            if recorded_family and recorded_family != family else ""
        raise ConfigError(f"{CONFIG_FILE}: backbone.model_type={family!r} does not fit {weights}: {len(missing)} of "
                          f"its weights are not there (e.g. {missing[0]}) and {len(unexpected)} there have no place "
                          f"in it (e.g. {unexpected[0]}){noted}; the config does not belong to these weights")
    if missing:
        raise ConfigError(f"{weights}: {len(missing)} weights missing (e.g. {missing[0]}); the export is incomplete: "
                          "export or download it again")
    if unexpected:
        name = config.method.get("name") if isinstance(config.method, dict) else None
        raise ConfigError(f"{weights}: {len(unexpected)} weights have no place in the model {CONFIG_FILE} describes "
                          f"(e.g. {unexpected[0]}; its method is {name!r}): the config does not belong to these "
                          "weights")
    if mismatched:
        key, *shapes = mismatched[0] if isinstance(mismatched[0], tuple) else (mismatched[0],)
        sizes = f": {list(shapes[0])} there, {list(shapes[1])} in the config" if len(shapes) == 2 else ""
        raise ConfigError(f"{weights}: {len(mismatched)} weights have other shapes than {CONFIG_FILE}'s backbone "
                          f"gives them (e.g. {key}{sizes}); the config does not belong to these weights")

