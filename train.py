"""Entry point: `python train.py method=scaleformer_middle data=govreport backbone=bart_base`.

With no arguments it trains and evaluates the embedded default on the CPU. The same command is
installed as `scaleformer train` (see scaleformer/cli/train.py).
"""

from scaleformer.cli.train import main

if __name__ == "__main__":
    main()
