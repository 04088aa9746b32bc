"""Elasticities d ln y / d ln x of a model quantity to every parameter, exact at a point.

The expression graph is walked once forward (every unique node's number at the point, as the
compiled model computes it) and once backward (reverse-mode differentiation: each node passes
its adjoint to its arguments by its own derivative rule). At the point every maximum and
minimum takes its active argument and every Piecewise its active piece, as ``predict``
evaluates them; a tile or wave count (ceiling, floor) is locally constant, so its derivative
is 0 (the count moves only at a step: the answer's pin says where). Special functions without
a symbolic derivative (``moesym.symbolic.special``) are differentiated by a central difference of their
own compiled value.

>>> from moesym.symbolic.symbols import S
>>> import sympy as sp
>>> g = gradient(sp.Max(S.batch * S.hidden / S.flops_gemm, S.hidden / S.hbm_bw),
...              {S.batch: 2.0, S.hidden: 8.0, S.flops_gemm: 4.0, S.hbm_bw: 1.0})
>>> g[S.hbm_bw], g[S.batch]  # memory-bound: only the bandwidth side moves it
(-8.0, 0.0)
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Mapping

import sympy as sp

from ..symbolic.compile import compile_expr
from ..symbolic.expr import symbols_of

__all__ = ["gradient", "elasticities", "root_elasticities"]


@lru_cache(maxsize=None)
def _function(func, n: int, i: int | None):
    """Compiled value (i None) or i-th partial derivative of ``func`` of n arguments, or None
    where SymPy has no derivative for it."""
    xs = sp.symbols(f"x0:{n}", real=True)
    e = func(*xs)
    if i is not None:
        e = sp.diff(e, xs[i])
        if e.has(sp.Derivative) or e.has(sp.Subs):
            return None
    try:
        f = compile_expr(e, xs)
    except NotImplementedError:  # a derivative moesym cannot compile (loggamma's polygamma)
        if i is None:
            raise
        return None  # the caller takes a central difference of the function instead

    def call(*a):
        r = f(*a)
        return float(r[0] if isinstance(r, tuple) else r)

    return call


def _truth(c, val) -> bool:
    if c is sp.true or c is True:
        return True
    if c is sp.false or c is False:
        return False
    if isinstance(c, sp.core.relational.Relational):
        a, b = val(c.lhs), val(c.rhs)
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b,
                ">=": a >= b}[c.rel_op]
    if isinstance(c, sp.And):
        return all(_truth(x, val) for x in c.args)
    if isinstance(c, sp.Or):
        return any(_truth(x, val) for x in c.args)
    if isinstance(c, sp.Not):
        return not _truth(c.args[0], val)
    if isinstance(c, sp.ITE):
        return _truth(c.args[1] if _truth(c.args[0], val) else c.args[2], val)
    raise TypeError(f"cannot decide {c}")


def _order(expr: sp.Basic) -> list:
    """Unique non-atom nodes, children before parents (iterative: the graphs are deep)."""
    order, seen, stack = [], set(), [(expr, False)]
    while stack:
        e, done = stack.pop()
        if done:
            order.append(e)
            continue
        if e in seen or e.is_Atom:
            continue
        seen.add(e)
        stack.append((e, True))
        kids = e.args if not isinstance(e, sp.Piecewise) else [x for p in e.args for x in p]
        stack.extend((a, False) for a in kids if a not in seen)
    return order


def _forward(expr: sp.Basic, values: Mapping[sp.Symbol, float]) -> dict:
    num: dict = {}

    def val(e):
        if e in num:
            return num[e]
        if e.is_Symbol:
            return float(values[e])
        if e.is_Number or e.is_NumberSymbol:
            return float(e)
        raise KeyError(e)

    for e in _order(expr):
        if isinstance(e, (sp.core.relational.Relational, sp.logic.boolalg.Boolean)) and \
                not isinstance(e, sp.Expr):
            continue
        if isinstance(e, sp.Add):
            v = math.fsum(val(a) for a in e.args)
        elif isinstance(e, sp.Mul):
            v = 1.0
            for a in e.args:
                v *= val(a)
        elif isinstance(e, sp.Pow):
            b, x = val(e.base), val(e.exp)
            try:
                v = b ** x
                v = float("nan") if isinstance(v, complex) else float(v)
            except (ZeroDivisionError, OverflowError):
                v = float("inf")
        elif isinstance(e, sp.Max):
            v = max(val(a) for a in e.args)
        elif isinstance(e, sp.Min):
            v = min(val(a) for a in e.args)
        elif isinstance(e, sp.ceiling):
            v = float(math.ceil(val(e.args[0])))
        elif isinstance(e, sp.floor):
            v = float(math.floor(val(e.args[0])))
        elif isinstance(e, sp.Piecewise):
            v = next((val(x) for x, c in e.args if _truth(c, val)), float("nan"))
        else:  # a function of numbers
            v = _function(e.func, len(e.args), None)(*(val(a) for a in e.args))
        num[e] = v
    return num


def _active(e, num, val) -> list:
    """(argument, d e / d argument) pairs at the point."""
    args = e.args
    if isinstance(e, sp.Add):
        return [(a, 1.0) for a in args]
    if isinstance(e, sp.Mul):
        vs = [val(a) for a in args]
        out = []
        for i, a in enumerate(args):
            p = 1.0
            for j, x in enumerate(vs):
                if j != i:
                    p *= x
            out.append((a, p))
        return out
    if isinstance(e, sp.Pow):
        b, x = val(e.base), val(e.exp)
        out = [(e.base, x * b ** (x - 1) if b != 0 or x >= 1 else 0.0)]
        if not e.exp.is_Number and b > 0:
            out.append((e.exp, num[e] * math.log(b)))
        return out
    if isinstance(e, (sp.Max, sp.Min)):
        pick = max if isinstance(e, sp.Max) else min
        target = pick(val(a) for a in args)
        return [(next(a for a in args if val(a) == target), 1.0)]
    if isinstance(e, (sp.ceiling, sp.floor)):
        return []
    if isinstance(e, sp.Piecewise):
        return next(([(x, 1.0)] for x, c in e.args if _truth(c, val)), [])
    xs = [val(a) for a in args]
    out = []
    for i, a in enumerate(args):
        if a.is_Number:
            continue
        d = _function(e.func, len(args), i)
        if d is not None:
            out.append((a, d(*xs)))
            continue
        f = _function(e.func, len(args), None)  # no symbolic derivative: central difference
        h = 1e-6 * max(abs(xs[i]), 1e-12)
        up, dn = list(xs), list(xs)
        up[i] += h
        dn[i] -= h
        out.append((a, (f(*up) - f(*dn)) / (2 * h)))
    return out


def gradient(expr: sp.Expr, values: Mapping[sp.Symbol, float]) -> dict:
    """d expr / d symbol at the point ``values`` for every free symbol of ``expr``
    (active branches; tile and wave counts held)."""
    expr = sp.sympify(expr)
    num = _forward(expr, values)

    def val(e):
        if e in num:
            return num[e]
        if e.is_Symbol:
            return float(values[e])
        return float(e)

    adj: dict = {expr: 1.0}
    grad: dict = {}
    order = _order(expr)
    if expr.is_Symbol:
        return {expr: 1.0}
    for e in reversed(order):
        a = adj.get(e)
        if not a:
            continue
        if not isinstance(e, sp.Expr):
            continue
        for arg, d in _active(e, num, val):
            if not d:
                continue
            if arg.is_Symbol:
                grad[arg] = grad.get(arg, 0.0) + a * d
            elif not arg.is_Atom:
                adj[arg] = adj.get(arg, 0.0) + a * d
    return {s: grad.get(s, 0.0) for s in symbols_of(expr)}


def elasticities(expr: sp.Expr, values: Mapping[sp.Symbol, float]) -> list[tuple]:
    """[(symbol, d ln y / d ln x)] for every free symbol of ``expr``, largest magnitude first
    (ties by name); a symbol whose value is 0 has elasticity 0."""
    g = gradient(expr, values)
    y = float(_forward(expr, values).get(sp.sympify(expr), float(values.get(expr, 0.0))))
    if y == 0:
        raise ValueError("the quantity is 0 at this point: no elasticity")
    out = [(s, g[s] * float(values[s]) / y) for s in g]
    return sorted(out, key=lambda t: (-abs(t[1]), str(t[0])))


def root_elasticities(eq: sp.Expr, var: sp.Symbol, values: Mapping[sp.Symbol, float],
                      root: float) -> list[tuple]:
    """Elasticities of the root x* of ``eq(x) = 0`` (at ``root``) to every other symbol, by the
    implicit-function theorem on the regime at the root: d ln x* / d ln p =
    -(p df/dp) / (x* df/dx). Largest magnitude first."""
    at = {**values, var: root}
    g = gradient(eq, at)
    fx = g.get(var, 0.0)
    if fx == 0:
        raise ValueError(f"the equation is flat in {var} at its root: no elasticity")
    out = [(s, -g[s] * float(at[s]) / (root * fx)) for s in g if s != var]
    return sorted(out, key=lambda t: (-abs(t[1]), str(t[0])))
