"""Bundled synthetic long-document summarization data, generated deterministically offline.

Why synthetic: the embedded default must train and evaluate with no hub access, yet still reward
long-context methods. Each document is a town ledger of several thousand words in which a handful of
key events ("On day 41, Mara Quill repaired 17 lanterns at Harbor Gate.") are spread evenly across
the whole text among filler sentences and distractors that mention the same people. The reference
summary restates every event in order, so a model that only reads the first 1024 tokens can recover
at most the first one or two events.

Multi-reference data (as in SCROLLS): some train documents appear twice with a paraphrased second
reference, and some validation/test ids have two rows (two references) for the same input.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scaleformer.io import atomic_write_jsonl, atomic_write_text
from scaleformer.model.vocab import ASSET, SPECIAL_TOKENS, VOCAB_SIZE

# Bump when the generated text changes, so cached files and tokenizers are rebuilt.
GENERATOR_VERSION = 1
# The data is part of the product, not of an experiment: it does not follow the run's seed.
DEFAULT_SEED = 1234
# Every `MULTI_REF_EVERY`-th document gets a second (paraphrased) reference.
MULTI_REF_EVERY = 4
# Key events per ledger (inclusive range) unless a config asks for another.
DEFAULT_EVENTS = (6, 9)

FIRST = (
    "Mara Tobin Elsa Joren Petra Anselm Ilsa Corin Wren Dario Nadia Felix Oona Bram Greta Hollis "
    "Ivo Juna Kasper Lidia Milo Nell Osric Pia Quentin Rosa Soren Talia Ulric Vera Wendel Xenia "
    "Yorick Zora Aldo Brina Cato Delia Emeric Fenna Gideon Hedda Isak Jolie Konrad Linnea Matteo "
    "Norah Otto Perrin Rhea Silas Thea Viggo Willa Anton Bettina Cyril Dagny Edwin"
).split()
LAST = (
    "Quill Ashdown Brightwater Carrow Dunmore Ellery Fairbank Greaves Holloway Ingram Jessop Kettering "
    "Lockhart Marlow Norcott Oakley Pembrook Quarry Redfern Stroud Thornbury Upton Varley Whitlock "
    "Yardley Ashby Bramwell Calloway Denholm Everly Fenwick Garside Hartwell Ivers Keswick Larkin "
    "Mayhew Nettle Orwell Penrose Ramsay Sedley Tilney Underhill Vance Winslow Alcott Birch Colby Drury"
).split()
PLACES = (
    "Harbor Gate|the North Mill|Copper Street|the Old Granary|Fenwick Bridge|the East Quay|Lantern Square|"
    "the Salt Market|Willow Lane|the Clock Tower|Stone Wharf|the Glass Works|Mossy Hill|the River Depot|"
    "Cedar Row|the South Barracks|Bell Yard|the Weavers Hall|Ash Crossing|the Hay Loft|Tanners Court|"
    "the Lower Dock|Kingsway|the Chapel Green|Foundry Road|the Apple Orchard|Mill Pond|the Toll House|"
    "Rope Walk|the High Terrace|Birch Hollow|the Fish Market|Iron Gate|the Signal Hill|Pepper Alley|"
    "the West Warehouse|Dove Court|the Brewery|Gull Point|the Town Hall"
).split("|")
OBJECTS = (
    "lanterns|crates|barrels|sacks of flour|bolts of cloth|wagon wheels|copper pots|oil lamps|fishing nets|"
    "iron nails|clay jars|wool blankets|candles|ropes|saddles|bottles of ink|glass panes|oak beams|bricks|"
    "spools of thread|tin cups|apple baskets|bells|maps|hammers|ledgers|buckets|stools|kegs|chains|brooms|"
    "kettles|quilts|clocks|shovels"
).split("|")
VERBS = (
    "delivered repaired sold counted found stored shipped painted bought built moved loaded cleaned "
    "inspected collected carried returned ordered weighed sorted packed traded recorded measured "
    "polished guarded restored checked lifted hauled"
).split()

# Filler vocabulary: ordinary narrative with no numbers and no fact marker.
F_ADJ = (
    "quiet busy cold warm grey bright narrow wide old new muddy dusty calm windy damp crowded empty "
    "distant nearby gentle heavy pale dark steady slow early late long short low tall"
).split()
F_NOUN = (
    "street harbor market river bridge tower square road meadow chapel garden wall gate roof window "
    "field orchard lane yard well mill shop stall cart boat path hill forest valley fence door"
).split()
F_VERB = (
    "stood rested waited stretched leaned shone faded lingered glowed shifted echoed settled "
    "trembled creaked swayed dripped"
).split()
F_PREP = "near beside behind across beyond under over along past around".split()
F_TIME = (
    "In the morning|By midday|Later that week|Toward evening|At dawn|After the rain|Before the fair|"
    "During the long winter|That spring|Some days later|As the bells rang|Once the tide turned"
).split("|")
F_CLAUSE = (
    "the clerks copied old notes|the children chased the geese|a dog slept in the sun|"
    "smoke rose from the chimneys|the wind carried the smell of bread|carts rattled over the stones|"
    "gulls circled above the water|the baker opened his shutters|someone sang an old song|"
    "the watchman walked his rounds|rain drummed on the roofs|the ferry crossed without passengers|"
    "merchants argued about prices|the church clock struck the hour|mist hung over the fields|"
    "a fiddler played by the fountain|the lamps were lit one by one|traders packed up their stalls"
).split("|")


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _filler(rng: random.Random, people: list[str]) -> str:
    """One sentence that carries no fact: scenery, routine, or a distractor mentioning a person."""
    k = rng.random()
    if k < 0.4:
        return (f"The {rng.choice(F_ADJ)} {rng.choice(F_NOUN)} {rng.choice(F_VERB)} {rng.choice(F_PREP)} "
                f"the {rng.choice(F_ADJ)} {rng.choice(F_NOUN)}.")
    if k < 0.75:
        return f"{rng.choice(F_TIME)}, {rng.choice(F_CLAUSE)} and {rng.choice(F_CLAUSE)}."
    if k < 0.9:
        # Distractor: a person who also appears in facts, doing nothing countable.
        return (f"{rng.choice(people)} walked {rng.choice(F_PREP)} the {rng.choice(F_ADJ)} "
                f"{rng.choice(F_NOUN)} and {rng.choice(F_VERB)} there for a while.")
    return f"Nobody at {rng.choice(PLACES)} remembered the {rng.choice(F_ADJ)} {rng.choice(F_NOUN)}."


def _fact_doc(f: dict[str, Any]) -> str:
    return f"On day {f['day']}, {f['who']} {f['verb']} {f['n']} {f['obj']} at {f['where']}."


def _fact_summary(f: dict[str, Any], paraphrase: bool) -> str:
    if paraphrase:
        return f"At {f['where']}, {f['who']} {f['verb']} {f['n']} {f['obj']}."
    return f"{f['who']} {f['verb']} {f['n']} {f['obj']} at {f['where']}."


def make_document(rng: random.Random, n_words: int, n_events: tuple[int, int] = DEFAULT_EVENTS) -> tuple[str, str, str]:
    """One (document, reference, paraphrased reference) triple of about `n_words` words with
    `n_events` (inclusive range) key events."""
    doc, ref, ref2, _ = make_ledger(rng, n_words, n_events)
    return doc, ref, ref2


def make_ledger(rng: random.Random, n_words: int, n_events: tuple[int, int] = DEFAULT_EVENTS
                ) -> tuple[str, str, str, list[dict[str, Any]]]:
    """:func:`make_document`'s triple and the events themselves (in document order)."""
    town = rng.choice(PLACES).removeprefix("the ")
    volume = rng.randint(2, 99)
    n_facts = rng.randint(*n_events)
    people = [_person(rng) for _ in range(rng.randint(3, 5))]
    days = sorted(rng.sample(range(1, 366), n_facts))
    facts = [
        {"day": d, "who": rng.choice(people), "verb": rng.choice(VERBS), "n": rng.randint(2, 400),
         "obj": rng.choice(OBJECTS), "where": rng.choice(PLACES)}
        for d in days
    ]
    # Filler sentences until the word budget is met, then one fact dropped into each of n_facts equal
    # segments, so the facts are spread over the whole document in order.
    filler: list[str] = []
    words = 0
    budget = n_words - sum(len(_fact_doc(f).split()) for f in facts) - 8
    while words < budget:
        s = _filler(rng, people)
        filler.append(s)
        words += len(s.split())
    seg = len(filler) / n_facts
    for i in reversed(range(n_facts)):
        lo, hi = int(i * seg), max(int(i * seg) + 1, int((i + 1) * seg))
        filler.insert(rng.randint(lo, hi), _fact_doc(facts[i]))
    # Paragraphs of about six sentences.
    paras = [" ".join(filler[i:i + 6]) for i in range(0, len(filler), 6)]
    doc = f"Ledger of {town}, volume {volume}.\n\n" + "\n\n".join(paras)
    head = f"The ledger of {town} records {n_facts} events."
    ref = " ".join([head] + [_fact_summary(f, False) for f in facts])
    head2 = f"Volume {volume} of the {town} ledger lists {n_facts} events."
    ref2 = " ".join([head2] + [_fact_summary(f, True) for f in facts])
    return doc, ref, ref2, facts


