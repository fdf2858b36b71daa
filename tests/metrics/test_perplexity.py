"""Perplexity over documents: token-weighted, by the paper's length buckets, its interval over documents."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scaleformer.metrics.perplexity import bucket_label, perplexity, ratio_ci


def test_token_weighted_perplexity_and_the_papers_buckets():
    rows = [{"nll": 10.0, "tokens": 5, "length": 6}, {"nll": 30.0, "tokens": 10, "length": 1024},
            {"nll": 2.0, "tokens": 1, "length": 1025}]
    out = perplexity(rows, 1024)
    assert out["ppl"] == pytest.approx(math.exp(42 / 16), abs=1e-4) and out["tokens"] == 16
    assert list(out["by_length"]) == ["(0, 1024]", "(1024, 2048]"]
    assert out["by_length"]["(0, 1024]"]["ppl"] == pytest.approx(math.exp(40 / 15), abs=1e-4)
    assert bucket_label(1, 128) == "(0, 128]" and bucket_label(128, 128) == "(0, 128]" and \
        bucket_label(129, 128) == "(128, 256]"
    assert "dependency" not in out


def test_the_interval_resamples_documents_not_tokens():
    """One long document of low loss among short ones of high loss: the interval is wide, as the documents
    differ; tokens counted as independent would give a narrow one. A constant loss has a point interval."""
    rng = np.random.default_rng(0)
    nll = list(rng.uniform(2, 6, 30) * 100)
    tokens = [100] * 30
    ci = ratio_ci(nll, tokens)
    assert ci.low < ci.mean < ci.high and ci.method == "percentile" and ci.n == 30
    assert math.log(ci.high) - math.log(ci.low) > 0.3
    same = ratio_ci([300.0] * 8, [100] * 8)
    assert same.low == pytest.approx(same.mean) == pytest.approx(same.high) == pytest.approx(math.exp(3))
    with pytest.raises(ValueError, match="not finite"):
        ratio_ci([float("nan")], [3])
    with pytest.raises(ValueError, match="at least one document"):
        ratio_ci([], [])


def test_dependency_tokens_are_scored_apart():
    rows = [{"nll": 10.0, "tokens": 10, "length": 11, "dep_nll": 6.0, "dep_tokens": 2, "far_nll": 5.0,
             "far_tokens": 1}, {"nll": 10.0, "tokens": 10, "length": 11}]
    out = perplexity(rows, 8)
    assert out["dependency"]["ppl"] == pytest.approx(math.exp(3), abs=1e-4) and out["dependency"]["n_docs"] == 1
    assert out["dependency_beyond_block"]["ppl"] == pytest.approx(math.exp(5), abs=1e-4)
