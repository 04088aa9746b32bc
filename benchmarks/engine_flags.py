"""Extract the server-launcher flag names of SGLang, vLLM and TensorRT-LLM from their downloaded
sources, offline, with :mod:`ast` (the engines are never imported: they need torch and GPUs), and
write the fixture ``tests/data/engine_flags.json`` that ``tests/test_emit.py`` checks every
``--emit`` flag against.

Test-data preparation (not run by the tests)::

    pip download sglang==0.5.23 --no-deps -d /tmp/engsrc      # the version moesym/engines/emit.py targets
    pip download vllm --no-deps -d /tmp/engsrc                 # wheel or sdist
    pip download tensorrt-llm --no-deps -d /tmp/engsrc         # PyPI has only a stub (see below)
    python benchmarks/engine_flags.py --sglang /tmp/engsrc/sglang-*.whl \\
        --vllm /tmp/engsrc/vllm-*.whl [--trtllm WHEEL_OR_SDIST] -o tests/data/engine_flags.json

    # the single-device engines (entries of engines not given are kept):
    pip download llama-cpp-python==0.3.36 --no-deps --no-binary :all: -d /tmp/engsrc
    pip download mlx-lm==0.32.2 --no-deps -d /tmp/engsrc
    python benchmarks/engine_flags.py --llamacpp /tmp/engsrc/llama_cpp_python-0.3.36.tar.gz \\
        --mlx-lm /tmp/engsrc/mlx_lm-0.32.2-py3-none-any.whl

- llama.cpp (``llama-server``, ``llama-bench``): the sdist of llama-cpp-python vendors
  llama.cpp; ``common/arg.cpp``'s ``add_opt(common_arg({names}, ...))`` calls that llama-server
  takes (``set_examples`` naming SERVER or COMMON), and ``tools/llama-bench/llama-bench.cpp``'s
  own ``arg == "-x"`` comparisons. Short flags (``-ngl``) are kept: users write them.
- mlx-lm (``mlx_lm.server``, ``mlx_lm.generate``): the ``add_argument`` calls of
  ``mlx_lm/server.py`` and ``mlx_lm/generate.py``.

Each ``--ENGINE`` takes a wheel, an sdist or an unpacked folder. What is read:

- SGLang (``python -m sglang.launch_server``): ``ServerArgs.add_cli_args`` in
  ``sglang/srt/server_args.py`` registers every annotated field of the namespaces listed in
  ``_INPUT_NAMESPACES`` (``sglang/srt/arg_groups/fields/*.py``) whose annotation carries a help
  string or an ``Arg(...)`` (not ``no_cli``): ``Arg.cli_name`` or ``--`` + the field name with
  ``_`` -> ``-``, plus ``Arg.aliases`` (and ``--no-X`` for ``BooleanOptionalAction``); then
  its explicit ``parser.add_argument`` calls (deprecated spellings among them). An older SGLang
  whose ``add_cli_args`` only calls ``add_argument`` is read through those calls.
- vLLM (``vllm serve``): ``make_arg_parser`` (``vllm/entrypoints/*/cli_args.py``): its own
  ``add_argument`` calls, ``FrontendArgs.add_cli_args`` (a flag per dataclass field of
  ``FrontendArgs`` and its bases), ``EngineArgs.add_cli_args`` and ``AsyncEngineArgs.add_cli_args``
  (explicit flag names; a field whose type holds ``bool`` gets vLLM's ``BooleanOptionalAction``,
  hence ``--no-X``, as vLLM's ``get_kwargs`` does).
- TensorRT-LLM (``trtllm-serve``): the ``click.option`` decorators of the ``serve`` command in
  ``tensorrt_llm/commands/serve.py``. The PyPI ``tensorrt-llm`` release is a stub sdist that
  fetches the wheel from pypi.nvidia.com at install time; with no wheel, the fixture says so
  (``"flags": null``) and the tests skip.

Flags registered with a deprecation (SGLang's ``Deprecated*Action``; a help text taken from a
``*DEPRECATION*`` constant in vLLM) are listed under ``deprecated`` as well, and the values a
flag accepts, where the source spells them out (``Literal[...]`` types, literal ``choices``),
under ``choices`` (plugins may register more); for vLLM's JSON-valued ``--*-config`` flags, the
fields of the config class the JSON is validated as, under ``config_keys``.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import tarfile
import zipfile
from pathlib import Path


class Source:
    """The ``.py`` files of a wheel, sdist or folder, keyed by their path from the package root
    (``sglang/srt/server_args.py``), and the distribution's version."""

    def __init__(self, path: str, package: str):
        self.path = Path(path)
        self.package = package
        self.files: dict[str, str] = {}
        self.version = None
        meta = re.compile(r"(^|/)(METADATA|PKG-INFO)$")
        if self.path.is_dir():
            items = ((str(p.relative_to(self.path)), p.read_bytes)
                     for p in self.path.rglob("*") if p.is_file())
        elif zipfile.is_zipfile(self.path):
            z = zipfile.ZipFile(self.path)
            items = ((n, (lambda n=n: z.read(n))) for n in z.namelist())
        else:
            t = tarfile.open(self.path)
            items = ((m.name, (lambda m=m: t.extractfile(m).read())) for m in t.getmembers()
                     if m.isfile())
        for name, read in items:
            if meta.search(name) and name.count("/") <= 1 and self.version is None:
                m = re.search(r"^Version:\s*(\S+)", read().decode(errors="replace"), re.M)
                self.version = m.group(1) if m else None
            i = name.find(package + "/")
            if name.endswith(".py") and i >= 0 and (i == 0 or name[i - 1] == "/"):
                self.files[name[i:]] = read().decode(errors="replace")
        if self.version is None:  # an unpacked folder without metadata
            v = self.files.get(f"{package}/_version.py") or self.files.get(
                f"{package}/version.py", "")
            m = re.search(r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)""", v)
            self.version = m.group(1) if m else "unknown"

    def tree(self, rel: str) -> ast.Module:
        return ast.parse(self.files[rel], rel)

    def module_file(self, module: str) -> str | None:
        rel = module.replace(".", "/")
        for cand in (rel + ".py", rel + "/__init__.py"):
            if cand in self.files:
                return cand
        return None

    def find_class(self, name: str, prefer: list[str] = ()) -> tuple[str, ast.ClassDef]:
        """The definition of class ``name``: first in the ``prefer`` files, else anywhere."""
        for rel in [*prefer, *sorted(self.files)]:
            if rel not in self.files or f"class {name}" not in self.files[rel]:
                continue
            for node in self.tree(rel).body:
                if isinstance(node, ast.ClassDef) and node.name == name:
                    return rel, node
        raise LookupError(f"class {name} not found in {self.path}")


def _const(node, what: str):
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(f"{what}: not a literal: {ast.unparse(node)}") from None


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")


def _kw(call: ast.Call, name: str):
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_boolean_optional(node) -> bool:
    return node is not None and ast.unparse(node).endswith("BooleanOptionalAction")


def _with_no(names: list[str]) -> list[str]:
    """argparse's ``BooleanOptionalAction`` adds ``--no-X`` for each ``--X``."""
    return names + ["--no-" + n[2:] for n in names if n.startswith("--")]


