"""Benchmark profiles: the grid and its measurement settings, kept as data in ``conf/bench/<name>.yaml``.

Why data: what a benchmark measures (backbones, sizes, caps, repeats) and what it is judged against
(comparisons, targets) is a choice of the people running it, not of the code; a new profile is a
new file. Loading types every key against :class:`Profile` (unknown keys and wrong types stop it)
and ``__post_init__`` checks ranges, so a typo fails in a second with the key, value and limit named,
before any model is built.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from scaleformer.bench.shapes import ASSET_SHAPES
from scaleformer.errors import ConfigError, check
from scaleformer.resources import conf_dir, group_options

PROFILE_DIR = conf_dir() / "bench"
ALL = "all"  # in `methods`: every method option of conf/method (and registered methods without one)

# Scalars a target can be stated on (scaleformer.bench.summary.metric computes them per cell).
METRICS = ("encode_s", "decode_s", "generate_e2e_s", "train_s", "mem_inference_bytes", "mem_train_bytes",
           "decoder_length", "cross_attention_bytes", "encode_tflops_per_s", "encode_peak_fraction")
BOUNDS = ("max_ratio", "min_ratio", "max_value", "min_value", "max_exponent", "must_run")


@dataclass
class Comparison:
    """Report, per backbone and size, how ``method`` compares with ``baseline`` (speedups, sizes)."""

    method: str = ""
    baseline: str = ""


@dataclass
class Target:
    """A claim checked against the measurements; exactly one bound says which kind.

    ``max_ratio``/``min_ratio``: metric(method) / a denominator at size ``at``: metric(baseline), or
    with ``baseline_beams`` the metric at that beam count (of ``baseline``, default the method itself,
    e.g. 4-beam / 1-beam decoding), or with ``reference`` a value measured before (``reference_note``
    says when, where and at which commit), e.g. an encode time before an optimisation;
    ``max_value``/``min_value``: metric(method) at ``at``, or its worst value over N >= ``from_tokens``;
    ``max_exponent``: fitted log-log slope over ``from_tokens``..``to_tokens`` (non-truncated sizes);
    ``must_run``: the cell at ``at`` ran and measured the metric.
    """

    metric: str = ""
    method: str = ""
    label: str | None = None  # the claim in words, shown in the report
    backbone: str | None = None  # None: checked on every backbone of the grid
    baseline: str | None = None
    baseline_beams: int | None = None  # ratio kinds: the denominator's beam count (default: ``beams``)
    reference: float | None = None  # ratio kinds: a recorded value as the denominator
    reference_note: str | None = None  # where ``reference`` comes from (commit, machine, load)
    at: int | None = None
    from_tokens: int | None = None
    to_tokens: int | None = None
    beams: int | None = None  # generation metrics; None: the profile's largest beam count
    max_ratio: float | None = None
    min_ratio: float | None = None
    max_value: float | None = None
    min_value: float | None = None
    max_exponent: float | None = None
    must_run: bool = False
    # Evaluated and shown, but a claim of another profile (e.g. gpu-base's on tiny CPU shapes): the
    # verdict is marked "(for information)".
    for_information: bool = False

    def kind(self) -> str:
        return next(b for b in BOUNDS if getattr(self, b) not in (None, False))

    def validate(self, key: str, beams: list[int]) -> None:
        check(self.metric in METRICS, f"{key}.metric", self.metric, f"must be one of {', '.join(METRICS)}")
        check(bool(self.method), f"{key}.method", self.method, "required")
        given = [b for b in BOUNDS if getattr(self, b) not in (None, False)]
        check(len(given) == 1, key, {b: getattr(self, b) for b in given},
              f"needs exactly one bound of {', '.join(BOUNDS)}")
        kind = given[0]
        for k in ("at", "from_tokens", "to_tokens"):
            v = getattr(self, k)
            check(v is None or v > 0, f"{key}.{k}", v, "must be > 0")
        if kind in ("max_ratio", "min_ratio"):
            check(bool(self.baseline) or self.baseline_beams is not None or self.reference is not None,
                  f"{key}.baseline", self.baseline, f"required with {kind} (or baseline_beams, or reference)")
            check(self.reference is None or (not self.baseline and self.baseline_beams is None),
                  f"{key}.reference", self.reference, "is a denominator of its own: give no baseline/baseline_beams")
            check(self.reference is None or self.reference > 0, f"{key}.reference", self.reference, "must be > 0")
            check(self.at is not None, f"{key}.at", self.at, f"required with {kind}")
            check(getattr(self, kind) > 0, f"{key}.{kind}", getattr(self, kind), "must be > 0")
        if kind in ("max_value", "min_value"):
            check((self.at is None) != (self.from_tokens is None), f"{key}.at", self.at,
                  "give exactly one of at (one size) and from_tokens (every size from there)")
        if kind == "max_exponent":
            check(self.from_tokens is not None, f"{key}.from_tokens", self.from_tokens, "required with max_exponent")
            check(self.to_tokens is None or self.to_tokens > self.from_tokens, f"{key}.to_tokens", self.to_tokens,
                  f"must be > from_tokens ({self.from_tokens})")
        if kind == "must_run":
            check(self.at is not None, f"{key}.at", self.at, "required with must_run")
        for k in ("beams", "baseline_beams"):
            v = getattr(self, k)
            check(v is None or v in beams, f"{key}.{k}", v, f"must be one of the profile's beams {beams}")


@dataclass
class Profile:
    """One benchmark grid and its measurement settings (the yaml keys, one to one)."""

    name: str = ""
    # Names (asset shapes bart_base/t5_base or a random-init conf/backbone option) or, from code, Shapes.
    backbones: list[Any] = field(default_factory=list)
    # conf/method option names, built-in peers (full_baseline, led) and "all" (the remaining options).
    methods: list[str] = field(default_factory=lambda: [ALL])
    sizes: list[int] = field(default_factory=list)
    device: str = "cpu"
    dtype: str = "float32"
    attn: str = "sdpa"  # "auto": flash_attention_2 for BART on CUDA when flash_attn imports, else sdpa
    new_tokens: int = 32
    beams: list[int] = field(default_factory=lambda: [1, 4])
    label_tokens: int = 32
    repeats: int = 3  # timed runs per phase and size, at least (every size, however slow)
    min_time_s: float = 0.5  # fast phases repeat until their timed runs add up to this ...
    max_repeats: int = 20  # ... or this many runs
    grad_ckpt_min_tokens: int | None = None  # gradient checkpointing in the training step from this N
    # Largest N per method ("*" = every method): above it the size is recorded as out of memory
    # (cause "cap") without running, e.g. quadratic attention on a laptop.
    max_tokens: dict[str, int] = field(default_factory=dict)
    max_train_tokens: dict[str, int] = field(default_factory=dict)  # the same for the training step alone
    cell_budget_s: float | None = None  # skip a size whose predicted time exceeds this
    total_budget_s: float | None = None  # skip sizes predicted to end past this many seconds
    method_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # "*": where the key exists
    led_attention_window: int = 1024  # the LED peer's local window (tokens, both sides together)
    threads: int | None = None  # torch intra-op threads (None: torch's default)
    seed: int = 0
    fit_from: int = 16384  # time exponents: N >= this when two such sizes ran, else every non-truncated size
    memory_fit_from: int = 16384  # memory exponents: N >= this only (smaller N is allocator noise)
    comparisons: list[Comparison] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    conf_root: str = str(conf_dir())  # Hydra config root whose `method` group lists the methods

    def __post_init__(self) -> None:
        check(bool(self.backbones), "backbones", self.backbones, "needs at least one backbone")
        check(bool(self.methods), "methods", self.methods, "needs at least one method (or 'all')")
        check(len(set(self.methods)) == len(self.methods), "methods", self.methods, "has duplicates")
        check(bool(self.sizes), "sizes", self.sizes, "needs at least one size")
        for i, n in enumerate(self.sizes):
            check(isinstance(n, int) and n >= 64, f"sizes[{i}]", n, "must be an integer >= 64 tokens")
        check(len(set(self.sizes)) == len(self.sizes), "sizes", self.sizes, "has duplicates")
        self.sizes = sorted(self.sizes)
        check(self.device in ("cpu", "cuda"), "device", self.device, "must be cpu or cuda")
        check(self.dtype in ("float32", "bfloat16", "float16"), "dtype", self.dtype,
              "must be float32, bfloat16 or float16")
        check(self.attn in ("auto", "sdpa", "eager", "flash_attention_2"), "attn", self.attn,
              "must be auto, sdpa, eager or flash_attention_2")
        for key in ("new_tokens", "label_tokens"):
            check(getattr(self, key) >= 1, key, getattr(self, key), "must be >= 1")
        check(bool(self.beams) and all(b >= 1 for b in self.beams), "beams", self.beams,
              "needs at least one beam count, each >= 1")
        self.beams = sorted(set(self.beams))
        check(self.repeats >= 3, "repeats", self.repeats, "must be >= 3 (min, median and IQR need 3 runs)")
        check(self.max_repeats >= self.repeats, "max_repeats", self.max_repeats,
              f"must be >= repeats ({self.repeats})")
        check(self.min_time_s >= 0, "min_time_s", self.min_time_s, "must be >= 0")
        for key in ("grad_ckpt_min_tokens", "cell_budget_s", "total_budget_s", "threads"):
            v = getattr(self, key)
            check(v is None or v > 0, key, v, "must be > 0 (or null)")
        for key in ("max_tokens", "max_train_tokens"):
            for m, v in getattr(self, key).items():
                check(v > 0, f"{key}.{m}", v, "must be > 0")
        check(self.led_attention_window > 0 and self.led_attention_window % 2 == 0, "led_attention_window",
              self.led_attention_window, "must be a positive even number")
        for key in ("fit_from", "memory_fit_from"):
            check(getattr(self, key) > 0, key, getattr(self, key), "must be > 0")
        for i, c in enumerate(self.comparisons):
            check(bool(c.method) and bool(c.baseline), f"comparisons[{i}]", dataclasses.asdict(c),
                  "needs method and baseline")
        for i, t in enumerate(self.targets):
            t.validate(f"targets[{i}]", self.beams)

    def cap(self, method: str) -> int | None:
        return self.max_tokens.get(method, self.max_tokens.get("*"))

    def train_cap(self, method: str) -> int | None:
        return self.max_train_tokens.get(method, self.max_train_tokens.get("*"))

    def settings(self) -> dict[str, Any]:
        """What must match for two runs' results to be merged (the grid and the report may differ)."""
        skip = {"backbones", "methods", "sizes", "conf_root", "total_budget_s", "cell_budget_s", "fit_from",
                "memory_fit_from", "comparisons", "targets"}
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name not in skip}

    def report_spec(self) -> dict[str, Any]:
        """What the report is judged against; stored with the results so they render on their own."""
        return {"fit_from": self.fit_from, "memory_fit_from": self.memory_fit_from,
                "comparisons": [dataclasses.asdict(c) for c in self.comparisons],
                "targets": [dataclasses.asdict(t) for t in self.targets]}


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str | Path, **changes: Any) -> Profile:
    """A profile by name (``conf/bench/<name>.yaml``) or yaml path, with ``changes`` applied (CLI flags)."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = PROFILE_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ConfigError(f"profile {str(name_or_path)!r}: no {path}; available: {', '.join(profile_names())}")
    try:
        raw = OmegaConf.load(path)
    except Exception as e:  # YAML syntax: the parser's first line names the place
        raise ConfigError(f"{path}: not readable YAML ({str(e).strip().splitlines()[0]})") from None
    if not isinstance(raw, DictConfig):
        raise ConfigError(f"{path}: a bench profile is a mapping of settings (name, methods, sizes, ...), "
                          f"not a {type(raw).__name__.removesuffix('Config').lower() or 'value'}")
    if "name" not in raw:
        raw.name = path.stem
    try:
        merged = OmegaConf.merge(OmegaConf.structured(Profile), raw)
        for k, v in changes.items():
            merged[k] = v
        profile: Profile = OmegaConf.to_object(merged)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    except Exception as e:  # omegaconf names the key; keep that line, drop its traceback noise
        key = getattr(e, "full_key", None)
        msg = str(e).splitlines()[0]
        raise ConfigError(f"{path}: {key}: {msg}" if key else f"{path}: {msg}") from None

    known = sorted({*ASSET_SHAPES, *group_options("backbone")})
    for i, b in enumerate(profile.backbones):
        check(b in known, f"{path}: backbones[{i}]", b, f"must be one of {', '.join(known)}")
    return profile
