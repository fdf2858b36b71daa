"""Fact recall on the synthetic ledgers: parsing, scoring, absence elsewhere, the truncation ceiling."""

from __future__ import annotations

import random

import pytest

from scaleformer.config import MetricsConfig
from scaleformer.data import synthetic
from scaleformer.data.ledger_facts import (
    compute_facts,
    document_events,
    headline_town,
    predicted_events,
    reference_events,
    window_ceiling,
)
from scaleformer.metrics import compute_metrics
from scaleformer.model.tokenizer import load_offline_tokenizer

REF = ("The ledger of Ash Crossing records 3 events. Mara Quill repaired 17 lanterns at Harbor Gate. "
       "Otto Birch sold 250 sacks of flour at the North Mill. Mara Quill counted 9 bells at the Hay Loft.")
PARA = ("Volume 12 of the Ash Crossing ledger lists 3 events. At Harbor Gate, Mara Quill repaired 17 lanterns. "
        "At the North Mill, Otto Birch sold 250 sacks of flour. At the Hay Loft, Mara Quill counted 9 bells.")


def _no_bertscore() -> MetricsConfig:
    cfg = MetricsConfig()
    cfg.bertscore.enabled = False
    return cfg


def test_reference_and_paraphrase_parse_to_the_same_events():
    events = reference_events(REF)
    assert events is not None and len(events) == 3
    assert events == reference_events(PARA)
    assert (events[1].who, events[1].verb, events[1].n, events[1].obj, events[1].where) == \
        ("Otto Birch", "sold", "250", "sacks of flour", "North Mill")


@pytest.mark.parametrize("text", ["", "A real summary of a report.", REF.replace("records 3 events", "is long"),
                                  REF + " The weather was fine."])
def test_non_ledger_references_are_not_parsed(text):
    assert reference_events(text) is None


def test_generated_references_all_parse():
    rng = random.Random(0)
    for _ in range(20):
        doc, ref, ref2 = synthetic.make_document(rng, 400)
        ev = reference_events(ref)
        assert ev is not None and ev == reference_events(ref2)
        assert [e for _, _, e in document_events(doc)] == ev, "the document states exactly the summary's events"


def test_scores_exact_partial_and_precision():
    perfect = compute_facts([REF], [[REF]])
    assert perfect["fact_recall"] == perfect["fact_field_recall"] == perfect["fact_precision"] == 100.0
    assert perfect["fact_events"] == 3
    # One event right, one with a wrong count (4 of 5 parts), one invented; the header states no event.
    pred = ("The ledger of Ash Crossing records 3 events. Mara Quill repaired 17 lanterns at Harbor Gate. "
            "Otto Birch sold 251 sacks of flour at the North Mill. Hedda Vance built 3 bricks at Kingsway.")
    got = compute_facts([pred], [[REF]])
    assert got["fact_recall"] == pytest.approx(100 / 3)
    assert got["fact_field_recall"] == pytest.approx(100 * (5 + 4) / 15)
    assert got["fact_precision"] == pytest.approx(100 / 3)
    assert len(predicted_events(pred)) == 3


def test_each_predicted_sentence_counts_once():
    pred = "Mara Quill repaired 17 lanterns at Harbor Gate. " * 3
    got = compute_facts([pred], [[REF]])
    assert got["fact_recall"] == pytest.approx(100 / 3), "repeating one event recalls one event"


def test_best_reference_and_mean_over_documents():
    got = compute_facts(["", PARA], [[REF, PARA], [REF]])
    assert got["fact_recall"] == pytest.approx(50.0) and got["fact_events"] == 6


@pytest.mark.parametrize(("prediction", "right"), [
    ("The ledger of Ash Crossing records 3 events. Mara Quill repaired 17 lanterns.", True),
    ("the LEDGER of ash crossing records 2 events.", True),  # case does not matter
    ("Volume 3 of the Ash Crossing ledger lists 3 events.", True),  # the paraphrased headline
    ("The ledger of Harbor Gate records 3 events. Mara Quill repaired 17 lanterns at Ash Crossing.", False),
    ("Mara Quill repaired 17 lanterns at Ash Crossing.", False),  # a place, not the headline's town
    ("", False),
])
def test_town_accuracy_reads_the_headline(prediction, right):
    assert compute_facts([prediction], [[REF]])["town_accuracy"] == (100.0 if right else 0.0)


def test_town_accuracy_takes_any_reference_and_averages_documents():
    other = REF.replace("Ash Crossing", "Old Granary")
    assert headline_town(other) == "old granary"
    got = compute_facts(["The ledger of Old Granary records 1 events.", "The ledger of Kingsway records"],
                        [[REF, other], [REF]])
    assert got["town_accuracy"] == 50.0


def test_generated_ledgers_name_their_town_in_reference_and_document():
    for row in synthetic.split_rows("validation", 8, 400):
        town = headline_town(row["output"])
        assert town is not None and row["input"].lower().startswith(f"ledger of {town},")


def test_compute_metrics_reports_facts_only_for_ledgers():
    on = compute_metrics([REF], [[REF]], _no_bertscore())
    assert on["fact_recall"] == 100.0
    off = compute_metrics(["a report summary"], [["the reference summary"]], _no_bertscore())
    assert not any(k.startswith("fact_") for k in off), "absent, not zero, on other data"
    mixed = compute_metrics([REF, "x"], [[REF], ["a real summary"]], _no_bertscore())
    assert "fact_recall" not in mixed
    cfg = _no_bertscore()
    cfg.facts = "off"
    assert "fact_recall" not in compute_metrics([REF], [[REF]], cfg)


def test_facts_setting_is_validated():
    with pytest.raises(ValueError, match="metrics.facts='yes'"):
        MetricsConfig(facts="yes")


def test_window_ceiling_counts_events_inside_the_window():
    tok = load_offline_tokenizer("bart")
    rng = random.Random(3)
    doc, _, _ = synthetic.make_document(rng, 300)  # ~350 tokens: every event inside 1024
    assert window_ceiling([doc], tok, 1024)["fact_ceiling"] == 100.0
    long_doc, _, _ = synthetic.make_document(rng, 8000)
    events = document_events(long_doc)
    enc = tok(long_doc)
    inside = sum(enc.char_to_token(end - 1) < 1023 for _, end, _ in events)  # 1024 minus the closing </s>
    got = window_ceiling([long_doc], tok, 1024)["fact_ceiling"]
    assert got == pytest.approx(100 * inside / len(events)) and got < 50
    assert window_ceiling([doc, long_doc], tok, 1024)["fact_ceiling"] == pytest.approx((100 + got) / 2)
    with pytest.raises(ValueError, match="window=1"):
        window_ceiling([doc], tok, 1)
    with pytest.raises(ValueError, match="no ledger event"):
        window_ceiling(["plain text"], tok, 1024)