def _literal_values(node, aliases=None, depth=0) -> list | None:
    """The values of ``Literal[...]`` in a type annotation (through ``Optional`` / unions,
    module-level aliases and nested ``Literal``), or None."""
    aliases = aliases or {}
    if depth > 8:
        return None
    for m in _union_members(node, parsed=True):
        if isinstance(m, ast.Name) and m.id in aliases:
            m = aliases[m.id]
        if isinstance(m, ast.Subscript) and ast.unparse(m.value).split(".")[-1] == "Literal":
            elts = m.slice.elts if isinstance(m.slice, ast.Tuple) else [m.slice]
            values = []
            for e in elts:
                if isinstance(e, ast.Constant):
                    values.append(e.value)
                    continue
                inner = _literal_values(e, aliases, depth + 1)  # Literal[A, "x"], A a Literal
                if inner is None:
                    return None
                values += inner
            return values
    return None


def _module_constants(src: "Source", rel: str, depth: int = 0) -> dict[str, ast.AST]:
    """Module-level ``NAME = value`` of ``rel``, and of the modules it imports names from."""
    out: dict[str, ast.AST] = {}
    for n in src.tree(rel).body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0],
                                                                             ast.Name):
            out[n.targets[0].id] = n.value
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value:
            out[n.target.id] = n.value
        elif isinstance(n, ast.ImportFrom) and n.module and depth < 1:
            mod = src.module_file(n.module)
            if mod is not None:
                consts = _module_constants(src, mod, depth + 1)
                out.update({a.asname or a.name: consts[a.name] for a in n.names
                            if a.name in consts})
    return out


