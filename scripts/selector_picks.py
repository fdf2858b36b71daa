"""Where the query-aware middle selector picks, beside the random draw it replaces (QA ledgers).

    .venv/bin/python scripts/selector_picks.py --out results/tiny/selector_picks.json   # ~4 min on 2 cores
    .venv/bin/python scripts/selector_picks.py --backbone tiny_t5_reader --docs 32

Why: ``middle_strategy=query`` keeps the m interior tokens the question attends to most; if the last
layer's attention favours positions over content (chunk edges, the stretch a chunk shares with the
next one), the selector spends its slots on copies. This runs the method itself (the same
``encode`` a run calls, the backbone's pretrained weights, ``table_qa``'s 992-token chunks) on the
validation ledgers of ``data=ledgers_qa`` and records, per chunk row, the middles drawn at random
and the ones the query chose, by plain attention (``query``) and against each position's prior
(``query_lift``) (``scaleformer.ops.query_middle.choose``'s input and output):

- the share of middle picks per tenth of the chunk's interior;
- the share that also lies in the next chunk (the overlap: encoded twice, kept twice);
- the share of the answer's tokens among everything the decoder gets (boundaries and middles).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

try:
    import scaleformer  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _answer_positions(tok: Any, text: str, answer: str) -> set[int]:
    """Token positions (in the document's ids, specials included) overlapping the answer's characters."""
    start = text.index(answer)
    end = start + len(answer)
    enc = tok(text, add_special_tokens=True, split_special_tokens=True, return_offsets_mapping=True, verbose=False)
    return {i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > a and a < end and b > start}


def measure(backbone: str, n_docs: int, overrides: list[str]) -> dict[str, Any]:
    import torch

    from scaleformer.compose import compose_config
    from scaleformer.data.sources import SyntheticSource
    from scaleformer.methods import build_method
    from scaleformer.model.backbone import build_model, prepare
    from scaleformer.ops import query_middle
    from scaleformer.runs.context import to_config

    base = [f"backbone={backbone}", "data=ledgers_qa", "method=scaleformer_middle_query", "method.chunk_size=992",
            "method.encoder_batch_size=256", *overrides]
    rc = to_config(compose_config(base))
    ready = prepare(rc.backbone)
    tok, spec = ready.tokenizer, ready.spec
    model = build_model(rc.backbone, ready.conf).eval()
    rows = [json.loads(line) for line in SyntheticSource(rc.data).file("validation").read_text().splitlines()]
    seen: dict[str, Any] = {}
    real_choose = query_middle.choose

    def choose(scores: torch.Tensor, pos: torch.Tensor, k: int) -> torch.Tensor:
        out = real_choose(scores, pos, k)
        seen["drawn"], seen["chosen"] = pos.cpu(), out.cpu()
        return out

    k = rc.method.boundary_tokens
    names = ("random", "query", "query_lift")
    tally = {name: {"deciles": [0] * 10, "middles": 0, "in_next_chunk": 0, "answer_kept": 0, "answer_tokens": 0}
             for name in names}
    query_middle.choose = choose
    try:
        for strategy in names[1:]:
            method = build_method(to_config(compose_config([*base, f"method.middle_strategy={strategy}"])).method, spec)
            real_layout = method.layout

            def layout(*args: Any, real_layout: Any = real_layout, **kwargs: Any) -> Any:
                seen["layout"] = real_layout(*args, **kwargs)
                return seen["layout"]

            method.layout = layout
            for row in rows[:n_docs]:
                ids = tok(row["input"], add_special_tokens=True, split_special_tokens=True)["input_ids"]
                q = tok(row["query"], add_special_tokens=False, split_special_tokens=True)["input_ids"]
                with torch.no_grad():
                    method.encode(model.get_encoder(), torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long),
                                  training=False, prefix_ids=torch.tensor([q]),
                                  prefix_mask=torch.ones(1, len(q), dtype=torch.long))
                lay = seen["layout"]
                answer = _answer_positions(tok, row["input"], row["output"])
                nxt = torch.cat([lay.table.start[1:], lay.table.start.new_tensor([10**9])])  # [R] next chunk's start
                nxt = torch.where(lay.table.is_last, torch.full_like(nxt, 10**9), nxt)
                measured = [(strategy, seen["chosen"])] + ([("random", seen["drawn"])] if strategy == "query" else [])
                for name, pos in measured:
                    t = tally[name]
                    left, right = pos[:, :k].max(1, keepdim=True).values, pos[:, -k:].min(1, keepdim=True).values
                    mid = pos[:, k:-k]  # [R, m] row coordinates
                    real = mid > left  # slots that hold a token
                    share = (mid - left).float() / (right - left).clamp(min=1).float()  # (0, 1) inside the interior
                    for d in (share[real] * 10).long().clamp(0, 9).tolist():
                        t["deciles"][d] += 1
                    doc_pos = lay.doc_position(pos - lay.prefix_len[:, None])  # [R, G] document positions
                    t["middles"] += int(real.sum())
                    t["in_next_chunk"] += int(((doc_pos[:, k:-k] >= nxt[:, None] + lay.content_offset) & real).sum())
                    kept = set(doc_pos[torch.cat([torch.ones_like(pos[:, :k], dtype=torch.bool), real,
                                                  torch.ones_like(pos[:, -k:], dtype=torch.bool)], 1)].tolist())
                    t["answer_kept"] += len(answer & kept)
                    t["answer_tokens"] += len(answer)
    finally:
        query_middle.choose = real_choose
    out: dict[str, Any] = {"backbone": backbone, "documents": min(n_docs, len(rows)), "split": "validation",
                           "chunk_size": rc.method.chunk_size, "overlap": rc.method.overlap,
                           "middle_tokens": rc.method.middle_tokens, "boundary_tokens": k}
    for name, t in tally.items():
        n = max(t["middles"], 1)
        out[name] = {"middles": t["middles"],
                     "by_tenth_of_interior": [round(100 * c / n, 1) for c in t["deciles"]],
                     "in_next_chunk": round(100 * t["in_next_chunk"] / n, 1),
                     "answer_tokens_kept": round(100 * t["answer_kept"] / max(t["answer_tokens"], 1), 1)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backbone", default="tiny_bart_qa_reader")
    ap.add_argument("--docs", type=int, default=128, help="validation ledgers to read (default: all 128)")
    ap.add_argument("--out", type=Path, help="write the report here (JSON)")
    ap.add_argument("overrides", nargs="*", help="more config overrides (e.g. method.middle_tokens=128)")
    args = ap.parse_args(argv)
    if args.docs < 1:
        ap.error(f"--docs={args.docs}: must be >= 1")
    report = measure(args.backbone, args.docs, args.overrides)
    text = json.dumps(report, indent=2) + "\n"
    if args.out:
        from scaleformer.io import atomic_write_text

        atomic_write_text(args.out, text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
