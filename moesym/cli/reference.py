"""The command-line reference (CLI.md), generated from the parsers themselves so it cannot drift
(``tests/test_cli.py`` compares the committed file with this output).

    python -m moesym.cli.reference > CLI.md

A flag group that several commands share (``deployment``, ``workload``, ...: an argparse
argument group of one title) is documented once, with the flags every command holding it gives
alike; each command lists the group names and its own flags, including any flag of a group that
it gives differently (optimize's ``--ep`` takes a list).
"""

from __future__ import annotations

import argparse

from . import COMMANDS, build_parser

__all__ = ["reference_text"]

_TABLE_HEAD = ["| argument | value | | help |", "|---|---|---|---|"]
# argparse's default groups: a command's own positionals and options, never shared
_OWN_GROUPS = {"positional arguments", "options", "optional arguments"}


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
    text = " ".join((a.help or "").split())
    return "| " + " | ".join(c.replace("|", "\\|") for c in (names, value, need, text)) + " |"


def _commands(title: str, p: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """(title, parser) of a command and of its subcommands, depth first, in help order."""
    out = [(title, p)]
    for name, sub in _subparsers(p).items():
        out += _commands(f"{title} {name}", sub)
    return out


def _groups(p: argparse.ArgumentParser) -> dict[str, dict[str, str]]:
    """Rows of each named argument group of a parser, by title, then by flag."""
    return {g.title: {a.dest: r for a in g._group_actions if (r := _row(a))}  # noqa: SLF001
            for g in p._action_groups  # noqa: SLF001
            if g.title not in _OWN_GROUPS and g._group_actions}  # noqa: SLF001


def _shared_groups(commands) -> dict[str, dict[str, str]]:
    """Each group title held by two or more commands, with each of its flags as most of its
    holders give it (ties: the first holder's), in the order flags first appear."""
    held: dict[str, list[dict[str, str]]] = {}
    for _, p in commands:
        for title, rows in _groups(p).items():
            held.setdefault(title, []).append(rows)
    shared = {}
    for title, holders in held.items():
        if len(holders) < 2:
            continue
        flags = list(dict.fromkeys(d for rows in holders for d in rows))
        votes = {d: [rows[d] for rows in holders if d in rows] for d in flags}
        shared[title] = {d: max(v, key=v.count) for d, v in votes.items()}
    return shared


def _section(title: str, p: argparse.ArgumentParser, level: int, shared: dict) -> list[str]:
    out = [f"{'#' * level} {title}", ""]
    if p.description:
        out += [" ".join(p.description.split()), ""]
    names = [t for t in _groups(p) if t in shared]
    common = {r for t in names for r in shared[t].values()}
    rows = [r for r in (_row(a) for a in p._actions) if r and r not in common]  # noqa: SLF001
    if names:
        out += ["Flag groups (the flags of each that this command takes; one given differently "
                "here is in the table below): "
                + ", ".join(f"[{t}](#{_anchor(t)})" for t in names), ""]
    if rows:
        out += [*_TABLE_HEAD, *rows, ""]
    return out


def _anchor(title: str) -> str:
    """The heading anchor of a shared group's section (GitHub's and MyST's slug rule for the
    plain-word titles argparse groups carry)."""
    slug = "".join(c for c in f"flag group {title}".lower() if c.isalnum() or c in " -")
    return slug.replace(" ", "-")


def reference_text() -> str:
    root = build_parser(None)
    lines = ["# moesym command-line reference", "",
             "_Generated from the parsers by `python -m moesym.cli.reference > CLI.md`; "
             "do not edit by hand (a test fails when it drifts)._", ""]
    lines += [f"- `moesym {name}`: {help_}" for name, help_ in COMMANDS.items()] + [""]
    rows = [r for r in (_row(a) for a in root._actions) if r]  # noqa: SLF001
    lines += ["Options before the command:", "", *_TABLE_HEAD, *rows, ""]
    commands = [c for name, sub in _subparsers(root).items()
                for c in _commands(f"moesym {name}", sub)]
    shared = _shared_groups(commands)
    lines += ["## Shared flag groups", "",
              "Flags that several commands take alike, documented once; each command below names "
              "the groups it takes.", ""]
    for title, group_rows in shared.items():
        holders = [t for t, p in commands if title in _groups(p)]
        lines += [f"### Flag group {title}", "", "Taken by " + ", ".join(f"`{t}`" for t in holders)
                  + ".", "", *_TABLE_HEAD, *group_rows.values(), ""]
    lines += ["## Commands", ""]
    for title, p in commands:
        lines += _section(title, p, 3, shared)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(reference_text(), end="")
