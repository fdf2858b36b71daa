"""Summarization as language modeling: a document, a separator and its summary in one causal sequence.

MASFormer fine-tunes its decoder-only model for summarization (section 4.2) on the document cut to the input
length, followed by the summary, with the loss on the summary alone, and decodes greedily. The paper names no
separator or query placement; the project's choices, with their reasons:

- **one sequence of at most n tokens** (``n``: ``method.max_length``): ``[document | query | sep | summary | eos]``.
  The summary has ``room`` tokens (``data.max_target_tokens``, its end token included), so the document keeps its
  first ``n - room - query - 1`` tokens, in training and generation alike: a model with learned positions has
  none beyond n, and the method's cost C is priced for n.
- **the query after the document**, right before the separator: every span reaches it from the summary (a block
  or a window reaches back only m tokens), as decoder-only SCROLLS prompts place it.
- **the separator**: the tokenizer's ``sep`` token, else its ``eos``. The summary is the reference's text without
  its own specials, closed by ``eos`` so greedy decoding stops.

Inputs are the summarization data module's tensors (right-padded documents, labels padded with -100, queries);
built by gathers, no loop over documents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from scaleformer.ops.decoding import generation_kwargs

IGNORE = -100


@dataclass(frozen=True)
class Specials:
    """Token ids of the join: ``sep`` between prompt and summary, ``eos`` closing it, ``pad``; ``bos``: the opening
    special a tokenizer may put on a reference (stripped)."""

    sep: int
    eos: int
    pad: int
    bos: int | None = None

    @classmethod
    def of(cls, tokenizer: object) -> Specials:
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos is None:
            raise ValueError("summarization as language modeling needs a tokenizer with an eos token")
        sep = getattr(tokenizer, "sep_token_id", None)
        pad = getattr(tokenizer, "pad_token_id", None)
        return cls(sep=eos if sep is None else sep, eos=eos, pad=eos if pad is None else pad,
                   bos=getattr(tokenizer, "bos_token_id", None))


def _lengths(mask: torch.Tensor | None, rows: int, device: torch.device) -> torch.Tensor:
    return mask.sum(1) if mask is not None else torch.zeros(rows, dtype=torch.long, device=device)


def _take(src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``src [B, L]`` read at ``index [B, T]``, clamped into range (callers mask what is out of it)."""
    if src.shape[1] == 0:
        return torch.zeros_like(index)
    return src.gather(1, index.clamp(0, src.shape[1] - 1))


