"""What MASFormer's paper profile costs, counted before any GPU is rented: ``make masformer_table1 PROFILE=dryrun``.

The summarization tables price their paper profile by running each cell for a few steps at the real shape
(:mod:`scaleformer.artifacts.costs`). A 1.4B-parameter model at 8,192 tokens does not fit that on a CPU (its
weights, gradients and Adam state alone are ~23 GB in fp32), so this bill is counted, not measured:

- the model's shape from the spec (``shape``: Pythia-1.4B, 24 layers of width 2,048, vocabulary 50,304, untied
  input and output embeddings; ``L (12 d^2 + 13 d) + 2 d + 2 V d`` gives its published 1,414,647,808 parameters);
- each cell's sequences: ``trainer.max_steps`` x the effective batch (``data.batch_size x
  trainer.accumulate_grad_batches x trainer.devices x trainer.num_nodes``) of ``n = method.max_length`` tokens, from
  the cell's own composed config (50,000 x 128 x 8,192 = 52B tokens: the paper's "50B");
- training FLOPs per sequence: ``6 n (N + V d)`` for the matmuls (N: the layers' parameters; the output head's
  ``V d``; the input embedding is a lookup) plus ``12 d`` per attended (query, key) pair (QK^T and AV, 2 d each,
  forward and twice that backward), with the pairs counted from the cell's own causal spans (the method's
  ``layer_spans``, :func:`~scaleformer.ops.span_cost.counted_cost`);
- the floor: those FLOPs at 100% of an H100's dense bf16 peak (989.4 TFLOP/s). A real run takes the floor divided
  by the utilisation it reaches, which only a GPU measures; none has run this profile, so no utilisation is assumed.

Written: ``results/dryrun/<artifact>.{md,json}``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import expand_grid
from scaleformer.compose import compose_config
from scaleformer.io import atomic_write_text
from scaleformer.methods import build_method, method_config
from scaleformer.model.spec import BackboneSpec
from scaleformer.ops.span_cost import counted_cost, paper_cost
from scaleformer.runs.context import to_config
from scaleformer.runs.sharding import world_size

H100_BF16_DENSE = 989.4e12  # FLOP/s, as scaleformer.artifacts.bill prices counted FLOPs


def parameters(shape: dict[str, Any]) -> dict[str, int]:
    """A GPT-NeoX/GPT-3 shape's parameters: the layers' (attention 4 d^2 + 4 d, MLP 8 d^2 + 5 d, two norms 4 d), the
    final norm, the embeddings (untied: input and output)."""
    L, d, V = int(shape["layers"]), int(shape["width"]), int(shape["vocab"])
    layers = L * (12 * d * d + 13 * d) + 2 * d
    embeddings = V * d * (1 if shape.get("tied") else 2)
    return {"layers": layers, "embeddings": embeddings, "total": layers + embeddings}


def cell_bill(rc: Any, shape: dict[str, Any]) -> dict[str, Any]:
    """One cell's tokens, attended pairs, FLOPs and floor hours."""
    L, d, V = int(shape["layers"]), int(shape["width"]), int(shape["vocab"])
    spec = BackboneSpec(max_positions=int(shape["positions"]), pad_id=0, d_model=d, n_decoder_layers=L,
                        decoder_only=True)
    method = build_method(method_config(dataclasses.asdict(rc.method)), spec)
    n = int(rc.method.max_length)
    spans = method.layer_spans(L)
    t = rc.trainer
    batch = int(rc.data.batch_size) * int(t.accumulate_grad_batches) * world_size(
        t.accelerator, t.devices, int(t.extra.get("num_nodes", 1) or 1))
    sequences = int(t.max_steps) * batch
    pairs = counted_cost(spans, n)  # per sequence, all layers
    matmul = 6 * n * (parameters(shape)["layers"] + V * d)
    attention = 12 * d * pairs
    flops = sequences * (matmul + attention)
    return {"n": n, "sequences": sequences, "tokens": sequences * n, "cost_paper": paper_cost(spans, n),
            "pairs_per_sequence": pairs, "flops_per_sequence": matmul + attention,
            "attention_share": attention / (matmul + attention), "flops": flops,
            "floor_h100_hours": flops / H100_BF16_DENSE / 3600,
            "spans": [f"{s.kind}{'' if s.kind == 'full' else f' {s.size}'}" for s in spans]}


