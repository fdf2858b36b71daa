"""SCROLLS' answer metrics against hand-computed cases, and the query split of SCROLLS inputs.

Each case's expected value is worked out by hand from the evaluator's definitions (SQuAD v1.1's, as
SCROLLS' f1/exact_match metrics use them): normalise = lower-case, remove ASCII punctuation, remove
the articles a/an/the, collapse whitespace; F1 over token multisets; the best score over references.
"""

from __future__ import annotations

import pytest

from scaleformer.data import DataError
from scaleformer.data.examples import split_query
from scaleformer.metrics.answers import (
    TASK_METRICS,
    answer_scores,
    exact_match,
    normalize_answer,
    scrolls_score,
    task_score,
    token_f1,
)

# (prediction, references, F1, exact match)
CASES = [
    ("Paris", ["Paris"], 1.0, 1.0),
    ("paris", ["Paris"], 1.0, 1.0),                                # case
    ("Paris.", ["Paris"], 1.0, 1.0),                               # punctuation
    ("the Eiffel Tower", ["Eiffel Tower"], 1.0, 1.0),              # article
    ("An apple", ["apple"], 1.0, 1.0),
    ("  Eiffel   Tower ", ["Eiffel Tower"], 1.0, 1.0),             # whitespace
    ("Eiffel", ["Eiffel Tower"], 2 / 3, 0.0),                      # P=1, R=1/2
    ("the big red barn", ["red barn"], 0.8, 0.0),                  # P=2/3, R=1
    ("cat dog", ["dog cat"], 1.0, 0.0),                            # order ignored by F1, not by EM
    ("a b c", ["x y z"], 0.0, 0.0),                                # "a" is an article: [b c] vs [x y z]
    ("yes", ["no", "Yes"], 1.0, 1.0),                              # best over references
    ("New York City", ["New York", "York City", "NYC"], 0.8, 0.0),  # best F1: P=2/3, R=1
    ("red red red", ["red"], 0.5, 0.0),                            # multiset: 1 shared, P=1/3, R=1
    ("red", ["red red red"], 0.5, 0.0),                            # P=1, R=1/3
    ("", ["anything"], 0.0, 0.0),                                  # empty prediction
    ("The", ["a"], 0.0, 1.0),                                      # both normalise to "": EM yes, F1 0
    ("Entailment", ["Entailment"], 1.0, 1.0),                      # ContractNLI labels
    ("Not mentioned", ["Not mentioned"], 1.0, 1.0),
    ("Contradiction", ["Entailment"], 0.0, 0.0),
    ("Unanswerable", ["Unanswerable", "the BERT model"], 1.0, 1.0),  # Qasper
    ("27", ["27"], 1.0, 1.0),                                      # numbers are tokens
    ("27 crates", ["27"], 2 / 3, 0.0),
    ("it's", ["its"], 1.0, 1.0),                                   # the apostrophe is punctuation
    ("U.S.A.", ["USA"], 1.0, 1.0),
    ("café", ["cafe"], 0.0, 0.0),                                  # no accent folding
    ("(C) a ship", ["(C) ship"], 1.0, 1.0),                        # QuALITY options: "c ship"
]


@pytest.mark.parametrize(("pred", "refs", "f1", "em"), CASES, ids=[f"{i}:{c[0]!r}" for i, c in enumerate(CASES)])
def test_f1_and_exact_match_by_hand(pred, refs, f1, em):
    assert token_f1(pred, refs) == pytest.approx(f1)
    assert exact_match(pred, refs) == em


def test_at_least_twenty_hand_cases_with_several_references():
    assert len(CASES) >= 20 and sum(len(refs) > 1 for _, refs, _, _ in CASES) >= 3


def test_normalisation_order_is_the_evaluators():
    # punctuation goes before articles: "the-end" -> "theend" keeps no article, "the end" -> "end"
    assert normalize_answer("the-end") == "theend" and normalize_answer("The end.") == "end"
    assert normalize_answer("A  B\tC\n") == "b c"


def test_a_bare_string_is_one_reference_and_no_reference_is_an_error():
    assert token_f1("x y", "x") == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="at least one reference"):
        token_f1("x", [])


def test_means_are_x100_over_documents():
    preds, refs = [c[0] for c in CASES], [c[1] for c in CASES]
    got = answer_scores(preds, refs)
    assert got["f1"] == pytest.approx(100 * sum(c[2] for c in CASES) / len(CASES))
    assert got["exact_match"] == pytest.approx(100 * sum(c[3] for c in CASES) / len(CASES))


def test_task_scores_and_the_scrolls_average():
    assert task_score("rouge", {"rouge_geomean": 20.0, "rouge1": 40.0}) == 20.0
    assert task_score("f1", {"f1": 31.5}) == 31.5
    scores = {t: float(i) for i, t in enumerate(TASK_METRICS)}
    assert scrolls_score(scores) == pytest.approx(sum(range(7)) / 7)
    with pytest.raises(ValueError, match="missing qasper"):
        scrolls_score({t: 1.0 for t in TASK_METRICS if t != "qasper"})
    assert {TASK_METRICS[t] for t in ("qasper", "narrative_qa")} == {"f1"}
    assert {TASK_METRICS[t] for t in ("quality", "contract_nli")} == {"exact_match"}


