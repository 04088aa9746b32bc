"""``str`` and LaTeX of large expressions, each shared subexpression printed once.

SymPy's printers walk the expression tree: a subexpression shared by many terms (a step model's
per-layer times, which every relation of a regime's condition repeats) is printed, its terms
ordered and its parentheses decided again on every path to it. These printers remember the
text of each compound subexpression for the one expression they print; the result is the
string ``str(expr)`` / ``sympy.latex(expr)`` return, character for character. Atoms are
never remembered (a Float prints with or without trailing zeros depending on whether it is
the whole expression), nor calls with printer keywords (a LaTeX function raised to a power).

>>> import sympy as sp
>>> x, y = sp.symbols("x y")
>>> e = sp.Max(x + y / 3, 2) * (x + y / 3) + sp.Float(0.5)
>>> text(e) == str(e), latex(e) == sp.latex(e)
(True, True)
"""

from __future__ import annotations

import sympy as sp
from sympy.printing.latex import LatexPrinter
from sympy.printing.str import StrPrinter

__all__ = ["text", "latex"]


class _Remembering:
    """A printer mixin: each compound subexpression's text computed once per printer."""

    def _print(self, expr, **kwargs) -> str:
        if kwargs or not isinstance(expr, sp.Basic) or expr.is_Atom:
            return super()._print(expr, **kwargs)
        memo = self.__dict__.setdefault("_texts", {})
        out = memo.get(expr)
        if out is None:
            out = memo[expr] = super()._print(expr)
        return out


class _Str(_Remembering, StrPrinter):
    pass


class _Latex(_Remembering, LatexPrinter):
    pass


def text(expr) -> str:
    """``str(expr)`` (SymPy's ``sstr(expr, order=None)``)."""
    return _Str({"order": None}).doprint(expr)


def latex(expr) -> str:
    """``sympy.latex(expr)``."""
    return _Latex({}).doprint(expr)
