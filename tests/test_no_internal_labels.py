"""No internal label in anything a user reads: sources are named as papers, repositories and
datasheets, never as the project's own design notes ("seed 003"), its issue numbers ("issue 20")
or its commit hashes.

Surfaces: every parser's help (``moesym.cli.reference``, what CLI.md is generated from), README.md,
CLI.md, docs/**/*.md, the generated derivation pages, the files the docs include, the data files
whose text commands print (hardware and model sources, engine profiles, schedules), the
docstrings of the modules the API reference renders, every string the package's code can print
(help, output, errors, warnings: its string literals other than docstrings), and the output of
commands that name sources (the ring dispatch table, the listings, a mesh file's fallback warning).

Labels: ``seed 00N`` / ``seed-00N`` / ``seed00N`` (any case; in a name too, such as a model's),
``issue N`` / ``issue #N``, and commit-like hashes (7 to 40 lower-case hex digits with a letter
and a digit; a float such as ``1979e12`` is not one). An issue or a revision of another
repository named just before it (``SemiAnalysisAI/InferenceX issue #870``,
``ai-dynamo/aiconfigurator @ 095f58a``) is a source and allowed. Code comments, identifiers and
test docstrings may keep references. The notebooks' text cells are pages too.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LABELS = {
    "design-note label": re.compile(r"(?i)(?<![\w])seed[ -]?0\d\d(?!\d)"),
    "issue number": re.compile(r"(?i)\bissues? #?\d+\b"),
    # not inside a number: 1979e12, the digits after the point of 2.6819000000000002e-05
    "commit hash": re.compile(r"(?<![\w.])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)(?!\d+e[-+]?\d)"
                              r"[0-9a-f]{7,40}(?!\w)"),
}
# "owner/repo " (or "owner/repo @ ", "owner/repo at revision ") right before the match: a source
_OTHER_REPO = re.compile(r"\b[\w.-]+/[\w.-]+(?: @| at revision)? $")


def labels_in(text: str) -> list[tuple[int, str, str]]:
    """(line, kind, match) of every internal label in ``text``."""
    out = []
    for n, line in enumerate(text.split("\n"), 1):
        for kind, rx in LABELS.items():
            for m in rx.finditer(line):
                if not _OTHER_REPO.search(line[:m.start()]):
                    out.append((n, kind, m.group()))
    return out


def test_labels_in_finds_labels_and_spares_sources():
    text = ("as seed 004 does\nSeed-003's layout\n(issue 20)\nfixed in 3b7197a\n"
            "GitHub SemiAnalysisAI/InferenceX issue #870\n"
            "ai-dynamo/aiconfigurator @ 095f58a and repository ai-dynamo/aiconfigurator at "
            "revision 095f58a\npeak 1979e12, 351149184 bytes, 2.6819000000000002e-05 s, model "
            "marlin-moe-7b, decade, fixed in 095f58a.\nthe model seed003-moe-7b, SEED_TILE\n")
    assert labels_in(text) == [(1, "design-note label", "seed 004"),
                               (2, "design-note label", "Seed-003"),
                               (3, "issue number", "issue 20"),
                               (4, "commit hash", "3b7197a"),
                               (7, "commit hash", "095f58a"),
                               (8, "design-note label", "seed003")]


def _files() -> list[Path]:
    docs = [p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts]
    included = []
    for page in docs:
        for m in re.finditer(r"^```\{(?:literal)?include\}\s*(\S+)", page.read_text(), re.M):
            included.append((page.parent / m.group(1)).resolve())
    data = [*(ROOT / "hardware").glob("*.toml"), *(ROOT / "moesym" / "catalog").glob("*.toml"),
            ROOT / "moesym" / "engines" / "builtin.toml", ROOT / "moesym" / "schedules" / "builtin.toml"]
    files = {ROOT / "README.md", ROOT / "CLI.md", *docs, *(ROOT / "derivations").glob("*.md"),
             *included, *data, *(ROOT / "notebooks").glob("*.ipynb")}
    return sorted(files)


def _text(path: Path) -> str:
    """A page's text; a notebook's text cells (its code cells are code)."""
    if path.suffix != ".ipynb":
        return path.read_text()
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_label_in_pages_and_data_files(path):
    found = labels_in(_text(path))
    assert not found, "\n".join(f"{path.relative_to(ROOT)}:{n}: {kind} {m!r}"
                                for n, kind, m in found)


def test_no_label_in_any_parsers_help():
    from moesym.cli.reference import reference_text

    found = labels_in(reference_text())
    assert not found, "\n".join(f"moesym.cli.reference output line {n}: {kind} {m!r}"
                                for n, kind, m in found)


def _strings(path: Path):
    """(line, text) of every string literal of a module except docstrings."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value