def qa_example(rng: random.Random, n_words: int, n_events: tuple[int, int] = DEFAULT_EVENTS) -> dict[str, Any]:
    """One ledger and one question about one of its events, chosen uniformly (``query, input, output,
    answer_at``; ``answer_at``: where the event's sentence starts, as a share of the characters).

    The question names the event's day ("What happened on day 213?"; days are distinct within a
    ledger); the answer is the event's sentence as the ledger writes it ("On day 213, Ada Moss bought
    27 lanterns at the Mill."). Exact match needs the whole event right, token F1 gives its parts
    partial credit; the day's words are in the question, so a guess gets them (and nothing more).
    A reader that does not find the day in the document can only guess the actor, action, count,
    item and place."""
    doc, _, _, facts = make_ledger(rng, n_words, n_events)
    f = rng.choice(facts)
    answer = _fact_doc(f)
    return {"query": f"What happened on day {f['day']}?", "input": doc, "output": answer,
            "answer_at": round(doc.index(answer) / len(doc), 4)}


def doc_lengths(split: str, n_docs: int, n_words: int, seed: int, spread: float) -> list[int]:
    """Words of each document: all ``n_words`` (spread 0), or lognormal with mean ``n_words`` and log-sd
    ``spread`` (a data set's published average, spread like real documents), from a stream of their own
    so the documents' text draws stay those of equal lengths."""
    if spread <= 0:
        return [n_words] * n_docs
    rng = random.Random(stream_seed(seed, f"{split}-lengths"))
    return [max(50, round(n_words * math.exp(spread * rng.gauss(0.0, 1.0) - spread**2 / 2))) for _ in range(n_docs)]