def test_compute_metrics_reports_the_tasks_own_metric():
    from scaleformer.config import BertScoreConfig, MetricsConfig
    from scaleformer.metrics import compute_metrics

    cfg = MetricsConfig(bertscore=BertScoreConfig(enabled=False), sentence_splitter="regex")
    qa = compute_metrics(["Paris", "Rome"], [["Paris"], ["Milan"]], cfg, task_metric="exact_match")
    assert qa["exact_match"] == 50.0 and qa["task_metric"] == "exact_match" and qa["task_score"] == 50.0
    summ = compute_metrics(["a cat sat"], [["a cat sat"]], cfg)
    assert summ["task_metric"] == "rouge" and summ["task_score"] == pytest.approx(summ["rouge_geomean"])
    assert "f1" not in summ


# ---- the query split of SCROLLS inputs ---------------------------------------------------------------


def test_blank_line_split_takes_the_text_before_the_first_blank_line():
    assert split_query("What is X?\n\nDoc one.\n\nDoc two.", "blank_line", "f:1") == (
        "What is X?", "Doc one.\n\nDoc two.")


def test_options_split_keeps_qualitys_options_with_the_question():
    text = "Why did she leave?\n\n (A) fear\n (B) money\n (C) love\n (D) duty\n\n\nThe story begins."
    query, doc = split_query(text, "options", "f:1")
    assert query.startswith("Why did she leave?") and query.endswith("(D) duty") and doc == "The story begins."


@pytest.mark.parametrize(("text", "mode", "message"), [
    ("no separator here", "blank_line", r"f:3: no blank line between the query and the document"),
    ("Q?\n\n(A) x (B) y\n\ndoc", "options", r"f:3: no answer options"),
])
def test_a_missing_separator_names_the_row(text, mode, message):
    with pytest.raises(DataError, match=message):
        split_query(text, mode, "f:3")


def test_truncations_answer_ceiling_counts_answers_inside_its_window():
    from scaleformer.data.ledger_facts import window_answer_ceiling
    from scaleformer.model.tokenizer import load_offline_tokenizer

    tok = load_offline_tokenizer("bart")
    filler = " ".join(["The quiet mill stood by the river."] * 40)
    early = f"On day 3, Ada Moss bought 27 lanterns at the Mill. {filler}"
    late = f"{filler} On day 9, Ada Moss sold 5 bells at the Quay."
    rows = [{"query": "What happened on day 3?", "input": early, "output": "On day 3, Ada Moss bought 27 lanterns at the Mill."},
            {"query": "What happened on day 9?", "input": late, "output": "On day 9, Ada Moss sold 5 bells at the Quay."}]
    assert window_answer_ceiling(rows, tok, 64) == 50.0
    assert window_answer_ceiling(rows, tok, 4096) == 100.0
    with pytest.raises(ValueError, match="not stated in its document"):
        window_answer_ceiling([{**rows[0], "output": "Nobody did anything."}], tok, 64)


def test_score_command_reports_the_answer_metrics(tmp_path):
    import json

    from scaleformer.cli import score

    f = tmp_path / "qa.jsonl"
    f.write_text('{"id": "a", "prediction": "Paris.", "reference": ["paris", "Lyon"]}\n'
                 '{"id": "b", "prediction": "the Rome", "reference": "Milan"}\n')
    returned = score.main([str(f), "--no-bertscore", "--sentence-splitter", "regex", "--task-metric", "exact_match",
                           "--out", str(tmp_path / "m.json")])
    m = json.loads((tmp_path / "m.json").read_text())
    assert returned["task_score"] == m["task_score"]
    assert (m["exact_match"], m["f1"], m["task_metric"], m["task_score"]) == (50.0, 50.0, "exact_match", 50.0)


def test_the_bundled_questions_name_a_day_stated_once_and_answers_spread_over_the_ledger():
    import re

    from scaleformer.data.synthetic import qa_rows

    rows = qa_rows("validation", 24, 600)
    for row in rows:
        day = re.fullmatch(r"What happened on day (\d+)\?", row["query"]).group(1)
        assert row["output"].startswith(f"On day {day}, ") and row["input"].count(f"On day {day},") == 1
        assert abs(row["input"].index(row["output"]) - row["answer_at"] * len(row["input"])) <= 1
    positions = [r["answer_at"] for r in rows]
    assert min(positions) < 0.3 and max(positions) > 0.7, "answers must also sit late in the document"


def test_scores_by_window_keep_answers_inside_and_past_the_window_apart():
    from scaleformer.metrics.answers import scores_by_window

    preds = ["On day 3, Ada Moss sold 5 bells.", "On day 9, Ada Moss sold 6 bells.", "On day 4, Bo Lin ran."]
    refs = [["On day 3, Ada Moss sold 5 bells."], ["On day 9, Cy Ng bought 6 jars."], ["On day 4, Bo Lin ran."]]
    got = scores_by_window(preds, refs, [True, False, False])
    assert got["inside"] == {"n": 1, "f1": 100.0, "exact_match": 100.0}
    # past: one exact, one sharing "on day 9" and "6": 4 of 8 tokens each way (F1 0.5)
    assert got["past"] == {"n": 2, "exact_match": 50.0, "f1": 75.0}
