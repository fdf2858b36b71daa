"""Steady-state training cost from the probe's records: per group, per setting, and at the paper's length.

A record of :mod:`scaleformer.runs.cost` holds groups (a setting at an input length) of micro-batches, the
first ``warmup`` of each untimed. Here, per group: the median and interquartile range of the timed
micro-batches, the median of each phase, the syncs per micro-batch, the counted FLOPs and the memory; per
setting, a least-squares line through the groups' medians, ``seconds = fixed + per_token x tokens``: a step's
fixed cost (launches, the optimiser, the loop, the decoder at its target length) stays fixed at the paper's
length, where scaling the whole step by the length multiplied it; FLOPs and peak memory get the same line.
Where the probe paired each timed micro-batch with its bare forward + backward, the framework's overhead is
the median of the pairs' differences (the machine's drift cancels within a pair). MFU is the counted FLOPs
of the plain setting (the model's work: recomputed chunks are not model FLOPs) over
the median seconds, over the matmul rate the run measured in its own process.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from scaleformer.config.train import COST_MIN_SPREAD

SLOW = 1.5  # a timed micro-batch above this multiple of its group's median is "slow" (slow_steps)

SETTINGS = ("plain", "checkpoint")
# A line through the lengths needs them this far apart (longest / shortest): closer, the noise of a step's time
# decides its slope, and a line through 4,000 and 4,001 tokens reads -1,605 s a step at the paper's length.
MIN_SPREAD = COST_MIN_SPREAD


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(p25, median, p75), inclusive method (one value: itself three times)."""
    v = sorted(values)
    if len(v) == 1:
        return v[0], v[0], v[0]
    p25, p50, p75 = statistics.quantiles(v, n=4, method="inclusive")
    return p25, p50, p75


def line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``(intercept, slope)`` of y over x (two distinct x at least)."""
    xs = [x for x, _ in points]
    mx, my = statistics.mean(xs), statistics.mean(y for _, y in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def groups(cost: dict[str, Any]) -> list[dict[str, Any]]:
    """Each group of the record with its timed micro-batches' statistics (warm-ups excluded)."""
    out = []
    steps = cost.get("train_steps") or []
    for g, group in enumerate(cost.get("train_groups") or []):
        timed = [s for s in steps if s.get("group") == g and not s.get("warmup")]
        if not timed:
            continue
        p25, med, p75 = quartiles([s["time_s"] for s in timed])
        phases = {k: statistics.median(s["phases"][k] for s in timed) for k in timed[0].get("phases") or {}}
        tokens = group.get("tokens_per_step") or [group.get("input_tokens", 0)]
        row = {**{k: v for k, v in group.items() if k != "tokens_per_step"}, "tokens": statistics.mean(tokens),
               "time_s": med, "time_p25_s": p25, "time_p75_s": p75, "time_iqr_s": p75 - p25,
               "repeats": len(timed), "phases": phases, "slow": slow_steps(timed, med)}
        if any("graphs_compiled" in s for s in timed):  # compiled modules: graphs compiled while timed (0 if steady)
            row["timed_compiles"] = sum(s.get("graphs_compiled", 0) for s in timed)
        if all("bare_s" in s for s in timed):  # each step paired with its bare forward + backward
            b25, bare, b75 = quartiles([s["bare_s"] for s in timed])
            o25, over, o75 = quartiles([s["time_s"] - s["bare_s"] for s in timed])
            row |= {"bare_s": bare, "bare_iqr_s": b75 - b25, "overhead_s": over, "overhead_iqr_s": o75 - o25}
        out.append(row)
    return out


