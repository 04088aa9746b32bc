"""Imports point one way: the package is a pipeline of stages, and no module imports from a later one.

Every ``import`` and ``from ... import`` in moesym's sources is read with :mod:`ast`, at module
level and inside functions alike (an import inside a function hides a cycle from Python, not from
this test). Each module belongs to the stage of its package (:data:`STAGES`, in pipeline order);
an import of a module in a later stage fails, naming both modules and their stages. A second check
finds cycles among files, counting every import (Tarjan's strongly connected components): none
may exist, inside a stage either.

There is no exception list. The one import against the pipeline is the root package's facade: ``moesym/__init__.py`` resolves the public names
(``ms.predict``, ``ms.load_model``) from :mod:`moesym.api` on first use, so the root sits in the
last stage as an importer; modules anywhere may read its ``__version__``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import moesym

PACKAGE = Path(moesym.__file__).parent

#: the pipeline, in order: a module may import from its own stage and the ones before it
STAGES = (
    ("moesym.errors", "moesym.io"),  # errors; reading TOML and the shipped data folders
    ("moesym.numeric",),  # compiled models run without SymPy: generated functions, cache
    ("moesym.symbolic",),  # declared symbols, SymPy helpers, the compiler to NumPy
    ("moesym.schedules",),  # overlap schedules (data and their event simulation)
    ("moesym.specs",),  # model, hardware, deployment, workload, precision formats
    ("moesym.routing",),  # routing statistics: load imbalance, touched experts, caches
    ("moesym.terms",),  # cost terms: FLOPs, bytes, communication of each kernel
    ("moesym.attention",),  # attention variants as components (one file each)
    ("moesym.readers",),  # reading models (catalog, spec TOML, HF config) and GGUF file types
    ("moesym.kernels",),  # time models: roofline, the calibrated kernel model, tables
    ("moesym.engines",),  # engine profiles and launch lines
    ("moesym.plan",),  # what a deployment means against a model and a GPU: the validity rules
    ("moesym.numbers",),  # bindings (specs -> numbers) and the metrics layer (numbers -> metrics)
    ("moesym.memory",),  # per-rank memory
    ("moesym.model",),  # layer and step models, compiled predict
    ("moesym.solve",),  # generic solving: regimes, roots, rewrites, elasticities
    ("moesym.derive",),  # derive's answers: one module each, and their registry
    ("moesym.search",),  # sweeps and the deployment optimizer
    ("moesym.serving",),  # request-level serving simulation and SLA search
    ("moesym.report",),  # HTML and interactive pages, derivation pages, validation
    ("moesym.api", "moesym.cli", "moesym.__main__", "moesym"),  # the public API and the CLI
)


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = ("moesym",) + p.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def stage_of(module: str) -> int:
    best, at = None, None
    for i, names in enumerate(STAGES):
        for n in names:
            if (module == n or module.startswith(n + ".")) and (best is None or len(n) > len(best)):
                best, at = n, i
    if at is None:
        raise AssertionError(f"{module} belongs to no stage of STAGES: add its package there")
    return at


def _imports(module: str, path: Path) -> list[tuple[str, int, bool]]:
    """(imported moesym module, line, at module level) of every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    found = []

    def visit(node, top: bool):
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, ast.ImportFrom):
                if ch.level:
                    base = module.split(".") if is_pkg else module.split(".")[:-1]
                    base = base[:len(base) - (ch.level - 1)]
                    target = ".".join(base + ([ch.module] if ch.module else []))
                else:
                    target = ch.module or ""
                subs = [f"{target}.{a.name}" for a in ch.names if f"{target}.{a.name}" in MODULES]
                names = subs if len(subs) == len(ch.names) else subs + [target]
                found.extend((t, ch.lineno, top) for t in names if t in MODULES)
            elif isinstance(ch, ast.Import):
                found.extend((a.name, ch.lineno, top) for a in ch.names if a.name in MODULES)
            elif isinstance(ch, ast.Call) and getattr(ch.func, "id", None) == "Lazy" and ch.args \
                    and isinstance(ch.args[0], ast.Constant) and ch.args[0].value in MODULES:
                # moesym.attention.base.Lazy: a module imported on first use is an import too
                found.append((ch.args[0].value, ch.lineno, False))
            nested = isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(ch, ast.If) and "TYPE_CHECKING" in ast.dump(ch.test):
                continue  # annotations only
            visit(ch, top and not nested)

    visit(tree, True)
    return found


