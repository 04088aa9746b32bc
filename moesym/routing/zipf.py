"""Routing under skewed (Zipf) popularity and with redundant experts: numeric estimators.

Zipf-skewed popularity needs a numeric root (the successive-sampling rate), so these functions
take numbers and return numbers or NumPy arrays (the closed forms of uniform routing are in
:mod:`moesym.routing.stats`).
"""

from __future__ import annotations

import functools
import heapq
import math

import numpy as np
import sympy as sp

from ..errors import MoesymError
from ..numeric import cache
from ..symbolic.special import load_cdf
from .stats import _s, distinct_destinations, distinct_experts_from_inclusion


def zipf_popularity(E: int, s: float) -> np.ndarray:
    """Routing popularity p_i proportional to i**-s, i = 1..E (sums to 1)."""
    w = np.arange(1, int(E) + 1, dtype=float) ** -float(s)
    return w / w.sum()


def is_uniform(s) -> bool:
    """``s`` (a Zipf exponent, or measured frequencies as a tuple) describes uniform routing."""
    return not isinstance(s, tuple) and float(s) == 0.0


def measured_inclusion(E: int, k: int, shares: tuple) -> np.ndarray:
    """Per-token inclusion probabilities from measured shares of the token-expert assignments
    (``--routing freq:FILE``): a token picks k distinct experts, so expert i is in a token's
    top-k with probability k x share_i, exactly (no sampling model needed).

    >>> measured_inclusion(4, 2, (0.4, 0.3, 0.2, 0.1))
    array([0.8, 0.6, 0.4, 0.2])
    """
    p = np.asarray(shares, dtype=float)
    if p.size != int(E):
        raise MoesymError(f"--routing freq: {p.size} experts in the file, the layer routes over {E}")
    pi = int(k) * p / p.sum()
    if pi.max() > 1 + 1e-9:
        i = int(np.argmax(pi))
        raise MoesymError(f"--routing freq: expert {i} takes {p[i] / p.sum():.3f} of the assignments, "
                          f"more than 1/k = {1 / k:.3f}: not a top-{k} routing count")
    return np.minimum(pi, 1.0)


def zipf_inclusion_probabilities(E: int, k: int, s) -> np.ndarray:
    """Per-token inclusion probabilities pi_i of a top-k draw under Zipf(s) popularity.

    Successive-sampling (Rosen / Hajek) approximation: pi_i = 1 - exp(-L*p_i) with L solving
    sum_i (1 - exp(-L*p_i)) = k (scipy brentq). Exact for s = 0 (k/E) and k = 1 (p_i); sums to k.
    A tuple ``s`` holds measured shares instead (:func:`measured_inclusion`).

    >>> zipf_inclusion_probabilities(4, 2, 0.0)
    array([0.5, 0.5, 0.5, 0.5])
    """
    if isinstance(s, tuple):
        return measured_inclusion(E, k, s)
    E, k = int(E), int(k)
    p = zipf_popularity(E, s)
    if k >= E:
        return np.ones(E)
    if k == 1:  # one draw: inclusion is the popularity itself
        return p
    if float(s) == 0.0:
        return np.full(E, k / E)

    def excess(log_rate: float) -> float:
        return float(np.sum(-np.expm1(-math.exp(log_rate) * p)) - k)

    hi = 1.0
    while excess(hi) < 0:
        hi *= 2.0
        if hi > 700:  # exp(700) ~ the float limit: so skewed that the k most popular always win
            return (np.arange(E) < k).astype(float)
    from scipy.optimize import brentq  # imported here: scipy.optimize takes ~0.5 s to load

    log_rate = brentq(excess, math.log(k) - 1.0, hi, xtol=1e-14, rtol=1e-14)
    return -np.expm1(-math.exp(log_rate) * p)


def _placement(E: int, ep: int, placement: str) -> np.ndarray:
    """Rank of each expert (popularity order): 'contiguous' blocks or 'round_robin' dealing."""
    idx = np.arange(E)
    if placement == "contiguous":
        return idx // (E // ep)
    if placement == "round_robin":
        return idx % ep
    raise MoesymError(f"placement {placement!r}: use 'contiguous' or 'round_robin'")


_EXACT_MAX_MEAN = 2048.0  # busiest mean load below which E[max] is the exact discrete sum


