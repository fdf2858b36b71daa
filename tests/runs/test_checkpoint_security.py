"""Checkpoints and weights are data, never code: a malicious pickle is refused wherever it comes from.

The payload is a real one: unpickling it with ``weights_only=False`` creates a marker file (checked
first, so the refusals below prove something). Served over HTTP on 127.0.0.1, passed as a local
``trainer.ckpt_path`` or shipped as a backbone's ``pytorch_model.bin``, it never runs.
"""

from __future__ import annotations

import ast
import http.server
import pickle
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from conftest import ROOT, compose

from scaleformer.errors import ConfigError
from scaleformer.runs import checkpoints
from scaleformer.runs.context import to_config
from scaleformer.runs.run import run


class _Payload:
    """Unpickling this calls ``open(marker, "w")``: arbitrary code with a visible side effect."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture
def evil(tmp_path: Path) -> tuple[Path, Path]:
    """(a checkpoint-shaped file whose unpickling creates `marker`, marker)."""
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "global_step": 3, "payload": _Payload(marker)}, path)
    assert not marker.exists()
    return path, marker


@pytest.fixture
def server(evil: tuple[Path, Path]) -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.1 serving the malicious file at /x.ckpt; yields (url, requests seen)."""
    body = evil[0].read_bytes()
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_HEAD = do_GET  # noqa: N815

        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/x.ckpt", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def _tiny(tmp_path: Path, *extra: str) -> list[str]:
    return ["debug=default", f"paths.root={tmp_path}/results", f"paths.cache={tmp_path}/cache",
            "trainer.enable_progress_bar=false", *extra]


def test_the_payload_runs_code_when_unpickled_unsafely(evil):
    """Guard for the tests below: without weights_only the file does run code."""
    path, marker = evil
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_remote_checkpoint_url_is_refused_before_any_download(tmp_path, evil, server):
    url, seen = server
    with pytest.raises(ConfigError, match=r"trainer\.ckpt_path='http://127\.0\.0\.1:\d+/x\.ckpt': remote "
                                          r"checkpoints are not loaded") as e:
        run(compose(_tiny(tmp_path, f"trainer.ckpt_path={url}")))
    assert "\n" not in str(e.value)
    assert seen == [], "nothing was fetched"
    assert not evil[1].exists(), "nothing ran"
    assert not (tmp_path / "results").exists(), "refused before the run folder was made"


def test_remote_url_is_refused_by_every_load_path(evil, server):
    url, seen = server
    for load in (checkpoints.load, checkpoints.AtomicCheckpointIO().load_checkpoint,
                 lambda u: checkpoints.resolve(u, None)):
        with pytest.raises(ConfigError, match="remote checkpoints are not loaded"):
            load(url)
    assert seen == [] and not evil[1].exists()


def test_train_py_refuses_a_remote_checkpoint_in_one_line(tmp_path, evil, server):
    """What a user gets: exit status 1 and one line, no traceback, nothing fetched, nothing run."""
    url, seen = server
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), *_tiny(tmp_path, f"trainer.ckpt_path={url}")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"error: trainer\.ckpt_path='http://127\.0\.0\.1:\d+/x\.ckpt': remote checkpoints "
                        r"are not loaded .*local path", last), proc.stderr
    assert "Traceback" not in proc.stderr
    assert seen == [] and not evil[1].exists()


@pytest.mark.parametrize("do_train", ["false", "true"])
def test_local_malicious_checkpoint_is_not_unpickled(tmp_path, evil, do_train):
    """Evaluate-only (weights loaded directly) and resume (Lightning's path) both read weights only."""
    path, marker = evil
    with pytest.raises((ConfigError, pickle.UnpicklingError), match=r"(?s)Weights only load failed|"
                                                                    r"trainer\.ckpt_path=.*io\.open"):
        run(compose(_tiny(tmp_path, f"trainer.ckpt_path={path}", f"trainer.do_train={do_train}")))
    assert not marker.exists()
    assert not list((tmp_path / "results").rglob("metrics.json"))


def test_backbone_weights_file_with_code_is_refused(tmp_path, evil):
    """A local backbone folder whose pytorch_model.bin carries code: one-line ConfigError, nothing runs."""
    from scaleformer.model.backbone import build_model, load_tokenizer, model_config

    rc = to_config(compose([]))
    tok = load_tokenizer(rc.backbone)
    folder = tmp_path / "model"
    model_config(rc.backbone, tok).save_pretrained(folder)
    (folder / "pytorch_model.bin").write_bytes(evil[0].read_bytes())
    rc = to_config(compose([f"backbone.pretrained={folder}", "backbone.tokenizer=offline"]))
    conf = model_config(rc.backbone, tok)
    with pytest.raises(ConfigError, match=r"backbone\.pretrained='.*model': its weights file holds more than "
                                          r"tensors \(Unsupported global: GLOBAL io\.open\)") as e:
        build_model(rc.backbone, conf)
    assert "\n" not in str(e.value) and not evil[1].exists()


def _loads(tree: ast.AST) -> list[tuple[int, str, ast.Call]]:
    """Calls that unpickle or load weights: torch.load, np.load, and a model class's from_pretrained
    (called, or passed to a helper such as backbone._from_hub), with the call whose keywords apply."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for target in (node.func, *node.args):
            if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)):
                continue
            owner, attr = target.value.id, target.attr
            if (owner, attr) in (("torch", "load"), ("np", "load")) and target is node.func:
                found.append((node.lineno, f"{owner}.load", node))
            elif attr == "from_pretrained" and "Model" in owner:
                found.append((node.lineno, f"{owner}.from_pretrained", node))
    return found


def test_every_load_in_the_package_is_weights_only():
    """Static audit: torch.load and model from_pretrained ask for weights only (or safetensors only);
    np.load never allows pickles."""
    calls = []
    for path in [*(ROOT / "scaleformer").rglob("*.py"), *(ROOT / "scripts").glob("*.py")]:
        for line, kind, call in _loads(ast.parse(path.read_text())):
            calls.append((f"{path.relative_to(ROOT).as_posix()}:{line}", kind,
                          {k.arg: getattr(k.value, "value", None) for k in call.keywords}))
    assert any(kind == "torch.load" for _, kind, _ in calls), "the audit finds the checkpoint loader"
    for where, kind, keywords in calls:
        if kind == "np.load":
            assert keywords.get("allow_pickle") is not True, where
        else:
            assert keywords.get("weights_only") is True or keywords.get("use_safetensors") is True, \
                f"{where}: {kind} without weights_only=True (or use_safetensors=True)"
