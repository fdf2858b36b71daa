"""Greedy and beam search as one step function over static buffers, so that a whole decoding step compiles.

Why: decoding waits on the host. transformers' ``generate`` dispatches 1,317 ``aten`` operators per token at 1
beam and 1,834 at 4 (BART-base shape on a CPU, ``results/bench/decode-overhead-cpu.md``), and 5.24 compiles
greedy search only: its beam search calls the model eagerly, and the paper decodes with 4 beams.

How (:func:`generate`): the cross-attention keys/values are projected once per document and shared by its
beams (:func:`scaleformer.ops.decoding.cross_cache`), the self-attention cache is a ``StaticCache`` of
``prompt + max_new_tokens`` positions, and :class:`Decoder` holds every running tensor in a buffer of fixed
shape. One call of its ``step`` runs the decoder for the last token of every hypothesis, then, on the device:
log-softmax (beam search), the logits processors transformers would apply (no repeated n-grams, minimum length
and new tokens, forced BOS/EOS), the top-k over beams x vocabulary, the running and finished beams by index,
the length and the stopping flag; then :meth:`Decoder.reorder` moves the self-attention cache's rows after the
beams, in place and outside the compiled step (inside it inductor's fusion miscompiled the in-place gather).
Once the flag is set a step changes nothing, so the host reads it only every ``check_every`` steps and the
tokens do not depend on when.
The position is a tensor, so every step has the same shapes: ``torch.compile(fullgraph=True)`` takes the step
whole (``compile=True``: inductor on a CPU, CUDA graphs on a GPU); the first step, which sizes the lazily
allocated static cache, runs eagerly.

The rules are transformers 5.24's ``_sample`` (greedy) and ``_beam_search`` (its vectorised beam search: the
top ``2 x beams`` continuations, the length penalty on finished hypotheses, ``early_stopping`` True, False or
"never" and its heuristic, the output cropped by the beam indices), so the tokens equal ``generate``'s (tested:
BART and T5, every method, greedy and 4 beams, ``no_repeat_ngram_size`` 0 and 3, ``length_penalty``,
``min_new_tokens``, ragged batches). A setting it does not implement (sampling, a processor it lacks, more than
one returned sequence, an output dictionary) returns None from :func:`supported`'s reason, and the caller runs
``generate``.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from scaleformer.ops import compat, decoding, static_decoding

NEG = -1.0e9  # transformers' "cannot be chosen" score in beam search
# Generation settings this decoder implements, at any value; every other one must be at transformers' default.
HANDLED = ("num_beams", "max_new_tokens", "max_length", "min_new_tokens", "min_length", "length_penalty",
           "no_repeat_ngram_size", "early_stopping", "forced_bos_token_id", "forced_eos_token_id", "eos_token_id",
           "pad_token_id", "decoder_start_token_id", "bos_token_id", "use_cache", "do_sample")
# Settings whose non-default values need a processor or output this decoder does not have.
UNHANDLED_DEFAULTS: dict[str, Any] = {
    "do_sample": False, "num_return_sequences": 1, "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0,
    "bad_words_ids": None, "sequence_bias": None, "suppress_tokens": None, "begin_suppress_tokens": None,
    "encoder_no_repeat_ngram_size": 0, "exponential_decay_length_penalty": None, "renormalize_logits": False,
    "remove_invalid_values": False, "guidance_scale": None, "num_beam_groups": 1, "diversity_penalty": 0.0,
    "constraints": None, "force_words_ids": None, "output_scores": False, "output_logits": False,
    "output_attentions": False, "output_hidden_states": False, "return_dict_in_generate": False,
    "watermarking_config": None, "prompt_lookup_num_tokens": None, "penalty_alpha": None, "low_memory": None,
    "use_cache": True, "assistant_model": None, "max_time": None, "stop_strings": None,
}


def resolve(model: nn.Module, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The generation config ``generate`` would use (the given or the model's, updated by the keywords) and the
    keywords it does not take (model inputs)."""
    gen = copy.deepcopy(kwargs.pop("generation_config", None) or model.generation_config)
    rest = gen.update(**kwargs)
    if gen.max_new_tokens is not None:
        gen.max_length = 1 + gen.max_new_tokens  # transformers' rule, the decoder prompt being the start token
    return gen, rest