def _max_of_independent(means: np.ndarray, variances: np.ndarray) -> float:
    """E[max] of independent bins, each moment-matched to (mean, variance) (binomial, Poisson or
    negative binomial: :func:`moesym.symbolic.special.load_cdf`).

    E[max] = sum_{j>=0} (1 - prod_r F_r(j)); bins with zero mean contribute F = 1. Above a
    busiest mean of 2048 the bins are normal and the sum an integral on a grid of a tenth of the
    smallest standard deviation (its error, from the loads' skew, is under 1e-3 of the mean there and falls as 1/sd).
    """
    means = np.asarray(means, float)
    var = np.asarray(variances, float)
    sd = np.sqrt(var)
    hi = float(np.max(means + 12.0 * sd + 4.0))
    lo = max(float(np.floor(np.max(means) - 12.0 * np.max(sd) - 4.0)), 0.0)
    if np.max(means) < _EXACT_MAX_MEAN:
        p = np.where(means > 0, 1.0 - var / np.where(means > 0, means, 1.0), 1.0)
        j = np.arange(lo, np.ceil(hi) + 1, dtype=float)[:, None]
        cdf = np.where(means > 0, load_cdf(j, means, p), 1.0)
        return float(lo + np.sum(1.0 - np.prod(cdf, axis=1)))
    live = means > 0
    step = max(1.0, float(np.min(sd[live])) / 10.0)
    x = np.arange(lo, hi + step, step)[:, None]
    z = (x - means[live]) / np.where(sd[live] > 0, sd[live], 1.0)
    from scipy.special import ndtr  # the standard normal CDF

    cdf = ndtr(z)
    return float(lo + step * np.sum(1.0 - np.prod(cdf, axis=1)))


def zipf_max_rank_load_ratio(E: int, k: int, ep: int, T: float, s: float,
                             placement: str = "round_robin") -> float:
    """Busiest rank over the mean under Zipf(s) popularity (numeric approximation).

    Expert i gets Binomial(T, pi_i) tokens (pi_i from :func:`zipf_inclusion_probabilities`);
    rank r's load has mean T*sum_{i in r} pi_i and variance T*sum_{i in r} pi_i*(1 - pi_i)
    (independent-inclusion approximation). Ranks are treated as independent moment-matched
    binomials and E[max] = sum_j (1 - prod_r F_r(j)); divided by T*k/ep.
    """
    pi = zipf_inclusion_probabilities(E, k, s)
    rank = _placement(int(E), int(ep), placement)
    means = float(T) * np.bincount(rank, weights=pi, minlength=int(ep))
    variances = float(T) * np.bincount(rank, weights=pi * (1 - pi), minlength=int(ep))
    return _max_of_independent(means, variances) / (float(T) * k / ep)


def zipf_max_expert_load_ratio(E: int, k: int, T: float, s: float) -> float:
    """Busiest expert over the mean T*k/E under Zipf(s): same machinery with one expert per bin."""
    return zipf_max_rank_load_ratio(E, k, E, T, s, "contiguous")


def zipf_distinct_ranks_per_token(E: int, k: int, ep: int, s: float,
                                  placement: str = "round_robin") -> float:
    """Expected distinct ranks per token under Zipf(s): sum_r (1 - exp(-L*sum_{i in r} p_i)).

    Successive-sampling (Poisson-process) approximation of P(no expert of rank r is drawn);
    s = 0 is uniform routing, given exactly (:func:`moesym.routing.stats.distinct_destinations`),
    and one rank is always reached.

    >>> zipf_distinct_ranks_per_token(256, 8, 1, 1.2), zipf_distinct_ranks_per_token(256, 8, 1, 0.0)
    (1.0, 1.0)
    """
    if int(ep) == 1:
        return 1.0
    if is_uniform(s):
        return float(distinct_destinations(E, k, ep))
    pi = zipf_inclusion_probabilities(E, k, s)
    rank = _placement(int(E), int(ep), placement)
    log_miss = np.bincount(rank, weights=np.log1p(-np.minimum(pi, 1 - 1e-16)), minlength=int(ep))
    return float(np.sum(1.0 - np.exp(log_miss)))


# ----------------------------------------------------------------- redundant experts (EPLB)
def replicate_hot_experts(loads, R: int) -> np.ndarray:
    """Replica counts after giving R extra replicas, one at a time, to the expert whose
    per-replica load is largest (greedy water-filling; replicas split an expert's load evenly)."""
    loads = np.asarray(loads, float)
    counts = np.ones(loads.size, dtype=int)
    heap = [(-v, i) for i, v in enumerate(loads)]
    heapq.heapify(heap)
    for _ in range(int(R)):
        _, i = heapq.heappop(heap)
        counts[i] += 1
        heapq.heappush(heap, (-loads[i] / counts[i], i))
    return counts


