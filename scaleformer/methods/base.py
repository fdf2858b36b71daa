"""The one interface every long-context method implements.

A method turns a batch of long inputs (token ids + mask, document-level special tokens already
added) and the backbone's encoder into the (hidden states, mask) the decoder cross-attends to. The
same call serves teacher-forced training (gradients flow) and generation. Subclassing registers the
method under its ``name``; its ``Config`` dataclass validates the ``method`` config group.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np
import torch
from omegaconf import MISSING

from scaleformer.errors import ConfigError
from scaleformer.ops import patches
from scaleformer.registry import claim

if TYPE_CHECKING:  # methods read a spec, model/ builds it (scaleformer.model.spec)
    from scaleformer.model.spec import BackboneSpec

REGISTRY: dict[str, type[Method]] = {}


@dataclass
class MethodConfig:
    name: str = MISSING
    # Keys that change only evaluation, not training (they join the evaluation identity).
    EVAL_KEYS: ClassVar[tuple[str, ...]] = ()
    # Keys that change neither the numbers nor the results (e.g. micro-batch sizes): in no identity.
    RUNTIME_KEYS: ClassVar[tuple[str, ...]] = ()


class Encoded(NamedTuple):
    hidden: torch.Tensor  # [batch, T, d] what the decoder cross-attends to
    mask: torch.Tensor  # [batch, T] 1 for real positions, 0 for padding


# The share of a window the document must keep beside a query prefix: below it the query crowds the
# document out (a 5,490-token query in a 1,024-token window leaves nothing to read).
MIN_DOCUMENT_SHARE = 0.25


def document_need(window: int) -> int:
    """Tokens of ``window`` the document must keep beside a query (MIN_DOCUMENT_SHARE of it)."""
    return math.ceil(MIN_DOCUMENT_SHARE * window)


def check_document_share(n_prefix: int, window: int, n_special: int, key: str, where: str = "") -> None:
    """Raise ConfigError when a query of ``n_prefix`` tokens leaves the document under a quarter of ``window``.

    ``where`` (e.g. "3 of 128 validation examples") says how much of the data the longest query stands for.
    """
    room = window - n_prefix - n_special
    need = document_need(window)
    if n_prefix and room < need:
        raise ConfigError(f"a query prefix of {n_prefix} tokens leaves the document {max(room, 0)} of the "
                          f"{window}-token window ({key}){f' in {where}' if where else ''}; at least {need} must "
                          "remain: shorten the queries or use a chunked method (each chunk reads the query beside "
                          "its own window)")


class Method(ABC):
    """Base class; subclasses set ``name`` and ``Config`` and implement :meth:`encode`."""

    name: ClassVar[str]
    Config: ClassVar[type[MethodConfig]] = MethodConfig
    # Patches of transformers internals the method cannot exist without (names in patches.PATCHES):
    # checked when the method is built, before any data or weights.
    requires: ClassVar[tuple[str, ...]] = ()
    # Settings that fit the test backbones (128 positions, 2 layers, d_model 32): the decoding, GPU and
    # golden matrices run every registered method with them, a researcher's own included.
    small_settings: ClassVar[dict[str, Any]] = {}
    # Whether the method runs on a decoder-only causal LM (it sets spans on the model's own self-attention);
    # the others read the input with an encoder.
    runs_decoder_only: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:  # a plugin's class cannot take a registered name (registry.claim)
            claim(REGISTRY, cls.name, cls, "method")

    def __init__(self, cfg: MethodConfig, spec: BackboneSpec) -> None:
        self.cfg = cfg
        self.spec = spec
        patches.require(self.requires, f"method={cfg.name}")
        if getattr(spec, "decoder_only", False) and not self.runs_decoder_only:
            able = ", ".join(sorted(n for n, c in REGISTRY.items() if c.runs_decoder_only))
            raise ConfigError(f"method.name={cfg.name!r} reads the input with an encoder, and the backbone is a "
                              f"decoder-only causal LM; on it run {able}")
        self.check_backbone(spec)

    def check_backbone(self, spec: BackboneSpec) -> None:  # noqa: B027 (optional hook)
        """Raise ConfigError if this method's settings cannot run on this backbone."""

    def fit_query(self, max_query_tokens: int) -> str | None:
        """Make room for queries of at most ``max_query_tokens`` (``data.max_prefix_tokens``) where a setting
        must; returns what changed, for the log and the run's record (None: nothing had to)."""
        return None

    @abstractmethod
    def encode(
        self,
        encoder: torch.nn.Module,
        input_ids: torch.Tensor,  # [batch, N] padded on the right
        attention_mask: torch.Tensor,  # [batch, N]
        *,
        training: bool,
        prefix_ids: torch.Tensor | None = None,  # [batch, P] optional query prepended to every chunk
        prefix_mask: torch.Tensor | None = None,  # [batch, P]
    ) -> Encoded:
        """Encode the long inputs into what the decoder attends to."""

    def query_window(self) -> tuple[int, str] | None:
        """The window a query prefix shares with the document, and the setting that sets it.

        None when the document keeps its window whatever the query: chunked methods put the query on top
        of every chunk (SLED), so a query can only fail to fit (:meth:`check_prefix`), never crowd out.
        """
        return None

    def crowded(self, prefix_lengths: Any) -> int:
        """How many of these query prefixes (token counts) leave the document under MIN_DOCUMENT_SHARE."""
        shared = self.query_window()
        if shared is None:
            return 0
        window = shared[0]
        room = window - np.asarray(prefix_lengths, dtype=np.int64) - len(self.spec.prefix_ids) - len(self.spec.suffix_ids)
        return int(((np.asarray(prefix_lengths) > 0) & (room < document_need(window))).sum())

    def check_prefix(self, n_tokens: int, where: str = "") -> None:
        """Raise ConfigError if a query prefix of `n_tokens` cannot be encoded or crowds the document out
        (checked at start-up on the longest query; ``where`` says which examples it stands for)."""
        shared = self.query_window()
        if shared is not None:
            check_document_share(n_tokens, shared[0], len(self.spec.prefix_ids) + len(self.spec.suffix_ids),
                                 shared[1], where)

    def decoder_length(self, n_tokens: int) -> int:
        """Length of the decoder's encoder-side input for one document of n_tokens (for benchmarks)."""
        raise NotImplementedError

    def train_length(self, n_tokens: int) -> int:
        """What a training step's encoder side grows with, for one document of n_tokens (the cost table
        scales a measured step by it): the evaluation's, unless the method trains on less."""
        return self.decoder_length(n_tokens)

    def describe(self) -> dict[str, Any]:
        """The method and its parameters, as recorded in metrics.json."""
        return asdict(self.cfg)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Hook for methods that change the model itself (e.g. attention patterns); default: none."""
        return model
