"""What MASFormer's paper profiles cost, counted before any GPU is rented: ``make masformer_table1 PROFILE=dryrun``
(continual training, then perplexity) and ``make masformer_table2 PROFILE=dryrun`` (summarization fine-tuning from
each row's continually trained model, then greedy generation; ``masformer_continual`` and ``masformer_ablation`` the
same on Table 2's grid).

The summarization tables of ScaleFormer price their paper profile by running each cell for a few steps at the real
shape (:mod:`scaleformer.costs.table`). A 1.4B-parameter model at 8,192 tokens does not fit that on a CPU (its
weights, gradients and Adam state alone are ~23 GB in fp32), so this bill is counted, not measured:

- the model's shape from the spec (``shape``: Pythia-1.4B, 24 layers of width 2,048, vocabulary 50,304, untied
  input and output embeddings; ``L (12 d^2 + 13 d) + 2 d + 2 V d`` gives its published 1,414,647,808 parameters);
- each cell's sequences: ``trainer.max_steps`` x the effective batch (``data.batch_size x
  trainer.accumulate_grad_batches x trainer.devices x trainer.num_nodes``) of ``n = method.max_length`` tokens, from
  the cell's own composed config (50,000 x 128 x 8,192 = 52B tokens: the paper's "50B");
- training FLOPs per sequence: ``6 n N`` for the layers' matmuls (N: their parameters; the input embedding is a
  lookup), ``6 K V d`` for the output head on the K positions a loss reads (language modeling: all n; summarization:
  the summary's ``data.max_target_tokens`` and the position before it, as the module computes them), plus
  ``12 d`` per attended (query, key) pair (QK^T and AV, 2 d each, forward and twice that backward), with the pairs
  counted from the cell's own causal spans (the method's ``layer_spans``, :func:`~scaleformer.ops.span_cost.counted_cost`);
  a fine-tuning sequence is counted at n (the three data sets' inputs are mostly longer: an upper bound);
- generation (summarization cells): each document of the evaluated splits (``eval_docs``) read as a prompt of
  ``n - room`` tokens, then ``min(generation.max_new_tokens, room - 1)`` greedy tokens (every summary at its
  longest: an upper bound). The prompt is compute-bound: ``2 P N + 2 V d + 4 d`` per attended pair. Each decoding
  step of a batch (``data.eval_batch_size``, the documents dealt to the processes) reads the weights once (bf16:
  2 bytes a parameter of the layers and the head) and each sequence's attended keys and values (``4 d`` bytes a
  key a layer), and computes ``2 (N + V d) + 4 d`` per attended pair a sequence: its floor is the larger of the
  bytes at an H100's HBM bandwidth and the FLOPs at its peak;
- the floor: those FLOPs at 100% of an H100's dense bf16 peak (989.4 TFLOP/s). A real run takes the floor divided
  by the utilisation it reaches, which only a GPU measures; none has run these profiles, so none is assumed.
- a profile whose rows start from continually trained models (``continual``) prices that stage too; a run that is
  another artifact's own (the same name: Table 1's continual runs, and for Tables 3 and 4, whose grid is Table 2's,
  Table 2's fine-tuning and continual runs) is priced in that artifact's bill and counted here at zero.

Written: ``results/dryrun/<artifact>.{md,json}``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from scaleformer.artifacts.grid import (
    Cell,
    continual_stage,
    expand_grid,
    load_spec,
    resolve_run_ids,
    row_continual,
)
from scaleformer.bench.gpt_shape import H100_BF16_DENSE, H100_HBM, parameters, training_flops
from scaleformer.compose import compose_config
from scaleformer.io import atomic_write_text
from scaleformer.methods import build_method, method_config
from scaleformer.model.spec import BackboneSpec
from scaleformer.ops.span_cost import counted_cost, paper_cost
from scaleformer.resources import experiments_dir
from scaleformer.runs.context import to_config
from scaleformer.runs.sharding import world_size


def layer_spans(rc: Any, shape: dict[str, Any]) -> list[Any]:
    """The causal span of each of the shape's layers under the cell's method and sizes."""
    L, d = int(shape["layers"]), int(shape["width"])
    spec = BackboneSpec(max_positions=int(shape["positions"]), pad_id=0, d_model=d, n_decoder_layers=L,
                        decoder_only=True)
    return build_method(method_config(dataclasses.asdict(rc.method)), spec).layer_spans(L)


def generation_bill(rc: Any, shape: dict[str, Any], docs: int) -> dict[str, Any]:
    """Greedy summaries of ``docs`` documents after fine-tuning: the prompts' FLOPs, the decoding steps' FLOPs and
    bytes, and the floor (the prompts at peak FLOP/s; decoding at the larger of its bytes at HBM bandwidth and its
    FLOPs at peak)."""
    d, V = int(shape["width"]), int(shape["vocab"])
    n, room, spans = int(rc.method.max_length), int(rc.data.max_target_tokens), layer_spans(rc, shape)
    prompt, new = n - room, min(int(rc.generation.max_new_tokens), room - 1)  # P, g: each document at its longest
    t = rc.trainer
    world = world_size(t.accelerator, t.devices, int(t.extra.get("num_nodes", 1) or 1))
    per = int(rc.data.eval_batch_size or rc.data.batch_size)
    batches = -(-docs // (per * world)) * world  # each process's batches of its dealt documents
    N = parameters(shape)["layers"]
    keys = counted_cost(spans, prompt + new) - counted_cost(spans, prompt)  # decoding's attended keys, all layers
    prefill = docs * (2 * prompt * N + 2 * V * d + 4 * d * counted_cost(spans, prompt))
    decode_flops = docs * (2 * new * (N + V * d) + 4 * d * keys)
    decode_bytes = batches * new * 2 * (N + V * d) + docs * 4 * d * keys
    seconds = prefill / H100_BF16_DENSE + max(decode_bytes / H100_HBM, decode_flops / H100_BF16_DENSE)
    return {"documents": docs, "prompt_tokens": prompt, "new_tokens": new, "eval_batch": per, "batches": batches,
            "prefill_flops": prefill, "decode_flops": decode_flops, "decode_bytes": decode_bytes,
            "decode_bound": "bandwidth" if decode_bytes / H100_HBM > decode_flops / H100_BF16_DENSE else "compute",
            "floor_h100_hours": seconds / 3600}


def cell_bill(rc: Any, shape: dict[str, Any]) -> dict[str, Any]:
    """One cell's tokens, attended pairs, FLOPs and floor hours."""
    n, spans = int(rc.method.max_length), layer_spans(rc, shape)
    t = rc.trainer
    batch = int(rc.data.batch_size) * int(t.accumulate_grad_batches) * world_size(
        t.accelerator, t.devices, int(t.extra.get("num_nodes", 1) or 1))
    sequences = int(t.max_steps) * batch
    head = n if rc.data.task_metric == "perplexity" else min(n, int(rc.data.max_target_tokens) + 1)
    per = training_flops(shape, spans, n, head)  # per sequence, all layers
    pairs, matmul, attention = per["pairs"], per["matmul"], per["attention"]
    flops = sequences * (matmul + attention)
    return {"n": n, "sequences": sequences, "tokens": sequences * n, "head_positions": head,
            "cost_paper": paper_cost(spans, n),
            "pairs_per_sequence": pairs, "flops_per_sequence": matmul + attention,
            "attention_share": attention / (matmul + attention), "flops": flops,
            "floor_h100_hours": flops / H100_BF16_DENSE / 3600,
            "spans": [f"{s.kind}{'' if s.kind == 'full' else f' {s.size}'}" for s in spans]}