def join(doc_ids: torch.Tensor, doc_mask: torch.Tensor, labels: torch.Tensor | None, sp: Specials, *, n: int,
         room: int, prefix_ids: torch.Tensor | None = None, prefix_mask: torch.Tensor | None = None
         ) -> dict[str, Any]:
    """The right-padded sequences ``input_ids``/``attention_mask`` ``[B, T]``, ``targets [B, T]`` (the token where it
    is one of the summary's, its eos included, else -100), ``prompt_lengths [B]`` (document, query, separator) and
    ``first_target`` (an int: the earliest row's summary start, where the loss begins). ``labels=None``: the
    prompts alone."""
    rows, dev = doc_ids.shape[0], doc_ids.device
    q = _lengths(prefix_mask, rows, dev)  # [B]
    keep = torch.minimum(doc_mask.sum(1), n - room - 1 - q)  # [B] document tokens kept
    if bool((keep < 1).any()):  # a query that leaves the document no room
        raise ValueError(f"summarization as language modeling: sequences of n = {n} tokens with {room} for the "
                         f"summary leave no room for the document beside a query of {int(q.max())} tokens; raise "
                         "method.max_length or lower data.max_target_tokens / data.max_prefix_tokens")
    a, b = keep, keep + q  # the query starts at a, the separator sits at b
    if labels is None:
        start = content = torch.zeros_like(keep)
    else:
        real = (labels != IGNORE).sum(1)  # [B]
        first = labels[:, 0] if labels.shape[1] else torch.full_like(real, IGNORE)
        last = _take(labels, (real - 1).clamp(min=0)[:, None])[:, 0]
        start = ((first == sp.bos) & (real > 0)).long() if sp.bos is not None else torch.zeros_like(real)
        end = real - ((last == sp.eos) & (real > start)).long()
        content = torch.minimum(end - start, torch.full_like(end, room - 1)).clamp(min=0)  # [B] summary text tokens
    c = b + 1  # the summary's first token
    d = c + content + (labels is not None)  # one past the eos (the prompt's end without labels)
    width, first = torch.stack([d.max(), c.min()]).tolist()  # one read of the device: [T], the earliest summary
    j = torch.arange(width, device=dev)[None]  # [1, T]
    a_, b_, c_, d_ = a[:, None], b[:, None], c[:, None], d[:, None]
    ids = torch.full((rows, width), sp.pad, dtype=torch.long, device=dev)  # [B, T]
    ids = torch.where(j < a_, _take(doc_ids, j.expand(rows, -1)), ids)
    if prefix_ids is not None:
        ids = torch.where((j >= a_) & (j < b_), _take(prefix_ids, j - a_), ids)
    ids = torch.where(j == b_, torch.full_like(ids, sp.sep), ids)
    targets = torch.full_like(ids, IGNORE)
    if labels is not None:
        text = (j >= c_) & (j < d_ - 1)
        ids = torch.where(text, _take(labels, j - c_ + start[:, None]), ids)
        ids = torch.where(j == d_ - 1, torch.full_like(ids, sp.eos), ids)
        summary = (j >= c_) & (j < d_)
        targets = torch.where(summary, ids, targets)
    return {"input_ids": ids, "attention_mask": (j < d_).long(), "targets": targets, "prompt_lengths": c,
            "first_target": first}


def left_pad(ids: torch.Tensor, lengths: torch.Tensor, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded rows ``[B, T]`` of ``lengths`` tokens moved to the right edge (what batched generation reads):
    ``(ids, attention_mask)``, each ``[B, max(lengths)]``."""
    width = int(lengths.max())
    j = torch.arange(width, device=ids.device)[None]  # [1, W]
    shift = (width - lengths)[:, None]  # [B, 1] padding before each row
    src = j - shift
    out = torch.where(src >= 0, _take(ids, src), torch.full_like(src, pad))
    return out, (src >= 0).long()


def causal_summaries(model: Any, tokenizer: Any, g: Any, batch: dict[str, torch.Tensor], *, n: int, room: int
                     ) -> list[str]:
    """Summaries of a batch (the summarization data's tensors: ``input_ids``/``attention_mask``, optional
    ``prefix_ids``/``prefix_mask``) by continuing each prompt ``[document | query | sep]`` of at most ``n - room``
    tokens (:mod:`scaleformer.ops.causal_join`), left-padded, with the decoding settings ``g`` (a
    :class:`~scaleformer.config.GenerationConfig`), for at most ``room - 1`` new tokens."""
    sp = Specials.of(tokenizer)
    seq = join(batch["input_ids"], batch["attention_mask"], None, sp, n=n, room=room,
               prefix_ids=batch.get("prefix_ids"), prefix_mask=batch.get("prefix_mask"))
    ids, mask = left_pad(seq["input_ids"], seq["prompt_lengths"], sp.pad)  # [B, P]
    kwargs = generation_kwargs(g) | {"max_new_tokens": min(g.max_new_tokens, room - 1)}
    kwargs["min_new_tokens"] = min(kwargs["min_new_tokens"], kwargs["max_new_tokens"])
    out = model.generate(input_ids=ids, attention_mask=mask, eos_token_id=sp.eos, pad_token_id=sp.pad,
                         do_sample=False, **kwargs)  # [B, P + new]
    return tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True, clean_up_tokenization_spaces=False)
