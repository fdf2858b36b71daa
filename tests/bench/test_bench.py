"""The benchmark harness on a very small grid: results structure, decoder lengths, truncation labels,
out-of-memory handling, outputs, profiles and the registry-driven method list. Timings are not
asserted (timed tests are not the place for them); their statistics and repeat counts are."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, BartConfig, T5Config

from scaleformer import bench
from scaleformer.bench import cell as bench_cell
from scaleformer.bench import runner
from scaleformer.bench.cli import main, parse_sizes
from scaleformer.bench.probes import encoder_flops, peak_tflops
from scaleformer.bench.profile import Comparison, Profile, Target, load_profile
from scaleformer.bench.rows import FULL, LED, SkipMethod, expand_methods, make_method, method_params
from scaleformer.bench.shapes import Shape, load_shape
from scaleformer.bench.summary import fit_exponent
from scaleformer.errors import ConfigError
from scaleformer.methods import REGISTRY
from scaleformer.methods.sled import Sled
from scaleformer.methods.truncation import Truncation, TruncationConfig
from scaleformer.model.spec import BackboneSpec
from scaleformer.ops.measure import MemoryProbe, Timing, measure, top_by_time

METHODS = ("truncation", "sled", "scaleformer", "scaleformer_middle", "full_attention", FULL, LED)
SIZES = (64, 128, 256)


def tiny_shape() -> Shape:
    conf = BartConfig(vocab_size=96, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                      decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                      max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                      decoder_start_token_id=2, forced_eos_token_id=2)
    return Shape("micro_bart", "bart", conf,
                 BackboneSpec(max_positions=64, pad_id=1, prefix_ids=(0,), suffix_ids=(2,), d_model=32))


def tiny_profile(**kw) -> Profile:
    base = Profile(
        name="test-tiny", backbones=[tiny_shape()], methods=[*METHODS, "no_such_method"], sizes=list(SIZES),
        new_tokens=3, beams=[1, 2], label_tokens=4, repeats=3, min_time_s=0.0, max_repeats=3, threads=1,
        led_attention_window=16,
        # full_attention reads 128 tokens at most: its 256-token size is truncated.
        method_overrides={"*": {"chunk_size": 64, "overlap": 8, "encoder_batch_size": 4},
                          "scaleformer_middle": {"middle_tokens": 8}, "full_attention": {"max_length": 128}},
        comparisons=[Comparison("scaleformer_middle", "sled")],
        targets=[Target(metric="cross_attention_bytes", method="scaleformer_middle", baseline="sled", at=256,
                        max_ratio=1.0, label="middle attends to less than sled"),
                 Target(metric="decoder_length", method="sled", at=256, max_value=1.0),
                 Target(metric="encode_s", method="full_attention", from_tokens=64, to_tokens=256, max_exponent=99.0),
                 Target(metric="train_s", method="sled", at=1 << 20, must_run=True),
                 Target(metric="cross_attention_bytes", method="sled", at=256, beams=2, baseline_beams=1,
                        max_ratio=1.0, label="beams share sled's cross-attention"),
                 Target(metric="cross_attention_bytes", method=LED, at=256, beams=2, baseline_beams=1,
                        max_ratio=1.0, label="beams share LED's cross-attention"),
                 Target(metric="encode_s", method="sled", at=256, reference=1e6, reference_note="a slow machine",
                        max_ratio=0.5, label="sled encodes 2x faster than recorded")])
    return replace(base, **kw)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    doc = bench.run_profile(tiny_profile(grad_ckpt_min_tokens=256), out, log=lambda s: None, copy_bytes=8 * 2**20)
    return doc, out


def by_method(doc, method):
    return {c["n_tokens"]: c for c in doc["results"] if c["method"] == method}


def timings(c):
    yield c["encode"]
    yield from c["generate"].values()
    if c["train"]["status"] == "ok":
        yield c["train"]


def test_results_file_structure(run):
    doc, out = run
    saved = json.loads((out / "test-tiny.json").read_text())
    assert saved["profile"] == "test-tiny" and saved["schema"] == bench.SCHEMA
    for key in ("settings", "spec", "environment", "memory_measure", "methods", "results", "comparisons",
                "targets", "wall_time_s"):
        assert key in saved, key
    assert saved["settings"]["new_tokens"] == 3 and saved["settings"]["beams"] == [1, 2]
    for m in METHODS:
        cells = by_method(saved, m)
        assert sorted(cells) == list(SIZES), m
        for n, c in cells.items():
            assert c["status"] == "ok", (m, n, c)
            assert c["encode"]["time_s"] > 0 and c["encode"]["tokens_per_s"] > 0
            assert c["encode"]["encoder_calls"] >= 1 or m == "full_attention"  # runs the layers itself
            assert set(c["generate"]) == {"1", "2"}
            assert all(g["new_tokens"] == 3 and g["e2e_time_s"] > g["time_s"] > 0 for g in c["generate"].values())
            assert c["train"]["status"] == "ok" and c["train"]["time_s"] > 0
            assert c["train"]["grad_checkpointing"] is (n >= 256)
            xa = c["cross_attention_bytes"]  # measured from the generation cache
            if m == LED:  # transformers' own cache: one copy per beam
                assert xa["2"] == 2 * xa["1"] and not c["generate"]["2"]["beam_shared_cross_attention"]
            else:  # keys + values, 1 decoder layer, d_model 32, fp32, once per document
                assert xa["2"] == xa["1"] == 2 * c["decoder_length"] * 32 * 4, m
                assert all(g["beam_shared_cross_attention"] for g in c["generate"].values())
            for b, g in c["generate"].items():  # the decoding floor: what a step reads, at the copy bandwidth
                f = g["floor"]
                assert f["cross_attention_bytes"] == xa[b] and f["cross_attention_measured"]
                assert f["step_bytes"] == f["weight_bytes"] + f["cross_attention_bytes"] + f["self_attention_bytes"]
                assert f["floor_ms"] > 0 and f["floor_multiple"] > 0 and f["self_attention_mean_length"] == 2.0
        rec = next(r for r in saved["methods"] if r["method"] == m)
        assert rec["status"] == "ran" and rec["source"] == ("peer" if m in (FULL, LED) else "option")
    bw = saved["environment"]["copy_bandwidth"]
    assert bw["gb_per_s"] > 0 and bw["size_bytes"] == 8 * 2**20 and bw["repeats"] >= 10
    assert by_method(saved, "sled")[64]["encode"]["flops"] > 0
    assert by_method(saved, LED)[64]["encode"]["flops"] is None  # dense FLOPs do not describe LED
    skipped = next(r for r in saved["methods"] if r["method"] == "no_such_method")
    assert skipped["status"] == "skipped" and "no_such_method.yaml" in skipped["reason"]
    assert not any(c["method"] == "no_such_method" for c in saved["results"])
    assert bench.problems(saved) == []


def test_every_timing_has_min_iqr_and_at_least_three_runs(run):
    doc, _ = run
    for c in doc["results"]:
        for t in timings(c):
            assert t["repeats"] == len(t["times_s"]) >= 3, (c["method"], c["n_tokens"])
            assert 0 < t["time_min_s"] <= t["time_p25_s"] <= t["time_s"] <= t["time_p75_s"]
            assert t["time_iqr_s"] == pytest.approx(t["time_p75_s"] - t["time_p25_s"])


def test_decoder_lengths_match_methods_and_grow_with_n(run):
    doc, _ = run
    lengths = {m: [by_method(doc, m)[n]["decoder_length"] for n in SIZES] for m in METHODS}
    for m, ls in lengths.items():
        assert ls == sorted(ls), m
        assert all(c["decoder_length_ok"] for c in by_method(doc, m).values()), m
    assert lengths["truncation"] == [64, 64, 64] and lengths["full_attention"] == [64, 128, 128]
    assert lengths["sled"] == list(SIZES) and lengths[FULL] == list(SIZES) and lengths[LED] == list(SIZES)
    assert lengths["scaleformer"][-1] < lengths["scaleformer_middle"][-1] < lengths["sled"][-1]
    cmp = next(c for c in doc["comparisons"] if c["n_tokens"] == 256 and c["method"] == "scaleformer_middle")
    assert cmp["cross_attention_length_ratio"] == pytest.approx(lengths["scaleformer_middle"][-1] / 256)


def test_truncated_sizes_are_labelled_and_left_out_of_fits(run):
    doc, out = run
    full = by_method(doc, "full_attention")
    assert [full[n]["truncated"] for n in SIZES] == [False, False, True]
    assert 0 < full[256]["input_coverage"] < 1 and full[128]["input_coverage"] == 1.0
    assert full[256]["train"]["truncated"] is True
    trunc = by_method(doc, "truncation")
    assert [trunc[n]["truncated"] for n in SIZES] == [False, True, True]
    for m in ("sled", "scaleformer", "scaleformer_middle", FULL, LED):  # every token reaches the encoder
        assert all(c["truncated"] is False and c["train"]["truncated"] is False for c in by_method(doc, m).values())
    fits = next(r for r in doc["methods"] if r["method"] == "full_attention")["scaling"]
    assert fits["encode_s"]["range"] == [64, 128] and fits["encode_s"]["excluded_truncated"] == [256]
    assert fits["train_s"]["range"] == [64, 128]
    assert next(r for r in doc["methods"] if r["method"] == "truncation")["scaling"]["encode_s"] is None
    assert next(r for r in doc["methods"] if r["method"] == "sled")["scaling"]["encode_s"]["range"] == [64, 256]
    target = next(t for t in doc["targets"] if t["kind"] == "max_exponent")
    assert target["range"] == [64, 128] and target["status"] == "pass (partial range)"
    md = (out / "test-tiny.md").read_text()
    assert "| full_attention | 256 | ok, truncated (" in md and "| full_attention | 128 | ok |" in md


def test_led_peer_row(run):
    doc, out = run
    rec = next(r for r in doc["methods"] if r["method"] == LED)
    assert rec["config"]["attention_window"] == 16 and rec["config"]["d_model"] == 32
    assert rec["config"]["max_encoder_position_embeddings"] >= max(SIZES)
    assert "N x N" in rec["note"]
    assert all(c["status"] == "ok" and c["input_coverage"] == 1.0 for c in by_method(doc, LED).values())
    md = (out / "test-tiny.md").read_text()
    assert f"| {LED} | 256 | ok |" in md and "N x N float masks" in md


def test_targets_report_values_and_verdicts(run):
    doc, out = run
    got = {t["target"]: t for t in doc["targets"]}
    ratio = got["middle attends to less than sled"]
    assert ratio["status"] == "pass" and 0 < ratio["value"] < 1
    value = next(t for t in doc["targets"] if t["kind"] == "max_value")
    assert value["status"] == "fail" and value["value"] == 256
    assert next(t for t in doc["targets"] if t["kind"] == "must_run")["status"] == "not measured"
    assert got["beams share sled's cross-attention"]["value"] == 1.0
    assert got["beams share sled's cross-attention"]["status"] == "pass"
    assert got["beams share LED's cross-attention"]["value"] == 2.0  # the stock per-beam cache
    assert got["beams share LED's cross-attention"]["status"] == "fail"
    rec = got["sled encodes 2x faster than recorded"]
    assert rec["status"] == "pass" and rec["value"] == by_method(doc, "sled")[256]["encode"]["time_s"] / 1e6
    md = (out / "test-tiny.md").read_text()
    assert "| middle attends to less than sled | micro_bart | max_ratio 1 |" in md and "| fail |" in md
    assert "(2 beams / 1) | pass |" in md and "; before: a slow machine | pass |" in md


def test_markdown_and_plot_written(run):
    doc, out = run
    md = (out / "test-tiny.md").read_text()
    assert "| method | N | status | enc ms | dec len | gen 1b ms | gen 2b ms | train ms |" in md
    assert "| x-attn MiB (1/2b) | step MiB (1/2b) | floor ms (1/2b) | ms/tok (1/2b) | x floor (1/2b) |" in md
    assert "Copy bandwidth: " in md and "GB/s (read + write of a 8 MiB" in md
    assert "median / min / IQR" in md
    for m in ("sled", "scaleformer", FULL):
        assert f"| {m} | 64 | ok |" in md and f"| {m} | 256 | ok |" in md
    assert "no_such_method: skipped" in md and "Fitted scaling exponents" in md
    png = (out / "test-tiny.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


@pytest.mark.parametrize("err", [torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                                 RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory"),
                                 MemoryError()])
def test_oom_is_recorded_and_larger_sizes_skipped(monkeypatch, tmp_path, err):
    real = bench_cell.run_encode

    def fake(ctx, method, model, ids, *args):
        if isinstance(method, Sled) and ids.shape[1] >= 256:
            raise err
        return real(ctx, method, model, ids, *args)

    monkeypatch.setattr(bench_cell, "run_encode", fake)
    out = tmp_path if isinstance(err, torch.cuda.OutOfMemoryError) else None  # write the files once
    doc = bench.run_profile(tiny_profile(methods=["sled", "truncation"], sizes=[64, 256, 512]), out,
                            log=lambda s: None)
    sled = by_method(doc, "sled")
    assert sled[64]["status"] == "ok"
    assert sled[256]["status"] == "oom" and sled[256]["oom_phase"] == "encode"
    assert sled[512]["status"] == "skipped" and "N=256" in sled[512]["reason"]
    assert all(c["status"] == "ok" for c in by_method(doc, "truncation").values())
    if out is not None:
        saved = json.loads((out / "test-tiny.json").read_text())
        assert [c["status"] for c in saved["results"] if c["method"] == "sled"] == ["ok", "oom", "skipped"]
        assert "oom (encode)" in (out / "test-tiny.md").read_text()


def test_training_oom_skips_only_larger_training_steps(monkeypatch):
    real = bench_cell.run_train

    def fake(ctx, method, model, ids, *args):
        if ids.shape[1] >= 256:
            raise RuntimeError("CUDA out of memory. Tried to allocate 1 GiB")
        return real(ctx, method, model, ids, *args)

    monkeypatch.setattr(bench_cell, "run_train", fake)
    doc = bench.run_profile(tiny_profile(methods=["sled"], sizes=[64, 256, 512]), None, log=lambda s: None)
    c = by_method(doc, "sled")
    assert c[256]["status"] == "oom" and c[256]["oom_phase"] == "train" and c[256]["train"]["status"] == "oom"
    assert "encode" in c[256] and "2" in c[256]["generate"]  # inference of that size was measured
    assert c[512]["status"] == "ok" and c[512]["train"]["status"] == "skipped"
    assert "N=256" in c[512]["train"]["reason"] and c[512]["decoder_length"] == 512


def test_memory_cap_records_oom_without_running(monkeypatch):
    calls = []
    real = runner.measure_cell
    monkeypatch.setattr(runner, "measure_cell",
                        lambda ctx, m, model, n, **kw: calls.append(n) or real(ctx, m, model, n, **kw))
    doc = bench.run_profile(tiny_profile(methods=["sled"], sizes=[64, 256, 512], max_tokens={"sled": 64},
                                         max_train_tokens={"*": 32}), None, log=lambda s: None)
    c = by_method(doc, "sled")
    assert calls == [64]
    assert c[64]["train"]["status"] == "skipped" and "training-step cap" in c[64]["train"]["reason"]
    assert c[256]["status"] == "oom" and c[256]["cause"] == "cap"
    assert c[512]["status"] == "skipped"


def test_errors_and_wrong_decoder_lengths_are_reported(monkeypatch):
    monkeypatch.setattr(Sled, "decoder_length", lambda self, n: n + 1)
    real = bench_cell.run_encode

    def fake(ctx, method, *args):
        if method.cfg.name == "scaleformer":
            raise ValueError("broken method")
        return real(ctx, method, *args)

    monkeypatch.setattr(bench_cell, "run_encode", fake)
    doc = bench.run_profile(tiny_profile(methods=["sled", "scaleformer"], sizes=[64, 256]), None,
                            log=lambda s: None)
    assert by_method(doc, "sled")[64]["decoder_length_ok"] is False
    sf = by_method(doc, "scaleformer")
    assert sf[64]["status"] == "error" and "broken method" in sf[64]["error"] and sf[256]["status"] == "skipped"
    found = bench.problems(doc)
    assert any("sled N=64: decoder length 64 != decoder_length() 65" in p for p in found)
    assert any("scaleformer N=64: ValueError: broken method" in p for p in found)


def test_resume_keeps_measured_cells(monkeypatch, tmp_path):
    p = tiny_profile(methods=["sled"], sizes=[64])
    bench.run_profile(p, tmp_path, log=lambda s: None)
    real = bench_cell.run_encode

    def fake(ctx, method, model, ids, *args):
        assert not (isinstance(method, Sled) and ids.shape[1] == 64), "a cell already measured was run again"
        return real(ctx, method, model, ids, *args)

    monkeypatch.setattr(bench_cell, "run_encode", fake)
    doc = bench.run_profile(replace(p, sizes=[64, 256], methods=["sled", "truncation"]), tmp_path, resume=True,
                            log=lambda s: None)
    got = sorted((c["method"], c["n_tokens"], c["status"]) for c in doc["results"])
    assert got == [("sled", 64, "ok"), ("sled", 256, "ok"), ("truncation", 64, "ok"), ("truncation", 256, "ok")]
    assert doc["grid"]["methods"] == ["sled", "truncation"] and doc["grid"]["sizes"] == [64, 256]
    assert "| sled | 64 | ok |" in (tmp_path / "test-tiny.md").read_text()
    with pytest.raises(ValueError, match="settings differ"):
        bench.run_profile(replace(p, new_tokens=5), tmp_path, resume=True, log=lambda s: None)


@pytest.fixture
def throwaway():
    """A method registered by this test only (subclassing registers it); removed afterwards."""

    @dataclass
    class ThrowawayConfig(TruncationConfig):
        name: str = "bench_throwaway"

    class Throwaway(Truncation):
        name = "bench_throwaway"
        Config = ThrowawayConfig

    yield Throwaway
    REGISTRY.pop("bench_throwaway", None)


def test_registry_method_shows_up_with_all(throwaway, tmp_path):
    (tmp_path / "method").mkdir()
    (tmp_path / "method" / "mine.yaml").write_text("name: bench_throwaway\nmax_tokens: 32\n")
    (tmp_path / "method" / "_fragment.yaml").write_text("overlap: 3\n")  # not an option
    p = tiny_profile(methods=["sled", "all"], conf_root=str(tmp_path), sizes=[64], beams=[1],
                     max_train_tokens={"*": 32}, targets=[], comparisons=[])
    names = expand_methods(p)
    assert names[:2] == ["sled", "mine"] and "_fragment" not in names
    assert "bench_throwaway" not in names  # it has an option file (named `mine`)
    assert set(REGISTRY) - {"sled", "bench_throwaway"} <= set(names)  # the other registered methods
    (tmp_path / "method" / "mine.yaml").unlink()
    assert "bench_throwaway" in expand_methods(p)  # registered, no option: its Config defaults
    (tmp_path / "method" / "mine.yaml").write_text("name: bench_throwaway\nmax_tokens: 32\n")
    doc = bench.run_profile(replace(p, methods=["mine"]), None, log=lambda s: None)
    cells = by_method(doc, "mine")
    assert cells[64]["status"] == "ok" and cells[64]["decoder_length"] == 32 and cells[64]["truncated"] is True
    assert next(r for r in doc["methods"] if r["method"] == "mine")["config"]["name"] == "bench_throwaway"


def test_committed_profiles_load():
    tiny, gpu = load_profile("cpu-tiny"), load_profile("gpu-base")
    assert tiny.device == "cpu" and tiny.repeats >= 3 and "all" in tiny.methods and LED in tiny.methods
    assert gpu.device == "cuda" and 1048576 in gpu.sizes and FULL in gpu.methods
    assert {t.kind() for t in gpu.targets} == {"min_value", "max_exponent", "max_ratio", "must_run"}
    assert load_profile("cpu-tiny", sizes=[2048, 1024]).sizes == [1024, 2048]


@pytest.mark.parametrize("patch, message", [
    ({"sizes": [1024, 16]}, "sizes[1]=16: must be an integer >= 64 tokens"),
    ({"sizez": [1024]}, "sizez"),
    ({"sizes": [1024, "abc"]}, "sizes[1]"),
    ({"repeats": 1}, "repeats=1: must be >= 3"),
    ({"max_repeats": 2}, "max_repeats=2: must be >= repeats (3)"),
    ({"device": "tpu"}, "device='tpu': must be cpu or cuda"),
    ({"backbones": ["tiny_bert"]}, "backbones[0]='tiny_bert': must be one of bart_base, bart_base_shape, pythia_1_4b, t5_base"),
    ({"led_attention_window": 5}, "led_attention_window=5: must be a positive even number"),
    ({"max_tokens": {"sled": 0}}, "max_tokens.sled=0: must be > 0"),
    ({"targets": [{"metric": "speed", "method": "sled", "max_value": 1, "at": 1024}]},
     "targets[0].metric='speed': must be one of"),
    ({"targets": [{"metric": "decode_s", "method": "sled", "at": 1024}]}, "targets[0]={}: needs exactly one bound"),
    ({"targets": [{"metric": "decode_s", "method": "sled", "at": 1024, "max_ratio": 0.5}]},
     "targets[0].baseline=None: required with max_ratio"),
    ({"targets": [{"metric": "decode_s", "method": "sled", "max_exponent": 1.1}]},
     "targets[0].from_tokens=None: required with max_exponent"),
    ({"targets": [{"metric": "encode_s", "method": "sled", "at": 1024, "max_ratio": 0.5, "reference": 2.0,
                   "baseline": "truncation"}]}, "targets[0].reference=2.0: is a denominator of its own"),
    ({"targets": [{"metric": "decode_s", "method": "sled", "at": 1024, "max_ratio": 2, "baseline_beams": 3}]},
     "targets[0].baseline_beams=3: must be one of the profile's beams [1, 4]"),
])
def test_profile_validation_names_key_value_and_limit(tmp_path, patch, message):
    from omegaconf import OmegaConf

    path = tmp_path / "bad.yaml"
    OmegaConf.save(OmegaConf.create({"backbones": ["tiny_bart"], "sizes": [1024]} | patch), path)
    with pytest.raises(ConfigError) as e:
        load_profile(path)
    assert message in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="available: cpu-tiny, gpu-base"):
        load_profile("no-such-profile")


def test_measure_repeats_and_statistics():
    calls = []
    timing, out = measure(lambda: calls.append(1) or len(calls), torch.device("cpu"), repeats=3, min_time_s=0.0,
                          max_repeats=10)
    assert len(calls) == len(timing.times) == 3 and out == 3
    calls.clear()
    timing, _ = measure(lambda: calls.append(1), torch.device("cpu"), repeats=3, min_time_s=1e9, max_repeats=5)
    assert len(calls) == 5
    s = Timing((4.0, 1.0, 3.0, 2.0)).summary()
    assert (s["time_s"], s["time_min_s"], s["time_p25_s"], s["time_p75_s"]) == (2.5, 1.0, 1.75, 3.25)
    assert s["time_iqr_s"] == 1.5 and s["repeats"] == 4 and s["times_s"] == [4.0, 1.0, 3.0, 2.0]


def test_fit_exponent_ranges():
    pts = [(n, 3.0 * n**0.5) for n in (1024, 4096)] + [(n, 1e-6 * n**1.5) for n in (16384, 65536, 262144)]
    fit = fit_exponent(pts, excluded=[1048576])
    assert fit["exponent"] == pytest.approx(1.5, abs=1e-3) and fit["range"] == [16384, 262144]
    assert fit["basis"] == "N >= 16384" and fit["points"] == 3 and fit["excluded_truncated"] == [1048576]
    small = fit_exponent([(1024, 2.0), (4096, 8.0), (8192, None)])
    assert small["exponent"] == pytest.approx(1.0) and small["basis"] == "all non-truncated sizes"
    assert fit_exponent([(1024, 2.0), (4096, 8.0)], fallback=False) is None  # memory: stated range only
    assert fit_exponent([(1024, 1.0)]) is None


def test_peak_table_by_device_name():
    assert peak_tflops("NVIDIA H100 80GB HBM3") == pytest.approx(989.4)
    assert peak_tflops("NVIDIA H200") == pytest.approx(989.4)
    assert peak_tflops("NVIDIA H100 PCIe") == pytest.approx(756.0)
    assert peak_tflops("NVIDIA A100-SXM4-80GB") == pytest.approx(312.0)
    assert peak_tflops("AMD EPYC 7763") is None


@pytest.mark.parametrize("arch", ["bart", "t5"])
def test_encoder_flops_match_torch_flop_counter(arch):
    from torch.utils.flop_counter import FlopCounterMode

    if arch == "bart":
        conf = tiny_shape().config
    else:
        conf = T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=3,
                        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    model = AutoModelForSeq2SeqLM.from_config(conf, attn_implementation="eager").eval()
    ids = torch.randint(4, 96, (3, 40))
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model.get_encoder()(input_ids=ids, attention_mask=torch.ones_like(ids))
    assert encoder_flops(conf, [(3, 40)]) == counter.get_total_flops()
    # The last layer at 7 kept positions only (ScaleFormer): the count drops by exactly what it skips.
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from scaleformer.bench.probes import record_encoder_calls
    from scaleformer.ops.kept_layer import encode_at

    pos = torch.arange(7).expand(3, -1) * 5  # [3, 7]
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), counter, record_encoder_calls(model.get_encoder()) as calls:
        encode_at(model.get_encoder(), ids, torch.ones_like(ids), [(None, pos)])  # sdpa as counted matmuls
    assert calls.full == [(3, 40)] and calls.kept == [(3, 40, 7)]
    assert encoder_flops(conf, calls.full, calls.kept) == counter.get_total_flops()


def test_base_shapes_from_config_files():
    bart, t5 = load_shape("bart_base"), load_shape("t5_base")
    assert (bart.config.d_model, bart.config.encoder_layers, bart.config.decoder_layers) == (768, 6, 6)
    assert (bart.config.encoder_attention_heads, bart.config.encoder_ffn_dim, bart.config.vocab_size) == (12, 3072, 50265)
    assert bart.config.max_position_embeddings == 1024 and bart.spec.pad_id == 1
    assert bart.model_config(4096).max_position_embeddings == 4096 and bart.config.max_position_embeddings == 1024
    assert (t5.config.d_model, t5.config.d_kv, t5.config.d_ff, t5.config.num_layers, t5.config.num_heads) == \
        (768, 64, 3072, 12, 12)
    assert t5.config.vocab_size == 32128 and t5.spec.suffix_ids == (1,) and t5.spec.prefix_ids == ()
    assert t5.dims() == {"d_model": 768, "encoder_layers": 12, "decoder_layers": 12, "heads": 12, "ffn": 3072}
    with torch.device("meta"):
        n_bart = sum(p.numel() for p in AutoModelForSeq2SeqLM.from_config(bart.config).parameters())
        n_t5 = sum(p.numel() for p in AutoModelForSeq2SeqLM.from_config(t5.config).parameters())
    assert round(n_bart / 1e6) == 139 and round(n_t5 / 1e6) == 223  # the public parameter counts


def test_method_params_compose_defaults_interpolations_and_overrides(tmp_path):
    (tmp_path / "method").mkdir()
    (tmp_path / "method" / "m.yaml").write_text("name: scaleformer\nmiddle_seed: ${oc.select:seed,0}\n"
                                                "chunk_size: 1024\nbroken: ${no.such.key}\n")
    (tmp_path / "method" / "m_more.yaml").write_text("defaults:\n  - m\n  - _self_\nmiddle_tokens: 8\n")
    p = tiny_profile(conf_root=str(tmp_path), seed=7, method_overrides={"*": {"chunk_size": 64, "overlap": 8},
                                                                        "m": {"alpha": 1.0}})
    assert method_params("m", p) == {"name": "scaleformer", "middle_seed": 7, "chunk_size": 64, "alpha": 1.0}
    assert method_params("m_more", p) == {"name": "scaleformer", "middle_seed": 7, "chunk_size": 64,
                                          "middle_tokens": 8}
    with pytest.raises(SkipMethod, match="absent.yaml"):
        method_params("absent", p)
    (tmp_path / "method" / "later.yaml").write_text("name: not_registered_yet\n")
    with pytest.raises(SkipMethod, match="not registered"):
        make_method("later", p, tiny_shape().spec)


def test_cpu_memory_probe_sees_an_allocation():
    probe = MemoryProbe(torch.device("cpu"))
    if not probe.available:
        pytest.skip("no /proc/self/clear_refs here")
    base = probe.start()
    x = torch.ones(16 * 2**20)  # 64 MiB, touched
    grown = probe.peak() - base
    del x
    assert 60 * 2**20 <= grown < 200 * 2**20


def test_cli_runs_a_profile_file(tmp_path, capsys):
    assert parse_sizes("1k, 4096,1M") == [1024, 4096, 1048576]
    prof = tmp_path / "mini.yaml"
    prof.write_text("backbones: [tiny_bart]\nmethods: [all]\nsizes: [4096]\nnew_tokens: 2\nbeams: [1]\n"
                    "min_time_s: 0\nmax_repeats: 3\nthreads: 1\nmax_train_tokens: {'*': 64}\n")
    rc = main(["--profile", str(prof), "--methods", "sled", "--sizes", "256", "--out", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "mini.json").read_text())
    assert doc["grid"]["methods"] == ["sled"] and [c["n_tokens"] for c in doc["results"]] == [256]
    assert (tmp_path / "mini.md").exists() and (tmp_path / "mini.png").exists()
    assert main(["--profile", str(prof), "--sizes", "10", "--out", str(tmp_path)]) == 2
    assert "sizes[0]=10: must be an integer >= 64" in capsys.readouterr().err


def test_the_largest_operators_are_summed_by_name():
    got = top_by_time([("aten::mm", 30.0), ("aten::add", 5.0), ("aten::mm", 50.0), ("aten::gelu", 15.0)], n=2)
    assert got == [{"name": "aten::mm", "calls": 2, "ms": 0.08, "share": 0.8},
                   {"name": "aten::gelu", "calls": 1, "ms": 0.015, "share": 0.15}]
    assert top_by_time([]) == []


def test_a_gpu_cycle_sums_its_kernels_device_time_and_ranks_them():
    """The GPU branch of count_ops, on stand-in profiler events (the gpu tier meets the real ones)."""
    from types import SimpleNamespace as NS

    from scaleformer.ops.measure import count_ops

    def event(name, device, us=0.0, parent=None):
        return NS(name=name, device_type=device, cpu_parent=parent, self_cpu_time_total=1.0,
                  time_range=NS(elapsed_us=lambda us=us: us))

    mm = event("aten::mm", "DeviceType.CPU")
    events = [mm, event("aten::view", "DeviceType.CPU", parent=mm), event("sm90_gemm", "DeviceType.CUDA", 300.0),
              event("sm90_gemm", "DeviceType.CUDA", 100.0), event("softmax_kernel", "DeviceType.CUDA", 100.0)]
    prof = NS(events=lambda: events, activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA])
    got = count_ops(prof)
    assert (got["aten_ops_per_step"], got["top_level_ops_per_step"], got["kernels_per_step"]) == (2, 1, 3)
    assert got["kernel_s_per_step"] == pytest.approx(500e-6) and got["top"]["of"] == "kernels, device time"
    assert [(t["name"], t["calls"], t["share"]) for t in got["top"]["rows"]] == [("sm90_gemm", 2, 0.8),
                                                                                ("softmax_kernel", 1, 0.2)]