def _choices(node, consts) -> list | None:
    """A ``choices=`` value: a literal, or a module constant holding one."""
    if isinstance(node, ast.Name) and node.id in consts:
        node = consts[node.id]
    if isinstance(node, ast.Call) and _call_name(node) in ("list", "tuple", "set") and node.args:
        return _choices(node.args[0], consts)
    try:
        v = ast.literal_eval(node)
    except ValueError:
        return None
    return list(v) if isinstance(v, (list, tuple, set)) else None


class Flags:
    def __init__(self, short: bool = False):
        self.short = short  # keep single-dash names too (llama.cpp's -ngl, mlx_lm's none)
        self.flags: set[str] = set()
        self.deprecated: set[str] = set()
        self.choices: dict[str, list] = {}
        self.config_keys: dict[str, list] = {}

    def add(self, names, deprecated=False, choices=None):
        names = [n for n in names if n.startswith("--" if not self.short else "-")]
        self.flags.update(names)
        if deprecated:
            self.deprecated.update(names)
        if choices is not None:
            for n in names:
                self.choices[n] = sorted({str(c) for c in choices if c is not None})

    def explicit(self, func: ast.AST, consts=None):
        """Every ``X.add_argument("--a", "-b", ...)`` call under ``func`` with literal names."""
        for call in ast.walk(func):
            if not (isinstance(call, ast.Call) and _call_name(call) == "add_argument"):
                continue
            if any(not isinstance(a, ast.Constant) for a in call.args):
                raise ValueError(f"line {call.lineno}: flag name not a literal: "
                                 f"{ast.unparse(call)[:120]}")
            names = [a.value for a in call.args]
            action = _kw(call, "action")
            helps = [_kw(call, "help")] + [v for k in call.keywords if k.arg is None
                                            and isinstance(k.value, ast.Dict)
                                            for kk, v in zip(k.value.keys, k.value.values)
                                            if isinstance(kk, ast.Constant)
                                            and kk.value == "help"]
            dep = (action is not None and "Deprecat" in ast.unparse(action)) or any(
                h is not None and not isinstance(h, ast.Constant)
                and "DEPRECAT" in ast.unparse(h).upper() for h in helps)
            ch = _kw(call, "choices")
            ch = _choices(ch, consts or {}) if ch is not None else None
            self.add(_with_no(names) if _is_boolean_optional(action) else names, dep, ch)
            yield call, names

    def result(self, version: str, source: str) -> dict:
        return {"version": version, "source": source, "flags": sorted(self.flags),
                "deprecated": sorted(self.deprecated),
                "choices": {k: self.choices[k] for k in sorted(self.choices)},
                "config_keys": {k: self.config_keys[k] for k in sorted(self.config_keys)}}


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


# --------------------------------------------------------------------------------------------
# SGLang
# --------------------------------------------------------------------------------------------


