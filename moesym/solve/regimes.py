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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import sympy as sp

from ..numeric.compiled import function_from_source
from ..symbolic.compile import evaluate, numpy_source
from ..symbolic.expr import dependents, nodes, power, restrict, substitute, substituter, symbols_of
from ..symbolic.special import NO_CLOSED_FORM
from .rewrite import RELAX_CEILING, apply_rules

__all__ = ["Root", "branch_at", "branches", "solve_regimes", "solve_smooth"]


@dataclass(frozen=True)
class Root:
    """A root ``value`` of the equation, valid where ``condition`` holds."""

    value: sp.Expr
    condition: sp.Basic
    regime: tuple[str, ...] = ()


def _nonsmooth(expr: sp.Basic, var: sp.Symbol) -> list[sp.Basic]:
    """Max / Min / Piecewise nodes involving ``var``, outer ones first (one pass over the
    shared graph)."""
    dep = dependents(expr, var)
    return nodes(expr, lambda a: isinstance(a, (sp.Max, sp.Min, sp.Piecewise)) and a in dep)


def _choices(node: sp.Basic, only: int | None = None):
    """(replacement, condition, label) for each branch of a Max, Min or Piecewise node; with
    ``only``, that branch's alone (its condition built, the others' not)."""
    out = []
    if isinstance(node, sp.Piecewise):
        earlier = sp.true
        for i, (e, c) in enumerate(node.args):
            if only is None or i == only:
                out.append((e, sp.And(c, earlier), f"piece{i}"))
            earlier = sp.And(earlier, sp.Not(c))
        return out if only is None else out[0]
    args = list(node.args)
    is_max = isinstance(node, sp.Max)
    for i, a in enumerate(args):
        if only is not None and i != only:
            continue
        conds = []
        for j, b in enumerate(args):
            if j == i:
                continue
            rel = (sp.StrictGreaterThan if j < i else sp.GreaterThan) if is_max else \
                (sp.StrictLessThan if j < i else sp.LessThan)
            conds.append(_relation(rel, a, b))
        out.append((a, sp.And(*conds), f"{'max' if is_max else 'min'}{i}"))
    return out if only is None else out[0]


def _branch(node: sp.Basic, i: int) -> tuple[sp.Basic, str]:
    """(replacement, label) of branch ``i`` of a Max, Min or Piecewise node (:func:`_choices`'
    without its condition)."""
    if isinstance(node, sp.Piecewise):
        return node.args[i][0], f"piece{i}"
    return node.args[i], f"{'max' if isinstance(node, sp.Max) else 'min'}{i}"


def _relation(rel, a: sp.Expr, b: sp.Expr) -> sp.Basic:
    """``rel(a, b)``, evaluated by SymPy (True or False where the assumptions settle it) when a
    side is a number, else left as the relation: between two expressions SymPy asks the
    assumptions of their difference, minutes on the shared graph of a large step model, to
    settle relations it almost never can."""
    if a.is_Number or b.is_Number:
        return rel(a, b)
    d = a - b
    if d.is_Number:
        return rel(d, 0)
    return rel(a, b, evaluate=False)


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
                raise ValueError(f"more than {limit} regimes; use moesym.solve.model_root instead")
            yield e, cond, labels
            continue
        node = nodes[-1]  # innermost first (preorder lists outer nodes first)
        for rep, c, lab in reversed(_choices(node)):
            stack.append((substitute(e, {node: rep}), sp.And(cond, c), labels + (lab,)))


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
            roots.append(Root(s, substitute(cond, {var: s}) if cond is not sp.true else cond, labels))
    return roots


def _holds(c: sp.Basic) -> bool:
    """Whether a condition evaluated at a point holds (a relation left symbolic is simplified)."""
    return c in (sp.true, True) or (c not in (sp.false, False) and bool(c.simplify()))


def _active(node: sp.Basic, value, numbers: Mapping) -> int:
    """Index of the branch of a Max, Min or Piecewise node active at the point: the first whose
    condition holds (:func:`_choices`' order and ties: an earlier argument of a Max takes a
    tie). ``numbers``: each Max / Min argument's value at the point; ``value``: an expression's
    value there (a Piecewise's conditions)."""
    if isinstance(node, sp.Piecewise):
        for i, (_, c) in enumerate(node.args):
            if _holds(value(c)):
                return i
        raise RuntimeError("no active branch at the given point")  # pragma: no cover
    vals = [numbers[a] for a in node.args]
    better = (lambda a, b: a > b) if isinstance(node, sp.Max) else (lambda a, b: a < b)
    for i, a in enumerate(vals):
        if all(better(a, b) if j < i else not better(b, a) for j, b in enumerate(vals) if j != i):
            return i
    raise RuntimeError("no active branch at the given point")  # pragma: no cover


