"""The one place where SymPy expressions become NumPy functions.

``compile_expr`` lambdifies with common-subexpression elimination and a fixed argument order,
caches on the expression, the argument tuple and the options, and gives the function a generated
docstring listing its arguments. ``evaluate`` binds numbers, compiles over the free (grid)
symbols and broadcasts.

>>> import numpy as np
>>> from moesym.symbols import S
>>> from moesym.compile import evaluate
>>> evaluate(S.batch * S.hidden, {S.hidden: 2.0}, {S.batch: np.array([1.0, 3.0])})
array([2., 6.])
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Mapping, Sequence

import numpy as np
import sympy as sp

from .symbols import INFO

__all__ = ["compile_expr", "evaluate", "bind_and_compile", "numpy_modules"]


def numpy_modules() -> list:
    """lambdify modules: moesym's special functions first, then SciPy and NumPy."""
    try:
        from .special import NUMPY_FUNCTIONS
    except ImportError:  # pragma: no cover - special functions are optional
        NUMPY_FUNCTIONS = {}
    return [{**NUMPY_FUNCTIONS, "LambertW": _lambertw_real}, "scipy", "numpy"]


def _lambertw_real(x):
    """Principal-branch Lambert W on real arguments >= -1/e (where it is real), as floats."""
    from scipy.special import lambertw

    w = lambertw(x)
    return np.where(np.asarray(x) >= -np.exp(-1.0), np.real(w), np.nan)


@lru_cache(maxsize=512)
def _compile_cached(expr: sp.Expr, args: tuple[sp.Symbol, ...], cse: bool) -> Callable:
    raw = sp.lambdify(args, expr, modules=numpy_modules(), cse=cse)

    def fn(*a):
        # Piecewise branches are all evaluated by numpy.select; the unused ones may divide by 0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return raw(*a)

    lines = ["Compiled moesym expression. Arguments, in order:"]
    for a in args:
        info = INFO.get(a)
        lines.append(f"  {a}: {info.unit} - {info.meaning}" if info else f"  {a}")
    fn.__doc__ = "\n".join(lines)
    return fn


def compile_expr(expr: sp.Expr, args: Sequence[sp.Symbol], cse: bool = True) -> Callable:
    """NumPy function of ``args`` (in that order) computing ``expr``; cached."""
    args = tuple(args)
    extra = sp.sympify(expr).free_symbols - set(args)
    if extra:
        raise ValueError("expression has free symbols not among the arguments: "
                         + ", ".join(sorted(map(str, extra))))
    return _compile_cached(sp.sympify(expr), args, cse)


@lru_cache(maxsize=256)
def _bound_cached(expr: sp.Expr, fixed: tuple, args: tuple, cse: bool) -> Callable:
    bound = expr.xreplace({s: sp.Float(v) for s, v in fixed})
    return compile_expr(bound, tuple(a for a in args if a in bound.free_symbols), cse=cse), \
        tuple(a for a in args if a in bound.free_symbols)


@lru_cache(maxsize=512)
def _late_compiled(expr: sp.Expr, grid_symbols: tuple, cse: bool) -> tuple:
    free = expr.free_symbols
    grid = tuple(s for s in grid_symbols if s in free)
    rest = tuple(sorted(free - set(grid), key=str))
    return compile_expr(expr, grid + rest, cse=cse), grid, rest


def _late_bound(expr: sp.Expr, values: Mapping, grid_symbols: tuple, cse: bool) -> tuple:
    fn, grid, rest = _late_compiled(expr, grid_symbols, cse)
    missing = [s for s in rest if s not in values]
    if missing:
        raise ValueError("missing value(s) for: " + ", ".join(sorted(map(str, missing))))
    numbers = tuple(float(values[s]) for s in rest)

    def bound(*grid_values):
        return fn(*grid_values, *numbers)

    bound.__doc__ = fn.__doc__
    return bound, grid


def bind_and_compile(expr: sp.Expr, values: Mapping[sp.Symbol, float], grid_symbols,
                     cse: bool = True, fold: bool = False) -> tuple[Callable, tuple]:
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
        return _late_bound(expr, values, grid_symbols, cse)
    free = expr.free_symbols
    missing = free - set(values) - set(grid_symbols)
    if missing:
        raise ValueError("missing value(s) for: " + ", ".join(sorted(map(str, missing))))
    fixed = tuple(sorted(((s, float(v)) for s, v in values.items()
                          if s in free and s not in grid_symbols), key=lambda kv: str(kv[0])))
    return _bound_cached(expr, fixed, grid_symbols, cse)


def evaluate(expr: sp.Expr, values: Mapping[sp.Symbol, float], grid: Mapping[sp.Symbol, object],
             cse: bool = True) -> np.ndarray:
    """Evaluate ``expr`` with ``values`` bound and ``grid`` arrays broadcast against each other.

    Every free symbol must be given exactly once (in ``values`` or ``grid``); bindings for symbols
    the expression does not use are ignored here (the step model checks its own bindings).
    """
    fn, args = bind_and_compile(expr, values, tuple(grid), cse=cse)
    out = fn(*(np.asarray(grid[a], dtype=float) for a in args))
    shape = np.broadcast_shapes(*(np.shape(g) for g in grid.values())) if grid else ()
    return np.broadcast_to(np.asarray(out, dtype=float), shape).copy()


