"""Regime-enumeration solver for expressions with Max, Min, Piecewise and ceilings.

SymPy's ``solve`` cannot handle Max, Min and ceiling. We relax ceilings, rewrite each Max/Min/
Piecewise that involves the unknown into its branches (each with the condition under which it is
the active one, earlier branches taking ties), solve every smooth branch, keep each root with its
branch condition, and verify roots by substitution.

>>> import sympy as sp
>>> x, a, b = sp.symbols("x a b", positive=True)
>>> roots = solve_regimes(sp.Max(2 * x, a) - b, x)
>>> [(r.value, r.condition) for r in roots]
[(b/2, b > a)]
>>> numeric_roots(sp.Max(2 * x, 3) - 5, x, {})
[2.5]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import sympy as sp
from scipy.optimize import brentq

from .rewrite import RELAX_CEILING, apply_rules

__all__ = ["Root", "branches", "solve_regimes", "numeric_roots", "solve_at_root"]


@dataclass(frozen=True)
class Root:
    """A root ``value`` of the equation, valid where ``condition`` holds."""

    value: sp.Expr
    condition: sp.Basic
    regime: tuple[str, ...] = ()


def _nonsmooth(expr: sp.Basic, var: sp.Symbol) -> list[sp.Basic]:
    found = [a for a in sp.preorder_traversal(expr)
             if isinstance(a, (sp.Max, sp.Min, sp.Piecewise)) and a.has(var)]
    return found


def _choices(node: sp.Basic) -> list[tuple[sp.Basic, sp.Basic, str]]:
    """(replacement, condition, label) for each branch of a Max, Min or Piecewise node."""
    out = []
    if isinstance(node, sp.Piecewise):
        earlier = sp.true
        for i, (e, c) in enumerate(node.args):
            out.append((e, sp.And(c, earlier), f"piece{i}"))
            earlier = sp.And(earlier, sp.Not(c))
        return out
    args = list(node.args)
    is_max = isinstance(node, sp.Max)
    for i, a in enumerate(args):
        conds = []
        for j, b in enumerate(args):
            if j == i:
                continue
            if is_max:
                conds.append(a > b if j < i else a >= b)
            else:
                conds.append(a < b if j < i else a <= b)
        out.append((a, sp.And(*conds), f"{'max' if is_max else 'min'}{i}"))
    return out


def branches(expr: sp.Basic, var: sp.Symbol, limit: int = 4096):
    """Yield (smooth expression, condition, labels) for every regime of ``expr`` in ``var``."""
    stack = [(sp.sympify(expr), sp.true, ())]
    count = 0
    while stack:
        e, cond, labels = stack.pop()
        nodes = _nonsmooth(e, var)
        if not nodes:
            count += 1
            if count > limit:
                raise ValueError(f"more than {limit} regimes; use solve_at_root instead")
            yield e, cond, labels
            continue
        node = nodes[-1]  # innermost first (preorder lists outer nodes first)
        for rep, c, lab in reversed(_choices(node)):
            stack.append((e.xreplace({node: rep}), sp.And(cond, c), labels + (lab,)))


def solve_regimes(equation: sp.Expr, var: sp.Symbol, limit: int = 4096) -> list[Root]:
    """All roots of ``equation = 0`` in ``var``, each with the condition of its regime."""
    eq = apply_rules(equation, [RELAX_CEILING])
    roots: list[Root] = []
    for smooth, cond, labels in branches(eq, var, limit):
        try:
            sols = sp.solve(smooth, var, dict=False)
        except NotImplementedError:
            continue
        for s in sols:
            if s.is_real is False:
                continue
            roots.append(Root(s, cond.xreplace({var: s}) if cond is not sp.true else cond, labels))
    return roots


def _holds(cond: sp.Basic, values: Mapping) -> bool:
    c = cond.xreplace({k: sp.Float(v) for k, v in values.items()})
    if c in (sp.true, True):
        return True
    if c in (sp.false, False):
        return False
    try:
        return bool(c.simplify())
    except TypeError:
        return False


def numeric_roots(equation: sp.Expr, var: sp.Symbol, values: Mapping, tol: float = 1e-9) -> list[float]:
    """Numeric values of the regime roots whose conditions hold, verified by substitution."""
    eq = apply_rules(equation, [RELAX_CEILING])
    out = []
    for r in solve_regimes(equation, var):
        try:
            v = complex(r.value.xreplace({k: sp.Float(x) for k, x in values.items()}).evalf())
        except (TypeError, ValueError):
            continue
        if abs(v.imag) > 1e-9 * max(1.0, abs(v.real)):
            continue
        v = v.real
        vals = dict(values)
        vals[var] = v
        if not _holds(r.condition, vals):
            continue
        resid = float(eq.xreplace({k: sp.Float(x) for k, x in vals.items()}).evalf())
        if abs(resid) <= tol * max(1.0, abs(v)):
            if not any(np.isclose(v, w, rtol=1e-9) for w in out):
                out.append(v)
    return sorted(out)


def branch_at(expr: sp.Expr, var: sp.Symbol, env: Mapping) -> tuple[sp.Expr, sp.Basic, tuple]:
    """The smooth branch of ``expr`` active at the point ``env`` (numbers for every symbol,
    ``var`` included), with the condition under which it holds and the branch labels.

    At each Max / Min / Piecewise node the first branch whose condition holds at ``env`` is
    substituted (repeated for nodes nested inside chosen branches).
    """
    env = {k: sp.Float(v) for k, v in env.items()}
    choice, conds, labels = {}, [], []
    for node in _nonsmooth(expr, var):
        for rep, c, lab in _choices(node):
            cn = c.xreplace(env)
            if cn in (sp.true, True) or (cn not in (sp.false, False) and bool(cn.simplify())):
                choice[node] = rep
                conds.append(c)
                labels.append(lab)
                break
        else:  # pragma: no cover - one branch always holds
            raise RuntimeError("no active branch at the given point")
    e = expr
    for _ in range(64):
        new = e.xreplace(choice)
        if new == e:
            break
        e = new
    if _nonsmooth(e, var):  # pragma: no cover - nodes created by substitution
        raise RuntimeError("regime substitution left non-smooth nodes")
    return e, sp.And(*conds), tuple(labels)


def _linear_exponential_roots(e: sp.Expr, var: sp.Symbol) -> list[sp.Expr]:
    """Roots of a + b x + c q^(kappa x + mu) = 0 (one exponential term, e.g. lazy expert
    loading's 1 - (1 - k/E)^(B g)) through Lambert W, both real branches; [] for other forms.

    With lam = kappa ln q and c' = c q^mu: x = -a/b - W(lam c'/b e^(-lam a / b)) / lam.

    >>> x = sp.Symbol("x")
    >>> r = _linear_exponential_roots(2 - x + 3 * sp.Rational(1, 2) ** x, x)
    >>> root = brentq(lambda v: 2 - v + 3 * 0.5 ** v, 0, 10)  # the one real root
    >>> any(abs(complex(v.evalf()) - root) < 1e-9 for v in r)
    True
    """
    pows = {p for p in e.atoms(sp.Pow) if p.exp.has(var) and not p.base.has(var)}
    if len(pows) != 1:
        return []
    (P,) = pows
    kappa = sp.diff(P.exp, var)
    if kappa.has(var) or kappa == 0:
        return []
    z = sp.Dummy("z")
    ez = sp.expand(e.xreplace({P: z}))
    if ez.has(P) or not ez.has(z):
        return []
    try:
        poly = sp.Poly(ez, var, z)
    except sp.PolynomialError:
        return []
    if poly.total_degree() > 1:
        return []
    b, c, a = poly.coeff_monomial(var), poly.coeff_monomial(z), poly.coeff_monomial(1)
    if b == 0:
        return []
    lam = kappa * sp.log(P.base)
    cp = c * P.base ** P.exp.subs(var, 0)
    arg = lam * cp / b * sp.exp(-lam * a / b)
    return [-a / b - sp.LambertW(arg, k) / lam for k in (0, -1)]


def solve_smooth(e: sp.Expr, var: sp.Symbol, num: Mapping, x0: float) -> sp.Expr:
    """The root of the smooth expression ``e`` = 0 nearest to ``x0`` (numbers ``num`` pick it).

    Rational in ``var`` with a numerator of degree <= 2: the root comes straight from the
    polynomial's coefficients (fast on large expressions); otherwise ``sympy.solve``.
    """
    numer = sp.numer(sp.together(e))
    try:
        poly = sp.Poly(sp.expand(numer), var)
    except sp.PolynomialError:
        poly = None
    if poly is not None and 1 <= poly.degree() <= 2:
        c = poly.all_coeffs()
        if poly.degree() == 1:
            sols = [-c[1] / c[0]]
        else:
            a, b, cc = c
            disc = sp.sqrt(b ** 2 - 4 * a * cc)
            sols = [(-b + disc) / (2 * a), (-b - disc) / (2 * a)]
    else:
        sols = _linear_exponential_roots(e, var) or [s for s in sp.solve(e, var)
                                                      if s.is_real is not False]
    fnum = {k: sp.Float(v) for k, v in num.items()}
    return min(sols, key=lambda s: abs(complex(s.xreplace(fnum).evalf()) - x0))


def solve_at_root(equation: sp.Expr, var: sp.Symbol, values: Mapping, lo: float, hi: float):
    """Closed form in the regime that holds at the numeric root in [lo, hi].

    For expressions with too many Max/Min nodes to enumerate: find the root numerically (brentq
    on the relaxed, compiled expression), pick at each non-smooth node the branch active there,
    solve that smooth branch symbolically and return (Root, numeric root).
    """
    from ..compile import evaluate

    eq = apply_rules(equation, [RELAX_CEILING])
    num = {k: sp.Float(v) for k, v in values.items() if k != var}
    x0 = brentq(lambda x: float(evaluate(eq, num, {var: x})), lo, hi, xtol=1e-12, rtol=1e-14)
    e, cond, labels = branch_at(eq, var, {**num, var: x0})
    best = solve_smooth(e, var, num, x0)
    return Root(best, cond.xreplace({var: best}), labels), x0
