"""``python -m ratings fit FILE.csv``: see ratings/cli.py. No Django involved."""

from ratings.cli import main

raise SystemExit(main())
