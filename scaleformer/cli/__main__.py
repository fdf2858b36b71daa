"""`python -m scaleformer.cli <command> ...` = `scaleformer <command> ...`."""

from scaleformer.cli import main

raise SystemExit(main())
