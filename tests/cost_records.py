"""Hand-made steady-state records of the cost probe (scaleformer.runs.cost): every time on a known line,
fixed + per-token, with symmetric noise around it, after warm-ups far off it. What the fit and the cost
tables' tests share."""

from __future__ import annotations

FIXED, PER_TOKEN, PEAK = 0.3, 2e-4, 100.0  # s, s per token, TFLOP/s
NOISE = (-0.02, 0.01, 0.0, 0.02, -0.01, 0.0, 0.01, -0.02, 0.02, 0.0)  # symmetric: the median is the line


def record(settings=("plain", "checkpoint"), lengths=(4000, 2000), ckpt_extra=0.25, warmup_s=50.0):
    groups, steps = [], []
    for setting in settings:
        for n in lengths:
            g = len(groups)
            t = (FIXED + PER_TOKEN * n) * (1 + ckpt_extra * (setting == "checkpoint"))
            flops = (1e9 + 1e6 * n) * (1.3 if setting == "checkpoint" else 1)
            groups.append({"setting": setting, "fraction": n / lengths[0], "input_tokens": n, "target_tokens": 100,
                           "tokens_per_step": [n] * 13, "flops": flops, "encoder_forward_flops": 2e5 * n,
                           "mem_peak_bytes": 1e9 + 1e5 * n, "base_bytes": 1e9})
            phases = {"data": 0.001, "forward": t / 3, "backward": t / 2, "optimizer": 0.05}
            steps += [{"group": g, "warmup": True, "time_s": warmup_s, "phases": {**phases, "other": warmup_s - t}}
                      for _ in range(3)]
            steps += [{"group": g, "warmup": False, "time_s": t + e,
                       "phases": {**phases, "other": t + e - sum(phases.values())}} for e in NOISE]
    return {"device": "cuda:0", "precision": "bf16-mixed", "probe": "steady-state", "timer": "cuda events",
            "schedule": {"warmup": 3, "repeats": 10, "lengths": [1.0, 0.5]}, "matmul_peak": {"tflops": PEAK},
            "length_scaling": "linear", "train_length_scaling": "linear", "train_groups": groups,
            "train_steps": steps, "generate": [], "model": {}}