def fits(cost: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per setting: its groups by length and the lines of time, FLOPs and peak memory over tokens.

    Two lengths or more: least-squares lines. One length: the encoder's FLOPs (forward + backward = 3 x its
    forward, 4 x when the chunks are recomputed) are the share that grows, the rest stays; memory grows
    from what the step started with."""
    by: dict[str, dict[str, Any]] = {}
    for group in groups(cost):
        by.setdefault(group["setting"], {"groups": []})["groups"].append(group)
    for setting, fit in by.items():
        gs = sorted(fit["groups"], key=lambda g: g["tokens"])
        fit["groups"] = gs
        why = None
        if len({round(g["tokens"]) for g in gs}) >= 2:
            fixed, per = line([(g["tokens"], g["time_s"]) for g in gs])
            spread = gs[-1]["tokens"] / max(gs[0]["tokens"], 1e-9)
            why = (f"its lengths ({gs[0]['tokens']:,.0f} and {gs[-1]['tokens']:,.0f} tokens) are too close to "
                   f"separate fixed from per-token cost (under {MIN_SPREAD}x)" if spread < MIN_SPREAD else
                   "its slope is negative: the longer micro-batches timed faster (noise, or a warm-up too short)"
                   if per < 0 else
                   f"its fixed cost is negative ({fixed:.3g} s): a step cannot cost less than nothing at no input "
                   "(noisy lengths)" if fixed < 0 else None)
            if why is None:
                fit["fixed_s"], fit["per_token_s"] = fixed, per
                with_flops = [(g["tokens"], g["flops"]) for g in gs if g.get("flops")]
                fit["flops"] = line(with_flops) if with_flops else None
                with_mem = [(g["tokens"], g["mem_peak_bytes"]) for g in gs if g.get("mem_peak_bytes") is not None]
                fit["peak_bytes"] = line(with_mem) if with_mem else None
                continue
            fit["note"] = (f"no line: {why}; the longest length's step, its encoder share growing with the input "
                           "(the one-length model)")
        g, n = gs[-1], gs[-1]["tokens"] or 1
        total, enc = g.get("flops"), g.get("encoder_forward_flops")
        grows = min(total, (4 if setting == "checkpoint" else 3) * enc) if total and enc is not None else total
        share = grows / total if total else 1.0
        fit["fixed_s"], fit["per_token_s"] = g["time_s"] * (1 - share), g["time_s"] * share / n
        fit["flops"] = None if not total else (total - grows, grows / n)
        peak, base = g.get("mem_peak_bytes"), g.get("base_bytes")
        fit["peak_bytes"] = None if peak is None else (base or 0.0, (peak - (base or 0.0)) / n)
    return by


def at(fit: dict[str, Any], tokens: float, linear: bool) -> dict[str, Any]:
    """A setting's step at ``tokens``: on its lines when the step grows with the input, else its longest
    group as measured (a method that reads a window costs what it cost there)."""
    longest = fit["groups"][-1]
    if not linear:
        return {"step_s": longest["time_s"], "flops": longest.get("flops"), "peak_bytes": longest.get("mem_peak_bytes")}

    def on(pair: tuple[float, float] | None) -> float | None:
        return None if pair is None else pair[0] + pair[1] * tokens

    return {"step_s": on((fit["fixed_s"], fit["per_token_s"])), "flops": on(fit["flops"]),
            "peak_bytes": on(fit["peak_bytes"])}


def mfu(flops: float | None, seconds: float | None, peak_tflops: float | None) -> float | None:
    """Model FLOPs utilisation: achieved FLOP/s over the measured matmul rate."""
    if not flops or not seconds or not peak_tflops:
        return None
    return flops / seconds / (peak_tflops * 1e12)


def summary(cost: dict[str, Any], paper_tokens: float, linear: bool) -> dict[str, Any] | None:
    """The table's steady-state fields for a record (None: not a steady-state record)."""
    by = fits(cost)
    if not by:
        return None
    peak = (cost.get("matmul_peak") or {}).get("tflops")
    plain, ckpt = by.get("plain"), by.get("checkpoint")
    base = plain or ckpt
    longest = base["groups"][-1]
    model = {g["tokens"]: g.get("flops") for g in (plain or base)["groups"]}  # the model's FLOPs per length
    paper = {s: at(f, paper_tokens, linear) for s, f in by.items()}
    main = paper["plain" if plain else "checkpoint"]
    flops_paper = main["flops"]
    return {
        "probe": "steady-state", "timer": cost.get("timer"), "peak_tflops": peak,
        "repeats": longest["repeats"], "warmup": (cost.get("schedule") or {}).get("warmup"),
        "measured_tokens": [round(g["tokens"]) for g in base["groups"]],
        "step_measured_s": longest["time_s"], "step_iqr_s": longest["time_iqr_s"],
        "fixed_s": base["fixed_s"], "per_1k_tokens_s": base["per_token_s"] * 1000,
        "phases": longest["phases"], "syncs_per_step": longest.get("syncs_per_step"),
        "mfu_measured": mfu(model.get(longest["tokens"]), longest["time_s"], peak),
        "mfu": mfu(flops_paper, main["step_s"], peak),
        "step_s": paper["plain"]["step_s"] if plain else None,
        "step_ckpt_s": paper["checkpoint"]["step_s"] if ckpt else None,
        "train_peak_gb": paper["plain"]["peak_bytes"] / 1e9 if plain and paper["plain"]["peak_bytes"] else None,
        "train_peak_ckpt_gb": paper["checkpoint"]["peak_bytes"] / 1e9 if ckpt and paper["checkpoint"]["peak_bytes"]
        else None,
        "flops_step": flops_paper,
        "encoder_share": _share(longest),
        "fit_note": "; ".join(f"{k}: {f['note']}" for k, f in by.items() if f.get("note")) or None,
    }


def _share(group: dict[str, Any]) -> float:
    """The encoder's share of a step's FLOPs (forward + backward = 3 x its forward)."""
    total, enc = group.get("flops"), group.get("encoder_forward_flops")
    return round(min(1.0, 3 * enc / total), 3) if total and enc is not None else 1.0


def slow_steps(timed: list[dict[str, Any]], median_s: float) -> dict[str, Any] | None:
    """A group's slow micro-batches (above :data:`SLOW` x its median) and, for each counter, its mean over
    them against its mean over the others: where a slow step's extra time went. None without counters
    (records from before :mod:`scaleformer.runs.cost_waits`)."""
    if not timed or not all(s.get("waits") for s in timed):
        return None
    slow = [s for s in timed if s["time_s"] > SLOW * median_s]
    rest = [s for s in timed if s["time_s"] <= SLOW * median_s]
    out: dict[str, Any] = {"threshold": SLOW, "count": len(slow), "of": len(timed),
                           "excess_s": round(sum(s["time_s"] - median_s for s in slow), 6)}
    for key in timed[0]["waits"]:
        def mean(steps: list[dict[str, Any]], key: str = key) -> float | None:
            vals = [s["waits"][key] for s in steps if s["waits"].get(key) is not None]
            return round(statistics.mean(vals), 6) if vals else None

        out[key] = {"slow": mean(slow), "others": mean(rest)}
    return out
