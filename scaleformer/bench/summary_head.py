"""What the output head costs in decoder-only summarization fine-tuning, on all positions or only the summary's.

    python -m scaleformer.bench.summary_head [--out results/bench/summary-head-cpu] [--n 8192] [--repeats 10]

The loss of summarization as language modeling (:mod:`scaleformer.runs.causal_summary`) reads the summary's
tokens only, so the head's logits at the document's positions are thrown away. The module asks the backbone for
the logits from the position before the earliest summary token on (``logits_to_keep``); this measures what that
saves, both variants in the same run, each after an untimed warm-up, ``repeats`` timed runs, median and IQR
(:func:`scaleformer.ops.measure.measure`), peak memory growth (:class:`~scaleformer.ops.measure.MemoryProbe`):

- **the head and the loss at the paper's shape**: one sequence of n = 8,192 hidden states of width 2,048, a
  vocabulary of 50,304 (Pythia-1.4B), fp32, forward and backward, on every position against only the summary's for
  Table 8's summary lengths (QMSUM 256, ArXiv 512, GovReport 1,024 tokens). Counted first: the head's matmuls are
  ``6 K d V`` FLOPs for K positions; the fp32 logits and their gradient ``8 K V`` bytes.
- **the tiny decoder-only reader's whole training step** (``experiment=masformer_summarization``: n = 1,024, a
  128-token summary, batch 4 of the synthetic ledgers), the module's forward and backward with and without
  ``logits_to_keep``: its vocabulary is 1,738, so the head is a small part of its step.

Writes ``<out>.json`` and ``<out>.md``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import torch

from scaleformer.bench.causal_spans import timed_phase
from scaleformer.compose import compose_config
from scaleformer.data.datamodule import SummarizationDataModule
from scaleformer.io import atomic_write_result
from scaleformer.model.backbone import build_model, prepare
from scaleformer.ops.measure import matmul_peak
from scaleformer.runs.causal_summary import CausalSummarizationModule
from scaleformer.runs.context import to_config
from scaleformer.runs.lm_module import token_nll
from scaleformer.runs.runtime import machine

ROOMS = {"QMSUM": 256, "ArXiv": 512, "GovReport": 1024}  # the paper's maximum generation lengths (Table 8)


def head_and_loss(n: int, width: int, vocab: int, repeats: int) -> list[dict[str, Any]]:
    """Forward + backward of the head and the summary's loss, ``hidden [1, n, width]``, the head ``[vocab, width]``,
    on all n positions and on the last ``room + 1`` (a document filling the rest)."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(1, n, width, generator=g).requires_grad_()
    head = (torch.randn(vocab, width, generator=g) / width**0.5).requires_grad_()
    ids = torch.randint(0, vocab, (1, n), generator=g)
    rows = []
    for label, room in [("every position", None), *((f"summary only ({k}: {r})", r) for k, r in ROOMS.items())]:
        summary = room or 256  # the loss reads the last `summary` tokens in either variant
        k = n if room is None else room + 1

        def step(k: int = k, summary: int = summary) -> None:
            logits = hidden[:, n - k:] @ head.T  # [1, K, V]
            scored = torch.zeros(1, k, dtype=torch.bool)
            scored[:, k - summary:] = True
            nll = token_nll(logits, ids[:, n - k:], scored)  # [1, K-1]
            (nll.sum() / summary).backward()
            hidden.grad = head.grad = None

        rows.append({"variant": label, "positions": k, "flops": 6 * k * width * vocab, "logit_bytes": 8 * k * vocab,
                     **timed_phase(step, repeats)})
    return rows