def build_bill(spec: dict[str, Any], profile: str, out_dir: Path, methods: str | list[str] | None = None
               ) -> dict[str, Path]:
    """Count every cell of the profile the dry run prices (``prices``: the paper profile) and write the bill."""
    prof = spec["profiles"][profile]
    priced, shape = prof["prices"], prof["shape"]
    cells = [c for c in expand_grid(spec, priced, methods) if c.available]
    rows = []
    for c in cells:
        rc = to_config(compose_config(c.overrides))
        bill = cell_bill(rc, shape)
        if c.train_from is not None:  # evaluates another column's weights (share_training): trains nothing itself
            bill |= {"sequences": 0, "tokens": 0, "flops": 0, "floor_h100_hours": 0.0, "weights_from": c.train_from.key}
        rows.append({"method": c.method, "dataset": c.key, **bill})
    total = sum(r["floor_h100_hours"] for r in rows)
    trained = [r for r in rows if "weights_from" not in r]
    record = {"artifact": spec["artifact"], "profile": priced, "shape": shape, "parameters": parameters(shape),
              "peak_flops": H100_BF16_DENSE, "cells": rows, "floor_h100_hours": total}
    labels = spec.get("method_labels", {})
    p = parameters(shape)
    lines = [f"# What the {priced} profile of {spec['artifact']} costs (counted)", "",
             f"Model: {shape['layers']} layers of width {shape['width']}, vocabulary {shape['vocab']} "
             f"({p['total']:,} parameters, {p['layers']:,} in the layers). Each trained cell continues "
             f"{trained[0]['sequences']:,} sequences of {trained[0]['n']:,} tokens ({trained[0]['tokens'] / 1e9:.1f}B "
             "tokens) from the pretrained weights, then scores the test set (negligible beside training); a cell "
             "marked shared scores another column's weights, which train on the same corpus. FLOPs: 6 n (N + V d) "
             "for the matmuls plus 12 d per attended pair, the pairs counted from each row's causal spans. Floor: "
             "those FLOPs at 100% of an H100's dense bf16 peak (989.4 TFLOP/s); a run takes the floor divided by "
             "the utilisation it reaches, which no GPU has measured for this profile yet. Memory: weights, "
             f"gradients and Adam state alone are {16 * p['total'] / 1e9:.0f} GB in fp32, so the run shards them "
             "(FSDP) across GPUs.", "",
             "| row | column | C (paper) | attention share of FLOPs | FLOPs | floor (H100-hours) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        spent = (f"shared ({r['weights_from']}'s) | 0" if "weights_from" in r
                 else f"{r['flops']:.2e} | {r['floor_h100_hours']:,.0f}")
        lines.append(f"| {labels.get(r['method'], r['method'])} | {r['dataset']} | {r['cost_paper'] / 1e6:,.0f}M | "
                     f"{100 * r['attention_share']:.0f}% | {spent} |")
    lines += ["", f"All {len(rows)} cells ({len(trained)} trained): at least {total:,.0f} H100-hours at peak, before "
              "utilisation (none measured for this profile): continual training of a 1.4B model on "
              f"{trained[0]['tokens'] / 1e9:.0f}B tokens per trained cell is a cluster's work."]
    name = spec["artifact"]
    return {"md": atomic_write_text(out_dir / f"{name}.md", "\n".join(lines) + "\n"),
            "json": atomic_write_text(out_dir / f"{name}.json", json.dumps(record, indent=2) + "\n")}
