"""The ``moesym`` command line (see CONTRACT.md). Each subcommand lives in its own module that
exposes ``register(subparsers)``; this module wires them and turns bad input into one line."""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from .. import __version__
from ..errors import MoesymError

__all__ = ["main", "build_parser"]

# subcommand modules, in help order; a module missing from a build is skipped
_COMMANDS = ("predict", "memory", "kernel", "comm", "routing", "derive", "sweep", "optimize",
             "validate")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, no usage dump
        raise MoesymError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="moesym", description="Symbolic performance models of MoE inference.")
    p.add_argument("--version", action="version", version=f"moesym {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    for name in _COMMANDS:
        try:
            mod = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{name}":
                continue
            raise
        mod.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    warnings.simplefilter("default")
    warnings.formatwarning = lambda msg, cat, *a, **k: f"moesym: warning: {msg}\n"
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 0
        return int(args.func(args) or 0)
    except MoesymError as exc:
        print(f"moesym: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # pragma: no cover
        return 0
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    except Exception as exc:  # noqa: BLE001 - never a traceback on the command line
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"moesym: error: {type(exc).__name__}: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