def qa_rows(split: str, n_docs: int, n_words: int, seed: int = DEFAULT_SEED,
            n_events: tuple[int, int] = DEFAULT_EVENTS, spread: float = 0.0) -> list[dict[str, Any]]:
    """Question-answering rows (``id`` and :func:`qa_example`'s fields), one question per ledger."""
    rng = random.Random(stream_seed(seed, f"qa-{split}"))
    return [{"id": f"{split}-qa-{i:04d}", **qa_example(rng, n, n_events)}
            for i, n in enumerate(doc_lengths(split, n_docs, n_words, seed, spread))]


def split_rows(split: str, n_docs: int, n_words: int, seed: int = DEFAULT_SEED,
               n_events: tuple[int, int] = DEFAULT_EVENTS, spread: float = 0.0) -> list[dict[str, str]]:
    """Rows (`id, input, output`) of one split; multi-reference ids repeat the input on two rows."""
    rng = random.Random(stream_seed(seed, split))
    rows = []
    for i, n in enumerate(doc_lengths(split, n_docs, n_words, seed, spread)):
        doc, ref, ref2 = make_document(rng, n, n_events)
        doc_id = f"{split}-{i:04d}"
        rows.append({"id": doc_id, "input": doc, "output": ref})
        if i % MULTI_REF_EVERY == MULTI_REF_EVERY - 1:
            rows.append({"id": doc_id, "input": doc, "output": ref2})
    return rows


