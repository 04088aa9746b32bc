"""The smooth closed form of the regime at a derive answer, with the target in it, and what pins
the exact answer when it sits on a step.

A derive answer is a root of ``lhs(x) = rhs`` over the model ``predict`` evaluates (tile and
wave counts are ceilings; kernels switch between compute- and memory-bound). Its *regime form*:

1. **relax** the model: every ceiling and floor becomes its argument (tile and wave counts
   continuous) and the kernel model's 1 -+ 1e-9 guards inside them are dropped;
2. find the relaxed model's root near the answer (a scan refined by bisection);
3. resolve each maximum, minimum and Piecewise to its branch active there;
4. solve the smooth remainder for x with every parameter and the target (``rhs``, a symbol
   such as tau_tpot) kept symbolic: the parts free of x are named c0, c1, ... (their numbers
   and full expressions are reported) so the printed form reads ``x* = (tau_tpot - c0) / c1``.

The exact answer differs from the smooth one because the full model counts whole tiles, waves
and requests; when the exact answer sits on a step, :func:`pin` names the counts that change
between the answer and the next value.

>>> from moesym.symbolic.symbols import S
>>> t = sp.ceiling(S.batch / 64) * S.hidden / S.hbm_bw + S.batch * S.hidden / S.flops_gemm
>>> f = regime_form(t, S.tpot_target, S.batch, {S.hidden: 64.0, S.hbm_bw: 64.0,
...                 S.flops_gemm: 8.0, S.tpot_target: 20.0}, 100.0, (1.0, 1e4))
>>> f.skeleton, round(f.value, 12), 1280 / 513  # B/64 + 8B = 20 relaxed: B = 20 * 64/513
(c0*tau_tpot, 2.495126705653, 2.4951267056530213)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Mapping

import numpy as np
import sympy as sp

from ..symbolic.compile import evaluate, evaluate_many
from ..symbolic.expr import dependents, nodes, restrict, substitute, symbols_of
from ..symbolic.printing import latex, session, text
from ..symbolic.symbols import INFO, describe
from .model_root import nearest_sign_change
from .regimes import _collapse, branch_at, solve_smooth
from .rewrite import RELAX_CEILING, apply_rules

__all__ = ["RegimeForm", "relax", "tidy", "printed", "regime_form", "pin", "legend"]

_GUARD = 1e-9  # the relative guard moesym.kernels.analytical applies inside its counts


@lru_cache(maxsize=256)
def tidy(expr: sp.Basic, digits: int = 6) -> sp.Basic:
    """``expr`` with every float constant printed short: an exact rational where one with a
    denominator up to 1000 is within 1e-8 (0.124999999875 -> 1/8, 64.000000064 -> 64), else
    ``digits`` significant digits.

    >>> x = sp.Symbol("x")
    >>> tidy(sp.Float(64.000000064) * x + sp.Float(0.124999999875) * x ** 2 + sp.Float(3.14159265))
    x**2/8 + 64*x + 3.14159
    """
    rep = {}
    for f in nodes(sp.sympify(expr), lambda e: isinstance(e, sp.Float)):  # the shared graph
        v = float(f)
        q = Fraction(v).limit_denominator(1000)
        if v == 0 or abs(float(q) - v) <= 1e-8 * abs(v):
            rep[f] = sp.Rational(q.numerator, q.denominator)
        else:
            rep[f] = sp.Float(float(f"{v:.{digits}g}"), digits)
    return substitute(expr, rep) if rep else expr


@lru_cache(maxsize=256)
def printed(expr: sp.Basic) -> str:
    """``str(tidy(expr))``, printed once per expression (an answer's JSON shows its smooth form
    twice: ``smooth.sympy`` and ``closed_form``)."""
    return text(tidy(expr))


def relax(expr: sp.Basic) -> sp.Basic:
    """The continuous relaxation: ceilings and floors dropped, their 1 -+ 1e-9 guards too."""
    out = apply_rules(expr, [RELAX_CEILING])
    guards = {f: sp.Integer(1) for f in nodes(out, lambda e: isinstance(e, sp.Float))
              if abs(float(f) - 1) <= 1.5 * _GUARD and float(f) != 1}
    return substitute(out, guards) if guards else out


def _relaxed_root(eq, var, values, near: float, span, scale=None) -> float:
    """The relaxed equation's root nearest ``near`` in ``span`` (the scan of
    :func:`~moesym.solve.model_root.sign_changes`, bisected to 1e-12 relative; with a
    ``scale``, where the equation passes 1e-9 ``|scale|``)."""
    found = nearest_sign_change(eq, var, values, span[0], span[1], near,
                                None if scale is None else relax(sp.sympify(scale)))
    if found is None:
        raise ValueError(f"the relaxed model has no root in {var} in [{span[0]:g}, {span[1]:g}]")
    a, b = found
    return 0.5 * (a + b)


@dataclass(frozen=True)
class RegimeForm:
    """The smooth closed form of the regime at an answer (module docstring).

    ``expr``: x* in every parameter and the target (None when the regime has none, ``note``
    says why); ``skeleton``: the same with the parts free of the target (or of x, when the
    target is not a symbol) named c0, c1, ...;
    ``placeholders``: {name: (number, full expression)}; ``value``: ``expr`` at the point;
    ``relaxed_root``: the relaxed model's numeric root it equals; ``branches``: the active
    branch labels; ``equation``: the relaxed equation (lhs - rhs)."""

    variable: sp.Symbol
    expr: sp.Expr | None
    skeleton: sp.Basic | None
    placeholders: dict = field(default_factory=dict)
    value: float | None = None
    relaxed_root: float | None = None
    branches: tuple = ()
    note: str = ""
    equation: sp.Expr | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        return {"sympy": printed(self.expr) if self.expr is not None else "",
                "latex": latex(tidy(self.expr)) if self.expr is not None else "",
                "skeleton": str(self.skeleton) if self.skeleton is not None else "",
                "placeholders": {k: {"value": v, "sympy": printed(e)}
                                 for k, (v, e) in self.placeholders.items()},
                "value": self.value, "relaxed_root": self.relaxed_root, "note": self.note}


def regime_form(lhs: sp.Expr, rhs: sp.Expr, var: sp.Symbol, values: Mapping, near: float,
                span: tuple[float, float], scale: sp.Expr | None = None) -> RegimeForm:
    """The regime form of ``lhs = rhs`` solved for ``var`` near ``near`` (module docstring);
    ``values`` binds every other symbol (the target's symbol included). With a ``scale``, the
    relaxed root is where ``lhs - rhs`` passes 1e-9 ``|scale|`` (a difference that is zero over
    a range, such as exposed communication: a root of its rounding noise there would pick the
    regime where it is zero, 0 = 0, with no root in ``var``)."""
    lhs, rhs = relax(sp.sympify(lhs)), relax(sp.sympify(rhs))
    eq = lhs - rhs
    vals = {k: float(v) for k, v in restrict(values, eq, var).items()}
    try:
        r = _relaxed_root(eq, var, vals, near, span, scale)
    except ValueError as exc:
        return RegimeForm(var, None, None, note=str(exc), equation=eq)
    smooth, _, labels = branch_at(eq, var, {**vals, var: r}, lazy=True)
    # the target side stays whole when it is free of x; the rest is collapsed to c0, c1, ...
    rhs_dep = var in dependents(rhs, var)
    skel, back = _collapse(smooth if rhs_dep else smooth + rhs, var)
    if not rhs_dep:
        skel = skel - rhs
    names = {d: sp.Symbol(f"c{i}", real=True) for i, d in enumerate(back)}
    skel = substitute(skel, names)
    ph = {names[d]: (float(evaluate(x, restrict(vals, x), {})), x) for d, x in back.items()}
    num = {**vals, **{c: v for c, (v, _) in ph.items()}}
    try:
        root = solve_smooth(skel, var, num, r, general=False)
    except (ValueError, TypeError, NotImplementedError, RuntimeError) as exc:
        return RegimeForm(var, None, None, relaxed_root=r, branches=labels, equation=eq,
                          note=f"no closed form of this regime: {_why_not(skel, var) or exc}")
    full = substitute(root, {c: x for c, (_, x) in ph.items()})
    value = float(evaluate(full, restrict(vals, full), {}))
    if not np.isfinite(value) or abs(value - r) > 1e-6 * abs(r):
        return RegimeForm(var, None, None, relaxed_root=r, branches=labels, equation=eq,
                          note=f"the regime's closed form evaluates to {value:.6g} in floating "
                               f"point, not to the relaxed model's root {r:.6g}: no usable "
                               "closed form here")
    if isinstance(rhs, sp.Symbol):  # the target in view: everything free of it named c0, ...
        root, back = _collapse(full, rhs)
        names = {d: sp.Symbol(f"c{i}", real=True) for i, d in enumerate(back)}
        root = substitute(root, names)
        ph = {names[d]: (float(evaluate(x, restrict(vals, x), {})), x) for d, x in back.items()}
    used = symbols_of(root)
    return RegimeForm(var, full, tidy(root),
                      {str(c): (v_, e) for c, (v_, e) in ph.items() if c in used},
                      value, r, labels,
                      "the relaxed model's root, solved in its regime"
                      if abs(value - r) <= 1e-9 * abs(r) else
                      f"the regime's root {value:.6g} differs from the relaxed model's {r:.6g}",
                      eq)


def _why_not(e: sp.Expr, var: sp.Symbol) -> str:
    """Which forms in ``var`` the regime mixes (each alone has a closed-form root)."""
    pows = nodes(e, lambda x: isinstance(x, sp.Pow) and var in dependents(x, var))
    forms = []
    if any(var in dependents(p.exp, var) for p in pows):
        forms.append(f"an exponential in {var} (lazy expert loading, 1 - (1 - k/E)^{var})")
    if any(p.base == var and p.exp.is_Rational and not p.exp.is_Integer for p in pows):
        forms.append(f"a fractional power of {var} (the load-imbalance term's sqrt({var}))")
    funcs = {type(x).__name__ for x in nodes(e, lambda x: isinstance(x, sp.Function)
                                             and not isinstance(x, (sp.Max, sp.Min))
                                             and var in dependents(x, var))}
    if funcs:
        forms.append(f"{', '.join(sorted(funcs))} of {var}")
    if len(forms) > 1:
        return "it mixes " + " and ".join(forms) + ", so its root has no closed form"
    return ""


def pin(eq: sp.Expr, var: sp.Symbol, values: Mapping, a: float, b: float,
        where: Mapping[str, sp.Expr] | None = None) -> list[str]:
    """The tile and wave counts of ``eq`` that change between ``var = a`` and ``var = b``
    (the steps that can pin an integer answer): one line each, naming the breakdown key whose
    expression holds the count (``where``: {key: expression}) and its argument's values."""
    counts = nodes(eq, lambda e: isinstance(e, (sp.ceiling, sp.floor)))
    dep = dependents(eq, var)
    counts = [n for n in counts if n in dep]
    vals = {k: v for k, v in values.items() if k != var}
    owners = {}
    for key, e in (where or {}).items():
        for n in nodes(e, lambda e: isinstance(e, (sp.ceiling, sp.floor))):
            owners.setdefault(n, key)
    exprs = [*counts, *(n.args[0] for n in counts)]
    at_a, at_b = evaluate_many(exprs, vals, var, a), evaluate_many(exprs, vals, var, b)
    out = []
    with session():  # the counts' arguments share subexpressions: each printed once
        for i, n in enumerate(counts):
            va, vb = at_a[i], at_b[i]
            if va == vb:
                continue
            ga, gb = at_a[len(counts) + i], at_b[len(counts) + i]
            arg = text(tidy(relax(n.args[0])))
            if len(arg) > 90:
                arg = arg[:87] + "..."
            out.append(f"{owners.get(n, 'a tile or wave count')}: {type(n).__name__}({arg}) "
                       f"{va:.0f} -> {vb:.0f} (argument {ga:.4g} -> {gb:.4g})")
    return out


def legend(exprs) -> list[str]:
    """One line per moesym symbol in ``exprs``: ``name [unit]: meaning``."""
    syms = set()
    for e in exprs:
        if e is not None:
            syms |= {s for s in symbols_of(sp.sympify(e)) if s in INFO}
    return [describe(s) for s in sorted(syms, key=str)]
