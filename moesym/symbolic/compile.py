"""The one place where SymPy expressions become NumPy functions.

Expressions become NumPy source with one line per unique node of the expression graph
(:func:`numpy_source`; every shared subexpression computed once, for all outputs together), run by
:mod:`moesym.numeric.compiled`. ``compile_expr`` compiles one expression with a fixed argument order,
cached on the expression and the arguments, with a generated docstring listing its arguments;
``compile_model`` compiles every output of a model into one cacheable
:class:`~moesym.numeric.compiled.CompiledModel`. ``evaluate`` binds numbers, compiles over the free (grid)
symbols and broadcasts.

>>> import numpy as np
>>> from moesym.symbolic.symbols import S
>>> from moesym.symbolic.compile import evaluate
>>> evaluate(S.batch * S.hidden, {S.hidden: 2.0}, {S.batch: np.array([1.0, 3.0])})
array([2., 6.])
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable, Mapping, Sequence

import numpy as np
import sympy as sp

from ..numeric.compiled import CompiledModel, function_from_source
from ..numeric.special import NUMPY_FUNCTIONS
from .expr import substitute, symbols_of
from .symbols import INFO

__all__ = ["compile_expr", "compile_model", "evaluate", "bind_and_compile", "numpy_source"]


# ---------------------------------------------------------------------------------------------
# Code generation: one NumPy line per unique node of the expression graph.
#
# SymPy expressions are hash-consed trees: the step model's 26k tree nodes are ~600 unique ones.
# Walking them once with a memo (instead of printing the tree, as lambdify does, and instead of
# SymPy's cse, which costs seconds on a step model) gives a function whose every shared
# subexpression is computed once, for every output at the same time.

# SymPy function name -> scipy.special / NumPy function of one argument
_SCIPY_SPECIAL = {"erfcinv": "erfcinv", "digamma": "digamma"}
# special functions computed once per distinct argument without SciPy (special_numeric)
_DISTINCT = ("erf", "erfc", "erfinv", "gamma", "loggamma")
_NUMPY_UNARY = ("sin", "cos", "tan", "sinh", "cosh", "tanh", "atan", "asin", "acos")
# n-ary nodes folded pairwise, and one-argument nodes, with the NumPy function each becomes
_REDUCE = {sp.Max: "_np.maximum", sp.Min: "_np.minimum", sp.And: "_np.logical_and",
           sp.Or: "_np.logical_or"}
_UNARY = {sp.ceiling: "_np.ceil", sp.floor: "_np.floor", sp.Abs: "_np.abs", sp.exp: "_np.exp",
          sp.log: "_np.log", sp.sign: "_np.sign", sp.Not: "_np.logical_not",
          sp.LambertW: "_lambertw_real"}
_RELATIONS = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _literal(x: sp.Basic) -> str:
    if x is sp.true or x is sp.false:
        return "True" if x is sp.true else "False"
    v = float(x)
    if v != v:
        return "_nan"
    if v in (float("inf"), float("-inf")):
        return "_inf" if v > 0 else "(-_inf)"
    return f"({v!r})" if v < 0 else repr(v)


def _reduce(fn: str, toks: list[str]) -> str:
    out = toks[-1]
    for t in reversed(toks[:-1]):
        out = f"{fn}({t}, {out})"
    return out


def _node_source(e: sp.Basic, a: list[str]) -> str:
    """NumPy source of one node whose arguments are already the tokens ``a``."""
    if e.is_Add:
        return " + ".join(a)
    if e.is_Mul:
        return " * ".join(a)
    if e.is_Pow:
        b, x = e.args
        if x.is_Number:
            if x == -1:
                return f"1.0 / {a[0]}"
            if x == sp.S.Half:
                return f"_np.sqrt({a[0]})"
            if x == -sp.S.Half:
                return f"1.0 / _np.sqrt({a[0]})"
        return f"{a[0]} ** {a[1]}"
    if isinstance(e, sp.Piecewise):
        out = "_nan"
        for i in reversed(range(0, len(a), 2)):
            val, c = a[i], a[i + 1]
            out = val if c == "True" else f"_np.where({c}, {val}, {out})"
        return out
    if e.is_Relational:
        return f"({a[0]} {_RELATIONS[e.rel_op]} {a[1]})"
    if isinstance(e, sp.ITE):  # SymPy's form of a condition on a Piecewise (measured tables)
        return f"_np.where({a[0]}, {a[1]}, {a[2]})"
    for cls, fn in _REDUCE.items():
        if isinstance(e, cls):
            return _reduce(fn, a)
    for cls, fn in _UNARY.items():
        if isinstance(e, cls) and len(a) == 1:
            return f"{fn}({a[0]})"
    name = type(e).__name__
    if name in _DISTINCT and len(a) == 1:  # see moesym.numeric.special.DISTINCT_FUNCTIONS
        return f"_d_{name}({a[0]})"
    if name in _SCIPY_SPECIAL and len(a) == 1:
        return f"_sps.{_SCIPY_SPECIAL[name]}({a[0]})"
    if name in _NUMPY_UNARY and len(a) == 1:
        return f"_np.{name}({a[0]})"
    if name in _special_functions():
        return f"{name}({', '.join(a)})"
    raise NotImplementedError(f"moesym cannot compile {name} nodes")


def _special_functions() -> dict:  # moesym.symbolic.special's NumPy versions, by class name
    return NUMPY_FUNCTIONS


def _children(e: sp.Basic) -> tuple:
    if isinstance(e, sp.Piecewise):  # (value, condition) pairs, flattened
        return tuple(x for pair in e.args for x in pair)
    return e.args


def graph_nodes(roots, tok: dict, symbol, literal) -> tuple[list, dict]:
    """The unique non-atom nodes of the expression graph of ``roots``, children first, and each
    node's children (a Piecewise's (value, condition) pairs flattened). ``tok`` maps each node
    to its token: the nodes become ``v0, v1, ...``; a symbol not in it gets ``symbol(e)``, an
    atom ``literal(e)``. The one walk of every code printer (NumPy here, JavaScript in
    :mod:`moesym.report.interactive`)."""
    order: list = []
    kids_of: dict = {}
    for root in roots:
        stack = [(root, False)]
        while stack:
            e, expanded = stack.pop()
            if e in tok:
                continue
            if e.is_Symbol:
                tok[e] = symbol(e)
                continue
            if e.is_Atom or e is sp.true or e is sp.false:
                tok[e] = literal(e)
                continue
            kids = _children(e)
            if not expanded:
                stack.append((e, True))
                stack.extend((k, False) for k in reversed(kids) if k not in tok)
                continue
            tok[e] = f"v{len(order)}"
            kids_of[e] = kids
            order.append(e)
    return order, kids_of


def _generate(exprs: Sequence[sp.Basic], args: Sequence[sp.Symbol] | None, name: str):
    """(source, argument symbols): see :func:`numpy_source`; ``args=None`` takes every free
    symbol met, sorted by name.

    A Piecewise evaluates only the branch its conditions pick when they are scalars (a sweep
    or search over one micro-batch count at a time): the nodes only that branch uses are
    emitted inside it. With array conditions every branch is computed and ``where`` picks."""
    tok: dict = {}
    if args is not None:
        for i, s_ in enumerate(args):
            tok[s_] = f"a{i}"
    found: list = []

    def symbol(e) -> str:
        if args is not None:
            raise ValueError(f"expression has a free symbol not among the arguments: {e}")
        found.append(e)
        return f"_s{len(found) - 1}"

    roots = [sp.sympify(r) for r in exprs]
    order, kids_of = graph_nodes(roots, tok, symbol, _literal)
    # scope of each node: None (always computed) or (Piecewise, branch) when only that branch
    # of that Piecewise needs it
    users: dict = {e: [] for e in order}
    for e in order:
        for pos, k in enumerate(kids_of[e]):
            if k in users:
                users[k].append((e, pos))
    scope: dict = {}
    root_set = set(roots)
    for e in reversed(order):
        if e in root_set:
            scope[e] = None
            continue
        seen = {(u, pos // 2) if isinstance(u, sp.Piecewise) and pos % 2 == 0 else scope[u]
                for u, pos in users[e]}
        scope[e] = seen.pop() if len(seen) == 1 else None
    members: dict = {}
    for e in order:
        members.setdefault(scope[e], []).append(e)

    def emit(where, ind: str) -> list[str]:
        out: list[str] = []
        for e in members.get(where, ()):
            if not isinstance(e, sp.Piecewise):
                out.append(f"{ind}{tok[e]} = {_node_source(e, [tok[k] for k in kids_of[e]])}")
                continue
            kids = [tok[k] for k in kids_of[e]]
            vals, conds = kids[0::2], kids[1::2]
            live = [c for c in conds if c not in ("True", "False")]
            scalar = " and ".join(f"_np.ndim({c}) == 0" for c in live) or "True"
            out.append(f"{ind}if {scalar}:")
            for i, (v, c) in enumerate(zip(vals, conds)):
                head = "else:" if c == "True" else f"{'if' if i == 0 else 'elif'} {c}:"
                out.append(f"{ind}    {head}")
                out += emit((e, i), ind + "        ")
                out.append(f"{ind}        {tok[e]} = {v}")
                if c == "True":
                    break
            else:
                out.append(f"{ind}    else:")
                out.append(f"{ind}        {tok[e]} = _np.float64(_nan)")
            out.append(f"{ind}else:")
            for i in range(len(vals)):
                out += emit((e, i), ind + "    ")
            out.append(f"{ind}    {tok[e]} = {_node_source(e, kids)}")
        return out

    body = emit(None, "    ")
    if args is None:  # name the arguments in sorted order
        args = sorted(found, key=str)
        rename = {f"_s{found.index(s_)}": f"a{i}" for i, s_ in enumerate(args)}
        pattern = re.compile(r"\b_s\d+\b")
        body = [pattern.sub(lambda m: rename[m.group(0)], line) for line in body]
        outs = [pattern.sub(lambda m: rename[m.group(0)], tok[r]) for r in roots]
    else:
        outs = [tok[r] for r in roots]
    lines = [f"def {name}({', '.join(f'a{i}' for i in range(len(args)))}):"]
    lines += [f"    a{i} = _np.asarray(a{i}, dtype=float)" for i in range(len(args))]
    lines += body
    lines.append(f"    return ({', '.join(outs)},)")
    return "\n".join(lines), tuple(args)


def numpy_source(exprs: Sequence[sp.Basic], args: Sequence[sp.Symbol], name: str = "f") -> str:
    """Python source of ``def name(*args)`` returning a tuple with one value per expression.

    Every unique subexpression (across all ``exprs``) is one line; inputs go through
    ``np.asarray(float)`` so that scalars and arrays follow the same (IEEE) rules.

    >>> from moesym.symbolic.symbols import S
    >>> print(numpy_source([S.batch * S.hidden + S.hidden], [S.batch, S.hidden]))
    def f(a0, a1):
        a0 = _np.asarray(a0, dtype=float)
        a1 = _np.asarray(a1, dtype=float)
        v0 = a0 * a1
        v1 = a1 + v0
        return (v1,)
    """
    return _generate(exprs, tuple(args), name)[0]


def compile_model(parts: Sequence[tuple[Mapping[str, sp.Expr], Mapping[sp.Symbol, float]]]
                  ) -> CompiledModel:
    """One :class:`~moesym.numeric.compiled.CompiledModel` with a function per part. A part is the
    outputs by name and the numbers of its symbols; each function takes every free symbol of its
    outputs (sorted by name) and keeps the part's numbers as its static values."""
    sources, meta = [], []
    for i, (exprs, values) in enumerate(parts):
        src, args = _generate(list(exprs.values()), None, f"f{i}")
        missing = [str(a) for a in args if a not in values]
        if missing:
            raise ValueError("missing value(s) for: " + ", ".join(sorted(missing)))
        sources.append(src)
        meta.append({"fn": f"f{i}", "args": [str(a) for a in args], "outputs": list(exprs),
                     "static": {str(a): float(values[a]) for a in args}})
    return CompiledModel("\n\n\n".join(sources), tuple(meta))


