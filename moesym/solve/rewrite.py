"""Rewrites of expressions as small named rule objects applied by one pure function.

>>> import sympy as sp
>>> from moesym.symbolic.symbols import S
>>> apply_rules(sp.ceiling(S.batch / 32) * 32, [RELAX_CEILING])
B
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import sympy as sp

from ..symbolic.expr import transform

__all__ = ["Rule", "RELAX_CEILING", "SMOOTH_MAX", "apply_rules", "smooth_max_rule"]


@dataclass(frozen=True)
class Rule:
    """Replace every node for which ``match`` holds by ``rewrite(node)``."""

    name: str
    match: Callable[[sp.Basic], bool]
    rewrite: Callable[[sp.Basic], sp.Basic]


RELAX_CEILING = Rule("relax_ceiling",
                     lambda e: isinstance(e, (sp.ceiling, sp.floor)),
                     lambda e: e.args[0])
"""ceiling(x) -> x and floor(x) -> x: the continuous relaxation used for solving; the
quantisation step (at most one tile or wave) is reported separately."""


def smooth_max_rule(sharpness: float = 50.0) -> Rule:
    """Max(a, b, ...) -> log-sum-exp with relative sharpness, for gradient-based solvers.

    max(a, b) ~ m + log(sum exp(s (x_i - m) / m)) m / s with m = a + b + ...: smooth, within
    m log(n) / s of the true max.
    """
    def rw(e):
        m = sp.Add(*e.args)
        return m * sp.log(sp.Add(*(sp.exp(sharpness * a / m) for a in e.args))) / sharpness

    return Rule(f"smooth_max({sharpness})", lambda e: isinstance(e, sp.Max), rw)


SMOOTH_MAX = smooth_max_rule()


def apply_rules(expr: sp.Basic, rules: Iterable[Rule]) -> sp.Basic:
    """Apply each rule bottom-up over the whole expression (pure: returns a new expression;
    maxima are rebuilt without SymPy's re-simplification, see :func:`moesym.symbolic.expr.transform`)."""
    out = sp.sympify(expr)
    for r in rules:
        out = transform(out, lambda e, r=r: r.rewrite(e) if r.match(e) else e)
    return out
