"""From measured cells to claims: fitted scaling exponents, method-vs-baseline comparisons, targets.

Why exclusions: a method whose input was truncated at some N does constant work from there on, so
including those sizes would fit a flat slope that says nothing about the method. Truncated sizes
(per phase: inference and training step apart) are left out of every fit and listed beside it. Time
exponents use N >= ``fit_from`` when two such sizes ran (else every non-truncated size, labelled);
memory exponents use N >= ``memory_fit_from`` only, since at small N the growth is fixed allocator
overhead rather than the method.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

TIME_KEYS = ("encode_s", "generate_e2e_s", "train_s")
MEMORY_KEYS = ("mem_inference_bytes", "mem_train_bytes")
SCALING_KEYS = ("encode_s", "generate_e2e_s", "train_s", "mem_inference_bytes", "mem_train_bytes")
TRAIN_KEYS = ("train_s", "mem_train_bytes")


def max_beams(doc: dict[str, Any]) -> str:
    return str(max(doc["settings"]["beams"]))


def metric(cell: dict[str, Any] | None, key: str, beams: str) -> float | None:
    """One scalar of a cell (None when that phase did not run)."""
    if cell is None:
        return None
    enc = cell.get("encode") or {}
    gen = (cell.get("generate") or {}).get(beams) or {}
    floor = gen.get("floor") or {}  # absent in results written before the floor was measured
    train = cell.get("train") or {}
    return {
        "encode_s": enc.get("time_s"),
        "decode_s": gen.get("time_s"),
        "generate_e2e_s": gen.get("e2e_time_s"),
        "train_s": train.get("time_s"),
        "mem_inference_bytes": cell.get("mem_inference_growth_bytes"),
        "mem_train_bytes": train.get("mem_growth_bytes"),
        "decoder_length": cell.get("decoder_length"),
        "cross_attention_bytes": (cell.get("cross_attention_bytes") or {}).get(beams),
        "encode_tflops_per_s": enc.get("tflops_per_s"),
        "encode_peak_fraction": enc.get("peak_fraction"),
        "step_bytes": floor.get("step_bytes"),
        "floor_ms": floor.get("floor_ms"),
        "ms_per_token": floor.get("ms_per_token"),
        "floor_multiple": floor.get("floor_multiple"),
    }[key]


def truncated(cell: dict[str, Any], key: str) -> bool:
    """Whether the phase behind ``key`` read less than the whole input."""
    phase = cell.get("train") or {} if key in TRAIN_KEYS else cell
    return bool(phase.get("truncated"))


def cells_of(doc: dict[str, Any], backbone: str, method: str) -> dict[int, dict[str, Any]]:
    return {c["n_tokens"]: c for c in doc["results"] if c["backbone"] == backbone and c["method"] == method}


def slope(points: Sequence[tuple[int, float]]) -> float:
    """Least-squares slope of log(value) vs log(N)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(v) for _, v in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def fit_exponent(points: Sequence[tuple[int, float | None]], min_n: int = 16384, fallback: bool = True,
                 excluded: Sequence[int] = ()) -> dict[str, Any] | None:
    """The slope over N >= ``min_n`` when two such sizes have values, else (``fallback``) over every size
    given; None when fewer than two sizes qualify. ``excluded`` (truncated sizes) is recorded only."""
    pts = [(n, v) for n, v in points if v is not None and v > 0]
    big = [p for p in pts if p[0] >= min_n]
    use, basis = big, f"N >= {min_n}"
    if len(big) < 2 and fallback:
        use, basis = pts, "all non-truncated sizes"
    if len({n for n, _ in use}) < 2:
        return None
    return {"exponent": round(slope(use), 3), "range": [min(n for n, _ in use), max(n for n, _ in use)],
            "points": len(use), "basis": basis, "excluded_truncated": sorted(excluded)}


def scaling(doc: dict[str, Any], backbone: str, method: str, spec: dict[str, Any]) -> dict[str, Any]:
    beams = max_beams(doc)
    cells = sorted(cells_of(doc, backbone, method).items())
    out = {}
    for key in SCALING_KEYS:
        pts = [(n, metric(c, key, beams)) for n, c in cells if not truncated(c, key)]
        cut = [n for n, c in cells if truncated(c, key) and metric(c, key, beams) is not None]
        mem = key in MEMORY_KEYS
        out[key] = fit_exponent(pts, spec["memory_fit_from"] if mem else spec["fit_from"], fallback=not mem,
                                excluded=cut)
    return out


