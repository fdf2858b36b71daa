"""A researcher's own method, from a package of their own: one module (a new kept-position rule and a new
span kind) and one YAML, found through the ``scaleformer.methods`` entry point and run through ``train``,
the exported folder, the ``Summarizer``, ``AutoModelForSeq2SeqLM`` and a bench row. Nothing in
``scaleformer/`` knows it: the package is written to a temp folder here, installed the way pip leaves a
package (a module folder beside its ``.dist-info`` with ``entry_points.txt``) and put on the path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
import torch
from conftest import ROOT

PLUGIN = '''
"""Dilated chunks: overlapping chunks whose bottom encoder layer attends at a stride.

Two extension points of scaleformer, from outside it:
- the span kind ``dilated``: token i attends to token j when ``(i - j) % size == 0``;
- the kept-position rule: each chunk passes on its content up to where the next chunk starts (its left
  part, no right context), the last chunk everything to the end; every token reaches the decoder once.
"""

from dataclasses import dataclass

import torch

from scaleformer.methods.chunked import ChunkedConfig, ChunkedMethod
from scaleformer.ops.kept_layer import gather
from scaleformer.ops.spans import Span, SpanKind, encoder_layers, register_span_kind, run_encoder


class Dilated(SpanKind):
    name = "dilated"

    def pairs(self, size, n):
        counts = torch.bincount(torch.arange(n) % size, minlength=size)  # [size] tokens per residue
        return int((counts * counts).sum())

    def dense_mask(self, size, n):
        i = torch.arange(n)
        return (i[:, None] - i[None, :]) % size == 0  # [n, n]

    def covers(self, size, n):
        return size <= 1 or n <= 1

    def prepare(self, encoder, size, x, valid, bias_attn):
        if bias_attn is not None:
            raise ValueError("the dilated span is written for BART-like encoders (no relative bias)")
        keep = self.dense_mask(size, x.shape[1]).to(x.device)[None] & valid[:, None, :]  # [B, N, N]
        return {"mask": torch.where(keep, 0.0, torch.finfo(x.dtype).min)[:, None].to(x.dtype), "bias": None}


register_span_kind(Dilated())


@dataclass
class DilatedChunksConfig(ChunkedConfig):
    name: str = "dilated_chunks"
    dilation: int = 2  # the bottom layer's stride


class DilatedChunks(ChunkedMethod):
    name = "dilated_chunks"
    Config = DilatedChunksConfig
    requires = ("layer_spans",)
    small_settings = {"chunk_size": 48, "overlap": 12}

    def select(self, layout, training):
        t = layout.table
        keep_hi = torch.where(t.is_last, t.start + t.length, t.start.roll(-1))  # [R] the next chunk's start
        lo = torch.where(t.is_first, 0, layout.head)  # [R] segment coordinates
        hi = torch.where(t.is_last, layout.seg_len, keep_hi - t.start + layout.head)  # [R]
        count = hi - lo
        j = torch.arange(int(count.max()))[None, :]  # [1, G]
        valid = j < count[:, None]  # [R, G]
        return torch.where(valid, layout.prefix_len[:, None] + lo[:, None] + j, 0), valid

    def pick_fn(self, training):
        def encode(encoder, ids, mask, picks):
            spans = [Span("dilated", self.cfg.dilation)] + [Span("full")] * (len(encoder_layers(encoder)) - 1)
            h = run_encoder(encoder, ids, mask, spans)  # [mb, w, d]
            return [gather(h, rows, pos) for rows, pos in picks]

        return encode
'''

YAML = """\
# scaleformer train --config-dir ./my_conf method=dilated_chunks
defaults:
  - /dilated_chunks_schema@_here_
  - _self_

