"""The decoding-overhead benchmark (scaleformer.bench.decode_overhead) at tiny repetitions: its records' fields."""

from __future__ import annotations

import json

from scaleformer.bench import decode_overhead

ROW_FIELDS = {"beams", "cache", "new_tokens", "forced_new_tokens", "repeats", "ms_per_token", "ms_per_token_p25",
              "ms_per_token_p75", "ms_per_token_iqr", "ms_per_token_min", "run_time_s", "times_s",
              "aten_ops_per_token", "top_level_ops_per_token", "tokens_equal_dynamic", "dispatched_per_token",
              "graphs_per_token", "ops_inside_graphs_per_token"}
EAGER = [c for c in decode_overhead.CACHES if c != decode_overhead.COMPILED]  # inductor's compile: the slow tier


def test_records_and_table(tmp_path):
    out = tmp_path / "bench" / "decode-overhead-cpu.json"
    assert decode_overhead.main(["--out", str(out), "--repeats", "2", "--new-tokens", "4", "--doc-tokens", "48",
                                 "--beams", "1,2", "--caches", ",".join(EAGER)]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == decode_overhead.SCHEMA and doc["backbone"] == "tiny_bart_reader"
    assert doc["forced_new_tokens"] == 4 and doc["machine"] and doc["wall_time_s"] > 0
    assert {(r["beams"], r["cache"]) for r in doc["rows"]} == {(b, c) for b in (1, 2) for c in EAGER}
    for r in doc["rows"]:
        assert ROW_FIELDS <= r.keys()
        assert r["repeats"] == len(r["times_s"]) == 2 and r["new_tokens"] == 4  # the length was forced
        assert r["ms_per_token_p25"] <= r["ms_per_token"] <= r["ms_per_token_p75"]
        assert r["aten_ops_per_token"] >= r["top_level_ops_per_token"] > 0
        assert r["tokens_equal_dynamic"] is True
        assert r["graphs_per_token"] == 0 and r["dispatched_per_token"] == r["aten_ops_per_token"]  # nothing compiled
    assert [c["beams"] for c in doc["comparison"]] == [1, 2]
    assert all(c["tokens_equal"] and c["time_ratio"] > 0 and (c["first"], c["second"]) == ("dynamic", "static")
               for c in doc["comparison"])
    # the default path before and after: the same tokens, the same operators (the change is Python's alone)
    assert [c["beams"] for c in doc["before_after"]] == [1, 2]
    assert all(c["tokens_equal"] and c["aten_ops_per_token"][0] == c["aten_ops_per_token"][1] and c["ops_ratio"] == 1
               for c in doc["before_after"])
    assert [c["beams"] for c in doc["step"]] == [1, 2] and all(c["tokens_equal"] for c in doc["step"])
    table = out.with_suffix(".md").read_text()
    assert "| 2 | static |" in table and "Static against dynamic" in table and "| 1 | dynamic (before) |" in table
    assert "before and after argument binding cached its signatures" in table
    assert "| 2 | step |" in table and "The decoding step, eager" in table


def test_a_compiled_graph_counts_as_one_dispatch():
    import torch
    from torch.profiler import ProfilerActivity, profile

    from scaleformer.ops.measure import count_dispatches

    def f(x):
        return (x.sin() @ x.cos()).relu() + 1

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    x = torch.randn(8, 8)
    compiled(x)
    for fn, graphs in ((f, 0), (compiled, 1)):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn(x)
            fn(x)
        got = count_dispatches(prof)
        assert got["graphs"] == 2 * graphs
        if graphs:
            assert got["dispatched"] == 2 and got["inside_graphs"] >= 2 * 4  # sin, cos, mm, relu, add inside
        else:
            assert got["inside_graphs"] == 0 and got["dispatched"] >= 2 * 5


def test_before_computes_the_signature_on_every_call():
    import inspect

    from scaleformer.ops import binding

    def f(self, hidden_states, cache=None, **kw):
        return None

    with decode_overhead._variant(decode_overhead.BEFORE):
        assert binding._signature_object is inspect.signature  # uncached, as the path was
        assert binding.bind(f, (None, 1), {"cache": 2}, ("hidden_states", "cache"))[0] == {"hidden_states": 1, "cache": 2}
    binding.clear()
    for _ in range(3):
        assert binding.bind(f, (None, 1), {}, ("hidden_states", "cache"))[0] == {"hidden_states": 1, "cache": None}
    info = binding._signature_object.cache_info()
    assert info.misses == 1 and info.hits >= 3  # one signature for every call after


def test_bad_flags_stop_with_one_line(tmp_path, capsys):
    assert decode_overhead.main(["--out", str(tmp_path / "x.json"), "--repeats", "0"]) == 2
    assert decode_overhead.main(["--out", str(tmp_path / "x.json"), "--beams", "0"]) == 2
    assert "--beams" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