def _argument_values(nodes_: list, env: Mapping) -> dict:
    """Every Max / Min argument of ``nodes_`` at the point ``env``, in one compiled NumPy
    function over their shared graph (each subexpression computed once)."""

    args = list(dict.fromkeys(a for n in nodes_ if isinstance(n, (sp.Max, sp.Min)) for a in n.args))
    if not args:
        return {}
    syms = sorted(set().union(*(symbols_of(a) for a in args)), key=str)
    missing = [s for s in syms if s not in env]
    if missing:
        raise ValueError("no value at the point for: " + ", ".join(map(str, missing)))
    fn = function_from_source(numpy_source(args, syms))
    out = fn(*(float(env[s]) for s in syms))
    return {a: float(v) for a, v in zip(args, out)}


def branch_at(expr: sp.Expr, var: sp.Symbol, env: Mapping, lazy: bool = False
              ) -> tuple[sp.Expr, sp.Basic, tuple]:
    """The smooth branch of ``expr`` active at the point ``env`` (numbers for every symbol,
    ``var`` included), with the condition under which it holds and the branch labels.

    At each Max / Min / Piecewise node the first branch whose condition holds at ``env`` is
    substituted (repeated for nodes nested inside chosen branches, and for nodes a substitution
    creates, such as SymPy's 1 / Piecewise -> Piecewise of reciprocals). The branch is picked on
    the numbers (each node's arguments evaluated once, shared subexpressions once); only the chosen
    branch's condition is built symbolically. ``lazy=True`` returns, in the condition's place, a
    function that builds it: SymPy's relations on large branches are most of the time here, and
    a caller may not need the condition.
    """
    value = substituter({k: sp.Float(v) for k, v in env.items()})  # memoised across nodes
    picks, labels = [], []
    e = expr
    for _ in range(8):  # a substitution can create nodes (1 / Min(a, Piecewise) -> Piecewise)
        found = _nonsmooth(e, var)
        if not found:
            break
        numbers = _argument_values(found, env)
        choice = {}
        for node in found:
            i = _active(node, value, numbers)
            rep, lab = _branch(node, i)
            picks.append((node, i))
            choice[node] = rep
            labels.append(lab)
        for _ in range(64):
            new = substitute(e, choice)
            if new == e:
                break
            e = new
    if _nonsmooth(e, var):  # pragma: no cover - nodes keep appearing
        raise RuntimeError("regime substitution left non-smooth nodes")

    def condition() -> sp.Basic:
        conds = [_choices(node, only=i)[1] for node, i in picks]
        # And(*conds) would sort its arguments by tree size: exponential on the shared graphs
        # of a large model, so the conjunction is assembled as is
        return sp.true if not conds else conds[0] if len(conds) == 1 else sp.And._from_args(
            tuple(dict.fromkeys(conds)))

    return e, condition if lazy else condition(), tuple(labels)


def _linear_exponential_roots(e: sp.Expr, var: sp.Symbol) -> list[sp.Expr]:
    """Roots of a + b x + c q^(kappa x + mu) = 0 (one exponential term, e.g. lazy expert
    loading's 1 - (1 - k/E)^(B g)) through Lambert W, both real branches; [] for other forms.

    With lam = kappa ln q and c' = c q^mu: x = -a/b - W(lam c'/b e^(-lam a / b)) / lam.

    >>> x = sp.Symbol("x")
    >>> r = _linear_exponential_roots(2 - x + 3 * sp.Rational(1, 2) ** x, x)
    >>> from scipy.optimize import brentq
    >>> root = brentq(lambda v: 2 - v + 3 * 0.5 ** v, 0, 10)  # the one real root
    >>> any(abs(complex(v.evalf()) - root) < 1e-9 for v in r)
    True
    """
    pows = {p for p in nodes(e, lambda x: isinstance(x, sp.Pow))
            if p.exp.has(var) and not p.base.has(var)}
    if len(pows) != 1:
        return []
    (P,) = pows
    kappa = sp.diff(P.exp, var)
    if kappa.has(var) or kappa == 0:
        return []
    z = sp.Dummy("z")
    # the numerator over a common denominator: a factor (1 - z) / (1 - z) cancels there
    ez = sp.expand(sp.numer(sp.together(substitute(e, {P: z}))))
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


def _root_denominator(e: sp.Expr, var: sp.Symbol) -> int:
    """Least common denominator q of the rational exponents of ``var`` in ``e`` (1 if none):
    with var = u^q the expression has only integer powers of u."""
    q = 1
    for p in nodes(e, lambda x: isinstance(x, sp.Pow)):
        if p.base == var and p.exp.is_Rational and not p.exp.is_Integer:
            q = int(sp.ilcm(q, p.exp.q))
    return q