def generate(
    out_dir: str | Path,
    docs: dict[str, int],
    n_words: int,
    seed: int = DEFAULT_SEED,
    split_words: dict[str, int] | None = None,
    n_events: tuple[int, int] = DEFAULT_EVENTS,
    task: str = "summary",
    split_seeds: dict[str, int] | None = None,
    spread: float = 0.0,
) -> dict[str, Path]:
    """Write `<split>.jsonl` for each split under a folder keyed by the settings; reuse it if present.

    `split_words` gives some splits another length than `n_words` (e.g. short training ledgers and
    long evaluation ones). Returns split -> path. Written atomically, so a killed run never leaves a
    half-written split. `split_seeds` draws some splits from their own seed (a held-out test split);
    `spread` draws each document's length around the split's (:func:`doc_lengths`).
    """
    split_words = {k: v for k, v in (split_words or {}).items() if v != n_words}
    settings: dict[str, Any] = {"v": GENERATOR_VERSION, "docs": dict(sorted(docs.items())), "words": n_words,
                                "seed": seed}
    # New settings join the key only when set, so existing folders keep their names.
    if split_words:
        settings["split_words"] = dict(sorted(split_words.items()))
    split_seeds = {k: v for k, v in (split_seeds or {}).items() if v != seed}
    if split_seeds:
        settings["split_seeds"] = dict(sorted(split_seeds.items()))
    if spread > 0:
        settings["spread"] = spread
    if tuple(n_events) != DEFAULT_EVENTS:
        settings["events"] = list(n_events)
    if task != "summary":
        settings["task"] = task
    if task == "qa":  # answers became the ledger's own sentence (they restated it as summaries do)
        settings["answer"] = "ledger_sentence"
    make_rows = ROW_MAKERS[task]
    if getattr(make_rows, "version", None):  # a row maker's own version: its text changed, its files are rebuilt
        settings["rows_version"] = make_rows.version
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    folder = Path(out_dir) / f"synthetic-{key}"
    paths = {}
    for split, n in docs.items():
        path = folder / f"{split}.jsonl"
        if not path.exists():
            atomic_write_jsonl(path, make_rows(split, n, split_words.get(split, n_words), split_seeds.get(split, seed),
                                               tuple(n_events), spread))
        paths[split] = path
    if not (folder / "settings.json").exists():
        atomic_write_text(folder / "settings.json", json.dumps(settings, indent=2) + "\n")
    return paths


# task -> the rows of one split (scaleformer.data.synthetic_lm adds "lm": documents for language modeling)
ROW_MAKERS: dict[str, Any] = {"summary": split_rows, "qa": qa_rows}


def tokenizer_corpus(n_docs: int = 48, n_words: int = 3000) -> Iterator[str]:
    """Fixed text the offline tokenizer is trained on: documents and both references of each."""
    rng = random.Random(stream_seed(DEFAULT_SEED, "tokenizer"))
    for _ in range(n_docs):
        doc, ref, ref2 = make_document(rng, n_words)
        yield doc
        yield ref
        yield ref2
    # Make sure every entity appears, whatever the sampling above drew.
    yield " ".join(FIRST + LAST + VERBS + OBJECTS + PLACES)


def stream_seed(seed: int, name: str) -> int:
    """The integer seed of one named stream (a split, a stage): each draws from its own, so adding or
    lengthening one changes no other."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "big")


# ------------------------------------------------------------------------------ the offline tokenizer
def build_offline_bpe(vocab_size: int | None = None) -> Any:
    """Train the offline byte-level BPE on this generator's fixed corpus (deterministic; no post-processor).

    The result ships as ``assets/offline_bpe.json`` (:func:`scaleformer.model.tokenizer.load_offline_tokenizer`).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    vocab_size = vocab_size or VOCAB_SIZE
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    # No prefix space: like GPT-2/BART, so decoding does not grow a leading space.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(tokenizer_corpus(), trainer=trainer)
    return tok


def write_offline_asset(path: Path | None = None) -> Path:
    """Rebuild the shipped tokenizer json: ``python -m scaleformer.data.synthetic`` (after changing the
    generator's vocabulary)."""
    path = path or ASSET
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(build_offline_bpe().to_str(pretty=True) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    print(write_offline_asset())