def test_no_label_in_strings_the_code_prints():
    """Help, output, errors and warnings are the package's string literals (comments and
    docstrings are the code's own notes). The old names a built-in model still loads by
    (``moesym.readers.model.RENAMED``'s keys) are read, never printed."""
    from moesym.readers.model import RENAMED

    found = [f"{path.relative_to(ROOT)}:{line}: {kind} {m!r}"
             for path in sorted((ROOT / "moesym").rglob("*.py"))
             for line, text in _strings(path) if text not in RENAMED
             for _, kind, m in labels_in(text)]
    assert not found, "\n".join(found)


def _rendered_modules() -> list[str]:
    return sorted({m.group(1) for page in (ROOT / "docs").rglob("*.md")
                   for m in re.finditer(r"^\.\. automodule:: (\S+)", page.read_text(), re.M)})


def test_no_label_in_docstrings_the_api_reference_renders():
    """The modules ``docs/reference/api.md`` renders (automodule with members): the module's
    docstring and those of the members autodoc documents (the names of ``__all__`` where the
    module has one, imported or not; else its own public functions and classes), with their
    public methods and properties."""
    import importlib

    modules = _rendered_modules()
    assert "moesym.api" in modules
    found = []
    for name in modules:
        mod = importlib.import_module(name)
        objs = [("", mod)]
        members = getattr(mod, "__all__", None) or [
            a for a, o in vars(mod).items()
            if not a.startswith("_") and getattr(o, "__module__", None) == name]
        for attr in members:
            obj = getattr(mod, attr)
            objs.append((attr, obj))
            if inspect.isclass(obj):
                objs += [(f"{attr}.{a}", o) for a, o in vars(obj).items() if not a.startswith("_")]
        for attr, obj in objs:
            doc = (inspect.getdoc(obj) if callable(obj) or inspect.ismodule(obj)
                   or isinstance(obj, property) else None)
            found += [f"{name}{'.' + attr if attr else ''} docstring line {n}: {kind} {m!r}"
                      for n, kind, m in labels_in(doc or "")]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("argv", [
    ["comm", "dispatch", "--mode", "ring-mcast", "--table"],
    ["comm", "dispatch", "--mode", "ring-mcast", "--table", "--json"],
    ["comm", "dispatch", "--mode", "ring-mcast", "--table", "--hardware", "wormhole-tg"],
    ["comm", "combine", "--mode", "ring-mcast", "--table"],        # refused: names the table
    ["comm", "dispatch", "--mode", "ring-mcast"],                  # refused: names the table
    ["kernel", "grouped-gemm", "--hardware", "wormhole-tg", "--tokens-per-expert", "17,38",
     "--n", "4096", "--k", "7168"],
    ["list", "models"],
    ["list", "hardware"],
    ["list", "hardware", "--json"],
], ids=" ".join)
def test_no_label_in_command_output(argv, capsys):
    from moesym.cli import main

    main(argv)
    captured = capsys.readouterr()
    found = labels_in(captured.out + captured.err)
    assert not found, f"moesym {' '.join(argv)}: " + "; ".join(f"line {n}: {kind} {m!r}"
                                                              for n, kind, m in found)


def test_no_label_in_the_mesh_fallback_warning():
    """A mesh hardware file without ``[mesh.multicast]`` falls back to the fitted ring fabric and
    says where the fit comes from."""
    import warnings
    from dataclasses import replace

    from moesym.specs.deployment import Deployment
    from moesym.specs.hardware import load_hardware
    from moesym.specs.mesh import mesh_values

    hw = load_hardware("wormhole-tg")
    hw = replace(hw, mesh=replace(hw.mesh, multicast=None))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mesh_values(hw, Deployment(gpus=32, tp=8, mesh=(4, 8)))
    said = "\n".join(str(w.message) for w in caught)
    assert "multicast" in said
    assert not labels_in(said), said