def _sglang_arg(annotation) -> ast.AST | None:
    """The ``Arg(...)`` call or help string of ``A[T, ...]`` / ``Annotated[T, ...]``, or None."""
    if not (isinstance(annotation, ast.Subscript)
            and ast.unparse(annotation.value).split(".")[-1] in ("A", "Annotated")
            and isinstance(annotation.slice, ast.Tuple)):
        return None
    for meta in annotation.slice.elts[1:]:
        if isinstance(meta, ast.Call) and _call_name(meta) == "Arg":
            return meta
        if isinstance(meta, (ast.Constant, ast.JoinedStr, ast.BinOp)):  # help text
            return meta
    return None


def _sglang_fields(src: Source, rel: str, cls: ast.ClassDef, out: Flags):
    consts = _module_constants(src, rel)
    for base in cls.bases:  # inherited fields first
        name = ast.unparse(base).split(".")[-1]
        if name not in ("Struct", "object") and not name.startswith("Generic"):
            brel, bcls = src.find_class(name, [rel])
            _sglang_fields(src, brel, bcls, out)
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        meta = _sglang_arg(node.annotation)
        if meta is None:
            continue
        field = node.target.id
        typ = node.annotation.slice.elts[0]
        choices = _literal_values(typ, consts)
        if isinstance(meta, ast.Call):
            if _kw(meta, "no_cli") is not None and _const(_kw(meta, "no_cli"), field):
                continue
            cli = _kw(meta, "cli_name")
            name = _const(cli, field) if cli is not None else None
            aliases = _kw(meta, "aliases")
            names = [name or "--" + field.replace("_", "-")] + (
                list(_const(aliases, field) or []) if aliases is not None else [])
            action = _kw(meta, "action")
            dep = action is not None and "Deprecat" in ast.unparse(action)
            if _kw(meta, "choices") is not None:
                choices = _choices(_kw(meta, "choices"), consts)
            out.add(_with_no(names) if _is_boolean_optional(action) else names, dep, choices)
        else:
            out.add(["--" + field.replace("_", "-")], choices=choices)


def sglang_flags(src: Source) -> dict:
    rel = "sglang/srt/server_args.py"
    tree = src.tree(rel)
    server_args = next(n for n in tree.body if isinstance(n, ast.ClassDef)
                       and n.name == "ServerArgs")
    out = Flags()
    how = []
    add_cli = _method(server_args, "add_cli_args")
    if any(isinstance(c, ast.Call) and _call_name(c) == "add_cli_args_from_dataclass"
           for c in ast.walk(add_cli)):
        namespaces = next((n.value for n in tree.body if isinstance(n, ast.Assign)
                           and ast.unparse(n.targets[0]) == "_INPUT_NAMESPACES"), None)
        imports = {a.asname or a.name: n.module for n in tree.body
                   if isinstance(n, ast.ImportFrom) for a in n.names}
        classes = ([e.id for e in namespaces.elts] if namespaces is not None else [])
        for name in classes:
            mod = src.module_file(imports.get(name, "")) or rel
            crel, cls = src.find_class(name, [mod])
            _sglang_fields(src, crel, cls, out)
        _sglang_fields(src, rel, server_args, out)  # fields on ServerArgs itself
        how.append("annotated fields of the ServerArgs namespaces "
                   f"({', '.join(classes)}; sglang/srt/arg_groups/fields)")
    list(out.explicit(add_cli, _module_constants(src, rel)))
    how.append("the explicit add_argument calls of ServerArgs.add_cli_args")
    return out.result(src.version, f"{src.path.name}, read with ast: " + "; ".join(how))


# --------------------------------------------------------------------------------------------
# vLLM
# --------------------------------------------------------------------------------------------


