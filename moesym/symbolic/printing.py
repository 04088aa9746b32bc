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

from contextlib import contextmanager

import sympy as sp
from sympy.printing.latex import LatexPrinter
from sympy.printing.str import StrPrinter

__all__ = ["text", "latex", "session"]


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


_SESSIONS: list = []  # the (str, LaTeX) printers of the innermost open session()


@contextmanager
def session():
    """Inside it, :func:`text` and :func:`latex` share one printer each, so a subexpression
    common to several expressions (an answer's closed form, its regime form and the pieces of
    each) is printed once. The text is the same: a remembered subexpression's text does not
    depend on where it stands (parentheses are added around it by the printer of the node
    above)."""
    _SESSIONS.append((_Str({"order": None}), _Latex({})))
    try:
        yield
    finally:
        _SESSIONS.pop()


def text(expr) -> str:
    """``str(expr)`` (SymPy's ``sstr(expr, order=None)``)."""
    return (_SESSIONS[-1][0] if _SESSIONS else _Str({"order": None})).doprint(expr)


def latex(expr) -> str:
    """``sympy.latex(expr)``."""
    return (_SESSIONS[-1][1] if _SESSIONS else _Latex({})).doprint(expr)
