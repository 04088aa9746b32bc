"""The command-line reference (CLI.md), generated from the parsers themselves so it cannot drift
(``tests/test_cli.py`` compares the committed file with this output).

    python -m moesym.cli.reference > CLI.md
"""

from __future__ import annotations

import argparse

from . import COMMANDS, build_parser

__all__ = ["reference_text"]


def _subparsers(p: argparse.ArgumentParser) -> dict:
    for a in p._actions:  # noqa: SLF001 - argparse keeps subcommands here
        if isinstance(a, argparse._SubParsersAction):  # noqa: SLF001
            return dict(a.choices)
    return {}


def _row(a: argparse.Action) -> str | None:
    if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):  # noqa: SLF001
        return None
    names = ", ".join(f"`{o}`" for o in a.option_strings) or f"`{a.dest.upper()}`"
    if a.choices:
        value = "{" + ",".join(str(c) for c in a.choices) + "}"
    elif a.nargs == 0:
        value = ""
    else:
        value = a.metavar if isinstance(a.metavar, str) else (
            " ".join(a.metavar) if a.metavar else a.dest.upper())
    need = "required" if a.required or not a.option_strings else (
        "" if a.default in (None, False, [], argparse.SUPPRESS) else f"default {a.default}")
    text = " ".join((a.help or "").split()).replace("|", "\\|")
    return f"| {names} | {value} | {need} | {text} |"


def _section(title: str, p: argparse.ArgumentParser, level: int) -> list[str]:
    out = [f"{'#' * level} {title}", ""]
    if p.description:
        out += [" ".join(p.description.split()), ""]
    rows = [r for r in (_row(a) for a in p._actions) if r]  # noqa: SLF001
    if rows:
        out += ["| argument | value | | help |", "|---|---|---|---|", *rows, ""]
    for name, sub in _subparsers(p).items():
        out += _section(f"{title} {name}", sub, level + 1)
    return out


def reference_text() -> str:
    root = build_parser(None)
    lines = ["# moesym command-line reference", "",
             "_Generated from the parsers by `python -m moesym.cli.reference > CLI.md`; "
             "do not edit by hand (a test fails when it drifts)._", ""]
    lines += [f"- `moesym {name}`: {help_}" for name, help_ in COMMANDS.items()] + [""]
    rows = [r for r in (_row(a) for a in root._actions) if r]  # noqa: SLF001
    lines += ["Options before the command:", "", "| argument | value | | help |",
              "|---|---|---|---|", *rows, ""]
    for name, sub in _subparsers(root).items():
        lines += _section(f"moesym {name}", sub, 2)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(reference_text(), end="")
