"""moesym.symbolic.printing prints the text SymPy's own printers do (str, sympy.latex), on
expressions with shared subexpressions, Floats at several precisions and relations."""

from __future__ import annotations

import sympy as sp

from moesym.symbolic.printing import latex, text
from moesym.symbolic.symbols import S


def _cases():
    x, y = sp.symbols("x y", positive=True)
    shared = sp.Max(x / 7 + sp.Float(0.25) * y, sp.ceiling(x / 64) * sp.Float(1.5e-6))
    yield shared * (shared + 1) / (shared - y) + sp.Float(0.5, 6)
    yield sp.Float(64.0)  # the whole expression a Float: printed with its trailing zeros
    yield sp.Float(2.5, 6) * x + sp.Float(2.5, 15) * y  # equal values, other precisions
    yield sp.And(shared > y, sp.Le(shared ** 2, x + 3), sp.Lt(sp.sqrt(shared), 2 * y))
    yield sp.Piecewise((shared, x < 3), (sp.log(shared) ** 2, True))
    yield S.batch * S.hidden / S.hbm_bw + sp.Min(S.batch, 4) ** sp.Rational(1, 2)


def test_text_and_latex_are_sympys_own():
    for e in _cases():
        assert text(e) == str(e)
        assert latex(e) == sp.latex(e)
