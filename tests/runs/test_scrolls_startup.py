"""Every SCROLLS task starts on BART-base's positions with every chunked method: queries are cut to SLED's caps
(64 tokens, QuALITY's 160) and a window that would not fit beside one shrinks to what is left, at start-up,
through the real loaders reading local mirrors of SCROLLS' zips whose queries run past those caps."""

from __future__ import annotations

import pytest
from conftest import compose

from scaleformer.data.mirrors import write_scrolls
from scaleformer.methods import REGISTRY
from scaleformer.methods.chunked import ChunkedMethod
from scaleformer.runs import run as run_module
from scaleformer.runs.context import RunContext, to_config

QUERY_TASKS = {"qasper": "qasper", "narrative_qa": "narrative_qa", "quality": "quality", "qmsum": "qmsum",
               "contract_nli": "contract_nli"}
CAPS = {"qasper": 64, "narrative_qa": 64, "quality": 160, "qmsum": 64, "contract_nli": 64}  # SLED configs/data/*.json


def _chunked_options() -> list[str]:
    from scaleformer.artifacts.grid import method_options

    chunked = []
    for option in method_options():
        name = to_config(compose([f"method={option}"])).method.name
        if issubclass(REGISTRY[name], ChunkedMethod):
            chunked.append(option)
    return chunked


CHUNKED = _chunked_options()


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    root = tmp_path_factory.mktemp("mirror")
    write_scrolls(root, {"train": 2, "validation": 2, "test": 2}, scale=0.01, tasks=list(QUERY_TASKS.values()))
    return root


def test_the_chunked_methods_are_the_ones_expected():
    assert {"sled", "scaleformer", "scaleformer_middle", "unlimiformer", "memorizing"} <= set(CHUNKED)


@pytest.mark.parametrize("task", list(QUERY_TASKS))
def test_every_query_task_starts_on_bart_base_with_every_chunked_method(task, mirror, tmp_path):
    for option in CHUNKED:
        cfg = compose([f"data={task}", "backbone=bart_base_shape", f"method={option}", "trainer=paper", "optim=paper",
                       f"data.files_base={mirror}/scrolls", f"paths.root={tmp_path}",
                       f"paths.cache={tmp_path.parent}/startup_cache", "metrics.bertscore.enabled=false",
                       "logger=csv", "trainer.accelerator=cpu"])
        ctx = RunContext.create(to_config(cfg))
        parts = run_module.prepare(ctx, None)  # the run's own start-up: backbone, method, data, every check
        summary = parts.dm.summary()
        cap, limit = CAPS[task], 1024
        assert ctx.cfg.data.max_prefix_tokens == cap
        assert parts.dm.longest_prefix() == cap, option  # the mirror's longest queries ran past the cap, now cut
        assert sum(s["n_prefix_truncated"] for s in summary.values()) > 0
        chunk = parts.method.cfg.chunk_size
        assert chunk + cap <= limit and parts.described["chunk_size"] == chunk, (option, chunk)
        assert chunk == min(to_config(compose([f"method={option}"])).method.chunk_size, limit - cap)
        parts.method.check_prefix(cap)  # what the first batch's layout would raise


def test_a_cap_that_leaves_no_room_for_the_overlap_is_one_line_at_start_up(mirror, tmp_path):
    from scaleformer.errors import ConfigError

    cfg = compose(["data=qasper", "backbone=bart_base_shape", "method=sled", "data.max_prefix_tokens=900",
                   f"data.files_base={mirror}/scrolls", f"paths.root={tmp_path}", f"paths.cache={tmp_path}/c",
                   "metrics.bertscore.enabled=false", "trainer.accelerator=cpu"])
    with pytest.raises(ConfigError, match=r"data.max_prefix_tokens=900: leaves a chunk of 124 tokens"):
        run_module.prepare(RunContext.create(to_config(cfg)), None)