def _union_members(node, parsed=False) -> list:
    """Top-level members of a type annotation: ``X | Y``, ``Optional[X]``, ``Union[...]``,
    ``Annotated[X, ...]`` unwrapped (vLLM's ``get_type_hints``); as source text, or as nodes
    with ``parsed``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # string annotation
        node = ast.parse(node.value, mode="eval").body
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_members(node.left, parsed) + _union_members(node.right, parsed)
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value).split(".")[-1]
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head == "Optional":
            return _union_members(elts[0], parsed) + [ast.Constant(None) if parsed else "None"]
        if head == "Union":
            return [m for e in elts for m in _union_members(e, parsed)]
        if head == "Annotated":
            return _union_members(elts[0], parsed)
    return [node if parsed else ast.unparse(node)]


class VllmTypes:
    """Field types of vLLM's config dataclasses, to tell which get ``--no-X``."""

    def __init__(self, src: Source):
        self.src = src
        self.cache: dict[str, dict[str, ast.AST]] = {}
        self.consts: dict[str, dict[str, ast.AST]] = {}

    def fields(self, cls_name: str) -> dict[str, ast.AST]:
        if cls_name not in self.cache:
            prefer = [r for r in self.src.files if r.startswith("vllm/config/")]
            rel, cls = self.src.find_class(cls_name, prefer)
            out: dict[str, ast.AST] = {}
            for base in cls.bases:
                b = ast.unparse(base).split(".")[-1]
                if b not in ("object",) and b[:1].isupper() and b not in ("BaseModel", "ABC"):
                    try:
                        out.update(self.fields(b))
                    except LookupError:
                        pass
            aliases = _module_constants(self.src, rel)
            self.consts[cls_name] = aliases
            for node in cls.body:
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    if "ClassVar" in ast.unparse(node.annotation):
                        continue
                    ann = node.annotation
                    if isinstance(ann, ast.Name) and ann.id in aliases:
                        ann = aliases[ann.id]
                    out[node.target.id] = ann
            self.cache[cls_name] = out
        return self.cache[cls_name]

    def boolean_optional(self, cls_name: str, field: str) -> bool:
        members = set(_union_members(self.fields(cls_name)[field]))
        return "bool" in members and members != {"bool", "str", "None"}

    def choices(self, cls_name: str, field: str) -> list | None:
        return _literal_values(self.fields(cls_name)[field], self.consts[cls_name])

    def config_keys(self, cls_name: str, field: str) -> list | None:
        """The fields of the config class a JSON-valued flag is parsed into (``get_kwargs``
        validates a dataclass-typed field's JSON as that class), or None."""
        members = [m for m in _union_members(self.fields(cls_name)[field]) if m != "None"]
        if len(members) != 1 or not (members[0].endswith("Config") and members[0].isidentifier()):
            return None  # a plain dict, or a union with one: any keys
        try:
            return sorted(f for f in self.fields(members[0]) if not f.startswith("_"))
        except LookupError:
            return None


def _vllm_kwargs_source(func: ast.FunctionDef) -> dict[str, tuple]:
    """``name -> (ConfigClass, field or None)`` for ``x = get_kwargs(C)`` and
    ``x = get_kwargs(C)["f"]`` / ``x = y["f"]`` in ``func``."""
    env: dict[str, tuple] = {}
    for node in ast.walk(func):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            continue
        v = node.value
        if isinstance(v, ast.Call) and _call_name(v) == "get_kwargs":
            env[node.targets[0].id] = (ast.unparse(v.args[0]), None)
        elif isinstance(v, ast.Subscript) and isinstance(v.slice, ast.Constant):
            inner = v.value
            if isinstance(inner, ast.Call) and _call_name(inner) == "get_kwargs":
                env[node.targets[0].id] = (ast.unparse(inner.args[0]), v.slice.value)
            elif isinstance(inner, ast.Name) and inner.id in env:
                env[node.targets[0].id] = (env[inner.id][0], v.slice.value)
    return env