@functools.lru_cache(maxsize=64)
def _eplb_slots(E: int, k: int, ep: int, R: int, s) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rank_of, slots, rank_load)``: each of the E + R expert slots' rank and per-token
    inclusion probability, and each rank's summed inclusion, after R replicas of the hottest
    experts (:func:`replicate_hot_experts`; a token picks one replica of its expert uniformly,
    so a replica of expert i takes pi_i / c_i) and LPT packing of the slots onto ep ranks,
    ceil((E + R)/ep) slots each."""
    pi = zipf_inclusion_probabilities(E, k, s)
    counts = replicate_hot_experts(pi, R)
    slots = np.repeat(pi / counts, counts)
    capacity = -(-(int(E) + int(R)) // int(ep))
    order = np.argsort(-slots, kind="stable")
    rank_of = np.empty(slots.size, dtype=int)
    rank_load = np.zeros(int(ep))
    room = np.full(int(ep), capacity)
    for idx in order:
        free = np.flatnonzero(room > 0)
        r = free[np.argmin(rank_load[free])]
        rank_of[idx] = r
        rank_load[r] += slots[idx]
        room[r] -= 1
    return rank_of, slots, rank_load


def _eplb_ranks(E: int, k: int, ep: int, R: int, s) -> tuple[np.ndarray, np.ndarray]:
    """Per rank, the share of one token's assignments it expects and their variance, with the
    slots of :func:`_eplb_slots`."""
    rank_of, slots, rank_load = _eplb_slots(E, k, ep, R, s)
    return rank_load, np.bincount(rank_of, weights=slots * (1 - slots), minlength=int(ep))


def eplb_imbalance(E: int, k: int, ep: int, R: int, s: float, T: float | None = None) -> float:
    """Busiest rank over the mean with R redundant replicas of the hottest experts (numeric).

    Expected expert loads T*pi_i (Zipf(s), s = 0 uniform); replicas by
    :func:`replicate_hot_experts`; E+R slots packed by LPT onto ep ranks, ceil((E+R)/ep) slots
    each. ``T=None``: expected-load imbalance (T -> infinity). Finite T adds the statistical
    spread: each rank's load is a sum of binomials (a token's traffic to a replicated expert
    picks one replica uniformly), maxed with :func:`_max_of_independent`.
    """
    rank_load, rank_var = _eplb_ranks(int(E), int(k), int(ep), int(R),
                                      s if isinstance(s, tuple) else float(s))
    mean_share = k / ep
    if T is None:
        return float(rank_load.max() / mean_share)
    T = float(T)
    return _max_of_independent(T * rank_load, T * rank_var) / (T * mean_share)


#: token counts at which numeric routing statistics are tabulated for the step model: every
#: count to 16, then four per octave to 2^26; interpolated linearly in log T between them
TABLE_TOKENS = np.array(sorted(set(np.concatenate([np.arange(1, 17),
                                                   np.round(2.0 ** (np.arange(16, 105) / 4))
                                                   ]).tolist())), dtype=float)  # np.unique
# would import numpy.ma (0.07 s of every command's start)


def rank_imbalance_table(E: int, k: int, ep: int, R: int, s: float,
                         placement: str = "round_robin") -> tuple[np.ndarray, np.ndarray]:
    """(T, busiest rank over the mean) at :data:`TABLE_TOKENS`: with redundant experts
    :func:`eplb_imbalance`, else :func:`zipf_max_rank_load_ratio`. Computed once per process
    for each argument set (a derive question builds two step models of one routing) and kept
    in the compiled-model cache (:mod:`moesym.numeric.cache`: numbers only, exact through JSON;
    the binomial tails of the EPLB estimator take about a second, each time ``derive`` builds
    the step model of such a routing)."""
    return TABLE_TOKENS, np.array(_imbalance_at_table(E, k, ep, R, s, placement))


@functools.lru_cache(maxsize=64)
def _imbalance_at_table(E, k, ep, R, s, placement) -> tuple[float, ...]:
    key = cache.key_for(f"rank_imbalance_table {E!r} {k!r} {ep!r} {R!r} {s!r} {placement!r} "
                        f"{TABLE_TOKENS.tolist()!r}")
    stored = cache.load(key)
    if stored is not None and len(stored.get("imbalance", ())) == len(TABLE_TOKENS):
        return tuple(float(v) for v in stored["imbalance"])
    if R:
        out = tuple(float(eplb_imbalance(E, k, ep, R, s, T)) for T in TABLE_TOKENS)
    else:
        out = tuple(float(zipf_max_rank_load_ratio(E, k, ep, T, s, placement))
                    for T in TABLE_TOKENS)
    cache.store(key, {"imbalance": list(out)})
    return out


def rank_slots(E: int, k: int, ep: int, R: int, s,
               placement: str = "round_robin") -> tuple[np.ndarray, np.ndarray]:
    """``(rank_of, inclusion)``: the rank of each expert slot and the probability that one token
    routes to it, under the routing ``s`` (a Zipf exponent or measured shares). Without
    redundant experts (R = 0) the slots are the experts, in ``placement`` over their popularity
    order (the placement the rank imbalance assumes, :func:`zipf_max_rank_load_ratio`); with R
    the EPLB slots of :func:`_eplb_slots` (replicas of the hottest experts, LPT-packed)."""
    if R:
        rank_of, slots, _ = _eplb_slots(int(E), int(k), int(ep), int(R),
                                        s if isinstance(s, tuple) else float(s))
        return rank_of, slots
    return _placement(int(E), int(ep), placement), zipf_inclusion_probabilities(E, k, s)


def busiest_touched_slots(E: int, k: int, ep: int, R: int, s, T: float,
                          placement: str = "round_robin") -> float:
    """Expected expert slots with >= 1 of T tokens on the busiest of ep EP ranks (the expert
    weights that rank reads), under the routing ``s`` (slots of :func:`rank_slots`).

    A slot of inclusion pi_i is touched with q_i = 1 - (1 - pi_i)**T: tokens route
    independently, so this is exact given pi_i, and at EP 1 the expectation sum_i q_i is the
    expected distinct experts (:func:`moesym.routing.stats.distinct_experts_from_inclusion`).
    With EP a rank's count is a sum of its slots' indicators (a token's k distinct picks make
    them slightly negatively dependent, ignored), moment-matched (mean sum q_i, variance
    sum q_i (1 - q_i)) and the ranks independent: the busiest rank's count is
    :func:`_max_of_independent` of them, as uniform routing's
    (:func:`moesym.routing.stats.busiest_touched_local_experts`, Binomial(E / ep, q)), which it
    is when every pi_i = k / E.

    >>> round(busiest_touched_slots(256, 8, 1, 0, 1.0, 64), 1)  # uniform: 222.4
    153.0
    """
    rank_of, pi = rank_slots(E, k, ep, R, s, placement)
    q = -np.expm1(float(T) * np.log1p(-np.minimum(pi, 1.0 - 1e-16)))
    means = np.bincount(rank_of, weights=q, minlength=int(ep))
    if int(ep) == 1:
        return float(means[0])
    return _max_of_independent(means, np.bincount(rank_of, weights=q * (1 - q), minlength=int(ep)))


def touched_table(E: int, k: int, ep: int, R: int, s,
                  placement: str = "round_robin") -> tuple[np.ndarray, np.ndarray]:
    """(T, :func:`busiest_touched_slots`) at :data:`TABLE_TOKENS`, the table the step model
    interpolates in log T (:func:`moesym.terms.routing.touched_local_experts_expr`)."""
    return TABLE_TOKENS, np.array(_touched_at_table(E, k, ep, R, s, placement))


@functools.lru_cache(maxsize=64)
def _touched_at_table(E, k, ep, R, s, placement) -> tuple[float, ...]:
    return tuple(busiest_touched_slots(E, k, ep, R, s, T, placement) for T in TABLE_TOKENS)


def replicas_for_target(E: int, k: int, ep: int, target: float, s: float,
                        T: float | None = None, max_replicas: int | None = None) -> int:
    """Fewest redundant replicas R bringing :func:`eplb_imbalance` to <= target.

    Closed-form start: no slot may exceed the target rank load h = target*k/ep, so
    R >= sum_i max(ceil(pi_i/h) - 1, 0). Then a numeric scan upward (packing and finite-T spread
    may need more). Raises :class:`MoesymError` when ``max_replicas`` (default 4*E) is not enough.

    >>> replicas_for_target(64, 2, 8, 1.5, 1.0)
    1
    """
    if target < 1:
        raise MoesymError(f"--target-imbalance {target}: must be >= 1 (1 = perfectly balanced)")
    pi = zipf_inclusion_probabilities(E, k, s)
    h = target * k / ep
    start = int(np.sum(np.maximum(np.ceil(pi / h - 1e-12) - 1, 0)))
    limit = 4 * int(E) if max_replicas is None else int(max_replicas)
    for R in range(start, limit + 1):
        if eplb_imbalance(E, k, ep, R, s, T) <= target:
            return R
    raise MoesymError(f"--target-imbalance {target}: not reached with {limit} replicas; "
                      "raise the target or the token count")


def zipf_cache_hit_rate(E: int, k: int, C: int, s: float) -> float:
    """Share of assignments hitting the C most popular experts: sum_{i<=C} pi_i / k."""
    pi = zipf_inclusion_probabilities(E, k, s)
    return float(np.sum(pi[: int(C)]) / k)


def zipf_cache_miss_transfer_time_s(E: int, k: int, T, C: int, s: float, expert_bytes,
                                    bw_host) -> sp.Expr:
    """As :func:`cache_miss_transfer_time_s` with the C most popular experts cached, Zipf(s)."""
    pi = zipf_inclusion_probabilities(E, k, s)
    cold = distinct_experts_from_inclusion(pi[int(C):], T)
    return cold * _s(expert_bytes) / _s(bw_host)

