"""``scaleformer lm-eval ARGS``: EleutherAI's lm-evaluation-harness on a scaleformer export, its command line as is.

``lm_eval --model hf --model_args pretrained=<export>`` alone cannot load an export: transformers learns the
``scaleformer`` model type from ``import scaleformer`` (the Auto registration). This command imports the package,
then hands every argument to lm-eval's own command line, so its options, tasks and output are lm-eval's:

    scaleformer lm-eval --model hf --model_args pretrained=results/runs/<run>/model --tasks wikitext

The export's context (``config.max_position_embeddings``: the method's ``max_length``) is the window lm-eval's
rolling log-likelihood reads documents in. lm-eval is an optional dependency (``pip install 'scaleformer[lmeval]'``;
the project's dev environment, hence its lock, has it for its tests). From Python: ``HFLM(pretrained=model,
tokenizer=tokenizer)`` on a loaded model (docs/using.md).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import scaleformer  # noqa: F401 (teaches transformers' Auto classes model_type "scaleformer")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from lm_eval.__main__ import cli_evaluate
    except ImportError as e:
        raise SystemExit(f"error: lm-eval is not installed ({e}): pip install 'scaleformer[lmeval]' "
                         "(lm-eval>=0.4.13)") from None
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):  # ours first, then lm-eval's own options
        print("usage: scaleformer lm-eval [lm-eval's arguments]   (lm-evaluation-harness on an export: e.g. --model hf "
              "--model_args pretrained=results/runs/<run>/model --tasks wikitext)\n")
        args = ["--help"]
    sys.argv = ["scaleformer lm-eval", *args]
    cli_evaluate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
