"""Routing statistics of Mixture-of-Experts layers as closed forms (SymPy in, SymPy out).

Every function takes SymPy symbols or plain numbers for each parameter and returns a SymPy
expression (numbers in, exact or ``Float`` numbers out). Quantities with no closed form (the
exact expected maximum of binomial loads, exact tile padding) are the SymPy functions of
:mod:`moesym.symbolic.special`, which compile to NumPy through ``special.NUMPY_FUNCTIONS``. This is the
one home of these formulas: the step model, ``moesym comm`` and ``moesym routing`` all use them.

Routing model ("uniform"): each of the T tokens routed in one step across the EP group picks k of
the E experts uniformly without replacement, independently of the other tokens. Experts are spread
evenly over the EP ranks (E / ep consecutive experts per rank).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import sympy as sp

from ..errors import MoesymError
from ..specs.model import check_experts
from ..symbolic.special import MaxBinomialMean, PaddedRowsMean
from ..symbolic.expr import smax

#: mean load per bin (tokens) below which the exact binomial maximum is used
EXACT_REGIME_MAX_LOAD = 8
#: grouped-GEMM step of the seed measurement: 235 us with <= 32 tokens per expert ...
SEED_TILE_BASE_S = 235e-6
#: ... plus about 130 us for each further (up to) 32 tokens of any one expert
SEED_TILE_STEP_S = 130e-6


def _s(x) -> sp.Expr:
    return sp.sympify(x, strict=True)


# ----------------------------------------------------------------------------- distinct experts
def distinct_experts(E, k, T) -> sp.Expr:
    """Expected experts with >= 1 token: E*(1 - (1 - k/E)**T).

    Exact for uniform routing: each token picks a given expert with probability k/E,
    independently of the other tokens.

    >>> distinct_experts(256, 8, 1), distinct_experts(4, 2, 2)
    (8, 3)
    """
    E, k, T = _s(E), _s(k), _s(T)
    return E * (1 - (1 - k / E) ** T)


def touched_share(E, k, T) -> sp.Expr:
    """Probability that a given expert receives >= 1 of T tokens: 1 - (1 - k/E)**T.

    >>> touched_share(4, 2, 2)
    3/4
    """
    E, k, T = _s(E), _s(k), _s(T)
    return 1 - (1 - k / E) ** T


def touched_local_experts(E, k, T, ep) -> sp.Expr:
    """Expected experts of one EP rank with >= 1 token (lazy loading): (E/ep)*(1 - (1 - k/E)**T).

    >>> round(float(touched_local_experts(256, 8, 128, 128)), 3)
    1.966
    """
    return _s(E) / _s(ep) * touched_share(E, k, T)


def busiest_touched_local_experts(E, k, T, ep, local=None) -> sp.Expr:
    """Expected touched experts (>= 1 token) on the busiest of ep EP ranks, uniform routing.

    Each of a rank's L = E/ep local experts (``local`` overrides L, e.g. with redundant
    experts) is touched with q = 1 - (1 - k/E)**T; a rank's count is taken as Binomial(L, q)
    (the slight negative dependence of a token's k distinct picks ignored) and the busiest rank
    reads the expected largest of ep such counts, MaxBinomialMean(L q, q, ep) <= L. At a
    small batch it reads more expert weights than the mean rank (L q) and sets the step;
    at ep = 1 it is the mean.

    >>> round(float(busiest_touched_local_experts(256, 8, 8, 8)), 2)
    10.64
    >>> round(float(touched_local_experts(256, 8, 8, 8)), 2)
    7.18
    """
    E, k, T, ep = _s(E), _s(k), _s(T), _s(ep)
    L = E / ep if local is None else _s(local)
    q = touched_share(E, k, T)
    if ep == 1:
        return L * q
    return sp.Piecewise((L * q, sp.Eq(ep, 1)), (MaxBinomialMean(L * q, q, ep), True))


def distinct_experts_from_inclusion(pi, T) -> sp.Expr:
    """Expected experts with >= 1 token from per-token inclusion probabilities: sum_i (1-(1-pi_i)**T).

    >>> distinct_experts_from_inclusion([0.5, 0.5], 2)
    1.50000000000000
    """
    T = _s(T)
    return sp.Add(*[1 - (1 - sp.Float(float(p))) ** T for p in np.ravel(pi)])


# ------------------------------------------------------------------------ distinct destinations
def no_hit_probability(E, m, k) -> sp.Expr:
    """P(a top-k draw without replacement from E misses a set of m experts) = C(E-m, k)/C(E, k).

    Written as prod_{j<k} (E-m-j)/(E-j) when k is a number (exact, overflow-free under NumPy),
    else through log-gamma, 0 where E - m < k (the Max keeps the unused branch off the gamma
    poles when numbers are substituted).

    >>> no_hit_probability(8, 4, 2)
    3/14
    """
    E, m, k = _s(E), _s(m), _s(k)
    if k.is_Integer:
        return sp.Mul(*[(E - m - j) / (E - j) for j in range(int(k))])
    lg = sp.loggamma
    return sp.Piecewise((0, E - m < k),
                        (sp.exp(lg(E - m + 1) - lg(smax(E - m - k + 1, 1)) + lg(E - k + 1)
                                - lg(E + 1)), True))


class GroupRouting(NamedTuple):
    """Group-limited routing as numbers (the model's): ``experts`` E, ``topk`` k, ``groups`` G,
    ``topk_groups`` kG. Its statistics are evaluated at these numbers even where the step model
    keeps E and k as symbols."""

    experts: int
    topk: int
    groups: int
    topk_groups: int


def _hypergeom_pmf(N: int, K: int, n: int, x: int) -> sp.Rational:
    """P(X = x), X ~ Hypergeometric(population N, K marked, n drawn)."""
    return sp.binomial(K, x) * sp.binomial(N - K, n - x) / sp.binomial(N, n)


def _group_limited(E, k, groups, topk_groups) -> tuple[int, int, int, int, int]:
    """(E, k, G, kG, E/G) as integers: group-limited routing needs numbers for these."""
    try:
        E, k, G, kG = (int(_s(x)) for x in (E, k, groups, topk_groups))
    except TypeError:
        raise MoesymError("group-limited routing needs numbers for the experts, top-k, groups "
                          "and top-k groups") from None
    check_experts(E, k, G, kG)
    return E, k, G, kG, E // G


def _leader_counts(E: int, k: int, G: int, kG: int) -> list[tuple[int, sp.Rational]]:
    """Distribution of one selected group's experts under the leader model: 1 + X,
    X ~ Hypergeometric(M - kG, E/G - 1, k - kG), M = kG E / G candidates."""
    mg = E // G
    N = kG * mg - kG
    return [(1 + x, _hypergeom_pmf(N, mg - 1, k - kG, x)) for x in range(k - kG + 1)
            if x <= mg - 1]


def distinct_destinations(E, k, n_dest, groups=None, topk_groups=None) -> sp.Expr:
    """Expected distinct ranks (or nodes) one token's top-k experts land on, experts spread
    evenly over n_dest destinations in order (E/n_dest consecutive experts each).

    Uniform routing: n (1 - C(E - E/n, k)/C(E, k)) (exact).

    Group-limited routing (``groups`` G, ``topk_groups`` kG; DeepSeek-V3: a group scores the sum
    of its top-2 experts, the top kG groups are kept, the top-k experts are taken from them).
    Leader model: a selected group's best expert is among the token's top-k (it is why the group
    was selected), and the other k - kG experts fall uniformly on the remaining kG E/G - kG
    candidates; within a group the chosen experts are a uniform subset of its E/G.
      n <= G (G/n whole groups per destination): n (1 - C(G - G/n, kG)/C(G, kG));
      n >  G (n/G destinations per group): kG sum_c P(c) (n/G) (1 - C(E/G - E/n, c)/C(E/G, c)),
             c = 1 + Hypergeometric(kG E/G - kG, E/G - 1, k - kG) experts in a selected group.
    A Monte Carlo of DeepSeek-V3's selection (sigmoid scores of normal logits) agrees within 1%
    at EP 8..256 (tests/test_routing.py); choosing the k experts uniformly among the candidates
    instead is 7% low at EP 16.

    >>> distinct_destinations(256, 8, 1)
    1
    >>> round(float(distinct_destinations(256, 8, 32)), 3)
    7.267
    >>> distinct_destinations(256, 8, 8, 8, 4)
    4
    >>> round(float(distinct_destinations(256, 8, 16, 8, 4)), 3)
    5.715
    """
    n = _s(n_dest)
    if groups is None:
        E, k = _s(E), _s(k)
        return n * (1 - no_hit_probability(E, E / n, k))
    E, k, G, kG, mg = _group_limited(E, k, groups, topk_groups)
    few = n * (1 - no_hit_probability(G, G / n, kG))
    many = kG * n / G * sp.Add(*[p * (1 - no_hit_probability(mg, sp.Integer(E) / n, c))
                                 for c, p in _leader_counts(E, k, G, kG)])
    if n.is_number:
        return few if n <= G else many
    return sp.Piecewise((few, n <= G), (many, True))


# ----------------------------------------------------------------------------- load imbalance
def rank_load_variance_per_token(E, k, n_bins, groups=None, topk_groups=None) -> sp.Expr:
    """Variance of one token's assignment count on one of n_bins equal bins (ranks or experts).

    Uniform: hypergeometric, (k/n)*(1 - 1/n)*(E - k)/(E - 1). Group-limited (numbers for
    n_bins, groups, topk_groups): the leader model of :func:`distinct_destinations`, by the law
    of total variance over the token's selected groups (the mean stays k/n).
    """
    E, k, n = _s(E), _s(k), _s(n_bins)
    if groups is None:
        return k / n * (1 - 1 / n) * (E - k) / (E - 1)
    n = int(n)
    E, k, G, kG, mg = _group_limited(E, k, groups, topk_groups)
    if n % G == 0:  # a bin (m experts) inside one group, selected with probability kG/G;
        m = E // n  # given c experts in the group, the bin's count is Hypergeom(E/G, m, c)
        second = sp.Add(*[p * (c * sp.Rational(m, mg) * (1 - sp.Rational(m, mg)) * (mg - c)
                               / sp.Integer(max(mg - 1, 1)) + (c * sp.Rational(m, mg)) ** 2)
                          for c, p in _leader_counts(E, k, G, kG)])
        return sp.Rational(kG, G) * second - sp.Rational(k, n) ** 2
    if G % n == 0:  # a bin holds g whole groups; J ~ Hypergeom(G, g, kG) of them selected, each
        g = G // n  # with its leader, and the k - kG others Hypergeom(M - kG, J (E/G - 1), .)
        N, d = kG * mg - kG, k - kG
        total = sp.Integer(0)
        for j in range(min(g, kG) + 1):
            pj = _hypergeom_pmf(G, g, kG, j)
            q = sp.Rational(j * (mg - 1), N) if N else sp.Integer(0)
            var = d * q * (1 - q) * (N - d) / (N - 1) if N > 1 else sp.Integer(0)
            total += pj * (var + (j + d * q) ** 2)
        return total - sp.Rational(k, n) ** 2
    check_experts(int(E), int(k), G, kG, n)  # its error: neither of EP and the groups divides
    raise AssertionError("check_experts passed a shape it refuses")  # pragma: no cover


def _blom_z(n: sp.Expr) -> sp.Expr:
    """Expected largest of n standard normals, Blom's plotting position Phi^-1((n-3/8)/(n+1/4))."""
    q = (n - sp.Rational(3, 8)) / (n + sp.Rational(1, 4))
    return sp.sqrt(2) * sp.erfinv(2 * q - 1)


def max_load_ratio(mean, var, n_bins) -> sp.Expr:
    """Expected busiest of n_bins bins over the mean, given the mean and dependence-adjusted variance.

    ``var`` is the variance of one bin's load inflated by n/(n-1) (bins sharing a fixed total:
    for Gaussians, E[max] = mean + sd*sqrt(n/(n-1))*z_n exactly). Moment-matched binomial
    p' = 1 - var/mean, skew g = (1 - 2p')/sd.
    mean < 8: max(MaxBinomialMean(mean, p', n), ceil(mean))/mean (exact sum over iid
    moment-matched binomials, floored by the pigeonhole bound of bins sharing a fixed total);
    else 1 + (sd/mean)*(z_n + g*(z_n**2 - 1)/6), z_n = sqrt(2)*erfinv(2*(n-3/8)/(n+1/4) - 1).
    """
    mean, var, n = _s(mean), _s(var), _s(n_bins)
    sd = sp.sqrt(var)
    p = 1 - var / mean
    z = _blom_z(n)
    normal = 1 + sd / mean * z + (1 - 2 * p) / mean * (z ** 2 - 1) / 6
    # the bins share a fixed total, which iid loads ignore: the busiest holds at least
    # ceil(mean) (pigeonhole; one token with top-1 puts exactly 1 on the busiest of E experts)
    exact = sp.Max(MaxBinomialMean(mean, p, n), sp.ceiling(mean), evaluate=False) / mean
    return sp.Piecewise((exact, mean < EXACT_REGIME_MAX_LOAD), (normal, True))


def max_rank_load_ratio(E, k, ep, T, groups=None, topk_groups=None, var_scale=1) -> sp.Expr:
    """Expected busiest EP rank's token-expert assignments over the mean (uniform routing).

    mean = T*k/ep; dependence-adjusted variance var = T*k/ep*(E-k)/(E-1) (hypergeometric per
    token times ep/(ep-1)); then :func:`max_load_ratio` with n = ep, capped at min(ep, E/k).
    Exactly 1 for ep = 1 (a number). Group-limited (numbers for ep, groups, topk_groups): the
    per-token variance of :func:`rank_load_variance_per_token` instead; or, with symbols (the
    step model, :func:`moesym.terms.routing.imbalance_expr`), the uniform variance times
    ``var_scale``, the group-limited over uniform ratio rho_G bound as a number.

    >>> max_rank_load_ratio(256, 8, 1, 100)
    1
    >>> round(float(max_rank_load_ratio(256, 8, 8, 4096)), 3)
    1.022
    """
    E, k, ep, T = _s(E), _s(k), _s(ep), _s(T)
    if ep == 1:
        return sp.Integer(1)
    mean = T * k / ep
    if groups is None:
        var = mean * (E - k) / (E - 1) * _s(var_scale)
    else:
        var = T * rank_load_variance_per_token(E, k, ep, groups, topk_groups) * ep / (ep - 1)
    # a token adds at most min(k, E / ep) to a rank: the ratio cannot pass min(ep, E / k) (the
    # normal approximation does at a token or two)
    ratio = max_load_ratio(mean, var, ep)
    if not isinstance(ratio, sp.Piecewise):  # a number: SymPy's Min picks the smallest
        return sp.Min(ratio, ep, E / k)
    # a Piecewise of the tokens: SymPy's Min would spend a quarter of a step model's build
    # failing to order it against the caps; it keeps all three (the smaller cap where both are
    # numbers), in SymPy's order
    caps = [c for c in (ep, E / k) if not c.is_Number]
    caps += [min(c for c in (ep, E / k) if c.is_Number)] if len(caps) < 2 else []
    return sp.Min(ratio, *caps, evaluate=False)


def max_expert_load_ratio(E, k, T) -> sp.Expr:
    """Expected busiest expert's tokens over the mean T*k/E (uniform; group-limited is the same).

    Per expert Binomial(T, k/E); dependence-adjusted variance T*k/E*(E-k)/(E-1); n = E.

    >>> round(float(max_expert_load_ratio(8, 1, 1)), 6)
    8.0
    """
    E, k, T = _s(E), _s(k), _s(T)
    return max_rank_load_ratio(E, k, E, T)


# ------------------------------------------------------------------------- tile quantization
def padded_rows_per_rank(E, k, T, ep, tile) -> sp.Expr:
    """Expected grouped-GEMM rows on one rank, each expert padded to the M tile (exact).

    (E/ep)*E[tile*ceil(X/tile)], X ~ Binomial(T, k/E) the exact marginal tokens of one expert
    (each token picks a given expert with probability k/E).

    >>> padded_rows_per_rank(256, 8, 1, 32, 32).evalf(6)
    8.00000
    """
    E, k, T, ep, tile = _s(E), _s(k), _s(T), _s(ep), _s(tile)
    return E / ep * PaddedRowsMean(T, k / E, tile)


def padded_rows_per_rank_smooth(E, k, T, ep, tile) -> sp.Expr:
    """Relaxed padded rows for solving: (E/ep)*Max(tile*P, n + P*(tile - 1)/2).

    n = T*k/E real rows per expert, P = 1 - (1 - k/E)**T the chance it has any. The first branch
    is exact when no expert exceeds one tile, the second when counts spread over many tiles
    (padding uniform on 0..tile-1); continuous and piecewise smooth.

    >>> padded_rows_per_rank_smooth(256, 8, 1, 32, 32)
    8
    """
    E, k, T, ep, tile = _s(E), _s(k), _s(T), _s(ep), _s(tile)
    n = T * k / E
    P = 1 - (1 - k / E) ** T
    return E / ep * sp.Max(tile * P, n + P * (tile - 1) / 2)


def grouped_gemm_time_s(tokens_per_expert, base_s=SEED_TILE_BASE_S, step_s=SEED_TILE_STEP_S,
                        tile=32) -> sp.Expr:
    """Tenstorrent-measured grouped-GEMM step time for given token counts per expert.

    base_s + step_s*sum_{e: n_e > 0} (ceil(n_e/tile) - 1): every extra tile of any expert costs
    one step (Tenstorrent's DeepSeek-V3 mesh study: 17,17 -> 235 us; 17,38 -> 365; 38,38 -> 495;
    38,70 -> 625).

    >>> float(grouped_gemm_time_s([17, 38]) * 1e6)
    365.0
    """
    base_s, step_s, tile = _s(base_s), _s(step_s), _s(tile)
    extra = sp.Add(*[sp.ceiling(_s(n) / tile) - 1 for n in tokens_per_expert if _s(n) != 0])
    return base_s + step_s * extra


def expected_grouped_gemm_time_s(E, k, T, ep, tile=32, base_s=SEED_TILE_BASE_S,
                                 step_s=SEED_TILE_STEP_S) -> sp.Expr:
    """Expected Tenstorrent-measured step time on one rank:
    base_s + step_s*(padded_rows/tile - touched experts)."""
    tiles = padded_rows_per_rank(E, k, T, ep, tile) / _s(tile)
    return _s(base_s) + _s(step_s) * (tiles - touched_local_experts(E, k, T, ep))


# -------------------------------------------------------------------- activation layouts
def batched_rows(E, ep, buffer_tokens) -> sp.Expr:
    """Rows a batched layout allocates and computes on one rank: (E/ep)*buffer_tokens.

    >>> batched_rows(256, 32, 128)
    1024
    """
    return _s(E) / _s(ep) * _s(buffer_tokens)


def contiguous_rows(E, k, T, ep, tile) -> sp.Expr:
    """Rows a contiguous layout computes on one rank: real rows plus tile padding (exact mean)."""
    return padded_rows_per_rank(E, k, T, ep, tile)


def activation_bytes(rows, hidden, act_bytes) -> sp.Expr:
    """Bytes of an activation buffer: rows*hidden*act_bytes."""
    return _s(rows) * _s(hidden) * _s(act_bytes)


# ------------------------------------------------------------------------- expert caching
def cache_hit_rate(E, C) -> sp.Expr:
    """Share of token-expert assignments served by C cached experts, uniform routing: C/E."""
    return _s(C) / _s(E)


def cache_miss_transfer_time_s(E, k, T, C, expert_bytes, bw_host) -> sp.Expr:
    """Host-to-GPU time misses add per MoE layer per step, uniform routing.

    (E - C)*(1 - (1 - k/E)**T)*expert_bytes/bw_host: each cold expert touched this step is
    streamed once.
    """
    E, k, T, C = _s(E), _s(k), _s(T), _s(C)
    return (E - C) * (1 - (1 - k / E) ** T) * _s(expert_bytes) / _s(bw_host)