name: dilated_chunks
dilation: 3   # differs from the dataclass's 2
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The package installed into ``site/`` and its config folder ``my_conf/``; unregistered afterwards."""
    site = tmp_path / "site"
    (site / "my_longctx").mkdir(parents=True)
    (site / "my_longctx" / "__init__.py").write_text("", encoding="utf-8")
    (site / "my_longctx" / "dilated.py").write_text(textwrap.dedent(PLUGIN), encoding="utf-8")
    info = site / "my_longctx-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-longctx\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[scaleformer.methods]\ndilated_chunks = my_longctx.dilated\n",
                                           encoding="utf-8")
    conf = tmp_path / "my_conf"
    (conf / "method").mkdir(parents=True)
    (conf / "method" / "dilated_chunks.yaml").write_text(YAML, encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    yield site, conf
    from scaleformer.methods import REGISTRY
    from scaleformer.ops.spans import SPAN_KINDS

    REGISTRY.pop("dilated_chunks", None)
    SPAN_KINDS.pop("dilated", None)
    for name in [m for m in sys.modules if m.split(".")[0] == "my_longctx"]:
        del sys.modules[name]


def test_a_method_from_its_own_package_trains_exports_generates_and_benches(tmp_path, plugin):
    site, conf = plugin
    before = subprocess.run(["git", "status", "--porcelain", "--", "scaleformer"], cwd=ROOT, capture_output=True,
                            text=True).stdout

    # train: a fresh process finds the method through the entry point and its YAML through --config-dir
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "train.py", "--config-dir", str(conf), "method=dilated_chunks",
                           "debug=default", "method.chunk_size=96", "method.overlap=16", "data.synthetic_words=150",
                           f"paths.root={tmp_path}/results", f"paths.cache={tmp_path}/cache"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (tmp_path / "results" / "runs").glob("*dilated_chunks*")
    (metrics,) = run_dir.glob("eval/*/metrics.json")
    written = json.loads(metrics.read_text())
    assert (written["method"]["class"], written["method"]["dilation"]) == ("DilatedChunks", 3)
    assert written["splits"]["validation"]["n_examples"] == 1

    # this process: the real entry-point discovery (nothing faked) registers the method and its span kind
    import scaleformer.methods as methods
    from scaleformer.ops.spans import Span

    methods.load_plugins()  # (importing scaleformer.methods does the same, if this process had not yet)
    assert methods.REGISTRY["dilated_chunks"].__module__ == "my_longctx.dilated"
    assert Span("dilated", 3).pairs(7) == 3 * 3 + 2 * 2 + 2 * 2  # residues {0,3,6}, {1,4}, {2,5}

    # the exported folder: the Summarizer and AutoModelForSeq2SeqLM run the plugin's method alike
    from transformers import AutoModelForSeq2SeqLM

    from scaleformer.export.summarizer import Summarizer

    model_dir = run_dir / "model"
    summarizer = Summarizer.from_pretrained(model_dir, num_beams=1, max_new_tokens=6)
    method = summarizer.method
    assert type(method).__name__ == "DilatedChunks" and (method.cfg.dilation, method.cfg.chunk_size) == (3, 96)
    text = " ".join(f"On day {d} the ledger moved {d * 7} coins to the north vault." for d in range(40))
    ids = summarizer.tokenizer(text, return_tensors="pt")
    n = ids["input_ids"].shape[1]
    assert n > 2 * 96, "the document spans several chunks"
    assert method.decoder_length(n) == n, "the left-part rule passes every token on exactly once"
    auto = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    assert type(auto.method).__name__ == "DilatedChunks" and auto.method.cfg.dilation == 3
    with torch.no_grad():  # the dilated bottom layer is what the decoder reads: undilated, the states differ
        enc = auto.get_encoder()
        mine = auto.method.encode(enc, ids["input_ids"], ids["attention_mask"], training=False)
        plain = type(auto.method)(replace(auto.method.cfg, dilation=1), auto.method.spec).encode(
            enc, ids["input_ids"], ids["attention_mask"], training=False)
        assert mine.hidden.shape == plain.hidden.shape == (1, n, enc.config.d_model)
        assert not torch.allclose(mine.hidden, plain.hidden, atol=1e-3)
        out = auto.generate(**ids, num_beams=1, max_new_tokens=6, do_sample=False)
    assert summarizer(text) == summarizer.tokenizer.decode(out[0], skip_special_tokens=True).strip()

    # one bench row, its option composed from the user's config folder
    from scaleformer.bench.cli import main as bench

    prof = tmp_path / "mini.yaml"
    prof.write_text(f"backbones: [tiny_bart]\nmethods: [dilated_chunks]\nsizes: [256]\nnew_tokens: 2\nbeams: [1]\n"
                    f"min_time_s: 0\nmax_repeats: 3\nthreads: 1\nmax_train_tokens: {{'*': 64}}\nconf_root: {conf}\n"
                    "method_overrides: {dilated_chunks: {chunk_size: 96, overlap: 16}}\n", encoding="utf-8")
    assert bench(["--profile", str(prof), "--out", str(tmp_path / "bench")]) == 0
    doc = json.loads((tmp_path / "bench" / "mini.json").read_text())
    (row,) = doc["results"]
    assert (row["method"], row["status"], row["decoder_length"]) == ("dilated_chunks", "ok", 256)
    assert next(r for r in doc["methods"] if r["method"] == "dilated_chunks")["config"]["dilation"] == 3

    after = subprocess.run(["git", "status", "--porcelain", "--", "scaleformer"], cwd=ROOT, capture_output=True,
                           text=True).stdout
    assert after == before, "nothing in scaleformer/ changed"