def _vllm_field_of(expr, env) -> tuple | None:
    """The (ConfigClass, field) a ``**kwargs`` expression of an add_argument call spreads."""
    if isinstance(expr, ast.Dict):
        for k, v in zip(expr.keys, expr.values):
            if k is None:
                return _vllm_field_of(v, env)
        return None
    if isinstance(expr, ast.Name) and expr.id in env and env[expr.id][1] is not None:
        return env[expr.id]
    if (isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name)
            and expr.value.id in env and isinstance(expr.slice, ast.Constant)):
        return env[expr.value.id][0], expr.slice.value
    return None


def _vllm_engine_args(src: Source, rel: str, types: VllmTypes, func: ast.FunctionDef,
                      out: Flags, unresolved: list):
    env = _vllm_kwargs_source(func)
    flags_of: dict[tuple, list] = {}
    for call, names in out.explicit(func):
        for k in call.keywords:
            if k.arg is None:
                cf = _vllm_field_of(k.value, env)
                if cf is None:
                    unresolved.append(names[0])
                    continue
                flags_of[cf] = names
                if _kw(call, "choices") is None:
                    out.add(names, choices=types.choices(*cf))
                keys = types.config_keys(*cf)
                if keys:
                    out.config_keys.update({n: keys for n in names if n.startswith("--")})
                if _kw(call, "action") is None and types.boolean_optional(*cf):
                    out.add(_with_no(names))
    # edits of the derived choices: `x_kwargs["field"]["choices"].remove(VALUE)`
    consts = _module_constants(src, rel)
    for call in ast.walk(func):
        f = call.func if isinstance(call, ast.Call) else None
        if not (isinstance(f, ast.Attribute) and f.attr in ("remove", "append")
                and isinstance(f.value, ast.Subscript)
                and ast.unparse(f.value.slice) in ("'choices'", '"choices"')):
            continue
        cf = _vllm_field_of(f.value.value, env)
        value = consts.get(ast.unparse(call.args[0]), call.args[0]) if call.args else None
        for n in flags_of.get(cf, []):
            if n in out.choices and value is not None:
                v = {str(_const(value, n))}
                have = set(out.choices[n])
                out.choices[n] = sorted(have - v if f.attr == "remove" else have | v)


def vllm_flags(src: Source) -> dict:
    types = VllmTypes(src)
    out = Flags()
    unresolved: list = []
    arg_rel, engine = src.find_class("EngineArgs", ["vllm/engine/arg_utils.py"])
    _, async_engine = src.find_class("AsyncEngineArgs", [arg_rel])
    cli_rel = next(r for r in sorted(src.files) if r.startswith("vllm/entrypoints/")
                   and "def make_arg_parser(parser: FlexibleArgumentParser)" in src.files[r]
                   and "FrontendArgs.add_cli_args" in src.files[r])
    cli = src.tree(cli_rel)
    make = next(n for n in cli.body if isinstance(n, ast.FunctionDef)
                and n.name == "make_arg_parser")
    list(out.explicit(make))
    # FrontendArgs.add_cli_args: one flag per dataclass field, `--{key.replace('_', '-')}`
    frontend = [n for n in ast.walk(make) if isinstance(n, ast.Call)
                and ast.unparse(n.func).endswith("FrontendArgs.add_cli_args")]
    for call in frontend:
        name = ast.unparse(call.func).split(".")[0]
        for field in types.fields(name):
            if field.startswith("_"):
                continue
            flag = ["--" + field.replace("_", "-")]
            out.add(_with_no(flag) if types.boolean_optional(name, field) else flag,
                    choices=types.choices(name, field))
    if '"flags"' in src.files[cli_rel].replace("value.pop(\"flags\", [])", ""):
        raise ValueError(f"{cli_rel}: extra frontend flags set through 'flags': read them")
    _vllm_engine_args(src, arg_rel, types, _method(engine, "add_cli_args"), out, unresolved)
    _vllm_engine_args(src, arg_rel, types, _method(async_engine, "add_cli_args"), out,
                      unresolved)
    if unresolved:
        print(f"vllm: no field type for {unresolved} (no --no-X added)", file=sys.stderr)
    return out.result(src.version, (
        f"{src.path.name}, read with ast: `vllm serve` = make_arg_parser ({cli_rel}): its "
        "add_argument calls, FrontendArgs.add_cli_args (a flag per FrontendArgs field), "
        f"EngineArgs.add_cli_args and AsyncEngineArgs.add_cli_args ({arg_rel}); --no-X where "
        "get_kwargs gives a bool field BooleanOptionalAction"))