def priced_elsewhere(spec: dict[str, Any], priced: str, cells: list[Cell]) -> dict[str | None, str]:
    """Run id -> the artifact whose bill prices that run: the trained runs of the artifact a continual stage comes
    from (Table 1's), and the runs of the artifact whose grid this one shares (``same_runs_as``: Tables 3 and 4 on
    Table 2's), its continual stage included. ``cells`` are named too where there is such a grid (a fine-tuning
    run's name holds its continual run's folder)."""
    out: dict[str | None, str] = {}
    parent = spec.get("same_runs_as")
    if parent:
        theirs = [c for c in expand_grid(load_spec(experiments_dir() / f"{parent}.yaml"), priced) if c.available]
        resolve_run_ids(theirs)
        resolve_run_ids(cells)
        out |= {c.run_id: parent for c in [*continual_stage(theirs), *theirs]}
    for name, profile in {(cont["artifact"], cont["profile"]) for c in cells
                          if (cont := row_continual(spec, priced, c.method))}:
        other = expand_grid(load_spec(experiments_dir() / f"{name}.yaml"), profile)
        out |= {str(to_config(compose_config(o.overrides)).paths.run_id): name for o in other
                if o.available and o.train_from is None}  # trained there (where both name it: there)
    return out


def continual_bills(cells: list[Cell], shape: dict[str, Any], elsewhere: dict[str | None, str]
                    ) -> list[dict[str, Any]]:
    """The continual training the profile's rows start from, each run once: priced, or zero where another
    artifact's bill prices the same run (the same identity: trained once for both)."""
    rows = []
    for c in continual_stage(cells):
        rc = to_config(compose_config(c.overrides))
        run_id, bill = str(rc.paths.run_id), cell_bill(rc, shape)
        if run_id in elsewhere:
            bill |= {"sequences": 0, "tokens": 0, "flops": 0, "floor_h100_hours": 0.0, "priced_in": elsewhere[run_id]}
        rows.append({"method": c.method, "run_id": run_id, **bill})
    return rows