def _polynomial_roots(e: sp.Expr, var: sp.Symbol) -> list[sp.Expr] | None:
    """Roots of ``e`` = 0 when its numerator is a polynomial of degree 1 or 2 in ``var``
    (straight from the coefficients: fast on large expressions); None otherwise."""
    numer = sp.numer(sp.together(e))
    try:
        poly = sp.Poly(sp.expand(numer), var)
    except sp.PolynomialError:
        return None
    if not 1 <= poly.degree() <= 2:
        return None
    c = poly.all_coeffs()
    if poly.degree() == 1:
        return [-c[1] / c[0]]
    a, b, cc = c
    disc = power(power(b, 2) - 4 * a * cc, sp.S.Half)
    return [(-b + disc) / (2 * a), (-b - disc) / (2 * a)]


def _collapse(e: sp.Expr, var: sp.Symbol) -> tuple[sp.Expr, dict]:
    """``e`` with every largest subexpression free of ``var`` replaced by a placeholder symbol
    (the var-free terms of a sum, or factors of a product, as one placeholder), and the map back.

    The regime of a large model is a sum of hundreds of terms of which few involve the unknown;
    solving the small skeleton and substituting the placeholders back is what keeps closed forms
    fast (``together`` / ``expand`` on the full expression grow with its tree, not its graph).
    """
    dep = dependents(e, var)
    depends = dep.__contains__

    back: dict = {}
    holder: dict = {}

    def place(x):
        if x.is_Number:
            return x
        if x not in holder:
            d = sp.Dummy(f"c{len(holder)}", real=True)
            holder[x] = d
            back[d] = x
        return holder[x]

    memo: dict = {}

    def walk(x):
        if x in memo:
            return memo[x]
        if not depends(x):
            out = place(x)
        elif isinstance(x, (sp.Add, sp.Mul)):
            free = [a for a in x.args if not depends(a)]
            rest = [walk(a) for a in x.args if depends(a)]
            if free:
                rest.append(place(x.func(*free)))
            out = x.func(*rest)
        else:
            out = x.func(*[walk(a) for a in x.args]) if x.args else x
        memo[x] = out
        return out

    return walk(e), back


_NO_ROOT = ("no closed-form root in {var} (not a polynomial of degree <= 2, a square-root form "
            "or one exponential)")


def _through_table(e: sp.Expr, var: sp.Symbol) -> bool:
    """Whether ``e`` holds a tabulated or numerically summed function of ``var``
    (:data:`moesym.symbolic.special.NO_CLOSED_FORM`): then none of :func:`solve_smooth`'s forms
    has a root (SymPy's ``Poly`` in ``var`` refuses such a node), and the expansions that would
    find that out are skipped."""
    dep = dependents(e, var)
    return bool(nodes(e, lambda x: isinstance(x, NO_CLOSED_FORM) and x in dep))


def solve_smooth(e: sp.Expr, var: sp.Symbol, num: Mapping, x0: float,
                 general: bool = True) -> sp.Expr:
    """The root of the smooth expression ``e`` = 0 nearest to ``x0`` (numbers ``num`` pick it).

    Rational in ``var`` with a numerator of degree <= 2: the root comes straight from the
    polynomial's coefficients (fast on large expressions). Fractional powers of ``var`` (the
    1 / sqrt(B) of a load-imbalance term) are cleared first by var = u^q with u > 0, so such an
    expression is solved as a polynomial in u. Otherwise: one exponential term through Lambert W,
    else ``sympy.solve`` (only with ``general``; without it such a form raises ValueError).

    >>> x = sp.Symbol("x", positive=True)
    >>> float(solve_smooth(x - 3 * sp.sqrt(x) - 4, x, {}, 10.0))  # sqrt(x) = 4
    16.0
    """
    if e not in dependents(e, var):
        raise ValueError(f"the expression does not depend on {var}: no root")
    full_num = num
    e, back = _collapse(e, var)
    if not general and _through_table(e, var):  # what the forms below would conclude, at once
        raise ValueError(_NO_ROOT.format(var=var))
    if back:  # numbers for the placeholders (to pick the root nearest x0)
        num = {**num, **{d: float(evaluate(x, restrict(full_num, x), {}))
                         for d, x in back.items()}}
    q = _root_denominator(e, var)
    sols = None
    if q > 1:
        u = sp.Dummy("u", positive=True)
        roots_u = _polynomial_roots(substitute(e, {var: u ** q}), u)
        if roots_u is not None:
            sols = [r ** q for r in roots_u]
    if sols is None:
        sols = _polynomial_roots(e, var)
    if sols is None:
        sols = _linear_exponential_roots(e, var)
    if not sols and general:
        sols = [s for s in sp.solve(e, var) if s.is_real is not False]
    if not sols:
        raise ValueError(_NO_ROOT.format(var=var))
    fnum = {k: sp.Float(v) for k, v in num.items()}
    best = min(sols, key=lambda s: abs(complex(substitute(s, fnum).evalf()) - x0))
    return substitute(best, back) if back else best