@lru_cache(maxsize=512)
def _compile_cached(expr: sp.Expr, args: tuple[sp.Symbol, ...]) -> Callable:
    many = function_from_source(numpy_source([expr], args))

    def fn(*a):
        return many(*a)[0]

    lines = ["Compiled moesym expression. Arguments, in order:"]
    for a in args:
        info = INFO.get(a)
        lines.append(f"  {a}: {info.unit} - {info.meaning}" if info else f"  {a}")
    fn.__doc__ = "\n".join(lines)
    return fn


def compile_expr(expr: sp.Expr, args: Sequence[sp.Symbol]) -> Callable:
    """NumPy function of ``args`` (in that order) computing ``expr``; cached."""
    args = tuple(args)
    extra = symbols_of(sp.sympify(expr)) - set(args)
    if extra:
        raise ValueError("expression has free symbols not among the arguments: "
                         + ", ".join(sorted(map(str, extra))))
    return _compile_cached(sp.sympify(expr), args)


@lru_cache(maxsize=256)
def _bound_cached(expr: sp.Expr, fixed: tuple, args: tuple) -> Callable:
    bound = substitute(expr, {s: sp.Float(v) for s, v in fixed})
    free = symbols_of(bound)
    return compile_expr(bound, tuple(a for a in args if a in free)), \
        tuple(a for a in args if a in free)