def comparisons(doc: dict[str, Any], specs: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Per backbone and N: how much faster a method generates than another, its cross-attention size, and
    the decode speed-up were both at their memory floors (the bytes per step alone)."""
    beams = max_beams(doc)
    out = []
    for backbone in dict.fromkeys(c["backbone"] for c in doc["results"]):
        for s in specs:
            a, b = s["method"], s["baseline"]
            ca, cb = cells_of(doc, backbone, a), cells_of(doc, backbone, b)
            for n in sorted(set(ca) & set(cb)):
                x, y = ca[n], cb[n]
                if metric(x, "decode_s", beams) is None or metric(y, "decode_s", beams) is None:
                    continue
                out.append({
                    "backbone": backbone, "n_tokens": n, "method": a, "baseline": b, "beams": int(beams),
                    "decode_speedup": metric(y, "decode_s", beams) / metric(x, "decode_s", beams),
                    "e2e_speedup": metric(y, "generate_e2e_s", beams) / metric(x, "generate_e2e_s", beams),
                    "cross_attention_length_ratio": x["decoder_length"] / y["decoder_length"],
                    "cross_attention_memory_ratio": _ratio(metric(x, "cross_attention_bytes", beams),
                                                           metric(y, "cross_attention_bytes", beams)),
                    # the decode speed-up were both at their floors: baseline's floor over the method's
                    "floor_speedup": _ratio(metric(y, "floor_ms", beams), metric(x, "floor_ms", beams)),
                    "truncated": bool(x.get("truncated") or y.get("truncated")),
                })
    return out


def _ratio(x: float | None, y: float | None) -> float | None:
    return None if x is None or not y else x / y


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else "pass" if ok else "fail"


def evaluate(t: dict[str, Any], doc: dict[str, Any], backbone: str) -> dict[str, Any]:
    """One target on one backbone: the measured value, the bound and pass / fail / not measured."""
    beams = str(t.get("beams") or max_beams(doc))
    key, cells = t["metric"], cells_of(doc, backbone, t["method"])
    kind = next(b for b in ("max_ratio", "min_ratio", "max_value", "min_value", "max_exponent", "must_run")
                if t.get(b) not in (None, False))
    bound = t[kind]
    out: dict[str, Any] = {"target": t.get("label") or _describe(t, kind), "backbone": backbone, "kind": kind,
                           "metric": key, "method": t["method"], "baseline": t.get("baseline"), "bound": bound,
                           "beams": int(beams), "value": None, "pass": None}
    if kind in ("max_ratio", "min_ratio"):
        x = metric(cells.get(t["at"]), key, beams)
        if t.get("reference") is not None:
            y = t["reference"]
            out["reference_note"] = t.get("reference_note")
        else:
            den_beams = str(t.get("baseline_beams") or beams)
            y = metric(cells_of(doc, backbone, t.get("baseline") or t["method"]).get(t["at"]), key, den_beams)
            out["baseline_beams"] = int(den_beams)
        if x is not None and y:
            out["value"] = x / y
            out["pass"] = out["value"] <= bound if kind == "max_ratio" else out["value"] >= bound
    elif kind in ("max_value", "min_value"):
        vals = [(n, metric(c, key, beams)) for n, c in sorted(cells.items())
                if (n == t["at"] if t.get("at") else n >= t["from_tokens"])]
        vals = [(n, v) for n, v in vals if v is not None]
        if vals:
            n, v = (max if kind == "max_value" else min)(vals, key=lambda p: p[1])
            out |= {"value": v, "worst_at": n,
                    "pass": v <= bound if kind == "max_value" else v >= bound}
    elif kind == "max_exponent":
        hi = t.get("to_tokens") or math.inf
        pts = [(n, metric(c, key, beams)) for n, c in sorted(cells.items())
               if t["from_tokens"] <= n <= hi and not truncated(c, key)]
        fit = fit_exponent(pts, t["from_tokens"], fallback=False)
        if fit:
            out |= {"value": fit["exponent"], "range": fit["range"], "pass": fit["exponent"] <= bound,
                    "partial": t.get("to_tokens") is not None and fit["range"][1] < t["to_tokens"]}
    else:  # must_run
        c = cells.get(t["at"])
        phase = (c or {}).get("train") if key in TRAIN_KEYS else c
        if c is not None and (phase or {}).get("status") not in (None, "skipped"):
            out["value"] = metric(c, key, beams)
            out["pass"] = out["value"] is not None
    out["status"] = _verdict(out["pass"]) + (" (partial range)" if out.get("partial") else "") + (
        " (for information)" if t.get("for_information") else "")
    return out


def _describe(t: dict[str, Any], kind: str) -> str:
    where = f"at N={t['at']}" if t.get("at") else f"over N >= {t.get('from_tokens')}" + (
        f"..{t['to_tokens']}" if t.get("to_tokens") else "")
    den = (f"recorded {t['reference']}" if t.get("reference") is not None else
           f"{t.get('baseline') or t['method']}" + (f" ({t['baseline_beams']} beams)" if t.get("baseline_beams") else ""))
    what = {"max_ratio": f"{t['metric']} {t['method']} / {den} <= {t.get('max_ratio')}",
            "min_ratio": f"{t['metric']} {t['method']} / {den} >= {t.get('min_ratio')}",
            "max_value": f"{t['metric']} of {t['method']} <= {t.get('max_value')}",
            "min_value": f"{t['metric']} of {t['method']} >= {t.get('min_value')}",
            "max_exponent": f"scaling exponent of {t['metric']} of {t['method']} <= {t.get('max_exponent')}",
            "must_run": f"{t['method']} measures {t['metric']}"}[kind]
    return f"{what} {where}"


def summarise(doc: dict[str, Any]) -> dict[str, Any]:
    """Add fitted exponents per method, the profile's comparisons and its targets to ``doc``."""
    spec = doc.setdefault("spec", {"fit_from": 16384, "memory_fit_from": 16384, "comparisons": [], "targets": []})
    for m in doc["methods"]:
        if m["status"] == "ran":
            m["scaling"] = scaling(doc, m["backbone"], m["method"], spec)
    doc["comparisons"] = comparisons(doc, spec["comparisons"])
    backbones = doc["grid"]["backbones"]
    doc["targets"] = [evaluate(t, doc, b) for t in spec["targets"]
                      for b in ([t["backbone"]] if t.get("backbone") else backbones)]
    return doc
