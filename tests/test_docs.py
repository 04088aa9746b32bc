"""Every ``moesym`` command and Python example shown in the README and the docs runs, a command
prints what the page shows, and every link there resolves.

Pages: README.md and docs/**/*.md (the generated derivation pages aside: ``tests/test_derive.py``
checks them against the code).

Fenced blocks. Every fenced block of a page is one of (``test_every_fenced_block_is_covered``):

- a ```` ```bash ```` block: each line (a line ending in ``\\`` continues on the next; ``&&``
  separates commands) is a ``moesym`` command, run in-process through ``moesym.cli.main`` in a
  fresh working folder and required to exit 0, or a set-up command in ``NOT_RUN`` (installing,
  the test suite, the docs build) with the reason it is not run here;
- an unlabelled block whose every line is a ``moesym`` command: run the same way;
- a ```` ```python ```` block: run as a script in a fresh working folder;
- an output block (```` ``` ```` or ```` ```text ````) right after a block of one command: the
  command's printed standard output must equal it line by line, numbers included (the tolerance
  is zero: the pages show what the code prints), trailing spaces ignored, where a line ``...``
  of the shown output stands for any number of printed lines;
- a MyST directive (```` ```{toctree} ````, ``{eval-rst}``, ``{include}``, ``{literalinclude}``):
  Sphinx builds them (``-W -n``: a missing file or module fails the build).

Files a command reads that the page assumes the reader has (a downloaded ``config.json``) are
written into the working folder first (``FILES``). Commands that search, simulate, write a report
page or draw a figure (``SLOW``, ``SLOW_FLAGS``) run in the slow tier.

Commands in running text. A backticked ``moesym ...`` in prose (``test_inline_command``) is
classified by a rule, each with its reason:

- ``moesym <command>`` alone that the parser refuses or answers with help names the command;
- a synopsis (``...``, ``[``, ``{``, ``|`` or a placeholder word in capitals such as MODEL, HW,
  FILE, DIR) is not a command line;
- a line the parser refuses otherwise must be listed in ``FRAGMENTS`` with its reason;
- every other one is a complete command: parsed through the CLI parser (argparse) and executed
  (``SLOW`` ones in the slow tier), except those in ``PARSE_ONLY`` (parsed only, with the reason)
  and those already run as a block.

Links: Sphinx checks the docs' internal links, anchors and references (``-n``); the README is
not part of the Sphinx build, so its relative links and anchors are checked here. External links
are listed and must be well-formed ``https`` URLs; they are not fetched (CI reaches no web site:
``docs/README.md`` has the ``linkcheck`` recipe for a machine that does).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
# command prefixes that take tens of seconds (searches, simulations, grids, solves, report pages)
# and flags that draw a figure (matplotlib): run in the slow tier
SLOW = ("moesym optimize", "moesym simulate", "moesym sweep", "moesym validate", "moesym derive",
        "moesym report", "moesym fleet")
SLOW_FLAGS = ("--timeline", "--plot")
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
DIRECTIVES = ("toctree", "eval-rst", "include", "literalinclude")
OUTPUT = ("", "text")

# set-up lines of bash blocks that are not moesym commands: not run here, and why
NOT_RUN = {
    "python3 -m venv": "creates a virtual environment (CI: .ci/run does it on a clean clone)",
    ". .venv/bin/activate": "activates that environment (CI: .ci/run)",
    "pip install": "installs from the package index (CI: .ci/run installs the same extras)",
    "python -m pytest": "the test suite itself (CI: .ci/run runs both tiers)",
    "python -m sphinx": "the docs build (CI: .ci/run builds it with -W -n)",
}

# files a page assumes the reader has, written into the working folder before its commands run.
# Qwen3-30B-A3B's config.json as published on the HuggingFace hub (Qwen/Qwen3-30B-A3B).
FILES = {
    "Qwen3-30B-A3B/config.json": json.dumps({
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
        "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
        "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "norm_topk_prob": True, "vocab_size": 151936,
        "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
}

# inline commands that are complete but only parsed here, and why
PARSE_ONLY = {
    "moesym derive pages": "writes every derivation page (minutes); tests/test_derive.py "
                           "compares the committed pages with the code",
    "moesym validate --cases my_runs.json --fit-serving": "my_runs.json stands for the reader's "
                                                          "own measurements",
    "moesym validate --cases FILE.json": "FILE.json stands for the reader's own measurements",
    "moesym validate --serving": "simulates all 633 published serving runs (about an hour on "
                                 "two cores); benchmarks/serving_open_set.py writes its tables, "
                                 "tests/test_serving_benchmark.py runs one of them",
}
# inline mentions the parser refuses that are not synopses: what they are
FRAGMENTS = {
    "moesym report --phase serve": "names report's serving mode in running text (the model and "
                                   "hardware are the surrounding command's)",
    "moesym simulate --lengths-file": "names the flag whose file format the page describes",
}
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$")
_SYNOPSIS_MARKS = ("...", "[", "{", "|")


def _slow(cmd: str) -> bool:
    return cmd.startswith(SLOW) or any(f in cmd.split() for f in SLOW_FLAGS)


def _pages() -> list[Path]:
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md")
                  if "_build" not in p.parts and "derivations" not in p.parts)
    return [ROOT / "README.md", *docs]


def _rel(page: Path, root: Path = ROOT) -> str:
    return str(page.relative_to(root))


def _blocks(text: str) -> list[tuple[int, str, str, int, int]]:
    """(line, info string, body, start, end) of every fenced block."""
    return [(text[:b.start()].count("\n") + 1, b.group(1).strip(), b.group(2), b.start(), b.end())
            for b in _FENCE.finditer(text)]


def _block_lines(body: str) -> list[str]:
    """The commands of a block: continuation lines joined, ``&&`` split."""
    out = []
    for line in body.replace("\\\n", " ").split("\n"):
        out += [part.strip() for part in line.split("&&") if part.strip()]
    return out


def _is_command_block(lang: str, body: str) -> bool:
    lines = _block_lines(body)
    return lang == "bash" or (lang == "" and bool(lines)
                              and all(ln.startswith("moesym ") for ln in lines))


def _commands(text: str) -> list[tuple[str, list[str] | None]]:
    """(command, shown output lines or None) of every ``moesym`` line in a command block."""
    blocks = _blocks(text)
    out = []
    for i, (_, lang, body, _, end) in enumerate(blocks):
        if not _is_command_block(lang, body):
            continue
        shown = None
        nxt = blocks[i + 1] if i + 1 < len(blocks) else None
        if (nxt is not None and nxt[1] in OUTPUT and not _is_command_block(nxt[1], nxt[2])
                and not text[end:nxt[3]].strip()):
            shown = nxt[2].rstrip("\n").split("\n")
        cmds = [ln for ln in _block_lines(body) if ln.startswith("moesym ")]
        # an output block belongs to a block of one command
        out += [(c, shown if len(cmds) == 1 else None) for c in cmds]
    return out


def _block_problems(text: str) -> list[str]:
    """Why a fenced block is neither run, compared nor a directive (empty: every one is)."""
    problems = []
    blocks = _blocks(text)
    for i, (line, lang, body, start, _) in enumerate(blocks):
        if lang.startswith("{"):
            if lang[1:].split("}")[0] not in DIRECTIVES:
                problems.append(f"line {line}: directive {lang} is not one Sphinx is known to "
                                f"check here ({', '.join(DIRECTIVES)})")
        elif _is_command_block(lang, body):
            for cmd in _block_lines(body):
                if not cmd.startswith(("moesym ", "#")) and not cmd.startswith(tuple(NOT_RUN)):
                    problems.append(f"line {line}: `{cmd}` is neither a moesym command nor a "
                                    "set-up line listed in NOT_RUN")
        elif lang == "python":
            pass
        elif lang in OUTPUT:
            prev = blocks[i - 1] if i else None
            if (prev is None or not _is_command_block(prev[1], prev[2])
                    or text[prev[4]:start].strip()
                    or len([c for c in _block_lines(prev[2]) if c.startswith("moesym ")]) != 1):
                problems.append(f"line {line}: an output block that does not follow a block of "
                                "one moesym command")
        else:
            problems.append(f"line {line}: a ```{lang} block is neither run nor compared")
    return problems


def _cases():
    for page in _pages():
        for n, (cmd, shown) in enumerate(_commands(page.read_text())):
            marks = [pytest.mark.slow] if _slow(cmd) else []
            yield pytest.param(cmd, shown, id=f"{_rel(page)}:{n}", marks=marks)


def _python_blocks():
    for page in _pages():
        blocks = [b[2] for b in _blocks(page.read_text()) if b[1] == "python"]
        for n, code in enumerate(blocks):
            yield pytest.param(code, id=f"{_rel(page)}:python{n}")


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
            "```bash\nmoesym predict m \\\n  --hardware h\necho no\n```\n"
            "```bash\npip install . && moesym list hardware\n```\n"
            "```\nmoesym list models --json\n```\n")
    assert _commands(text) == [("moesym list models", ["x", "..."]),
                               ("moesym predict m    --hardware h", None),
                               ("moesym list hardware", None),
                               ("moesym list models --json", None)]


def test_block_classification_names_what_is_not_covered():
    text = ("```bash\nmoesym list models\n```\n```text\nx\n```\n"  # run and compared
            "```bash\nmake all\n```\n"                             # not a listed set-up line
            "```toml\nx = 1\n```\n"                                # neither run nor compared
            "```text\norphan\n```\n"                               # output of no command
            "```{figure} x.png\n```\n")                            # unknown directive
    problems = _block_problems(text)
    assert [p.split(":")[0] for p in problems] == ["line 7", "line 10", "line 13", "line 16"]


def test_every_fenced_block_is_covered():
    """Each fenced block of every page is run, compared or a directive Sphinx checks."""
    problems = [f"{_rel(page)} {p}" for page in _pages() for p in _block_problems(page.read_text())]
    assert not problems, "\n".join(problems)


def _write_files(folder: Path) -> None:
    for rel, content in FILES.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(content)


def _run(cmd: str, capsys) -> tuple[int, str, str]:
    from moesym.cli import main

    try:
        code = main(shlex.split(cmd, comments=True)[1:])
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("cmd,shown", list(_cases()))
def test_doc_command_runs_and_prints_what_is_shown(cmd, shown, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _write_files(tmp_path)
    code, out, err = _run(cmd, capsys)
    assert code in (0, None), f"{cmd}\nexit {code}\n{err}"
    if shown is not None:
        printed = out.rstrip("\n").split("\n")
        assert matches(shown, printed), (f"{cmd}\nshown:\n" + "\n".join(shown)
                                         + "\nprinted:\n" + out)


@pytest.mark.parametrize("code", list(_python_blocks()))
def test_doc_python_example_runs(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "<doc example>", "exec"), {"__name__": "__doc_example__"})


# --- commands in running text ---------------------------------------------------------------

_INLINE = re.compile(r"(?<!`)(`{1,2})(?!`)(moesym [^`]*?)\1(?!`)")


def _prose(text: str) -> str:
    """The page with its fenced blocks blanked (line numbers kept)."""
    return _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _inline_mentions(text: str) -> list[tuple[int, str]]:
    """(line, command) of every backticked ``moesym ...`` in running text, whitespace folded."""
    prose = _prose(text)
    return [(prose[:m.start()].count("\n") + 1, " ".join(m.group(2).split()))
            for m in _INLINE.finditer(prose)]


def _parse(cmd: str):
    """The parsed arguments of a command line, or the parser's one-line refusal."""
    from moesym.cli import build_parser
    from moesym.errors import MoesymError

    argv = shlex.split(cmd)[1:]
    sub = next((a for a in argv if not a.startswith("-")), "")
    try:
        return build_parser(sub).parse_args(argv)
    except (MoesymError, SystemExit) as exc:
        return str(exc) or "refused"