@lru_cache(maxsize=512)
def _late_compiled(expr: sp.Expr, grid_symbols: tuple) -> tuple:
    free = symbols_of(expr)
    grid = tuple(s for s in grid_symbols if s in free)
    rest = tuple(sorted(free - set(grid), key=str))
    return compile_expr(expr, grid + rest), grid, rest


def _late_bound(expr: sp.Expr, values: Mapping, grid_symbols: tuple) -> tuple:
    fn, grid, rest = _late_compiled(expr, grid_symbols)
    missing = [s for s in rest if s not in values]
    if missing:
        raise ValueError("missing value(s) for: " + ", ".join(sorted(map(str, missing))))
    numbers = tuple(float(values[s]) for s in rest)

    def bound(*grid_values):
        return fn(*grid_values, *numbers)

    bound.__doc__ = fn.__doc__
    return bound, grid


def bind_and_compile(expr: sp.Expr, values: Mapping[sp.Symbol, float], grid_symbols,
                     fold: bool = False) -> tuple[Callable, tuple]:
    """A NumPy function of the grid symbols with ``values`` bound to every other symbol.

    Returns the function and the grid symbols it takes, in order. NumPy broadcasting keeps every
    subexpression on the axes it depends on (a term of EP alone stays one value per EP).

    ``fold=False`` (default): the symbolic expression is compiled once (cached on the expression)
    and the numbers are passed as scalar arguments at call time: about a second for a full step
    model, and numbers can change without recompiling. ``fold=True`` substitutes the numbers
    first and compiles the folded expression: SymPy re-evaluates every Max / Min (tens of
    seconds for the kernel-model step), and the result evaluates grids about 1.5x faster, which
    pays off only beyond about 10^9 points per model.
    """
    expr = sp.sympify(expr)
    grid_symbols = tuple(grid_symbols)
    if not fold:
        return _late_bound(expr, values, grid_symbols)
    free = symbols_of(expr)
    missing = free - set(values) - set(grid_symbols)
    if missing:
        raise ValueError("missing value(s) for: " + ", ".join(sorted(map(str, missing))))
    fixed = tuple(sorted(((s, float(v)) for s, v in values.items()
                          if s in free and s not in grid_symbols), key=lambda kv: str(kv[0])))
    return _bound_cached(expr, fixed, grid_symbols)


