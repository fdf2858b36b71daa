"""Run folders are named by hashes of their settings: options added later must leave them alone.

Settings that change neither the weights nor the tokens (documents per evaluation batch, the static
decoding cache, compilation, cheaper validation at its default) stay out of both identities, so the runs and
evaluations made before them keep their names and are reused, not redone. The hashes below are the ones
the code had before those options existed (checked out and computed at that commit).
"""

from __future__ import annotations

import pytest

from scaleformer.compose import compose_config
from scaleformer.runs import identity
from scaleformer.runs.context import to_config

BEFORE = [
    (["debug=default"], "5844ac2b96", "419c2f3fe6"),
    (["debug=default", "data=ledgers_short", "method=sled", "backbone=tiny_bart_reader", "generation.num_beams=1"],
     "6180455d8b", "15524ad892"),
]


@pytest.mark.parametrize(("overrides", "evaluation", "training"), BEFORE)
def test_identities_made_before_the_speed_options_stand(overrides, evaluation, training):
    rc = to_config(compose_config(overrides))
    assert (identity.evaluation_hash(rc), identity.training_hash(rc)) == (evaluation, training)


@pytest.mark.parametrize("extra", [["data.eval_batch_size=8"], ["data.eval_batch_size=1"],
                                   ["generation.static_cache=true"]])
def test_speed_options_join_no_identity(extra):
    rc = to_config(compose_config(["debug=default", *extra]))
    assert (identity.evaluation_hash(rc), identity.training_hash(rc)) == BEFORE[0][1:]