# --------------------------------------------------------------------------------------------
# TensorRT-LLM
# --------------------------------------------------------------------------------------------


def trtllm_flags(src: Source | None, why_missing: str) -> dict:
    rel = "tensorrt_llm/commands/serve.py"
    if src is None or rel not in src.files:
        where = f"{src.path.name} has no {rel}" if src is not None else "no source given"
        return {"version": src.version if src is not None else None,
                "source": f"{where}: {why_missing}", "flags": None, "deprecated": []}
    tree = src.tree(rel)
    serve = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                 and n.name == "serve")
    out = Flags()
    for dec in serve.decorator_list:
        if isinstance(dec, ast.Call) and _call_name(dec) == "option":
            names = []
            for a in dec.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    names += [s.strip() for s in a.value.split("/")]  # "--x/--no-x"
            typ = _kw(dec, "type")
            choices = (_choices(typ.args[0], {}) if isinstance(typ, ast.Call)
                       and _call_name(typ) == "Choice" and typ.args else None)
            out.add(names, choices=choices)
    return out.result(src.version, f"{src.path.name}, read with ast: the click.option "
                      f"decorators of serve() in {rel}")


def _member(path: str, suffix: str) -> tuple[str, str]:
    """(name, text) of the file of a tarball, zip or folder whose path ends with ``suffix``."""
    p = Path(path)
    if p.is_dir():
        hit = next(x for x in sorted(p.rglob("*")) if str(x).endswith(suffix))
        return str(hit.relative_to(p)), hit.read_text(errors="replace")
    if zipfile.is_zipfile(p):
        z = zipfile.ZipFile(p)
        name = next(n for n in z.namelist() if n.endswith(suffix))
        return name, z.read(name).decode(errors="replace")
    t = tarfile.open(p)
    m = next(m for m in t.getmembers() if m.isfile() and m.name.endswith(suffix))
    return m.name, t.extractfile(m).read().decode(errors="replace")


def _statements(text: str, opener: str):
    """Each balanced-parenthesis statement of C++ ``text`` that starts with ``opener(``."""
    i = text.find(opener + "(")
    while i >= 0:
        depth, j, quote = 0, i + len(opener), None
        while j < len(text):
            c = text[j]
            if quote:
                if c == "\\":
                    j += 1
                elif c == quote:
                    quote = None
            elif c in "\"'":
                quote = c
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        yield text[i:j + 1]
        i = text.find(opener + "(", j)


