"""moesym's SciPy-free special functions against SciPy, an independent implementation.

Compiled models evaluate the normal quantile, erf and log-gamma once per distinct argument with
the standard library, and the expected maximum of binomial-family loads by summing masses along
the window (``moesym.numeric.special``); SciPy's incomplete beta/gamma functions give the CDF
directly, summed here over the whole support.
"""

import math

import numpy as np
import pytest
from scipy import special as sps

from moesym.numeric.special import DISTINCT_FUNCTIONS, erfinv, max_binomial_mean


def test_distinct_functions_match_scipy():
    y = np.linspace(-0.999999, 0.999999, 4001)
    assert np.allclose(erfinv(y), sps.erfinv(y), rtol=1e-11, atol=1e-15)
    x = np.array([[0.5, 1.5, 3.0], [10.0, 100.5, 170.0]])
    assert np.allclose(DISTINCT_FUNCTIONS["loggamma"](x), sps.gammaln(x), rtol=1e-13)
    assert np.allclose(DISTINCT_FUNCTIONS["gamma"](x), sps.gamma(x), rtol=1e-13)
    assert np.allclose(DISTINCT_FUNCTIONS["erf"](y), sps.erf(y), rtol=1e-14)
    assert float(erfinv(1.0)) == math.inf and np.isnan(erfinv(1.5))


def _cdf(j, mean, p):
    """The load's CDF from SciPy: Binomial(mean/p, p) via the incomplete beta (real N),
    Poisson via the incomplete gamma, negative binomial (p < 0) via the incomplete beta."""
    if p > 0:
        n = mean / p
        return np.where(j >= n, 1.0, sps.betainc(np.maximum(n - j, 1e-300), j + 1.0, 1.0 - p))
    if p == 0:
        return sps.gammaincc(j + 1.0, mean)
    return sps.betainc(mean / -p, j + 1.0, 1.0 / (1.0 - p))


def _max_mean_scipy(mean, p, n):
    j = np.arange(0.0, mean + 60 * math.sqrt(mean * (1 + abs(p))) + 400)
    return float(np.sum(1.0 - _cdf(j, mean, p) ** n))


@pytest.mark.parametrize("seed", range(6))
def test_max_binomial_mean_matches_a_whole_support_sum(seed):
    rng = np.random.default_rng(seed)
    for _ in range(25):
        mean = rng.uniform(0.05, 60.0)
        p = [rng.uniform(0.001, 0.999), 0.0, -rng.uniform(0.01, 3.0)][seed % 3]
        n = float(rng.integers(1, 400))
        got = float(max_binomial_mean(mean, p, n))
        assert got == pytest.approx(_max_mean_scipy(mean, p, n), rel=1e-9), (mean, p, n)
