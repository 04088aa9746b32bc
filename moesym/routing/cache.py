"""Expert cache: which experts of a layer sit in device memory, and how many of a step's active
experts miss it (seed 003; llama.cpp / KTransformers-style offload).

A layer's ``E`` experts live in host memory; ``C`` of them are resident on the device. Tokens pick
expert ``i`` with per-token inclusion probability ``pi_i`` (uniform: k / E; Zipf(s): the
successive-sampling probabilities of :func:`moesym.routing.zipf.zipf_inclusion_probabilities`).
A step of ``T`` tokens activates expert ``i`` with probability ``a_i = 1 - (1 - pi_i)^T``.

Policies (``h_i``: probability that expert ``i`` is resident when a step needs it):

* ``static-top``: the ``C`` most popular experts are pinned: ``h_i = 1`` for them, else 0. The
  token-level hit rate is the sum of the top ``C`` inclusion probabilities over ``k``.
* ``lfu``: with routing statistics that do not drift, counting uses converges to the same set as
  ``static-top`` (the most frequently used experts), so it is timed as ``static-top``.
* ``lru``: the ``C`` most recently active experts. Che's approximation: a characteristic age
  ``t_C`` (in steps) solves ``sum_i (1 - (1 - a_i)^t_C) = C``, and ``h_i = 1 - (1 - a_i)^t_C``
  (tested against a Monte Carlo of a real LRU cache).

Misses per step (experts copied in, or computed on the host) ``= sum_i a_i (1 - h_i)``.

>>> round(hit_rate(8, 2, 4, 0.0, "static-top", 1), 3)  # uniform: C / E
0.5
>>> round(misses_per_step(8, 2, 4, 0.0, "static-top", 1), 3)  # 4 cold experts, each 2/8 per token
1.0
"""

from __future__ import annotations

import numpy as np

from .zipf import TABLE_TOKENS, zipf_inclusion_probabilities

__all__ = ["POLICIES", "inclusion", "residency", "hit_rate", "misses_per_step", "cache_tables"]

POLICIES = ("static-top", "lfu", "lru")


def inclusion(E: int, k: int, s: float) -> np.ndarray:
    """Per-token inclusion probabilities, most popular first (uniform when ``s`` = 0)."""
    if not s:
        return np.full(int(E), k / E)
    return zipf_inclusion_probabilities(E, k, s)


def _activity(pi: np.ndarray, T: float) -> np.ndarray:
    return -np.expm1(T * np.log1p(-np.minimum(pi, 1 - 1e-15)))


def residency(E: int, k: int, C: int, s: float, policy: str, T: float) -> np.ndarray:
    """``h_i`` of each expert (module docstring)."""
    if policy not in POLICIES:
        raise ValueError(f"cache policy {policy!r}: use {', '.join(POLICIES)}")
    E, C = int(E), int(C)
    if C >= E:
        return np.ones(E)
    if C <= 0:
        return np.zeros(E)
    pi = inclusion(E, k, s)
    if policy in ("static-top", "lfu"):
        h = np.zeros(E)
        h[np.argsort(-pi, kind="stable")[:C]] = 1.0
        return h
    a = _activity(pi, T)
    log_miss = np.log1p(-np.minimum(a, 1 - 1e-15))

    def filled(t: float) -> float:
        return float(np.sum(-np.expm1(t * log_miss))) - C

    lo, hi = 0.0, 1.0
    while filled(hi) < 0:
        hi *= 2.0
        if hi > 1e15:  # fewer than C experts ever active: all of them stay resident
            return np.ones(E)
    for _ in range(200):  # bisection on the characteristic age
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if filled(mid) < 0 else (lo, mid)
    return -np.expm1(hi * log_miss)


def hit_rate(E: int, k: int, C: int, s: float, policy: str, T: float) -> float:
    """Share of token-expert assignments served from device memory."""
    pi = inclusion(E, k, s)
    return float(np.sum(pi * residency(E, k, C, s, policy, T)) / np.sum(pi))


def misses_per_step(E: int, k: int, C: int, s: float, policy: str, T: float) -> float:
    """Expected distinct non-resident experts a step of ``T`` tokens activates (per layer)."""
    a = _activity(inclusion(E, k, s), float(T))
    return float(np.sum(a * (1.0 - residency(E, k, C, s, policy, T))))


def cache_tables(E: int, k: int, C: int, s: float, policy: str):
    """(T, cold experts per step, share of the assignments they take) at the routing tables'
    token counts, for the step model to interpolate in log T as it does the load imbalance."""
    cold = [misses_per_step(E, k, C, s, policy, T) for T in TABLE_TOKENS]
    miss = [1.0 - hit_rate(E, k, C, s, policy, T) for T in TABLE_TOKENS]
    return TABLE_TOKENS, np.array(cold), np.array(miss)