def supported(gen: Any, rest: dict[str, Any]) -> str | None:
    """None when this decoder gives ``generate``'s tokens for ``gen``; else why not (one phrase)."""
    for key, default in UNHANDLED_DEFAULTS.items():
        value = getattr(gen, key, default)
        if value is not None and value != default and not (default is None and value in ((), [])):
            return f"{key}={value!r}"
    for key in rest:
        if key not in ("decoder_input_ids",) or rest[key] is not None:
            return f"the keyword {key}"
    if gen.eos_token_id is None or gen.decoder_start_token_id is None:
        return "no eos_token_id or decoder_start_token_id"
    if gen.early_stopping not in (None, True, False, "never"):
        return f"early_stopping={gen.early_stopping!r}"
    return None


def _ids(value: Any) -> list[int]:
    return [int(v) for v in value] if isinstance(value, list | tuple) else [int(value)]


class Decoder:
    """Static buffers and one step of greedy (``beams == 1``) or beam search for a batch of encoded documents.

    Shapes: ``B`` documents, ``K`` beams, ``R = B x K`` hypotheses (a document's beams adjacent), ``L`` positions
    (the start token and ``max_new_tokens``), ``V`` the vocabulary.
    """

    def __init__(self, model: nn.Module, gen: Any, hidden: torch.Tensor, mask: torch.Tensor,
                 mods: list[nn.Module]) -> None:
        self.model, self.gen = model, gen
        dev = hidden.device
        self.B, self.K, self.L = hidden.shape[0], int(gen.num_beams or 1), int(gen.max_length)
        self.R = self.B * self.K
        self.eos = torch.tensor(_ids(gen.eos_token_id), device=dev)
        pad = gen.pad_token_id
        # transformers' fill: ``pad or eos[0]`` (a pad id of 0, as T5's, falls through to the eos id)
        self.fill = int(pad) if pad else int(self.eos[0])
        self.greedy_pad = int(pad) if pad is not None else int(self.eos[0])
        self.lp = float(gen.length_penalty if gen.length_penalty is not None else 1.0)
        self.early = gen.early_stopping if gen.early_stopping is not None else False  # transformers' default
        # an n-gram is banned once t >= n tokens exist, and t < L: one longer than L - 1 tokens never applies
        self.ngram = int(gen.no_repeat_ngram_size or 0) if (gen.no_repeat_ngram_size or 0) < self.L else 0
        self.min_length = int(gen.min_length or 0)
        self.min_new = int(gen.min_new_tokens or 0)
        self.bos = gen.forced_bos_token_id
        self.forced_eos = None if gen.forced_eos_token_id is None else torch.tensor(_ids(gen.forced_eos_token_id),
                                                                                    device=dev)
        cache = decoding.cross_cache(model, mods, hidden, compat.static_cache(
            model.config.get_text_config(decoder=True), self.L))
        self.cache, self.cache_key = cache, compat.cache_kwarg(model)
        rows = hidden.new_empty(self.R, hidden.shape[1], 0)  # [R, T, 0]: the decoder reads batch, length, dtype
        self.enc = (rows,)
        self.mask = mask.repeat_interleave(self.K, 0)  # [R, T]
        self.rows = torch.arange(self.R, device=dev)
        start = int(gen.decoder_start_token_id)
        seqs = torch.full((self.B, self.K, self.L), self.fill if self.K > 1 else self.greedy_pad, device=dev)
        seqs[:, :, 0] = start
        t = torch.ones((), dtype=torch.long, device=dev)  # tokens so far (the start token)
        running = torch.ones((), dtype=torch.bool, device=dev)
        if self.K == 1:
            self.state = (seqs, torch.ones(self.B, dtype=torch.bool, device=dev), t, running)
        else:
            scores = torch.zeros(self.B, self.K, device=dev)
            scores[:, 1:] = NEG  # only the first beam's continuations at the first step
            idx = torch.full((self.B, self.K, self.L - 1), -1, dtype=torch.int32, device=dev)
            self.state = (seqs, scores, idx, seqs.clone(), torch.full((self.B, self.K), NEG, device=dev), idx.clone(),
                          torch.zeros(self.B, self.K, dtype=torch.bool, device=dev),
                          torch.ones(self.B, 1, dtype=torch.bool, device=dev), self.rows.clone(), t, running)
        self.keep = max(2, 1 + len(self.eos)) * self.K  # transformers' beams_to_keep
        self.top = (torch.arange(self.keep, device=dev) < self.K)  # [2K]: the first K may finish

    # ------------------------------------------------------------------------------------------ one step
    def logits(self, tokens: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """fp32 logits ``[R, V]`` of the next token after ``tokens [R]`` at position ``t - 1``."""
        pos = (t - 1).clamp(max=self.L - 1).view(1)  # a step after the stop writes (unused) into the last slot
        out = self.model(encoder_outputs=self.enc, attention_mask=self.mask, decoder_input_ids=tokens[:, None],
                         cache_position=pos, use_cache=True, return_dict=True, **{self.cache_key: self.cache})
        return out.logits[:, -1, :].float()

    def process(self, seqs: torch.Tensor, t: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """transformers' processors, in its order, for hypotheses ``seqs [R, L]`` of ``t`` tokens: ``scores [R, V]``."""
        vocab = scores.shape[-1]
        eos_mask = torch.isin(torch.arange(vocab, device=scores.device), self.eos)  # [V]
        if self.ngram > 0:
            n = self.ngram
            windows = seqs.unfold(1, n, 1)  # [R, L - n + 1, n]
            start = (t + 1 - n).clamp(min=0)
            prefix = seqs.gather(1, (start + torch.arange(n - 1, device=seqs.device)).expand(seqs.shape[0], n - 1))
            inside = torch.arange(windows.shape[1], device=seqs.device) <= t - n  # windows within the t tokens
            hit = (windows[..., :-1] == prefix[:, None]).all(-1) & inside & (t >= n)  # [R, L - n + 1]
            banned = scores.new_zeros(scores.shape[0], vocab + 1, dtype=torch.bool)
            banned.scatter_(1, torch.where(hit, windows[..., -1].clamp(max=vocab), vocab), True)
            scores = scores.masked_fill(banned[:, :vocab], float("-inf"))
        if self.min_length > 0:
            scores = torch.where(eos_mask & (t < self.min_length), float("-inf"), scores)
        if self.min_new > 0:
            scores = torch.where(eos_mask & (t - 1 < self.min_new), float("-inf"), scores)
        if self.bos is not None:
            only = torch.arange(vocab, device=scores.device) == int(self.bos)
            scores = torch.where(t == 1, torch.where(only, 0.0, float("-inf")), scores)
        if self.forced_eos is not None:
            only = torch.isin(torch.arange(vocab, device=scores.device), self.forced_eos)
            scores = torch.where(t == self.L - 1, torch.where(only, 0.0, float("-inf")), scores)
        return scores

    def step(self, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        return self._greedy(state) if self.K == 1 else self._beam(state)

    def _greedy(self, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        seqs, unfinished, t, running = state  # [B, 1, L], [B], [], []
        flat = seqs[:, 0]
        last = flat.gather(1, (t - 1).view(1, 1).expand(self.B, 1))[:, 0]
        scores = self.process(flat, t, self.logits(last, t))
        nxt = torch.where(unfinished, scores.argmax(-1), self.greedy_pad)
        at = torch.arange(self.L, device=seqs.device) == t  # [L]
        write = at & running
        flat = torch.where(write, nxt[:, None], flat)
        unfinished = unfinished & ~(torch.isin(nxt, self.eos) & running)
        t2 = t + running.long()
        running = running & unfinished.any() & (t2 < self.L)
        return flat[:, None], unfinished, t2, running

    def _beam(self, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        seqs, scores, idx, done, done_scores, done_idx, finished, improvable, _, t, running = state
        B, K, L = self.B, self.K, self.L
        last = seqs.gather(2, (t - 1).view(1, 1, 1).expand(B, K, 1)).reshape(self.R)
        logp = F.log_softmax(self.logits(last, t), dim=-1)
        logp = self.process(seqs.reshape(self.R, L), t, logp)
        vocab = logp.shape[-1]
        acc = (logp.view(B, K, vocab) + scores[:, :, None]).view(B, K * vocab)
        top_logp, top_i = torch.topk(acc, self.keep)  # [B, 2K]
        beam = top_i // vocab
        tok = top_i % vocab
        at = torch.arange(L, device=seqs.device) == t  # [L]
        top_seqs = torch.where(at, tok[:, :, None], seqs.gather(1, beam[:, :, None].expand(B, self.keep, L)))
        flat_beam = (beam + torch.arange(B, device=beam.device)[:, None] * K).to(idx.dtype)
        at_idx = torch.arange(L - 1, device=seqs.device) == t - 1
        top_idx = torch.where(at_idx, flat_beam[:, :, None], idx.gather(1, beam[:, :, None].expand(B, self.keep, L - 1)))
        hits = torch.isin(tok, self.eos) | (t + 1 >= L)  # [B, 2K]: EOS, or the maximum length
        # the running beams of the next step: the best K continuations that did not finish
        run_logp = top_logp + hits.float() * NEG
        nxt = torch.topk(run_logp, K)[1]
        new_seqs = top_seqs.gather(1, nxt[:, :, None].expand(B, K, L))
        new_scores = run_logp.gather(1, nxt)
        new_idx = top_idx.gather(1, nxt[:, :, None].expand(B, K, L - 1))
        # the finished hypotheses: the best K of those kept and those that finished now among the first K
        just = hits & self.top
        s = top_logp / ((t + 1 - 1).double() ** self.lp).float()
        if self.early is True:
            s = s + finished.all(-1, keepdim=True).float() * NEG
        s = s + (~improvable).float() * NEG
        s = s + (~just).float() * NEG
        m_scores = torch.cat((done_scores, s), 1)
        pick = torch.topk(m_scores, K)[1]
        new_done = torch.cat((done, top_seqs), 1).gather(1, pick[:, :, None].expand(B, K, L))
        new_done_scores = m_scores.gather(1, pick)
        new_done_idx = torch.cat((done_idx, top_idx), 1).gather(1, pick[:, :, None].expand(B, K, L - 1))
        new_finished = torch.cat((finished, just), 1).gather(1, pick)
        # the rows the self-attention cache takes next (:meth:`reorder`, after the step)
        order = new_idx.gather(2, (t - 1).view(1, 1, 1).expand(B, K, 1)).reshape(self.R).long()
        t2 = t + 1
        new_improvable = self._improvable(improvable, new_scores, new_done_scores, new_finished, t2)
        go = new_improvable.any() & ~(new_finished.all() & (self.early is True)) & ~hits.all()

        def keep(new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
            return torch.where(running, new, old)

        return (keep(new_seqs, seqs), keep(new_scores, scores), keep(new_idx, idx), keep(new_done, done),
                keep(new_done_scores, done_scores), keep(new_done_idx, done_idx), keep(new_finished, finished),
                keep(new_improvable, improvable), torch.where(running, order, self.rows), keep(t2, t), running & go)

    def _improvable(self, improvable: torch.Tensor, scores: torch.Tensor, done_scores: torch.Tensor,
                    finished: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """transformers' early-stop heuristic: can a running beam still beat the worst finished one?"""
        if self.early == "never" and self.lp > 0.0:
            length = torch.full_like(t, self.L - 1)
        else:
            length = t - 1
        best = scores[:, :1] / (length.double() ** self.lp).float()
        worst = torch.where(finished, done_scores.min(1, keepdim=True)[0], NEG)
        return improvable & (best > worst).any(-1, keepdim=True)

    def reorder(self) -> None:
        """The self-attention cache follows the running beams of the last step, in place (a CUDA graph's buffers
        stay put), outside the compiled step: inside it, inductor's fused kernels read the cache rows while
        writing them (4-beam tokens went astray on a CPU; aot_eager and unfused inductor kept them)."""
        if self.K == 1:
            return
        order = self.state[-3]
        for layer in self.cache.self_attention_cache.layers:
            for name in ("keys", "values"):
                tensor = getattr(layer, name, None)
                if isinstance(tensor, torch.Tensor) and tensor.numel():
                    tensor.copy_(tensor.index_select(0, order))

    # --------------------------------------------------------------------------------------------- output
    def output(self) -> torch.Tensor:
        """The sequences ``generate`` returns: ``[B, length]``."""
        if self.K == 1:
            seqs, _, t, _ = self.state
            return seqs[:, 0, :int(t)]
        done, done_idx = self.state[3], self.state[5]
        generated = int((done_idx[:, 0] + 1).bool().sum(-1).max())
        return done[:, 0, :1 + generated]


def compile_options(backend: str, device: torch.device) -> dict[str, Any]:
    """``torch.compile``'s mode or options for the step: on a GPU a CUDA graph (``reduce-overhead``: one launch
    per step); on a CPU inductor's C++ wrapper, which calls the step's kernels without a Python line per kernel
    (the tiny reader: 3.0 -> 1.9 ms per token at 1 beam, where transformers' loop takes 4.3)."""
    if backend != "inductor":
        return {}
    return {"mode": "reduce-overhead"} if device.type == "cuda" else {"options": {"cpp_wrapper": True}}


def plan(model: nn.Module, kwargs: dict[str, Any]) -> tuple[Any, list[nn.Module] | None, str | None]:
    """The generation config, the beam-shared cross-attention modules and None when :func:`generate` decodes
    ``kwargs`` for ``model``; else why not (one phrase) in the last place."""
    gen, rest = resolve(model, dict(kwargs))
    if (reason := supported(gen, rest)) is not None:
        return gen, None, reason
    mods = decoding.share_cross_attention(model)
    if mods is None:
        return gen, None, "no beam-shared cross-attention here (another decoder, flex attention)"
    if compat.static_cache(model.config.get_text_config(decoder=True), 2) is None:
        return gen, None, f"transformers {compat.installed('transformers')} has no StaticCache sized by max_cache_len"
    return gen, mods, None


def why_not(model: nn.Module, kwargs: dict[str, Any]) -> str | None:
    """None when :func:`generate` decodes ``kwargs`` for ``model``; else why not (one phrase)."""
    return plan(model, kwargs)[2]


def generate(model: nn.Module, hidden: torch.Tensor, mask: torch.Tensor, *, compile: str | None = None,
             check_every: int = 8, **kwargs: Any) -> torch.Tensor | None:
    """``model.generate``'s sequences from encoder states ``hidden [B, T, d]`` and ``mask [B, T]`` by the static
    step, or None where it does not apply (:func:`why_not`) or torch's compiler refuses it (said once): the caller
    then runs ``generate``. ``compile``: a ``torch.compile`` backend for the step (``inductor``; on a GPU, with it,
    a CUDA graph too), None: eager."""
    gen, mods, reason = plan(model, kwargs)
    return None if reason is not None else _run(Decoder(model, gen, hidden, mask, mods), compile, check_every)


def _run(dec: Decoder, compile: str | None, check_every: int) -> torch.Tensor | None:
    """The decode, or None when torch's compiler refuses the step (said once; the caller runs ``generate``)."""
    step = dec.step
    with torch.no_grad(), warnings.catch_warnings(), contextlib.ExitStack() as later:
        # dynamo traces the argument binding's signature caches: constants here
        warnings.filterwarnings("ignore", message="Dynamo detected a call to a `functools.lru_cache`")
        dec.state = step(dec.state)  # eager: sizes the static cache
        dec.reorder()
        if compile:
            step = torch.compile(dec.step, backend=compile, fullgraph=True, dynamic=False, **compile_options(
                compile, dec.mask.device))
        for i in range(dec.L - 2):  # L - 1 steps at most: the static cache counts its writes, stopped or not
            if i % check_every == 0 and not bool(dec.state[-1]):
                break
            try:
                dec.state = step(dec.state)
            except Exception as e:  # the first compiled call traces and compiles: torch's compiler may refuse
                if i > 0 or not compile or not type(e).__module__.startswith(("torch._dynamo", "torch._inductor")):
                    raise
                why = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                static_decoding.say_once(f"compile:{why}", "generation.compile: torch.compile(%s) refused the decoding "
                                         "step (%s: %s); transformers' generate runs instead", compile,
                                         type(e).__name__, why)
                return None
            dec.reorder()
            if i == 0 and compile:
                # The first compiled call checked every guard (and compiled); the later ones pass the same decoder
                # and state shapes, so their guards (the model's parameters among them: ~0.5 ms a call on a CPU)
                # need only tell cached graphs apart.
                later.enter_context(compat.stance("default", skip_guard_eval_unsafe=True))
    return dec.output()


def decode(model: nn.Module, hidden: torch.Tensor, mask: torch.Tensor, *, step: bool = False,
           compile: str | None = None, **kwargs: Any) -> Any:
    """The one entry of generation from encoder states: the static step (``step``) where it applies, else
    :func:`scaleformer.ops.decoding.generate` (transformers' ``generate``), saying once why. A given
    ``generation_config`` is complete (the model class resolves it from its own and the call's keywords) and is
    read whole: a setting it turns off (None, e.g. ``forced_eos_token_id``) stays off."""
    with decoding.read_whole(model, kwargs.get("generation_config")):
        if step:
            gen, mods, reason = plan(model, kwargs)
            if reason is None and (out := _run(Decoder(model, gen, hidden, mask, mods), compile, 8)) is not None:
                return out
            if reason is not None:
                static_decoding.say_once(f"step:{reason}", "generation.step_decoding: %s; transformers' generate "
                                         "runs instead", reason)
        return decoding.generate(model, hidden, mask, **kwargs)
