"""``python -m moesym``: the command line."""

from .cli import main

raise SystemExit(main())
