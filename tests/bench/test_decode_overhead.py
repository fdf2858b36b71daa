"""The decoding-overhead benchmark (scaleformer.bench.decode_overhead) at tiny repetitions: its records' fields."""

from __future__ import annotations

import json

from scaleformer.bench import decode_overhead

ROW_FIELDS = {"beams", "cache", "new_tokens", "forced_new_tokens", "repeats", "ms_per_token", "ms_per_token_p25",
              "ms_per_token_p75", "ms_per_token_iqr", "ms_per_token_min", "run_time_s", "times_s",
              "aten_ops_per_token", "top_level_ops_per_token", "tokens_equal_dynamic"}


def test_records_and_table(tmp_path):
    out = tmp_path / "bench" / "decode-overhead-cpu.json"
    assert decode_overhead.main(["--out", str(out), "--repeats", "2", "--new-tokens", "4", "--doc-tokens", "48",
                                 "--beams", "1,2"]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == decode_overhead.SCHEMA and doc["backbone"] == "tiny_bart_reader"
    assert doc["forced_new_tokens"] == 4 and doc["machine"] and doc["wall_time_s"] > 0
    assert {(r["beams"], r["cache"]) for r in doc["rows"]} == {(b, c) for b in (1, 2) for c in ("dynamic", "static")}
    for r in doc["rows"]:
        assert ROW_FIELDS <= r.keys()
        assert r["repeats"] == len(r["times_s"]) == 2 and r["new_tokens"] == 4  # the length was forced
        assert r["ms_per_token_p25"] <= r["ms_per_token"] <= r["ms_per_token_p75"]
        assert r["aten_ops_per_token"] >= r["top_level_ops_per_token"] > 0
        assert r["tokens_equal_dynamic"] is True
    assert [c["beams"] for c in doc["comparison"]] == [1, 2]
    assert all(c["tokens_equal"] and c["time_ratio_static_over_dynamic"] > 0 for c in doc["comparison"])
    table = out.with_suffix(".md").read_text()
    assert "| 2 | static |" in table and "Static against dynamic" in table


def test_bad_flags_stop_with_one_line(tmp_path, capsys):
    assert decode_overhead.main(["--out", str(tmp_path / "x.json"), "--repeats", "0"]) == 2
    assert decode_overhead.main(["--out", str(tmp_path / "x.json"), "--beams", "0"]) == 2
    assert "--beams" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
