"""Documents for causal language modeling: packed training sequences and whole evaluation documents.

MASFormer continues a pretrained causal LM on sequences of ``n`` tokens (section 4.1: 8,192) and reports the
perplexity of held-out documents. So:

- **training**: every training document, wrapped in the tokenizer's document specials (``<s> ... </s>``), joined
  into one stream in a fixed seeded order and cut into rows of ``n`` tokens (the tail shorter than ``n`` is left
  out and counted). A row may hold the end of one document and the start of the next, which reads across the
  boundary, as GPT-style continual training does. Rows are drawn by the seeded, resumable sampler of the
  summarization runs, so a continued run sees the rows an uninterrupted one would.
- **evaluation**: each document alone, cut to its first ``n`` tokens (the window the model was trained on), in
  batches padded on the right. Marked dependencies (:mod:`scaleformer.data.synthetic_lm`) travel as (token,
  antecedent token) pairs inside the cut.

Rows come from the same sources as summarization (synthetic, local files, the hub), the text from
``data.input_field``. Tokenized in memory: what the tiny and smoke profiles need; a Pile-scale corpus
(``data.corpus``) is tokenized ahead into shards and read in stream order (:mod:`scaleformer.data.corpus`).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from scaleformer.config import DataConfig
from scaleformer.data.corpus import CorpusRows, prepare
from scaleformer.data.errors import DataError
from scaleformer.data.sampler import EvaluationShards, ResumableSampler
from scaleformer.data.sources import configured_roles, make_source
from scaleformer.data.synthetic_lm import beyond_block, dependency_tokens
from scaleformer.model.tokenizer import tokenizer_fingerprint

log = logging.getLogger(__name__)


@dataclass
class Document:
    id: str
    ids: np.ndarray  # [tokens] int64, the document specials included
    deps: list[tuple[int, int]] = field(default_factory=list)  # (token, antecedent token) of marked values


def _dependencies(where: str, deps: Any, chars: int) -> list[list[int]]:
    """A row's ``deps``: ``[value start, value end, antecedent]`` character offsets into its text (what
    :mod:`scaleformer.data.synthetic_lm` writes), checked before they index the text; absent or null: none."""
    if deps is None:
        return []
    ok = isinstance(deps, list) and all(
        isinstance(d, list | tuple) and len(d) == 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in d)
        and 0 <= d[2] < chars and 0 <= d[0] < d[1] <= chars for d in deps)
    if not ok:
        shown = repr(deps)[:80]
        raise DataError(f"{where}: field 'deps' is {shown}: must be a list of [value start, value end, antecedent] "
                        f"character offsets (integers within the text's {chars} characters), or absent")
    return [list(d) for d in deps]


class LanguageModelingData:
    """The splits of ``cfg`` as documents; ``length``: the sequence the model reads (``method.max_length``)."""

    def __init__(self, cfg: DataConfig, tokenizer: Any, length: int, *, seed: int = 42,
                 train_rows: int | None = None) -> None:
        if length < 2:
            raise DataError(f"method.max_length={length}: a language-model sequence needs at least 2 tokens")
        self.cfg, self.tokenizer, self.length, self.seed = cfg, tokenizer, length, seed
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.docs: dict[str, list[Document]] = {}
        self.packed: torch.Tensor | None = None  # [rows, length]
        self.dropped_tokens = 0
        self.train_rows = train_rows  # with data.corpus: the rows training reads (tokenized ahead, no more)
        self.corpus: CorpusRows | None = None

    def setup(self) -> None:
        if self.cfg.corpus is not None and self.train_rows is None:
            raise DataError(f"data.corpus={self.cfg.corpus!r}: tokenized ahead for a number of steps; set "
                            "trainer.max_steps (not -1)")
        source = make_source(self.cfg)
        source.check()
        for role in configured_roles(self.cfg):
            if role != "train" or self.cfg.corpus is None:  # the corpus replaces the train split
                self.docs[role] = self._read(source, role)
        if self.cfg.corpus is not None and self.cfg.max_train_examples is not None:
            log.warning("data.max_train_examples=%d is not read with data.corpus=%s: the corpus is read by tokens "
                        "(trainer.max_steps x the batch x method.max_length)", self.cfg.max_train_examples,
                        self.cfg.corpus)
        if self.cfg.corpus is not None and self.train_rows:
            folder = prepare(self.cfg, self.tokenizer, tokenizer_fingerprint(self.tokenizer),
                             int(self.train_rows) * self.length)
            self.corpus = CorpusRows(folder, self.length)
            if len(self.corpus) == 0:  # training would take no step and report the untrained weights as its own
                raise DataError(f"data.corpus={self.cfg.corpus!r}: holds {self.corpus.tokens} tokens, fewer than one "
                                f"sequence of method.max_length={self.length}; nothing to train on")
        elif self.docs.get("train"):
            self.packed = self._pack(self.docs["train"])
        elif self.train_rows != 0:  # training asked for, and there is nothing to train on
            raise DataError(f"data={self.cfg.name}: the train split has no document to train on; give it documents "
                            "or set trainer.do_train=false to score the weights as they are")

    def _read(self, source: Any, role: str) -> list[Document]:
        raw = source.rows(role)
        cap = self.cfg.max_train_examples if role == "train" else self.cfg.max_eval_examples
        texts, ids, deps, first = [], [], [], {}
        for n, (where, row) in enumerate(raw.records):
            if cap is not None and n >= cap:
                break
            text = row.get(self.cfg.input_field)
            if not isinstance(text, str):
                raise DataError(f"{raw.where} {where}: field {self.cfg.input_field!r} (data.input_field) is "
                                f"{type(text).__name__}, not text")
            doc_id = str(row.get(self.cfg.id_field) if self.cfg.id_field else f"{raw.id_stem}-{n}")
            if doc_id in first:  # perplexity is kept per id: a second document of one id would vanish from it
                raise DataError(f"{raw.where} {first[doc_id]} and {where}: id {doc_id!r} names two documents; "
                                f"perplexity is scored per document (data.id_field={self.cfg.id_field!r})")
            first[doc_id] = where
            texts.append(text)
            ids.append(doc_id)
            deps.append(_dependencies(f"{raw.where} {where}", row.get("deps"), len(text)))
        if not texts:
            return []
        enc = self.tokenizer(texts, return_offsets_mapping=True)
        out = []
        for i, text_ids in enumerate(enc["input_ids"]):
            pairs = dependency_tokens([tuple(o) for o in enc["offset_mapping"][i]], deps[i]) if deps[i] else []
            out.append(Document(ids[i], np.asarray(text_ids, dtype=np.int64), pairs))
        return out

    def _pack(self, docs: list[Document]) -> torch.Tensor:
        order = list(range(len(docs)))
        random.Random(self.seed).shuffle(order)
        stream = np.concatenate([docs[i].ids for i in order])
        rows = len(stream) // self.length
        if rows == 0:  # a sliver of data (debug=default): one shorter sequence rather than none
            log.warning("data=%s: the training documents hold %d tokens, fewer than one sequence of "
                        "method.max_length=%d: training reads one sequence of %d", self.cfg.name, len(stream),
                        self.length, len(stream))
            return torch.from_numpy(stream)[None]  # [1, tokens]
        self.dropped_tokens = len(stream) - rows * self.length
        return torch.from_numpy(stream[: rows * self.length].reshape(rows, self.length))  # [rows, n]

    # ---------------------------------------------------------------------------------------- loaders
    def has_split(self, role: str) -> bool:
        return bool(self.docs.get(role)) or (role == "train" and self.corpus is not None and len(self.corpus) > 0)

    def train_dataloader(self) -> DataLoader:
        if self.corpus is not None:  # in stream order, one pass (a shuffled corpus): rows dealt to the processes
            rows = self.corpus
            return DataLoader(range(len(rows)), batch_size=self.cfg.batch_size, num_workers=self.cfg.num_workers,
                              sampler=ResumableSampler(len(rows), self.seed, batch_size=self.cfg.batch_size,
                                                       shuffle=False),
                              collate_fn=lambda idx: {"input_ids": torch.from_numpy(np.stack([rows[i] for i in idx]))})
        assert self.packed is not None, "setup() first, with a train split"
        packed = self.packed
        return DataLoader(range(len(packed)), batch_size=self.cfg.batch_size,
                          sampler=ResumableSampler(len(packed), self.seed, batch_size=self.cfg.batch_size), num_workers=self.cfg.num_workers,
                          collate_fn=lambda idx: {"input_ids": packed[list(idx)]}, drop_last=False)

    def dataloader(self, role: str, first: int | None = None) -> DataLoader:
        """The documents of ``role`` (the first ``first``), each cut to ``length``, padded on the right."""
        docs = self.docs[role][:first] if first is not None else self.docs[role]
        size = self.cfg.eval_batch_size or self.cfg.batch_size
        # in file order; under several processes each takes as many batches (a sharded model's need)
        return DataLoader(list(range(len(docs))), batch_size=size, sampler=EvaluationShards(len(docs), size),
                          collate_fn=lambda idx: self._eval_batch([docs[i] for i in idx]))

    def _eval_batch(self, docs: list[Document]) -> dict[str, Any]:
        cut = [d.ids[: self.length] for d in docs]
        width = max(len(c) for c in cut)
        ids = torch.full((len(cut), width), self.pad_id, dtype=torch.long)  # [B, N]
        mask = torch.zeros(len(cut), width, dtype=torch.long)
        for i, c in enumerate(cut):
            ids[i, : len(c)] = torch.from_numpy(c)
            mask[i, : len(c)] = 1
        return {"input_ids": ids, "attention_mask": mask, "ids": [d.id for d in docs],
                "deps": [[(t, a) for t, a in d.deps if t < self.length] for d in docs]}

    def summary(self, block: int | None = None) -> dict[str, dict[str, Any]]:
        """Per split: documents, tokens, how many are cut; with ``block``, how many of the predicted tokens (in the
        cut) are marked values whose antecedent lies before their block: what only longer attention can predict."""
        out: dict[str, dict[str, Any]] = {}
        for role, docs in self.docs.items():
            lengths = [len(d.ids) for d in docs]
            out[role] = {"n_examples": len(docs), "n_ids": len(docs), "tokens": int(sum(lengths)),
                         "mean_tokens": round(float(np.mean(lengths)), 1) if lengths else 0,
                         "max_tokens": int(max(lengths, default=0)),
                         "cut_at": self.length, "n_cut": sum(n > self.length for n in lengths)}
            if block and any(d.deps for d in docs):
                predicted = sum(min(n, self.length) - 1 for n in lengths)
                far = sum(beyond_block(t, a, block) for d in docs for t, a in d.deps if t < self.length)
                out[role] |= {"dependency_block": block, "tokens_beyond_block": far,
                              "share_beyond_block": round(far / max(predicted, 1), 4)}
        if self.packed is not None:
            out["train"] |= {"packed_rows": int(self.packed.shape[0]), "dropped_tokens": int(self.dropped_tokens)}
        if self.corpus is not None:
            out["train"] = {"corpus": self.cfg.corpus, "tokens": self.corpus.tokens, "packed_rows": len(self.corpus),
                            "rows_read": min(len(self.corpus), int(self.train_rows or 0))}
        return out
