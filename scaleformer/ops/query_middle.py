"""Query-aware middle tokens for ScaleFormer + Middle (``method.middle_strategy=query``).

The paper keeps m randomly chosen interior tokens per chunk besides the fused boundaries and leaves
smarter selection open. With a query (SCROLLS' question, encoded at the head of every chunk row as
SLED does), this picks, per chunk, the m interior tokens the query attends to most in the encoder's
last layer: the last layer's self-attention probabilities from every query position to every chunk
position, averaged over heads and query positions, top-m among the interior (neither boundary nor
special), kept in document order. The same rule runs in training and evaluation.

The scores come from the last layer's own projections of its inputs (BART: the layer input; T5:
its pre-attention norm, plus the relative-position bias rows of the query positions), recorded by a
forward pre-hook while the whole encoder runs; the kept states are then gathered from its output
(the kept-positions shortcut of :mod:`scaleformer.ops.kept_layer` does not apply: the selection needs
the full row first). Rows without a query keep the middles the method drew.

``middle_strategy=query_lift`` divides each score by the attention the position gets from all of the
row's tokens: with the QA reader, plain attention picks mostly near the chunk's ends and in the stretch
the next chunk repeats (``scripts/selector_picks.py``, docs/results.md), which position, not the question,
explains. The layer's inputs are
bound by name and its submodules checked as :mod:`scaleformer.ops.kept_layer` does (the seam,
:mod:`scaleformer.ops.compat`); where a transformers release lays the layer out otherwise, the drawn
middles are kept and a warning says so once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from torch import nn

from scaleformer.ops.kept_layer import Pick, full_then_gather, gather, layer_fits, layer_inputs
from scaleformer.ops.spans import encoder_family, encoder_layers

log = logging.getLogger(__name__)
_warned: list[bool] = []  # one warning per process


def query_scores(family: str, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None,
                 valid: torch.Tensor, query: torch.Tensor, lift: bool = False) -> torch.Tensor:
    """Mean attention ``[mb, w]`` from the query positions (``query [mb, w]`` bool) to every position.

    x: the last layer's input ``[mb, w, d]``; valid: real tokens ``[mb, w]``; bias (T5): ``[1|mb, H, w, w]``.
    ``lift``: divided by the mean attention the position gets from every real token of the row, its
    positional prior: a token the query singles out beats one that everything attends to (chunk edges).
    """
    if family == "bart":
        attn = layer.self_attn
        n, heads, scale = x, attn.num_heads, attn.scaling
        q_proj, k_proj = attn.q_proj, attn.k_proj
    else:
        sa = layer.layer[0]
        attn = sa.SelfAttention
        n, heads, scale = sa.layer_norm(x), attn.n_heads, 1.0  # T5 folds the scale into its weights
        q_proj, k_proj = attn.q, attn.k
    mb, w, _ = x.shape
    q = q_proj(n).view(mb, w, heads, -1).transpose(1, 2)  # [mb, H, w, D]
    k = k_proj(n).view(mb, w, heads, -1).transpose(1, 2)
    logits = (q @ k.transpose(-1, -2)).float() * scale  # [mb, H, w, w]: query rows x key columns
    if bias is not None:
        logits = logits + bias.float()
    logits = logits.masked_fill(~valid[:, None, None, :], float("-inf"))
    probs = logits.softmax(-1)  # [mb, H, w, w]
    weight = (query & valid).float()  # [mb, w] the query rows that count
    per_row = (probs.mean(1) * weight[:, :, None]).sum(1)  # [mb, w]
    scores = per_row / weight.sum(1, keepdim=True).clamp(min=1)
    if lift:
        rows = valid.float()  # [mb, w] every real token as a query row
        prior = (probs.mean(1) * rows[:, :, None]).sum(1) / rows.sum(1, keepdim=True).clamp(min=1)  # [mb, w]
        scores = scores / prior.clamp(min=torch.finfo(prior.dtype).tiny)
    return scores


def choose(scores: torch.Tensor, pos: torch.Tensor, k: int) -> torch.Tensor:
    """``pos [Q, 2k + m]`` (left k | middle m | right k) with the middle slots replaced by the m interior
    positions of highest score, ascending. Middle slots that held no token (at or before the left
    boundary: the method's marker for "none") stay as they were, so the emitted count is unchanged."""
    m = pos.shape[1] - 2 * k
    if m <= 0:
        return pos
    left_max = pos[:, :k].max(1, keepdim=True).values  # [Q, 1]
    right_min = pos[:, k + m:].min(1, keepdim=True).values
    mid = pos[:, k:k + m]
    take = (mid > left_max).sum(1, keepdim=True)  # [Q, 1] real middle slots
    p = torch.arange(scores.shape[1], device=pos.device)[None, :]  # [1, w]
    candidate = (p > left_max) & (p < right_min)  # [Q, w] the interior of each chunk
    masked = scores.masked_fill(~candidate, float("-inf"))
    top = masked.topk(m, dim=1).indices  # [Q, m] best first
    j = torch.arange(m, device=pos.device)[None, :]
    ordered = torch.where(j < take, top, torch.iinfo(top.dtype).max).sort(1).values  # chosen, ascending
    return torch.cat([pos[:, :k], torch.where(j < take, ordered, mid), pos[:, k + m:]], 1)


def query_middle_picks(k: int, lift: bool = False):
    """A pick function (see :func:`scaleformer.ops.chunking.encode_chunks`) that moves each chunk row's
    middle slots to the query's most-attended interior tokens; ``k`` boundary tokens per side; ``lift``:
    scored against each position's attention from the whole row (:func:`query_scores`)."""

    def pick(encoder: nn.Module, ids: torch.Tensor, mask: torch.Tensor, picks: Sequence[Pick]
             ) -> list[torch.Tensor]:
        if not layer_fits(encoder):
            if not _warned:
                _warned.append(True)
                log.warning("method.middle_strategy=query: %s's last layer is not one the scores can read "
                            "(not BART/T5, or another transformers layout): keeping the drawn middles",
                            type(encoder).__name__)
            return full_then_gather(encoder, ids, mask, picks)
        family = encoder_family(encoder)
        layer = encoder_layers(encoder)[-1]
        seen: dict = {}

        def record(module: nn.Module, args: tuple, kwargs: dict) -> None:
            seen["args"], seen["kwargs"] = args, kwargs

        handle = layer.register_forward_pre_hook(record, with_kwargs=True)
        try:
            h = encoder(input_ids=ids, attention_mask=mask).last_hidden_state  # [mb, w, d]
        finally:
            handle.remove()
        x, bias = layer_inputs(family, layer, seen["args"], seen["kwargs"])
        valid = mask.bool()
        outs = []
        for i, (rows, pos) in enumerate(picks):
            if i == 0 and pos.shape[1] > 2 * k:  # the chunk rows (later picks: the prefix copies)
                xr = x if rows is None else x.index_select(0, rows)
                vr = valid if rows is None else valid.index_select(0, rows)
                br = bias if bias is None or bias.shape[0] == 1 or rows is None else bias.index_select(0, rows)
                query = torch.arange(x.shape[1], device=pos.device)[None, :] < pos[:, :1]  # before the segment
                with torch.no_grad():  # a choice, not a function to differentiate
                    scores = query_scores(family, layer, xr, br, vr, query, lift)
                has_query = query.any(1, keepdim=True)
                pos = torch.where(has_query, choose(scores, pos, k), pos)
            outs.append(gather(h, rows, pos))
        return outs

    return pick