def classify_inline(cmd: str) -> tuple[str, str]:
    """(kind, reason): kind is "run", "parse", "name", "synopsis" or "fragment"."""
    if cmd in PARSE_ONLY:
        return "parse", PARSE_ONLY[cmd]
    if cmd in FRAGMENTS:
        return "fragment", FRAGMENTS[cmd]
    marks = [m for m in _SYNOPSIS_MARKS if m in cmd]
    words = [w for tok in cmd.split()[1:] for w in re.split(r"[:=,]", tok) if _PLACEHOLDER.match(w)]
    if marks or words:
        return "synopsis", f"a synopsis ({', '.join(marks + words)}), not a command line"
    parsed = _parse(cmd)
    if len(cmd.split()) == 2 and (isinstance(parsed, str) or not getattr(parsed, "func", None)):
        return "name", "names the command in running text"
    if isinstance(parsed, str):
        return "refused", parsed
    return "run", "a complete command"


def inline_mentions() -> list[tuple[str, str, str, str]]:
    """(page:line, command, kind, reason) of every distinct inline ``moesym`` mention."""
    in_blocks = {" ".join(c.split()) for page in _pages() for c, _ in _commands(page.read_text())}
    out, seen = [], set()
    for page in _pages():
        for line, cmd in _inline_mentions(page.read_text()):
            if cmd in seen:
                continue
            seen.add(cmd)
            kind, reason = classify_inline(cmd)
            if kind == "run" and cmd in in_blocks:
                kind, reason = "block", "run as a block"
            out.append((f"{_rel(page)}:{line}", cmd, kind, reason))
    return out