@lru_cache(maxsize=128)
def _many_compiled(exprs: tuple, var: sp.Symbol) -> tuple:
    free = frozenset().union(*(symbols_of(e) for e in exprs))
    rest = tuple(sorted(free - {var}, key=str))
    return function_from_source(numpy_source(exprs, (var,) + rest)), rest


def evaluate_many(exprs: Sequence[sp.Expr], values: Mapping[sp.Symbol, float], var: sp.Symbol,
                  x: float) -> list[float]:
    """Each of ``exprs`` at the scalar ``var = x`` with ``values`` bound to every other symbol,
    from one compiled function over their shared graph (each subexpression computed once, with
    the arithmetic :func:`evaluate` does expression by expression)."""
    return [float(v) for v in evaluate_on(exprs, values, var, x)]


def evaluate_on(exprs: Sequence[sp.Expr], values: Mapping[sp.Symbol, float], var: sp.Symbol,
                x) -> list[np.ndarray]:
    """:func:`evaluate_many` at ``var = x``, a number or an array: each expression's values,
    an array of x's shape (or a number where the expression is free of ``var``)."""
    exprs = tuple(sp.sympify(e) for e in exprs)
    if not exprs:
        return []
    fn, rest = _many_compiled(exprs, var)
    missing = [s for s in rest if s not in values]
    if missing:
        raise ValueError("missing value(s) for: " + ", ".join(sorted(map(str, missing))))
    return list(fn(np.asarray(x, dtype=float), *(float(values[s]) for s in rest)))


def evaluate(expr: sp.Expr, values: Mapping[sp.Symbol, float], grid: Mapping[sp.Symbol, object]
             ) -> np.ndarray:
    """Evaluate ``expr`` with ``values`` bound and ``grid`` arrays broadcast against each other.

    Every free symbol must be given exactly once (in ``values`` or ``grid``); bindings for symbols
    the expression does not use are ignored here (the step model checks its own bindings).
    """
    fn, args = bind_and_compile(expr, values, tuple(grid))
    shape = np.broadcast_shapes(*(np.shape(g) for g in grid.values())) if grid else ()
    xs = [np.asarray(grid[a], dtype=float) for a in args]
    if len(shape) == 1 and shape[0] > 2 * _SLICE and all(x.shape in (shape, ()) for x in xs):
        # one long axis (a scan over every batch): in slices of 64 KB arrays, which the
        # allocator reuses (whole, the page faults of hundreds of fresh 0.5 MB arrays took a
        # third of a 65,536-batch scan); every node, the special functions included, gives each
        # element a value of its own arguments alone, so the values are the same
        return np.concatenate([
            np.broadcast_to(np.asarray(fn(*(x[i:i + _SLICE] if x.ndim else x for x in xs)),
                                       dtype=float), (min(_SLICE, shape[0] - i),))
            for i in range(0, shape[0], _SLICE)])
    out = fn(*xs)
    return np.broadcast_to(np.asarray(out, dtype=float), shape).copy()


_SLICE = 8192  # points per slice of a long one-axis evaluation


