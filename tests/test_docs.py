"""Every ``moesym`` command and Python example shown in the README and the docs runs, and a
command prints what the page shows.

A command is a line starting with ``moesym `` in a ```` ```bash ```` block of README.md or
docs/**/*.md (a line ending in ``\\`` continues on the next). It runs in-process through
``moesym.cli.main`` in a fresh working folder and must exit 0. Where the block is followed by an
output block (```` ``` ```` or ```` ```text ````), the printed standard output must equal it line
by line, numbers included, except that a line ``...`` in the shown output stands for any number
of printed lines. Commands that search or simulate (``SLOW``) run in the slow tier. Every
```` ```python ```` block runs as a script in a fresh working folder.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# command prefixes that take tens of seconds (searches, simulations, grids, solves)
SLOW = ("moesym optimize", "moesym simulate", "moesym sweep", "moesym validate", "moesym derive")
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)


def _pages() -> list[Path]:
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md")
                  if "_build" not in p.parts and "derivations" not in p.parts)
    return [ROOT / "README.md", *docs]


def _commands(text: str) -> list[tuple[str, list[str] | None]]:
    """(command, shown output lines or None) of every ``moesym`` line in a bash block."""
    blocks = list(_FENCE.finditer(text))
    out = []
    for i, b in enumerate(blocks):
        if b.group(1).strip() != "bash":
            continue
        shown = None
        nxt = blocks[i + 1] if i + 1 < len(blocks) else None
        if (nxt is not None and nxt.group(1).strip() in ("", "text")
                and not text[b.end():nxt.start()].strip()):
            shown = nxt.group(2).rstrip("\n").split("\n")
        lines = b.group(2).replace("\\\n", " ").split("\n")
        cmds = [ln.strip() for ln in lines if ln.strip().startswith("moesym ")]
        # an output block belongs to a block of one command
        out += [(c, shown if len(cmds) == 1 else None) for c in cmds]
    return out


def _cases():
    for page in _pages():
        for n, (cmd, shown) in enumerate(_commands(page.read_text())):
            marks = [pytest.mark.slow] if cmd.startswith(SLOW) else []
            yield pytest.param(cmd, shown, id=f"{page.relative_to(ROOT)}:{n}", marks=marks)


def _python_blocks():
    for page in _pages():
        blocks = [b.group(2) for b in _FENCE.finditer(page.read_text()) if b.group(1).strip() == "python"]
        for n, code in enumerate(blocks):
            yield pytest.param(code, id=f"{page.relative_to(ROOT)}:python{n}")


def matches(shown: list[str], printed: list[str]) -> bool:
    """``printed`` equals ``shown``, where a ``...`` line of ``shown`` stands for any number of
    printed lines (trailing spaces ignored)."""
    shown = [s.rstrip() for s in shown]
    printed = [p.rstrip() for p in printed]
    parts, cur = [], []
    for s in shown:
        if s.strip() == "...":
            parts.append(cur)
            cur = []
        else:
            cur.append(s)
    parts.append(cur)
    if len(parts) == 1:
        return shown == printed
    first, *middle, last = parts
    if printed[:len(first)] != first:
        return False
    pos = len(first)
    end = len(printed) - len(last)
    if end < pos or (last and printed[end:] != last):
        return False
    for seg in middle:
        for i in range(pos, end - len(seg) + 1):
            if printed[i:i + len(seg)] == seg:
                pos = i + len(seg)
                break
        else:
            return False
    return True


def test_matches_reads_ellipsis_as_any_lines():
    printed = ["a", "b", "c", "d"]
    assert matches(["a", "...", "d"], printed)
    assert matches(["a", "b", "c", "d"], printed)
    assert matches(["...", "c", "..."], printed)
    assert matches(["a", "...", "b", "c", "d"], printed)  # the gap may be empty
    assert not matches(["a", "...", "c"], printed)        # the end must match
    assert not matches(["a", "b"], printed)
    assert not matches(["a", "...", "x", "...", "d"], printed)


def test_commands_are_found_with_their_outputs():
    text = ("```bash\nmoesym list models\n```\n\n```text\nx\n...\n```\n"
            "```bash\nmoesym predict m \\\n  --hardware h\necho no\n```\n")
    assert _commands(text) == [("moesym list models", ["x", "..."]),
                               ("moesym predict m    --hardware h", None)]


@pytest.mark.parametrize("cmd,shown", list(_cases()))
def test_doc_command_runs_and_prints_what_is_shown(cmd, shown, tmp_path, monkeypatch, capsys):
    from moesym.cli import main

    monkeypatch.chdir(tmp_path)
    try:
        code = main(shlex.split(cmd, comments=True)[1:])
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    assert code in (0, None), f"{cmd}\nexit {code}\n{captured.err}"
    if shown is not None:
        printed = captured.out.rstrip("\n").split("\n")
        assert matches(shown, printed), (f"{cmd}\nshown:\n" + "\n".join(shown)
                                         + "\nprinted:\n" + captured.out)


@pytest.mark.parametrize("code", list(_python_blocks()))
def test_doc_python_example_runs(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "<doc example>", "exec"), {"__name__": "__doc_example__"})


def test_cli_reference_documents_a_shared_flag_group_once():
    """CLI.md's deployment flags appear in one table; every command taking them names the group."""
    import argparse

    from moesym.cli import build_parser
    from moesym.cli.reference import reference_text

    text = reference_text()
    assert text.count("### Flag group deployment") == 1
    assert sum(line.startswith("| `--mesh` |") for line in text.split("\n")) == 1

    def walk(title, p):
        yield title, p
        for a in p._actions:  # noqa: SLF001
            if isinstance(a, argparse._SubParsersAction):  # noqa: SLF001
                for name, sub in a.choices.items():
                    yield from walk(f"{title} {name}", sub)

    holders = [t for name, sub in next(a for a in build_parser(None)._actions  # noqa: SLF001
                                       if isinstance(a, argparse._SubParsersAction)).choices.items()
               for t, p in walk(f"moesym {name}", sub)
               if any(g.title == "deployment" for g in p._action_groups)]  # noqa: SLF001
    assert len(holders) > 10
    for title in holders:
        section = text.split(f"\n### {title}\n", 1)[1].split("\n### ", 1)[0]
        assert "[deployment](#flag-group-deployment)" in section, title
