"""The data layer's errors, and the one message every source gives for a missing field."""

from __future__ import annotations

from collections.abc import Sequence

from scaleformer.config import DataConfig
from scaleformer.errors import UserError
from scaleformer.model.hub import HubUnreachableError


class DataError(UserError, ValueError):
    """Bad data or an unusable source; the message names the file/dataset, line and field."""


class HubUnavailableError(DataError, HubUnreachableError):
    """The Hugging Face hub (or a data_files host) cannot be reached."""


def required_fields(cfg: DataConfig) -> list[str]:
    """The fields every row must have: input, target, and the id/prefix fields when configured. A language-model
    source (``data.task_metric=perplexity``) has no reference: its text is enough."""
    target = [] if cfg.task_metric == "perplexity" else [cfg.target_field]
    return list(dict.fromkeys([cfg.input_field, *target] + [f for f in (cfg.id_field, cfg.prefix_field) if f]))


def missing_field(where: str, field: str, has: Sequence[str], cfg: DataConfig) -> DataError:
    """`where: missing field 'x'; it has fields [...]`, plus which data.* key to set."""
    hint = ""
    for key in ("input_field", "target_field", "id_field", "prefix_field"):
        if getattr(cfg, key) == field:
            extra = " (or null to use row numbers as ids)" if key == "id_field" else ""
            extra = " (or null for none)" if key == "prefix_field" else extra
            hint = f". Set data.{key}=<field>{extra}"
            break
    return DataError(f"{where}: missing field {field!r}; it has fields {sorted(has)}{hint}")


def check_fields(where: str, has: Sequence[str], cfg: DataConfig) -> None:
    """Raise for the first required field not in `has` (a header, schema or row's keys)."""
    for f in required_fields(cfg):
        if f not in has:
            raise missing_field(where, f, has, cfg)