def _inline_cases():
    for where, cmd, kind, _ in inline_mentions():
        if kind in ("run", "parse"):
            marks = [pytest.mark.slow] if kind == "run" and _slow(cmd) else []
            yield pytest.param(cmd, kind, id=where, marks=marks)


def test_inline_mentions_are_found_and_classified():
    text = ("Run `moesym list models`, or ``moesym predict MODEL --hardware HW``; see\n"
            "`moesym simulate` and `moesym report\n--phase serve`.\n"
            "```bash\nmoesym list hardware\n```\n")
    found = _inline_mentions(text)
    assert found == [(1, "moesym list models"), (1, "moesym predict MODEL --hardware HW"),
                     (2, "moesym simulate"), (2, "moesym report --phase serve")]
    assert [classify_inline(c)[0] for _, c in found] == ["run", "synopsis", "name", "fragment"]
    assert classify_inline("moesym predict deepseek-v3 --phase nonsense")[0] == "refused"
    assert classify_inline("moesym validate --timing tables:DIR")[0] == "synopsis"


def test_no_inline_mention_is_refused():
    """Every inline mention is a command name, a synopsis, a listed fragment or a command line
    the parser accepts."""
    refused = [f"{where}: `{cmd}`: {reason} (fix the page, or list it in FRAGMENTS with what it is)"
               for where, cmd, kind, reason in inline_mentions() if kind == "refused"]
    assert not refused, "\n".join(refused)


