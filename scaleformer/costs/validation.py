"""Validation during training in a cost table: how many validations, on how many documents, at what cost each.

Everything is read from the paper profile's composed config (``trainer.*``, ``data.*``), never typed in:

- validations: Lightning counts ``trainer.val_check_interval`` (an int) in training micro-batches, not
  optimiser steps, so a run of ``max_steps x accumulate_grad_batches`` micro-batches validates
  ``micro-batches // val_check_interval`` times (``check_val_every_n_epoch: null``). A fraction ``f`` of an epoch
  (the paper profile's 0.5) validates every ``int(n x f)`` of an epoch's ``n`` micro-batches, ``n // int(n x f)``
  times an epoch, when the training set's size is known (``paper_train_docs``); else the total is unknown.
  Early stopping can only end a run sooner: the count is an upper bound;
- documents each time: ``trainer.limit_val_batches`` (an int counts documents, the split's first, whatever
  the evaluation batch: :func:`scaleformer.runs.trainer.validation_docs`), at most ``data.max_eval_examples``
  and the validation split's size where the spec gives it (``paper_eval_docs: {<column>: {validation: n,
  test: m}}``);
- seconds per document, by ``trainer.validation``: ``paper``, the test's generation per document (the same
  record and scaling as the test's); ``greedy``, its encoding plus its decoding per token times the token
  cap (4 beams' seconds per token: an upper bound for 1 beam); ``loss``, the forward share of a training
  micro-batch at the paper's length (the measured phases; a third where none were timed), per document.
"""

from __future__ import annotations

from typing import Any

from scaleformer.config import TrainerConfig


def _count(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def validation_plan(t: Any, data: Any, micro_batches: int, split_docs: int | None = None,
                    epoch_batches: int | None = None) -> dict[str, Any]:
    """The validations of a run (``t``: the composed trainer group, ``data``: the data group; ``epoch_batches``:
    micro-batches an epoch, where the training set's size is known): their number, documents, mode, and a
    sentence saying where each number comes from."""
    mode = str(t.get("validation", TrainerConfig.validation))
    cap = int(t.get("validation_max_new_tokens", TrainerConfig.validation_max_new_tokens))
    every, limit = t.get("val_check_interval"), t.get("limit_val_batches")
    plan: dict[str, Any] = {"validation": mode, "val_max_new_tokens": cap if mode == "greedy" else None,
                            "docs_per_step": int(data.get("batch_size") or 1)}
    if limit in (0, 0.0) or (every is None and t.get("check_val_every_n_epoch") is None):
        return {**plan, "val_rounds": 0, "val_docs": 0, "val_docs_round": 0,
                "val_source": "no validation during training (trainer.limit_val_batches=0 or no interval)"}
    said = []
    if _count(every) and t.get("check_val_every_n_epoch") is None:
        rounds: int | None = micro_batches // every
        said.append(f"trainer.val_check_interval={every:,} micro-batches in {micro_batches:,}: {rounds} validations")
    elif isinstance(every, float) and 0 < every <= 1 and epoch_batches:
        gap = max(1, int(epoch_batches * every))
        per_epoch = epoch_batches // gap
        rounds = per_epoch * (micro_batches // epoch_batches)
        said.append(f"trainer.val_check_interval={every} of an epoch's {epoch_batches:,} micro-batches: every {gap:,}, "
                    f"{per_epoch} an epoch, {rounds} validations"
                    + (f" at most (early stopping after {t.get('early_stopping_patience')} without a better score)"
                       if t.get("early_stopping_patience") else ""))
    else:
        rounds = None
        said.append(f"trainer.val_check_interval={every} (check_val_every_n_epoch="
                    f"{t.get('check_val_every_n_epoch')}): per epoch, not derived without the training set's size")
    if _count(limit):  # documents, whatever the evaluation batch (scaleformer.runs.trainer.validation_docs)
        per: int | None = limit
        said.append(f"trainer.limit_val_batches={limit} documents")
    elif isinstance(limit, float) and split_docs:
        per = int(limit * split_docs)
        said.append(f"trainer.limit_val_batches={limit} of the {split_docs} validation documents")
    else:
        per = None
        said.append(f"trainer.limit_val_batches={limit}: a fraction of a split of unknown size, not derived")
    for key, most in (("data.max_eval_examples", _count(data.get("max_eval_examples"))),
                      ("the validation split's size", split_docs)):
        if per is not None and most is not None and most < per:
            per = most
            said.append(f"at most {most} ({key})")
    docs = None if rounds is None or per is None else rounds * per
    return {**plan, "val_rounds": rounds, "val_docs_round": per, "val_docs": docs, "val_source": "; ".join(said)}


# What one validation document's seconds are read from, per trainer.validation (the table's summary line).
BASIS = {"paper": "the paper's protocol: the test's generation per document (same beams and max_new_tokens)",
         "greedy": "trainer.validation=greedy (not the paper's protocol): the test generation's encoding + its "
                   "decoding per token x the cap (its beams' time per token: at most what 1 beam takes)",
         "loss": "trainer.validation=loss (not the paper's protocol): the forward share of a training micro-batch "
                 "at the paper's length, per document"}


def seconds_per_doc(m: dict[str, Any], plan: dict[str, Any]) -> tuple[float | None, str]:
    """One validation document's seconds under the plan's ``trainer.validation``, and what they rest on."""
    mode = plan.get("validation", TrainerConfig.validation)
    if mode == "loss":
        if m.get("step_s") is None:
            return None, "no timed training step"
        phases = m.get("phases") or {}
        total = sum(v for v in phases.values() if isinstance(v, int | float))
        share = phases["forward"] / total if total and isinstance(phases.get("forward"), int | float) else 1 / 3
        basis = "its measured phases" if total and "forward" in phases else "a third: no phases timed"
        return (m["step_s"] * share / max(plan.get("docs_per_step", 1), 1),
                f"trainer.validation=loss (not the paper's protocol): the forward share ({100 * share:.0f}%, {basis}) "
                f"of a training micro-batch's {m['step_s']:.3g} s at the paper's length")
    gen = m.get("gen_s_doc")
    if gen is None:
        return None, "no timed generation"
    if mode == "greedy":
        enc, dec, made = m.get("gen_encode_s_doc"), m.get("gen_decode_s_doc"), m.get("gen_new_tokens")
        cap = plan.get("val_max_new_tokens") or TrainerConfig.validation_max_new_tokens
        if enc is None or dec is None or not made:
            return gen, (f"trainer.validation=greedy (not the paper's protocol): the test's {gen:.3g} s per document "
                         "(its record does not split encoding from decoding)")
        return enc + dec * min(1.0, cap / made), (
            f"trainer.validation=greedy (not the paper's protocol): the test generation's encoding {enc:.3g} s + its "
            f"decoding {dec:.3g} s x {min(cap, made):,.0f} of its {made:,.0f} tokens (its beams' time per token: at "
            "most what 1 beam takes)")
    return gen, BASIS["paper"]


def validation_cost(m: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """``val_s`` (None: unknown), seconds per document, and the source of both."""
    per, basis = seconds_per_doc(m, plan)
    docs = plan.get("val_docs")
    if not docs:
        return {"val_s": 0.0 if docs == 0 else None, "val_s_doc": per, "val_source": plan.get("val_source", "")}
    return {"val_s": None if per is None else docs * per, "val_s_doc": per,
            "val_source": f"{plan.get('val_source', '')}; {basis}"}
