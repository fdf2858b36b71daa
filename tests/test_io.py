"""The atomic writer: a crash mid-write leaves the old file intact and no temp file behind."""

from __future__ import annotations

import json
import os

import pytest

from scaleformer import io


def test_atomic_write_replaces_whole_file(tmp_path):
    p = tmp_path / "sub" / "metrics.json"
    io.atomic_write_json(p, {"a": 1})
    io.atomic_write_json(p, {"b": 2})
    assert json.loads(p.read_text()) == {"b": 2}
    assert [f.name for f in p.parent.iterdir()] == ["metrics.json"]


def test_crash_before_rename_keeps_old_file_and_no_temp(tmp_path, monkeypatch):
    p = tmp_path / "predictions.jsonl"
    io.atomic_write_jsonl(p, [{"id": "old"}])

    def killed(src, dst):
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        io.atomic_write_jsonl(p, [{"id": "new"}] * 1000)
    assert io.read_jsonl(p) == [{"id": "old"}]
    assert [f.name for f in tmp_path.iterdir()] == ["predictions.jsonl"]


def test_crash_during_write_leaves_no_temp(tmp_path, monkeypatch):
    """A write that fails half-way (disk full) leaves neither the target nor a temp file."""
    p = tmp_path / "table.md"
    real_write = io.Path.write_bytes

    def half_then_full(self, data):
        real_write(self, data[:3])
        raise OSError("disk full")

    monkeypatch.setattr(io.Path, "write_bytes", half_then_full)
    with pytest.raises(OSError, match="disk full"):
        io.atomic_write_text(p, "hello world")
    assert list(tmp_path.iterdir()) == []


def test_atomic_dir_swaps_in_a_finished_folder_only(tmp_path):
    out = tmp_path / "model"
    with io.atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("one")
    assert (out / "a.txt").read_text() == "one"
    with pytest.raises(RuntimeError), io.atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("half")
        raise RuntimeError("killed")
    assert (out / "a.txt").read_text() == "one", "a failed rewrite keeps the old folder"
    with io.atomic_dir(out, replace=False) as tmp:  # the first complete writer wins
        (tmp / "a.txt").write_text("two")
    assert (out / "a.txt").read_text() == "one"
    with io.atomic_dir(out) as tmp:
        (tmp / "b.txt").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"], "no temp or old folders left"


def test_read_jsonl_names_file_and_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"a": 1}\n\n{"a": \n')
    with pytest.raises(ValueError, match=r"x\.jsonl:3: malformed JSON"):
        io.read_jsonl(p)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_results_files_honour_the_umask(tmp_path, umask):
    """As a plain open() would: 0666 minus the umask (mkstemp alone gives 0600)."""
    old = os.umask(umask)
    try:
        assert io.current_umask() == umask
        p = io.atomic_write_text(tmp_path / f"m{umask:o}.json", "{}")
    finally:
        os.umask(old)
    assert p.stat().st_mode & 0o777 == 0o666 & ~umask


def test_stale_temp_files_are_removed_when_the_folder_is_next_written(tmp_path, monkeypatch):
    d = tmp_path / "eval"
    d.mkdir()
    killed = [d / ".metrics.json.k2j4x9.tmp", d / ".step=400.ckpt.12345.tmp"]  # left by a killed writer
    young = d / ".predictions_test.jsonl.abc123.tmp"  # a write that started after this process
    keep = [d / "notes.tmp", d / ".hidden", d / "predictions.jsonl"]
    for p in [*killed, young, *keep]:
        p.write_text("x")
    for p in killed:
        os.utime(p, (io._STARTED - 60, io._STARTED - 60))
    monkeypatch.setattr(io, "_swept", set())
    io.atomic_write_json(d / "metrics.json", {"a": 1})
    assert sorted(p.name for p in d.iterdir()) == sorted(["metrics.json", young.name, *(p.name for p in keep)])
    # Only the first write into a folder sweeps it: later writes do not list the folder again.
    for p in killed:
        p.write_text("x")
        os.utime(p, (io._STARTED - 60, io._STARTED - 60))
    io.atomic_write_json(d / "metrics.json", {"a": 2})
    assert all(p.exists() for p in killed)
    assert sorted(io.remove_stale_temps(d)) == sorted(killed)  # what the checkpoint writer can call
    assert young.exists() and all(p.exists() for p in keep)


def test_read_jsonl_skips_a_bom_and_names_the_line_of_bad_utf8(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n{"a": 2}\n')
    assert io.read_jsonl(p) == [{"a": 1}, {"a": 2}]
    assert [n for n, _ in io.iter_jsonl(p)] == [1, 3]
    p.write_bytes(b'{"a": 1}\n{"a": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"p\.jsonl:2: line is not valid UTF-8"):
        io.read_jsonl(p)


@pytest.mark.parametrize("content, message", [
    (None, r"^{p}: not a readable record \(No such file or directory\)$"),
    (b"\xff\xfe{}", r"^{p}: not a readable record \(not UTF-8: invalid start byte at byte 0\)$"),
    (b'{"a": 1,', r"^{p}: not a readable record \(Expecting property name enclosed in double quotes, column 9\)$"),
    (b"[" * 100_000, r"^{p}: not a readable record \(nested too deeply to parse\)$"),
    (b"[1, 2]", r"^{p}: a record is a JSON object, got a list$"),
])
def test_read_json_record_says_why_in_one_line(tmp_path, content, message):
    """The one reader of a JSON object from a file (method records, model configs, architecture files)."""
    import re

    p = tmp_path / "r.json"
    if content is not None:
        p.write_bytes(content)
    with pytest.raises(KeyError) as e:
        io.read_json_record(p, "record", error=KeyError)
    assert re.match(message.format(p=re.escape(str(p))), e.value.args[0])
    p.write_text('{"a": 1}')
    assert io.read_json_record(p, "record", where="x") == {"a": 1}