def build_bill(spec: dict[str, Any], profile: str, out_dir: Path, methods: str | list[str] | None = None
               ) -> dict[str, Path]:
    """Count every cell of the profile the dry run prices (``prices``: the paper profile), and the continual
    training its rows start from, and write the bill."""
    prof = spec["profiles"][profile]
    priced, shape = prof["prices"], prof["shape"]
    cells = [c for c in expand_grid(spec, priced, methods) if c.available]
    elsewhere = priced_elsewhere(spec, priced, cells)
    continual = continual_bills(cells, shape, elsewhere)
    rows = []
    for c in cells:
        rc = to_config(compose_config(c.overrides))  # the identity but the continual run's folder: same cost
        bill = cell_bill(rc, shape)
        if c.train_from is not None:  # evaluates another column's weights (share_training): trains nothing itself
            bill |= {"sequences": 0, "tokens": 0, "flops": 0, "floor_h100_hours": 0.0, "weights_from": c.train_from.key}
        if c.run_id in elsewhere:  # the same run as the grid's own artifact (same_runs_as): priced in its bill
            bill |= {"sequences": 0, "tokens": 0, "flops": 0, "floor_h100_hours": 0.0, "priced_in": elsewhere[c.run_id]}
        if rc.data.task_metric != "perplexity":  # summaries generated for every evaluated split
            counts = prof.get("eval_docs", {}).get(c.key, {})
            missing = [s for s in rc.trainer.eval_splits if s not in counts]
            if missing:
                raise ValueError(f"profiles.{profile}.eval_docs.{c.key}: no document count for the split "
                                 f"{missing[0]!r} (the data set's published size)")
            bill["generation"] = generation_bill(rc, shape, sum(int(counts[s]) for s in rc.trainer.eval_splits))
            if "priced_in" in bill:
                bill["generation"] |= {"floor_h100_hours": 0.0}
        rows.append({"method": c.method, "dataset": c.key, **bill})
    hours = {"continual": sum(r["floor_h100_hours"] for r in continual),
             "training": sum(r["floor_h100_hours"] for r in rows),
             "generation": sum(r["generation"]["floor_h100_hours"] for r in rows if "generation" in r)}
    record = {"artifact": spec["artifact"], "profile": priced, "shape": shape, "parameters": parameters(shape),
              "peak_flops": H100_BF16_DENSE, "hbm_bytes_per_s": H100_HBM, "continual": continual, "cells": rows,
              "floor_h100_hours_by_stage": hours, "floor_h100_hours": sum(hours.values())}
    lines = (_render_summarization if any("generation" in r for r in rows) else _render_lm)(spec, record)
    name = spec["artifact"]
    return {"md": atomic_write_text(out_dir / f"{name}.md", "\n".join(lines) + "\n"),
            "json": atomic_write_text(out_dir / f"{name}.json", json.dumps(record, indent=2) + "\n")}


