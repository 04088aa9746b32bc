"""``python -m moesym``: the command line."""

from .cli import run

raise SystemExit(run())
