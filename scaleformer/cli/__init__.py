"""Console commands: ``scaleformer <command>`` and one ``scaleformer-<command>`` alias per command.

    scaleformer train [hydra overrides]      train + evaluate (python train.py)
    scaleformer summarize --model DIR ...    summaries of your documents with an exported model
    scaleformer score PREDICTIONS.jsonl      re-score saved predictions (ROUGE, BERTScore)
    scaleformer compare RUN_A RUN_B          paired difference of two runs, its interval and p-value
    scaleformer reproduce table1 --profile tiny   the paper's tables and figure
    scaleformer bench --profile cpu-tiny     speed, memory and scaling of every method
    scaleformer push --model DIR --repo org/name   publish an exported model (opt-in)
    scaleformer lm-eval --model hf --model_args pretrained=DIR ...   lm-evaluation-harness on an export
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from scaleformer import __version__

COMMANDS = {
    "train": ("scaleformer.cli.train", "train and evaluate one configuration (Hydra overrides)"),
    "summarize": ("scaleformer.cli.summarize", "summarize documents with an exported model"),
    "score": ("scaleformer.cli.score", "re-score a predictions file"),
    "compare": ("scaleformer.cli.compare", "paired difference of two runs on the same documents"),
    "reproduce": ("scaleformer.cli.reproduce", "regenerate a table or figure of the paper"),
    "bench": ("scaleformer.bench.cli", "benchmark the methods' speed and memory"),
    "push": ("scaleformer.cli.push", "publish an exported model to the Hugging Face Hub"),
    "lm-eval": ("scaleformer.cli.lm_eval", "lm-evaluation-harness on an export (its own command line)"),
}


def _entry(name: str) -> Callable[..., object]:
    return importlib.import_module(COMMANDS[name][0]).main


def _run(name: str, argv: list[str]) -> int:
    """Run one command with its own arguments (Hydra reads sys.argv, so it is set for every command)."""
    sys.argv = [f"scaleformer {name}", *argv]
    if name == "train":
        _entry(name)()
        return 0
    rc = _entry(name)(argv)
    return rc if isinstance(rc, int) else 0  # score returns its metrics


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        width = max(map(len, COMMANDS))
        lines = [f"  {n:<{width}}  {h}" for n, (_, h) in COMMANDS.items()]
        print("usage: scaleformer <command> [arguments]\n\ncommands:\n" + "\n".join(lines) +
              "\n\n`scaleformer <command> --help` for a command's own options.")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name in ("-V", "--version"):
        print(f"scaleformer {__version__}")
        return 0
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return _run(name, rest)


def alias(name: str) -> Callable[[], int]:
    def run() -> int:
        return _run(name, sys.argv[1:])

    return run


# console aliases: scaleformer-train, ... (module names stay free for the commands themselves)
run_train, run_summarize, run_score, run_compare, run_reproduce, run_bench, run_push, run_lm_eval = (
    alias(n) for n in COMMANDS)

