"""Summarize your own documents with an exported model, from Python or the command line.

    scaleformer summarize --model results/runs/<run>/model --input report.txt
    scaleformer summarize --model DIR --input docs.jsonl --field document --output out.jsonl
    scaleformer summarize --model DIR --input book.txt --method scaleformer --set middle_tokens=100

    from scaleformer.export.summarizer import Summarizer
    summarize = Summarizer.from_pretrained("results/runs/<run>/model")
    print(summarize(open("report.txt").read()))

The model is any folder ``AutoModelForSeq2SeqLM`` loads with its tokenizer: an export, a folder
saved by ``scripts/hf_trainer.py`` (or any ``save_pretrained``), a Hub id. Its method (config.json's)
is used unless ``--method`` names another option of ``conf/method/`` (same backbone weights, another
way of reading the document); a plain backbone needs ``--method``. ``--set key=value`` changes one of
the method's parameters. ``scaleformer.json``, an export's record, is optional: when present its
decoding settings and input cap are used, else generation_config.json's. A ``.txt`` file is one
document; a ``.jsonl`` file has one per line (``--field``), and the summaries go to a jsonl file
(``id``, ``summary``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file
from tqdm import tqdm
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

from scaleformer.compose import compose_config
from scaleformer.config import BackboneConfig, GenerationConfig
from scaleformer.data.encode import truncate_ids
from scaleformer.data.sampler import length_sorted_batches
from scaleformer.export.folder import META_FILE, METHOD_STATE, read_meta
from scaleformer.export.hub import locate, push_to_hub
from scaleformer.io import read_json_record
from scaleformer.methods import build_method, method_config
from scaleformer.model.autoreg import register
from scaleformer.model.backbone import backbone_spec
from scaleformer.model.batching import auto_batch
from scaleformer.model.hf import ScaleformerForConditionalGeneration
from scaleformer.model.hf_causal import ScaleformerForCausalLM
from scaleformer.model.hf_config import ScaleformerConfig
from scaleformer.model.wrapping import wrap
from scaleformer.ops.causal_join import causal_summaries
from scaleformer.ops.decoding import summaries
from scaleformer.progress import Lines, is_terminal

# A tokenizer's vocabulary, in one of the files save_pretrained writes (fast, BPE, WordPiece, SentencePiece).
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "spiece.model", "sentencepiece.bpe.model",
                   "tokenizer.model")


class Summarizer:
    """An exported model with its long-context method: ``summarizer(text) -> summary``.

    ``model`` is a :class:`scaleformer.model.hf.ScaleformerForConditionalGeneration`: the same class a
    run trains and ``AutoModelForSeq2SeqLM`` loads, so all three generate alike.
    """

    def __init__(self, model: Any, tokenizer: Any, generation: Any, max_input_tokens: int | None = None,
                 folder: Path | None = None, record: dict[str, Any] | None = None) -> None:
        self.model = model.eval()
        self.method = model.method
        self.tokenizer = tokenizer
        self.generation = generation
        self.max_input_tokens = max_input_tokens
        self.folder = folder
        self.record = record or {}  # the exported method record (scaleformer.json)
        # Documents decoded together (None: from the memory model); a document's summary does not depend on it.
        self.batch_size: int | None = None

    @property
    def decoder_only(self) -> bool:
        """A causal LM (MASFormer as its paper runs it): it reads document and summary as one sequence."""
        return isinstance(self.model, ScaleformerForCausalLM)

    @property
    def trained_steps(self) -> int | None:
        """Optimiser steps of the run that exported this model (None when the record does not say)."""
        step = (self.record.get("run") or {}).get("step")
        return step if isinstance(step, int) else None

    @classmethod
    def from_pretrained(cls, path: str | Path, method: str | None = None, overrides: dict[str, Any] | None = None,
                        device: str | None = None, revision: str | None = None, batch_size: int | None = None,
                        **generation: Any) -> Summarizer:
        """Load ``path``: a model folder (an export, a ``save_pretrained`` folder) or a Hub id
        (``org/name``, offline: from the local cache, else one clear error); ``method``/``overrides``
        change the method, ``generation`` keywords the decoding (e.g. ``num_beams=1``); ``batch_size``: documents
        decoded together (None: from the memory model)."""
        path = locate(path, revision)
        folder = Path(path)
        meta = read_meta(folder) if (folder / META_FILE).is_file() else None  # the record is optional
        if meta is not None:
            check_record(folder, meta)
            if meta.get("task") == "language_modeling":  # its summaries would be empty: say what it is
                raise ValueError(f"{folder}: holds a language model (continually trained for perplexity: "
                                 "scaleformer.json's task is 'language_modeling'), not a summarizer; fine-tune it for "
                                 f"summaries first (train.py experiment=masformer_summarization backbone.pretrained={folder})")
        model_type = check_folder(folder)
        if meta is None and model_type != "scaleformer" and method is None:
            raise ValueError(f"{folder}: a plain {model_type} model (config.json names no scaleformer method and "
                             "there is no scaleformer.json): name the method to read it with, e.g. --method sled")
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        register()
        auto = AutoModelForCausalLM if _decoder_only(folder) else AutoModelForSeq2SeqLM
        try:
            model, info = auto.from_pretrained(str(path), use_safetensors=True,  # data, never code
                                               output_loading_info=True)
        except RuntimeError as e:  # weights of other shapes than config.json says (a vocabulary size, a width)
            if "size mismatch" not in str(e) and "ignore_mismatched_sizes" not in str(e):
                raise
            what = next((ln.strip() for ln in str(e).splitlines() if "size mismatch" in ln or "shape" in ln),
                        str(e).strip().splitlines()[0])
            raise ValueError(f"{path}: its weights do not match its config.json ({what[:200]}): the config and "
                             "model.safetensors come from different models") from None
        # A format-1 folder loads the bare backbone; the model class checks its own weights (from_pretrained).
        if missing := sorted(info.get("missing_keys") or []):
            raise ValueError(f"{path}/model.safetensors: {len(missing)} weights missing (e.g. {missing[0]}); "
                             "the export is incomplete: export or download it again")
        rows = model.get_input_embeddings().num_embeddings
        if len(tokenizer) > rows:  # ids past the table would fail deep inside the embedding
            raise ValueError(f"{path}: the tokenizer has {len(tokenizer)} tokens but the model's embeddings "
                             f"{rows} rows: the tokenizer does not belong to these weights")
        if not isinstance(model, CLASSES) and meta is None:  # a plain backbone
            model = wrap(model, _method_config({}, method, overrides or {}), tokenizer=tokenizer)
        elif not isinstance(model, CLASSES):  # format 1: the record holds the method
            mcfg = _method_config(meta["method"]["config"], method, overrides or {})
            model = _from_format1(model, folder, meta, mcfg, tokenizer, same=method is None)
        elif method is not None or overrides:  # the loaded model's method is the one changed (the model class
            # checked that scaleformer.json records the same one)
            model = _rebuilt(model, _method_config(dataclasses.asdict(model.method.cfg), method, overrides or {}))
        recorded = meta["generation"] if meta is not None else saved_generation(model.generation_config)
        gen = GenerationConfig(**{**recorded, **generation})
        meta = meta or {}
        out = cls(model, tokenizer, gen, meta.get("max_input_tokens"), folder, meta)
        if out.decoder_only:  # document, separator and summary share one sequence: check it has room for them
            n, room = out.method.cfg.max_length, out.summary_room
            if n - room < 2:
                raise ValueError(f"max_length={n}: the decoder-only model reads the document and its summary in one "
                                 f"sequence, and the summary takes {room} tokens of it; leave the document at least "
                                 f"2 (max_length >= {room + 2}, or a smaller --max-new-tokens)")
        out.model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size={batch_size!r}: must be an integer >= 1 (None: from the memory model)")
        out.batch_size = batch_size
        return out

    def push_to_hub(self, repo_id: str, **kwargs: Any) -> str:
        """Publish the folder this Summarizer was loaded from (see :func:`scaleformer.export.hub.push_to_hub`)."""
        return push_to_hub(self.folder, repo_id, **kwargs)

    def __call__(self, text: str | Sequence[str]) -> str | list[str]:
        if isinstance(text, str):
            return self.summarize([text])[0]
        return self.summarize(list(text))

    def summarize(self, texts: list[str], progress: bool = False) -> list[str]:
        """One summary per document, in order. Documents of similar length are decoded together,
        :attr:`batch_size` at a time (None: as many as the memory model says fit, ``scaleformer.model.batching``);
        a document's summary does not depend on its batch. ``progress``: a bar on a terminal's stderr, else a
        plain line about every tenth of the documents."""
        import sys

        for i, text in enumerate(texts):  # before any model work
            if not text.strip():
                raise ValueError(f"cannot summarize an empty document (document {i + 1} of {len(texts)})")
        docs = [self.token_ids(t) for t in texts]
        bar = progress and is_terminal(sys.stderr)
        lines = Lines("summarize", len(texts), "doc", write=lambda line: print(line, file=sys.stderr, flush=True)) \
            if progress and not bar and len(texts) > 1 else None
        out: list[str] = [""] * len(docs)
        done = 0
        with tqdm(total=len(docs), desc="summarize", unit="doc", disable=not bar) as tq:
            for idx in length_sorted_batches([len(d) for d in docs], self._batch_size(docs)):
                for i, summary in zip(idx, self._batch([docs[i] for i in idx])):
                    out[i] = summary
                done += len(idx)
                tq.update(len(idx))
                if lines is not None:
                    lines.update(done)
        return out

    @property
    def summary_room(self) -> int:
        """A decoder-only model's summary positions in its sequence: the run's, else the new tokens and the end."""
        return int(self.record.get("summary_tokens") or self.generation.max_new_tokens + 1)

    def _batch_size(self, docs: list[list[int]]) -> int:
        if self.batch_size is not None or not docs or self.decoder_only:  # the memory model prices seq2seq decoding
            return self.batch_size or 1
        p = next(self.model.parameters())
        g = self.generation
        return auto_batch(self.model.backbone, self.method, max(len(d) for d in docs), g.num_beams,
                          g.max_new_tokens, p.device, p.element_size())[0]

    def _batch(self, docs: list[list[int]]) -> list[str]:
        """Summaries of documents decoded together."""
        if self.decoder_only:  # the prompt (document, separator) continued, as the run decoded
            ids, mask = self.padded(docs)
            room = self.summary_room
            return [s.strip() for s in causal_summaries(self.model, self.tokenizer, self.generation, {
                "input_ids": ids, "attention_mask": mask}, n=self.method.cfg.max_length, room=room)]
        return [s.strip() for s in summaries(self.model, self.tokenizer, self.generation, *self.padded(docs))]

    def padded(self, docs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids of documents decoded together, right-padded ``[batch, N]``, and their mask, on the
        model's device."""
        device = next(self.model.parameters()).device
        ids = torch.full((len(docs), max(len(d) for d in docs)), self.method.spec.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, d in enumerate(docs):
            ids[row, :len(d)] = torch.tensor(d, dtype=torch.long)
            mask[row, :len(d)] = 1
        return ids.to(device), mask.to(device)

    def token_ids(self, text: str) -> list[int]:
        """The document as the run tokenized its data: special tokens around it, literals such as HTML's
        ``<s>`` inside it kept as text, cut to the run's input cap."""
        ids = self.tokenizer(text, add_special_tokens=True, split_special_tokens=True, verbose=False)["input_ids"]
        return truncate_ids(list(ids), self.max_input_tokens, self.method.spec.suffix_ids)[0]


CLASSES = (ScaleformerForConditionalGeneration, ScaleformerForCausalLM)


def _decoder_only(folder: Path) -> bool:
    """Whether config.json's model (or, for an export, its backbone) is a decoder-only causal LM."""
    try:
        conf = AutoConfig.from_pretrained(str(folder))
    except Exception:  # an unreadable config: the model class's loading names what is wrong with it
        return False
    return not getattr(conf.backbone if isinstance(conf, ScaleformerConfig) else conf, "is_encoder_decoder", False)


def _method_config(exported: dict[str, Any], option: str | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """The exported method's config, or another option's (from conf/method/), with overrides."""
    if option is None:
        cfg = dict(exported)
    else:
        cfg = OmegaConf.to_container(compose_config([f"method={option}"]).method, resolve=True)
    return {**cfg, **overrides}


def check_folder(folder: Path) -> str:
    """A model folder with its tokenizer files, else one line; returns config.json's ``model_type``.
    Checked before anything loads: without tokenizer files transformers builds an empty tokenizer that
    would turn every document into unknown tokens."""
    conf = folder / "config.json"
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder (give a model folder or a Hub id such as org/name)")
    if not conf.is_file():
        raise FileNotFoundError(f"{folder}: not a model folder (no config.json); give a folder saved with "
                                "save_pretrained, e.g. results/runs/<run>/model or scripts/hf_trainer.py's --output")
    config = read_json_record(conf, "model config")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise FileNotFoundError(f"{folder}: no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...); save the "
                                "tokenizer beside the model: tokenizer.save_pretrained(DIR)")
    check_weights(folder)
    return str(config.get("model_type") or "untyped")


def check_weights(folder: Path) -> None:
    """Weights in safetensors, readable as such, else one line: a pickle (``pytorch_model.bin``) is never read
    (unpickling can run code), and a ``.safetensors`` file that is not one would stop deep in the loader."""
    import struct

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        pickles = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt*"))
        raise ValueError(f"{folder}: no model.safetensors" + (f" (it has {', '.join(pickles)}: a pickle, which "
                         "scaleformer never reads, since unpickling can run code; convert it with "
                         "model.save_pretrained(DIR, safe_serialization=True) where you trust it)" if pickles else
                         "; save the model with save_pretrained"))
    for path in files:  # safetensors: an 8-byte little-endian header length, then that much JSON
        with open(path, "rb") as f:
            head = f.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            ok = 0 < n <= path.stat().st_size - 8 and f.read(1) == b"{"
        if not ok:
            raise ValueError(f"{path}: not a safetensors file (its header says {n} bytes in a file of "
                             f"{path.stat().st_size}); a pickle renamed .safetensors is not read")


def saved_generation(config: Any) -> dict[str, Any]:
    """The decoding settings of the model's generation config (generation_config.json), those it sets."""
    names = [f.name for f in dataclasses.fields(GenerationConfig)]
    return {k: v for k in names if (v := getattr(config, k, None)) is not None}


def check_record(folder: Path, meta: dict[str, Any]) -> None:
    """The parts of ``scaleformer.json`` the Summarizer reads have their types, else one line naming them."""
    f = folder / "scaleformer.json"
    method = meta.get("method")
    if not isinstance(method, dict) or not isinstance(method.get("config"), dict):
        raise ValueError(f"{f}: method.config must be a mapping of the method's settings")
    if not isinstance(meta.get("generation"), dict):
        raise ValueError(f"{f}: generation must be a mapping of decoding settings (num_beams, max_new_tokens, ...)")
    backbone = meta.get("backbone")
    if not isinstance(backbone, dict) or not isinstance(backbone.get("max_positions"), int):
        raise ValueError(f"{f}: backbone.max_positions must be an integer")


def _rebuilt(model: Any, mcfg: dict[str, Any]) -> Any:
    """The loaded backbone's weights read through another method (or other parameters): the model class
    rebuilt for it, with every weight the two share (a method's own parameters only when it keeps them)."""
    conf = ScaleformerConfig(backbone=model.config.backbone, method=dataclasses.asdict(method_config(mcfg)),
                             spec=model.config.spec)
    fresh = type(model)(conf)
    fresh.load_state_dict(model.state_dict(), strict=False)  # an old method's own parameters stay behind
    fresh.generation_config = model.generation_config
    return fresh


def _from_format1(backbone: Any, path: Path, meta: dict[str, Any], mcfg: dict[str, Any], tokenizer: Any,
                  same: bool) -> Any:
    """A format-1 export (the backbone alone): the method from ``scaleformer.json``, its own parameters
    from ``method_state.safetensors`` when the method is the exported one."""
    bcfg = BackboneConfig(name=meta["backbone"]["name"], pretrained=str(path),
                          max_positions=meta["backbone"]["max_positions"])
    spec = backbone_spec(bcfg, tokenizer, backbone.config)
    model = ScaleformerForConditionalGeneration.from_parts(backbone, build_method(method_config(mcfg), spec))
    extra = path / METHOD_STATE
    if extra.exists() and same:
        _, unexpected = model.backbone.load_state_dict(load_file(str(extra)), strict=False)
        if unexpected:
            raise ValueError(f"{extra}: parameters the method does not have: {', '.join(unexpected)}")
    return model


if __name__ == "__main__":  # a library module: say where the command is rather than exit 0 doing nothing
    raise SystemExit("scaleformer.export.summarizer is the Summarizer class; the command is `scaleformer summarize` "
                     "(or python -m scaleformer.cli.summarize)")