IMPORTS = {m: _imports(m, p) for m, p in MODULES.items()}


def test_every_module_has_a_stage():
    for m in MODULES:
        stage_of(m)


def test_no_module_imports_from_a_later_stage():
    wrong = []
    for m, found in IMPORTS.items():
        if m == "moesym":
            continue  # the facade: public names from moesym.api on first use
        s = stage_of(m)
        for target, line, _ in found:
            if target == "moesym":
                continue  # __version__
            t = stage_of(target)
            if t > s:
                wrong.append(f"{MODULES[m].relative_to(PACKAGE.parent)}:{line}: {m} (stage "
                             f"{STAGES[s][0]}) imports {target} (later stage {STAGES[t][0]})")
    assert not wrong, "imports against the pipeline:\n" + "\n".join(wrong)


def _cycles(graph: dict[str, set]) -> list[list[str]]:
    index, low, stack, on, out = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def test_no_cycles_among_files_counting_imports_inside_functions():
    # an import on first use breaks no cycle for a reader: every import counts
    graph = {m: {t for t, _, _ in found if t != m and t != "moesym"}
             for m, found in IMPORTS.items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    # the check above can fail: a three-module ring and a self-contained pair are found
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(_cycles(g)) == [["a", "b", "c"], ["d", "e"]]


@pytest.mark.parametrize("module,line", [("moesym.specs.model", "from ..model.step import build_step"),
                                         ("moesym.terms.cost", "from ..serving import simulator")])
def test_a_backward_import_is_caught(tmp_path, module, line):
    # the stage rule itself: an import from a later stage, parsed as the test parses sources
    p = tmp_path / "probe.py"
    p.write_text(f"def f():\n    {line}\n")
    found = _imports(module, p)
    assert found and all(stage_of(t) > stage_of(module) for t, _, _ in found)


def test_the_architecture_page_lists_the_stages_in_order():
    # docs/explanation/architecture.md's table is the drawing of this house: same stages, same order
    page = PACKAGE.parent / "docs" / "explanation" / "architecture.md"
    if not page.is_file():
        pytest.skip("the docs are not installed beside the package")
    rows = [line.split("|")[2] for line in page.read_text(encoding="utf-8").splitlines()
            if re.match(r"\| \d+ \|", line)]
    drawn = [re.findall(r"`(\w+)/?`", r) for r in rows]
    staged = [[n.split(".")[-1] for n in names if n not in ("moesym", "moesym.__main__")]
              for names in STAGES]
    assert drawn == staged


#: imports inside functions, at most: each one left is laziness that pays (SymPy, SciPy, pandas
#: and the optional extras kept off a cached predict and a stored derive answer, which
#: tests/test_cache.py checks load no SymPy; the figure and report modules kept off predict's
#: start; imports an ImportError guards). Lower it when one goes; an import inside a function
#: that does not pay belongs at the top of its module.
MAX_FUNCTION_IMPORTS = 66


def test_imports_sit_at_module_level_where_laziness_does_not_pay():
    inside = []
    for path in MODULES.values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        seen = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        seen[id(sub)] = f"{path.relative_to(PACKAGE.parent)}:{sub.lineno}"
        inside.extend(seen.values())
    assert len(inside) <= MAX_FUNCTION_IMPORTS, (
        f"{len(inside)} imports inside functions (at most {MAX_FUNCTION_IMPORTS}); move the new "
        f"ones to module level: {', '.join(sorted(inside)[:5])} ...")