def llamacpp_flags(sdist: str) -> dict:
    """llama-server's and llama-bench's flags from llama.cpp's sources (as vendored in the
    llama-cpp-python sdist): each ``add_opt(common_arg({names}, ...).set_examples({...}))`` of
    ``common/arg.cpp`` that llama-server takes (examples SERVER or COMMON, not excluded from
    SERVER: common_params_parser_init's rule), with the choices of a ``[a|b|c]`` value hint; and
    the ``arg == "-x"`` comparisons of ``tools/llama-bench/llama-bench.cpp``'s own parser."""
    version = re.search(r"-(\d[\w.]*)\.tar\.gz$|-(\d[\w.]*)-", Path(sdist).name)
    version = next(g for g in version.groups() if g) if version else "unknown"
    arg_name, arg_cpp = _member(sdist, "llama.cpp/common/arg.cpp")
    server = Flags(short=True)
    for st in _statements(arg_cpp, "add_opt"):
        m = re.match(r'add_opt\(\s*common_arg\(\s*\{([^}]*)\}\s*,\s*(?:"([^"]*)")?', st)
        if not m:
            continue
        names = re.findall(r'"(-[^"]+)"', m.group(1))
        ex = re.search(r"\.set_examples\(\{([^}]*)\}", st)
        excl = re.search(r"\.set_excludes\(\{([^}]*)\}", st)
        examples = ex.group(1) if ex else "LLAMA_EXAMPLE_COMMON"
        if not re.search(r"LLAMA_EXAMPLE_(SERVER|COMMON)\b", examples) or (
                excl and "LLAMA_EXAMPLE_SERVER" in excl.group(1)):
            continue
        hint = m.group(2) or ""
        ch = re.fullmatch(r"\[([\w|]+)\]", hint)
        server.add(names, choices=ch.group(1).split("|") if ch else None)
    bench_name, bench_cpp = _member(sdist, "llama.cpp/tools/llama-bench/llama-bench.cpp")
    bench = Flags(short=True)
    bench.add(re.findall(r'arg == "(-[^"]+)"', bench_cpp))
    where = f"{Path(sdist).name} (llama-cpp-python {version}'s vendored llama.cpp)"
    return {"llama-server": server.result(version, f"{where}: {arg_name}, the add_opt(common_arg"
                                          "(...)) calls llama-server takes"),
            "llama-bench": bench.result(version, f"{where}: {bench_name}, its parse_cmd_params "
                                        "comparisons arg == \"-x\"")}


def mlx_lm_flags(wheel: str) -> dict:
    """``mlx_lm.server``'s and ``mlx_lm.generate``'s argparse flags (``mlx_lm/server.py``,
    ``mlx_lm/generate.py``), read with ast."""
    src = Source(wheel, "mlx_lm")
    out = {}
    for tool, rel in (("mlx_lm.server", "mlx_lm/server.py"),
                      ("mlx_lm.generate", "mlx_lm/generate.py")):
        f = Flags(short=True)
        for _ in f.explicit(src.tree(rel)):
            pass
        out[tool] = f.result(src.version, f"{Path(wheel).name}, read with ast: the "
                             f"add_argument calls of {rel}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sglang", help="sglang wheel, sdist or folder")
    p.add_argument("--vllm", help="vllm wheel, sdist or folder")
    p.add_argument("--llamacpp", help="llama-cpp-python sdist (vendors llama.cpp's sources)")
    p.add_argument("--mlx-lm", help="mlx-lm wheel, sdist or folder")
    p.add_argument("--trtllm", help="tensorrt-llm wheel, sdist or folder (PyPI: a stub)")
    p.add_argument("--trtllm-missing", default=(
        "PyPI's tensorrt-llm is a stub sdist that downloads the wheel from pypi.nvidia.com "
        "at install time, and that index (and GitHub) could not be reached when this "
        "fixture was made; trtllm-serve flags are not checked"),
        help="the reason recorded when no trtllm-serve source is available")
    p.add_argument("-o", "--out", default="tests/data/engine_flags.json")
    a = p.parse_args(argv)
    out = Path(a.out)  # engines not given keep their entries
    data = json.loads(out.read_text()) if out.exists() else {}
    if a.sglang:
        data["sglang"] = sglang_flags(Source(a.sglang, "sglang"))
    if a.vllm:
        data["vllm"] = vllm_flags(Source(a.vllm, "vllm"))
    if a.sglang or a.vllm or a.trtllm:
        data["trtllm"] = trtllm_flags(Source(a.trtllm, "tensorrt_llm") if a.trtllm else None,
                                      a.trtllm_missing)
    if a.llamacpp:
        data.update(llamacpp_flags(a.llamacpp))
    if a.mlx_lm:
        data.update(mlx_lm_flags(a.mlx_lm))
    out.write_text(json.dumps(data, indent=1) + "\n")
    for k, v in data.items():
        n = len(v["flags"]) if v["flags"] is not None else "no"
        print(f"{k} {v['version']}: {n} flags", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
