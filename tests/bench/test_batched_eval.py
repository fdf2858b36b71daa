"""The batched-evaluation benchmark (scaleformer.bench.batched_eval) at tiny repetitions: its records, the
check that batching keeps every summary, and its results files."""

from __future__ import annotations

import json
import re

import pytest
import torch

from scaleformer.bench import batched_eval, floor


def test_the_benchmark_writes_its_results(tmp_path, capsys):
    assert batched_eval.main(["--methods", "sled", "--docs", "3", "--new-tokens", "4", "--repeats", "1",
                              "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "batched-eval-cpu.json").read_text())
    rows = result["rows"]
    assert {(r["beams"], r["batch"]) for r in rows} == {(b, n) for b in (1, 4) for n in batched_eval.SIZES}
    assert all(r["same_summaries"] and r["docs_per_s"] > 0 and r["timed"] == 1 for r in rows)
    assert [(s["method"], s["beams"]) for s in result["speedups"]] == [("sled", 1), ("sled", 4)]
    # forced tokens: a read floor per row, under the pass it is part of; the bound with it is the tighter
    assert all(0 < r["read_floor_s"] < r["pass_s"] for r in rows) and result["bandwidth"]["gb_per_s"] > 0
    assert all(0 < s["read_bound"] < s["encoder_bound"] for s in result["speedups"])
    md = (tmp_path / "batched-eval-cpu.md").read_text()
    assert md.count("| sled |") == len(rows) + 2 and "speed-up" in md and "GB/s" in md


def test_ledgers_are_distinct_test_documents():
    docs = batched_eval.ledgers(5)
    assert len(docs) == len(set(docs)) == 5


def test_eos_stopping_one_beam_count_and_a_tag(tmp_path):
    assert batched_eval.main(["--methods", "truncation", "--docs", "3", "--new-tokens", "6", "--repeats", "1",
                              "--beams", "2", "--stop", "eos", "--tag", "eos", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "batched-eval-cpu-eos.json").read_text())
    assert result["stop"] == "eos" and {r["beams"] for r in result["rows"]} == {2}
    # times are the benchmark's to report, not the test's to compare (one timed pass of 3 short documents)
    assert all(r["encode_s"] > 0 and r["pass_s"] > 0 and 0 < r["summary_tokens_mean"] for r in result["rows"])
    (s,) = result["speedups"]
    assert s["encoder_bound"] == result["rows"][0]["pass_s"] / next(
        r["encode_s"] for r in result["rows"] if r["batch"] == s["best_batch"])
    assert "each stopping at its end of sequence" in (tmp_path / "batched-eval-cpu-eos.md").read_text()
    # no fixed token count, so no read floor (a batch runs as long as its longest summary)
    assert result["bandwidth"] is None and s["read_bound"] is None
    assert all(r["read_floor_s"] is None for r in result["rows"])


def test_the_read_floor_shares_the_weights_not_a_documents_keys_and_values():
    s = batched_eval.summarizer("truncation", 1, 4)
    model, bw, k = s.model.backbone, 1e9, 4
    weights = floor.weight_bytes(model, 1)["total"]  # one sequence per step: one embedding row
    def masks(*batches):  # encoder masks [batch, T] with these real states per document
        return [torch.tensor([[1] * n + [0] * (max(b) - n) for n in b]) for b in batches]

    alone = batched_eval.read_floor_s(s, masks([700], [300]), k, bw)
    together = batched_eval.read_floor_s(s, masks([700, 300]), k, bw)
    # apart, each of the k steps reads the weights twice; together once (plus a second embedding row)
    rows_2 = floor.weight_bytes(model, 2)["total"]
    assert alone - together == pytest.approx(k * (2 * weights - rows_2) / bw, rel=1e-9)
    # keys and values: 2 x layers x states x width x 4 bytes per step, the same in both
    layers, width = floor.decoder_dims(model.config)
    assert together > k * 2 * layers * 1000 * width * 4 / bw
    four = batched_eval.summarizer("truncation", 4, 4)
    # beams read the document's keys/values once; only their own self-attention caches and rows add
    assert batched_eval.read_floor_s(four, masks([1000]), k, bw) - batched_eval.read_floor_s(s, masks([1000]), k, bw) \
        < k * 2 * layers * 1000 * width * 4 / bw


def test_a_changed_summary_shows_with_its_beam_score_gap():
    row = {"method": "sled", "beams": 4, "batch": 8, "docs_per_s": 4.0, "docs_per_s_iqr": 0.5, "pass_s": 8.0,
           "encode_s": 3.0, "summary_tokens_mean": 64.0, "same_summaries": False,
           "differing": [{"doc": 14, "alone": -0.89205599, "batched": -0.89205605}]}
    one = {**row, "batch": 1, "docs_per_s": 2.0, "pass_s": 16.0, "same_summaries": True, "differing": []}
    result = {"backbone": "tiny_bart_reader", "data": "32 test ledgers", "new_tokens": 64, "repeats": 10,
              "torch_threads": 2, "machine": "cpu", "rows": [one, row], "speedups": batched_eval.speedups([one, row])}
    md = batched_eval.markdown(result)
    assert "| NO (1; beam-score gap 6.0e-08) |" in md and "| 38% | 5.33x |" in md


@pytest.mark.parametrize("argv, message", [(["--beams", "0"], "--beams='0'"), (["--beams", "a"], "--beams='a'"),
                                           (["--tag", "../x"], "--tag='../x'")])
def test_bad_arguments_are_named(argv, message):
    with pytest.raises(SystemExit, match=re.escape(message)):
        batched_eval.main(argv)


def test_beam_scores_of_a_document_alone_and_in_its_batch():
    s = batched_eval.summarizer("truncation", 2, 4)
    ids = [s.token_ids(t) for t in batched_eval.ledgers(3)]
    (got,) = batched_eval.beam_scores(s, ids, 3, [1])
    assert got["doc"] == 1 and got["alone"] < 0 and abs(got["alone"] - got["batched"]) < 1e-4
    assert batched_eval.beam_scores(batched_eval.summarizer("truncation", 1, 4), ids, 3, [1]) == [
        {"doc": 1, "alone": None, "batched": None}]  # greedy search has no sequence score