def _render_lm(spec: dict[str, Any], record: dict[str, Any]) -> list[str]:
    rows, shape, p, total = record["cells"], record["shape"], record["parameters"], record["floor_h100_hours"]
    trained = [r for r in rows if "weights_from" not in r]
    labels = spec.get("method_labels", {})
    lines = [f"# What the {record['profile']} profile of {spec['artifact']} costs (counted)", "",
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
    return [*lines, "", f"All {len(rows)} cells ({len(trained)} trained): at least {total:,.0f} H100-hours at peak, "
            "before utilisation (none measured for this profile): continual training of a 1.4B model on "
            f"{trained[0]['tokens'] / 1e9:.0f}B tokens per trained cell is a cluster's work."]


def _render_summarization(spec: dict[str, Any], record: dict[str, Any]) -> list[str]:
    rows, shape, p, hours = record["cells"], record["shape"], record["parameters"], record["floor_h100_hours_by_stage"]
    labels = spec.get("method_labels", {})
    own = [c for c in record["continual"] if "priced_in" not in c]
    lines = [f"# What the {record['profile']} profile of {spec['artifact']} costs (counted)", "",
             f"Model: {shape['layers']} layers of width {shape['width']}, vocabulary {shape['vocab']} "
             f"({p['total']:,} parameters). Floor: FLOPs at 100% of an H100's dense bf16 peak (989.4 TFLOP/s), "
             "decoding at the larger of that and its bytes at the HBM's 3.35 TB/s; a run takes the floor divided "
             "by the utilisation it reaches, which no GPU has measured for this profile yet.", ""]
    if record["continual"]:
        lines += ["Continual training first: each row starts from its method's continual training"
                  + (f" ({own[0]['tokens'] / 1e9:.0f}B tokens a run)" if own else "") + "; a run that is another "
                  "artifact's own (the same identity) is priced in that artifact's bill:",
                  "", "| row | continual run | floor (H100-hours) |", "|---|---|---|"]
        for c in record["continual"]:
            spent = (f"{c['priced_in']}'s own | 0 here" if "priced_in" in c
                     else f"trained here | {c['floor_h100_hours']:,.0f}")
            lines.append(f"| {labels.get(c['method'], c['method'])} | {spent} |")
        lines.append("")
    lines += ["Fine-tuning (FLOPs: 6 n N for the layers, 6 K V d for the head on the summary's K positions, 12 d "
              "per attended pair; every sequence at n) and generation (each document's prompt of n - room tokens, "
              "then every summary at its longest; documents of the evaluated splits):", "",
              "| row | column | C (paper) | sequences | fine-tuning (H100-hours) | documents | new tokens | "
              "decoding bound by | generation (H100-hours) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g, theirs = r["generation"], r.get("priced_in")
        spent = (f"{theirs}'s run | 0" if theirs else f"{r['sequences']:,} | {r['floor_h100_hours']:,.1f}")
        lines.append(f"| {labels.get(r['method'], r['method'])} | {r['dataset']} | {r['cost_paper'] / 1e6:,.0f}M | "
                     f"{spent} | {g['documents']:,} | {g['new_tokens']} | {g['decode_bound']} | "
                     f"{g['floor_h100_hours']:,.2f} |")
    shared = sum("priced_in" in r for r in rows)
    return [*lines, "", f"All {len(rows)} cells: at least {record['floor_h100_hours']:,.0f} H100-hours at peak, before "
            f"utilisation: {hours['continual']:,.0f} of continual training ({len(own)} of the "
            f"{len(record['continual'])} runs; the others are priced in their own artifact's bill), "
            f"{hours['training']:,.0f} of fine-tuning"
            + (f" ({shared} cells are {spec.get('same_runs_as')}'s runs, priced in its bill)" if shared else "")
            + f", {hours['generation']:,.1f} of generation."]


def counted_floor(artifact: str, folder: Path) -> tuple[float, str] | None:
    """(floor hours, one line) where the artifact's dry run is a counted bill (this module's), else None: what a
    paper launch says before it asks for ``--yes``. A bill is checked before it is quoted: it names this artifact,
    it prices cells, and its floor is the sum of its rows; otherwise ValueError in one line (a floor from an empty
    bill, or another artifact's saved under this name, would let a launch pass its cost question)."""
    path = folder / f"{artifact}.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    floor = record.get("floor_h100_hours") if isinstance(record, dict) else None
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not math.isfinite(floor) or floor <= 0:
        return None
    redo = f"; count it again: make {artifact} PROFILE=dryrun"
    if record.get("artifact") != artifact:
        raise ValueError(f"{path}: is the bill of {record.get('artifact')!r}, not of {artifact}{redo}")
    cells, continual = record.get("cells"), record.get("continual", [])
    if not isinstance(cells, list) or not cells or not isinstance(continual, list):
        raise ValueError(f"{path}: prices no cells (cells={cells!r:.40}), so its {floor:,.1f} h is no floor{redo}")

    def hours(row: Any) -> float:
        h = row.get("floor_h100_hours") if isinstance(row, dict) else None
        if isinstance(h, bool) or not isinstance(h, (int, float)) or not math.isfinite(h) or h < 0:
            raise ValueError(f"{path}: a row's floor_h100_hours={h!r} is not a number of hours >= 0{redo}")
        return float(h)

    total = sum(hours(r) for r in [*continual, *cells]) + sum(hours(r["generation"]) for r in cells if "generation" in r)
    if not math.isclose(total, floor, rel_tol=1e-9, abs_tol=1e-9):
        raise ValueError(f"{path}: its rows sum to {total:,.1f} H100-hours, its floor says {floor:,.1f}{redo}")
    return float(floor), (f"the paper profile of {artifact} is counted at no less than {floor:,.0f} H100-hours at "
                          f"peak, before utilisation ({path.with_suffix('.md')})")