@pytest.mark.parametrize("cmd,kind", list(_inline_cases()))
def test_inline_command(cmd, kind, tmp_path, monkeypatch, capsys):
    """A complete ``moesym`` command in running text parses and (unless PARSE_ONLY) runs."""
    assert not isinstance(_parse(cmd), str), f"{cmd}: {_parse(cmd)}"
    if kind == "run":
        monkeypatch.chdir(tmp_path)
        _write_files(tmp_path)
        code, _, err = _run(cmd, capsys)
        assert code in (0, None), f"{cmd}\nexit {code}\n{err}"


# --- links --------------------------------------------------------------------------------------

_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_URL = re.compile(r"\bhttps?://[^\s)>\]`\"']+")


def github_slug(heading: str) -> str:
    """GitHub's (and MyST's) anchor of a heading: lower case, punctuation dropped, spaces to
    hyphens."""
    text = re.sub(r"`|\*\*?|__?", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", _prose(page.read_text()), re.M):
        slug = github_slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def link_problems(page: Path, root: Path = ROOT) -> list[str]:
    """Relative links of ``page`` whose file or anchor does not exist."""
    problems = []
    prose = _prose(page.read_text())
    prose = re.sub(r"`[^`\n]*`", "", prose)  # code spans are not links
    for m in _LINK.finditer(prose):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        line = prose[:m.start()].count("\n") + 1
        if not dest.exists():
            problems.append(f"{_rel(page, root)}:{line}: {target}: no file {path}")
        elif anchor and (dest.suffix != ".md" or anchor not in _anchors(dest)):
            problems.append(f"{_rel(page, root)}:{line}: {target}: no heading #{anchor} in "
                            f"{path or page.name}")
    return problems


def test_github_slug_and_link_check(tmp_path):
    assert github_slug("Install and pass the tests") == "install-and-pass-the-tests"
    assert github_slug("One device (`--expert-cache`, 4-bit)") == "one-device---expert-cache-4-bit"
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Title\n\n## Same\n\n## Same\n")
    page.write_text("[ok](b.md#title) [dup](b.md#same-1) ![img](b.md) [web](https://x.org/a)\n"
                    "[bad file](c.md) [bad anchor](b.md#nope) `[code](nothing.md)`\n")
    assert [p.split(": ", 1)[1] for p in link_problems(page, tmp_path)] == [
        "c.md: no file c.md", "b.md#nope: no heading #nope in b.md"]


def test_readme_links_resolve():
    """README.md's relative links and anchors (the docs' own are checked by Sphinx -n)."""
    assert not link_problems(ROOT / "README.md"), "\n".join(link_problems(ROOT / "README.md"))


def url_problem(url: str) -> str | None:
    """Why an external URL is not a well-formed https link (None: it is)."""
    parts = urlsplit(url)
    if parts.scheme != "https":
        return "not https"
    if not re.fullmatch(r"[a-z0-9-]+(\.[a-z0-9-]+)+(:\d+)?", parts.netloc.lower()):
        return f"host {parts.netloc!r} is not a domain name"
    if re.search(r"[\s<>\"{}|\\^`]", url) or url.endswith((".", ",", ";", ":")):
        return "characters a URL may not hold (or trailing punctuation)"
    return None


def external_urls() -> list[tuple[str, str]]:
    """(page:line, URL) of every web link in the README and the docs, generated pages and
    CLI.md included."""
    pages = [*_pages(), *sorted((ROOT / "derivations").glob("*.md")), ROOT / "CLI.md"]
    return [(f"{_rel(p)}:{n}", u) for p in pages
            for n, line in enumerate(p.read_text().split("\n"), 1) for u in _URL.findall(line)]


def test_url_problem_finds_malformed_links():
    assert url_problem("https://arxiv.org/abs/2412.19437") is None
    assert url_problem("http://arxiv.org/abs/2412.19437") == "not https"
    assert url_problem("https://localhost/x") is not None
    assert url_problem("https://github.com/a b") is not None


def test_external_links_are_https_and_well_formed():
    """Every external URL of the pages, listed (not fetched: CI reaches no web site; see
    docs/README.md for ``sphinx -b linkcheck``)."""
    bad = [f"{where}: {url}: {url_problem(url)}" for where, url in external_urls()
           if url_problem(url)]
    assert not bad, "\n".join(bad)


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
