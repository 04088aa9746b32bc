"""Special functions with no closed form: SymPy ``Function`` classes plus their NumPy versions.

Each class stays unevaluated in symbolic work, evaluates on numbers through ``evalf`` and
compiles to its NumPy version in :mod:`moesym.numeric.special` (:data:`NUMPY_FUNCTIONS`, called
by class name in generated code).

>>> import sympy as sp
>>> from moesym.symbolic.special import MaxBinomialMean, PaddedRowsMean
>>> half = sp.Rational(1, 2)
>>> round(float(MaxBinomialMean(half, half, 2).evalf()), 6)  # max of 2 Bernoulli(1/2)
0.75
>>> round(float(PaddedRowsMean(1, sp.Rational(1, 2), 32).evalf()), 6)  # 32 rows half the time
16.0
"""

from __future__ import annotations

import sympy as sp

from ..numeric.special import (NUMPY_FUNCTIONS, binomial_cdf, load_cdf, log_interp,
                               max_binomial_mean, padded_rows_mean)

__all__ = [
    "NUMPY_FUNCTIONS",
    "NO_CLOSED_FORM",
    "LogInterp",
    "MaxBinomialMean",
    "PaddedRowsMean",
    "binomial_cdf",
    "load_cdf",
    "max_binomial_mean",
    "padded_rows_mean",
]

def _numeric_args(args, prec):
    vals = [a.evalf(prec) for a in args]
    if not all(v.is_Number for v in vals):
        return None
    return [float(v) for v in vals]


class MaxBinomialMean(sp.Function):
    """MaxBinomialMean(mean, p, n): expected maximum of n iid binomial loads.

    Each load is Binomial(N, p) with N = mean / p (Poisson(mean) when p = 0, the negative
    binomial of variance mean*(1 - p) when p < 0), so
    E[max] = sum_{j>=0} (1 - F(j)**n) with F the binomial CDF.
    """

    nargs = 3

    def _eval_evalf(self, prec):
        vals = _numeric_args(self.args, prec)
        if vals is None:
            return None
        return sp.Float(float(max_binomial_mean(*vals)), prec)


class PaddedRowsMean(sp.Function):
    """PaddedRowsMean(N, p, tile): E[tile * ceil(X / tile)] for X ~ Binomial(N, p)."""

    nargs = 3

    def _eval_evalf(self, prec):
        vals = _numeric_args(self.args, prec)
        if vals is None:
            return None
        return sp.Float(float(padded_rows_mean(*vals)), prec)



class LogInterp(sp.Function):
    """LogInterp(x, log x_0, y_0, log x_1, y_1, ...): a tabulated function of a count x,
    linear in log x between its knots (numeric routing statistics against the tokens routed in
    a step). Stays unevaluated on symbols; no closed form is solved through it."""

    def _eval_evalf(self, prec):
        vals = _numeric_args(self.args, prec)
        if vals is None:
            return None
        return sp.Float(float(log_interp(*vals)), prec)


#: the functions above: tabulated or summed numerically, so an equation in x through any of them
#: has no symbolic root in x (a polynomial in x cannot contain one of them)
NO_CLOSED_FORM = (MaxBinomialMean, PaddedRowsMean, LogInterp)
