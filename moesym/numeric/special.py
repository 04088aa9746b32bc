"""NumPy versions of moesym's special functions (no SymPy): expected maxima and padded sizes of
binomial-family loads. :mod:`moesym.symbolic.special` wraps them as SymPy functions; compiled models call
them directly (:data:`NUMPY_FUNCTIONS`, by the SymPy class name).

Binomial distributions here take a real number of trials ``N`` (the CDF is the regularized
incomplete beta function, ``P(X <= j) = I_{1-p}(N - j, j + 1)``), so moment-matched binomials with
non-integer ``N`` are allowed.

>>> round(float(max_binomial_mean(0.5, 0.5, 2)), 6)  # max of 2 Bernoulli(1/2)
0.75
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

__all__ = ["DISTINCT_FUNCTIONS", "NUMPY_FUNCTIONS", "binomial_cdf", "erfinv", "load_cdf",
           "log_interp", "max_binomial_mean", "on_distinct", "padded_rows_mean"]

_SIGMAS = 10.0  # CDF window half-width in standard deviations; mass outside is < 1e-22
_MAX_WIDTH = 4096  # widest exact summation window; wider (huge loads) uses the normal form
_EXACT_MAX_MEAN = 64.0  # exact summation only below this mean load


def _sps():
    """scipy.special, imported on first use: it takes ~0.12 s to load, and compiled models do
    not need it (:data:`DISTINCT_FUNCTIONS`, the window recurrence of :func:`max_binomial_mean`)."""
    from scipy import special

    return special


def binomial_cdf(j, trials, p):
    """P(X <= j) for X ~ Binomial(trials, p), real ``trials`` allowed (incomplete beta).

    ``p = 0`` gives 1 for j >= 0; ``p = 1`` gives a point mass at ``trials``.
    """
    j, trials, p = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (j, trials, p)))
    out = np.zeros(j.shape)
    top = j >= trials
    mid = (j >= 0) & ~top
    a = np.where(mid, trials - j, 1.0)
    b = np.where(mid, j + 1.0, 1.0)
    x = np.where(mid, 1.0 - p, 0.5)
    with np.errstate(invalid="ignore"):
        out[mid] = _sps().betainc(a, b, x)[mid]
    out[top] = 1.0
    return out


def _poisson_cdf(j, mean):
    j, mean = np.broadcast_arrays(np.asarray(j, float), np.asarray(mean, float))
    out = np.zeros(j.shape)
    ok = j >= 0
    out[ok] = _sps().gammaincc(np.floor(j[ok]) + 1.0, mean[ok])
    return out


def _negbin_cdf(j, mean, p):
    """CDF of the negative binomial with the given mean and variance mean*(1 - p), p < 0."""
    j, mean, p = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (j, mean, p)))
    out = np.zeros(j.shape)
    ok = (j >= 0) & (p < 0)
    r = mean[ok] / -p[ok]  # size parameter
    out[ok] = _sps().betainc(r, np.floor(j[ok]) + 1.0, 1.0 / (1.0 - p[ok]))
    return out


def load_cdf(j, mean, p):
    """CDF of the count with mean ``mean`` and variance mean*(1 - p) (Katz family).

    0 < p <= 1: Binomial(mean/p, p); p = 0: Poisson(mean); p < 0: negative binomial
    (overdispersed, variance above the mean). Each element is computed by its own family only.
    """
    j, mean, p = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (j, mean, p)))
    out = np.empty(j.shape)
    poisson = np.abs(p) < 1e-12
    negative = p <= -1e-12
    binomial = ~poisson & ~negative
    if binomial.any():
        pb = p[binomial]
        out[binomial] = binomial_cdf(j[binomial], mean[binomial] / pb, np.minimum(pb, 1.0))
    if poisson.any():
        out[poisson] = _poisson_cdf(j[poisson], mean[poisson])
    if negative.any():
        out[negative] = _negbin_cdf(j[negative], mean[negative], p[negative])
    return out


def on_distinct(scalar_fn):
    """A NumPy function applying the Python float function ``scalar_fn`` once per distinct value
    of its argument. moesym's special-function arguments are functions of a few counts (ranks,
    experts, micro-batches), so this is exact (the standard library's libm) and costs no SciPy
    import (~0.12 s, more than a cached prediction)."""

    def fn(x):
        x = np.asarray(x, dtype=float)
        levels, where = np.unique(x, return_inverse=True)
        vals = np.array([scalar_fn(v) for v in levels.tolist()], dtype=float)
        return vals[where.reshape(x.shape)] if x.ndim else vals[0]

    return fn


def _erfinv_scalar(v: float) -> float:
    if -1.0 < v < 1.0:  # the normal quantile (Wichura's AS241, ~1e-16) at (1 + v) / 2
        return NormalDist().inv_cdf((v + 1.0) / 2.0) / math.sqrt(2.0)
    return math.copysign(math.inf, v) if abs(v) == 1.0 else math.nan


def _guard(f):
    def g(v: float) -> float:
        try:
            return f(v)
        except (ValueError, OverflowError):  # poles and overflow: what SciPy returns there
            return math.inf if not math.isnan(v) else math.nan

    return g


erfinv = on_distinct(_erfinv_scalar)
erfinv.__doc__ = """Inverse error function on distinct values (see :func:`on_distinct`).

    >>> round(float(erfinv(0.5)), 12)
    0.476936276204
    """
#: SymPy function name -> NumPy version without SciPy, used by compiled models
DISTINCT_FUNCTIONS = {"erf": on_distinct(math.erf), "erfc": on_distinct(math.erfc),
                      "erfinv": erfinv, "gamma": on_distinct(_guard(math.gamma)),
                      "loggamma": on_distinct(_guard(math.lgamma))}


def _normal_max(mean, sd, n):
    """Normal extreme-value form (Blom plotting position), used beyond the exact window."""
    return mean + sd * np.sqrt(2.0) * erfinv(2.0 * (n - 0.375) / (n + 0.25) - 1.0)


_LGAMMA = np.frompyfunc(math.lgamma, 1, 1)


def _lgamma(x):
    return _LGAMMA(np.asarray(x, dtype=float)).astype(float)


def _window_cdf(lo, width, mean, p):
    """CDF of the load (the :func:`load_cdf` family) at lo, lo + 1, ..., lo + width - 1 per row
    (rows: 1-D ``lo``, ``mean``, ``p``), from the probability mass at ``lo`` and the ratio of
    consecutive masses, in logs; the mass below ``lo`` (under 1e-20 where callers put ``lo``) is
    left out. Binomial with real N: the mass Gamma(N+1)/(Gamma(j+1)Gamma(N-j+1)) p^j (1-p)^(N-j)
    telescopes the incomplete-beta CDF exactly for j < N, and the CDF is 1 from N on."""
    j = lo[:, None] + np.arange(width, dtype=float)[None, :]
    m, pp = mean[:, None], p[:, None]
    binomial, poisson, negative = pp > 1e-12, np.abs(pp) <= 1e-12, pp < -1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        trials = np.where(binomial, m / np.where(binomial, pp, 1.0), 1.0)
        size = np.where(negative, m / -np.where(negative, pp, -1.0), 1.0)
        pi = 1.0 / (1.0 - np.where(negative, pp, 0.0))  # negative binomial success probability
        # log mass at lo
        lo2 = lo[:, None]
        log_bin = (_lgamma(trials + 1.0) - _lgamma(lo2 + 1.0)
                   - _lgamma(np.maximum(trials - lo2 + 1.0, 1e-300))
                   + lo2 * np.log(np.where(binomial, pp, 0.5))
                   + (trials - lo2) * np.log1p(-np.where(binomial, np.minimum(pp, 1 - 1e-16), 0.5)))
        log_poi = -m + lo2 * np.log(np.maximum(m, 1e-300)) - _lgamma(lo2 + 1.0)
        log_neg = (_lgamma(size + lo2) - _lgamma(lo2 + 1.0) - _lgamma(size)
                   + size * np.log(pi) + lo2 * np.log1p(-pi + (pi == 1.0)))
        first = np.where(binomial, log_bin, np.where(poisson, log_poi, log_neg))
        # log ratio of the mass at j + 1 to the mass at j
        jj = j[:, :-1]
        r_bin = np.log(np.maximum(trials - jj, 0.0)) - np.log(jj + 1.0) + np.log(
            np.where(binomial, pp, 0.5)) - np.log1p(-np.where(binomial, np.minimum(pp, 1 - 1e-16), 0.5))
        r_poi = np.log(np.maximum(m, 1e-300)) - np.log(jj + 1.0)
        r_neg = np.log(size + jj) - np.log(jj + 1.0) + np.log1p(-pi + (pi == 1.0))
        ratio = np.where(binomial, r_bin, np.where(poisson, r_poi, r_neg))
        log_mass = np.concatenate([first, first + np.cumsum(ratio, axis=1)], axis=1)
        cdf = np.minimum(np.cumsum(np.exp(log_mass), axis=1), 1.0)
    return np.where(binomial & (j >= trials), 1.0, np.where(j < 0, 0.0, cdf))


def max_binomial_mean(mean, p, n):
    """E[max of n iid Binomial(N = mean/p, p)] = sum_{j>=0} (1 - F(j)**n), NumPy, broadcasting.

    ``p -> 0`` is the Poisson(mean) limit; ``p = 1`` a point mass at ``mean``; ``p < 0`` the
    negative binomial with variance mean*(1 - p) (overdispersed loads). Loads wider than
    ``_MAX_WIDTH`` values fall back to the normal extreme-value form (error O(1/sd) there).
    """
    mean, p, n = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (mean, p, n)))
    shape = mean.shape
    mean, p, n = mean.ravel(), np.minimum(p.ravel(), 1.0), np.maximum(n.ravel(), 1.0)
    sd = np.sqrt(np.maximum(mean * (1.0 - p), 0.0))
    spread = _SIGMAS + np.sqrt(2.0 * np.log(n + 1.0))
    lo = np.maximum(np.floor(mean - _SIGMAS * sd) - 2.0, 0.0)
    hi = np.ceil(mean + spread * sd) + 2.0
    # overdispersed (negative binomial) tails decay like q**j, q = -p/(1 - p): 40 e-folds more
    q = np.clip(-p / np.maximum(1.0 - p, 1e-300), 1e-300, 1.0 - 1e-12)
    hi += np.where(p < 0, np.ceil(40.0 / -np.log(q)), 0.0)
    top = np.where(p > 0, mean / np.maximum(p, 1e-300), np.inf)  # the support ends at N
    hi = np.minimum(hi, np.ceil(top) + 1.0)
    width = np.maximum(hi - lo, 0.0)
    # exact sum where it is cheap and matters (small loads); the normal form elsewhere, where
    # its error is O(1/sd) of the spread (max_load_ratio calls it below a mean of 8)
    exact = (width <= _MAX_WIDTH) & (mean < _EXACT_MAX_MEAN)
    out = _normal_max(mean, sd, n)
    if exact.any():
        # the window's terms as one (elements x window) array, in slices of about 4 M values
        idx = np.flatnonzero(exact)
        ws = int(width[exact].max()) + 1
        step = max(1, (1 << 22) // ws)
        for s in range(0, len(idx), step):
            sel = idx[s:s + step]
            terms = 1.0 - _window_cdf(lo[sel], ws, mean[sel], p[sel]) ** n[sel, None]
            # terms j < lo are 1 to double precision; each element sums its own window in
            # order (a running sum read at its width), so its value never depends on which
            # other elements share the batch (chunked evaluation stays bit for bit)
            own = width[sel].astype(int)
            out[sel] = lo[sel] + np.cumsum(terms, axis=1)[np.arange(len(sel)), own]
    point = p >= 1.0 - 1e-15
    out[point] = mean[point]
    return out.reshape(shape)


def padded_rows_mean(trials, p, tile):
    """E[tile * ceil(X / tile)] for X ~ Binomial(trials, p) = tile * sum_{i>=0} P(X > i*tile)."""
    trials, p, tile = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (trials, p, tile)))
    shape = trials.shape
    trials, p, tile = trials.ravel(), np.clip(p.ravel(), 0.0, 1.0), tile.ravel()
    mean = trials * p
    sd = np.sqrt(mean * (1.0 - p))
    lo_rows = np.maximum(mean - _SIGMAS * sd - 2.0, 0.0)
    hi_rows = np.minimum(mean + _SIGMAS * sd + 2.0, trials)
    i_lo = np.floor(lo_rows / tile)
    i_hi = np.ceil(hi_rows / tile)
    width = i_hi - i_lo
    out = np.empty_like(mean)
    exact = width <= _MAX_WIDTH
    # beyond the window: mean plus half a tile of padding (error < tile / 2 out of >> tile rows)
    out[~exact] = mean[~exact] + (tile[~exact] - 1.0) / 2.0
    if exact.any():
        t, pp, tl, lo_e, own = trials[exact], p[exact], tile[exact], i_lo[exact], width[exact]
        total = lo_e.copy()
        for w in range(int(own.max()) + 1):
            i = lo_e + w
            # each element sums its own window only: its value never depends on which other
            # elements share the call (a long scan is evaluated in slices)
            total += np.where(w <= own, 1.0 - binomial_cdf(i * tl, t, pp), 0.0)
        out[exact] = tl * total
    return out.reshape(shape)


def log_interp(x, *knots):
    """Piecewise-linear interpolation in log x through ``knots`` = (log x_0, y_0, log x_1, y_1,
    ...), increasing x; constant beyond the ends (a tabulated function of a token count).

    >>> float(log_interp(2.0, 0.0, 1.0, math.log(4.0), 3.0))
    2.0
    """
    k = np.asarray(knots, dtype=float)
    with np.errstate(divide="ignore"):
        return np.interp(np.log(np.asarray(x, dtype=float)), k[0::2], k[1::2])


NUMPY_FUNCTIONS = {"MaxBinomialMean": max_binomial_mean, "PaddedRowsMean": padded_rows_mean,
                   "LogInterp": log_interp}
