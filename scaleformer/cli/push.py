"""``scaleformer push``: publish an exported model folder to the Hugging Face Hub (opt-in, never automatic).

    scaleformer push --model results/runs/<run>/model --repo your-name/bart-base-scaleformer [--private]

Uploads the weights, the tokenizer, the method record (``scaleformer.json``) and the model card
(``README.md``); the token comes from ``--token``, ``HF_TOKEN`` or ``hf auth login``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from scaleformer.export.hub import push_to_hub


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scaleformer push", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="an exported folder: results/runs/<run>/model")
    ap.add_argument("--repo", required=True, help="the Hub repository: org/name")
    ap.add_argument("--private", action="store_true", help="create the repository private")
    ap.add_argument("--token", default=None, help="a Hub token (default: HF_TOKEN or the saved login)")
    args = ap.parse_args(argv)

    try:
        url = push_to_hub(args.model, args.repo, private=args.private, token=args.token)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None
    except Exception as e:  # the Hub client's errors: authentication, network, permissions
        raise SystemExit(f"error: pushing {args.model} to {args.repo}: {type(e).__name__}: "
                         f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}") from None
    print(f"pushed {args.model} to {url}", file=sys.stderr)
    return 0