def reader_step(repeats: int, root: Path) -> list[dict[str, Any]]:
    """The tiny reader's summarization training step (the module's own forward and backward), both variants."""
    rc = to_config(compose_config(["experiment=masformer_summarization", f"paths.root={root}/results",
                                   f"paths.cache={root}/cache", "data.synthetic_docs.train=4"]))
    ready = prepare(rc.backbone, rc.method)
    torch.manual_seed(0)
    module = CausalSummarizationModule(build_model(rc.backbone, ready.conf), ready.method, ready.tokenizer,
                                       generation=rc.generation, room=rc.data.max_target_tokens).train()
    dm = SummarizationDataModule(rc.data, ready.tokenizer, seed=rc.seed)
    dm.prepare_data()
    dm.setup()
    batch = next(iter(dm.dataloader("train")))
    seq = module.joined(batch, with_summary=True)
    rows = []
    for label, keeps in [("every position", False), ("summary only", True)]:
        module.head_keeps = keeps

        def step() -> None:
            module(batch).backward()
            module.zero_grad(set_to_none=True)

        width = seq["targets"].shape[1]
        rows.append({"variant": label, "positions": width - (seq["first_target"] - 1 if keeps else 0),
                     "sequence": width, "n": rc.method.max_length, "room": rc.data.max_target_tokens,
                     "batch": len(batch["input_ids"]), **timed_phase(step, repeats)})
    return rows


def render(result: dict[str, Any]) -> str:
    lines = [f"# The output head in decoder-only summarization fine-tuning, on {result['machine']}", "",
             f"The head and the loss at the paper's shape (n = {result['n']}, width {result['width']}, vocabulary "
             f"{result['vocab']}, fp32, forward + backward; median of {result['repeats']} after a warm-up; floor: "
             f"the head's FLOPs at the measured matmul rate, {result['matmul_peak_gflops']:.0f} GFLOP/s).", "",
             "| variant | positions | head FLOPs | logits + gradient (MB) | floor (s) | time (s) | IQR (s) | "
             "peak growth (MB) |", "|---|---|---|---|---|---|---|---|"]
    for r in result["paper_shape"]:
        lines.append(f"| {r['variant']} | {r['positions']:,} | {r['flops']:.2e} | {r['logit_bytes'] / 1e6:,.0f} | "
                     f"{r['flops'] / (result['matmul_peak_gflops'] * 1e9):.2f} | {r['time_s']:.3f} | "
                     f"{r['time_iqr_s']:.3f} | {_mb(r)} |")
    r0 = result["reader"][0]
    lines += ["", f"The tiny reader's whole training step (n = {r0['n']:,}, a summary of at most {r0['room']} tokens; "
              f"the batch's {r0['batch']} sequences padded to {r0['sequence']}; vocabulary 1,738):", "",
              "| variant | head positions | step (s) | IQR (s) | peak growth (MB) |", "|---|---|---|---|---|"]
    for r in result["reader"]:
        lines.append(f"| {r['variant']} | {r['positions']:,} | {r['time_s']:.3f} | {r['time_iqr_s']:.3f} | {_mb(r)} |")
    return "\n".join(lines) + "\n"


def _mb(row: dict[str, Any]) -> str:
    grew = row.get("mem_growth_bytes")
    return "n/a" if grew is None else f"{grew / 1e6:,.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/bench/summary-head-cpu")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)
    if args.n <= max(ROOMS.values()) + 1:
        ap.error(f"--n {args.n}: must exceed the longest summary, {max(ROOMS.values())} tokens, plus one")
    paper = head_and_loss(args.n, args.width, args.vocab, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        reader = reader_step(args.repeats, Path(tmp))
    result = {"machine": machine(), "torch": torch.__version__, "threads": torch.get_num_threads(), "n": args.n,
              "width": args.width, "vocab": args.vocab, "repeats": args.repeats,
              "matmul_peak_gflops": matmul_peak(torch.device("cpu"), torch.float32)["tflops"] * 1e3,
              "paper_shape": paper, "reader": reader}
    atomic_write_result(args.out, result, render(result))
    print(json.dumps({r["variant"]: r["time_s"] for r in [*paper, *reader]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
