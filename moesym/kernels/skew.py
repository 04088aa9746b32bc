"""Routing skew in a fused-MoE grouped GEMM: each expert's rows padded to the kernel's M tile.

A grouped GEMM pads every expert's rows to its M block, so its M tiles are
``sum_e ceiling(n_e / t_m)`` over the per-expert row counts ``n_e``. The kernel model
(:func:`moesym.kernels.analytical.gemm_tiles`) counts ``groups x ceiling(M / t_m)``, the tiles of
equal groups of the mean rows, which is exact for balanced routing (the rows the grouped-GEMM
constants are fitted on). Skewed routing puts many rows on a few hot experts and a few rows on
many cold ones: the hot experts' rows fill whole tiles, each cold expert still takes a whole
tile for its few rows, and the sum grows while the rows stay the same. ``m_tile_factor`` is
that sum over the equal-groups count; the kernel model multiplies its M tiles by it.

One tile counter serves both uses:

- the fit (``benchmarks/kernel_fit_aic.py --heldout``): the power-law rows of AIConfigurator's
  tables, their per-expert counts drawn from the collector's generator
  (:func:`moesym.kernels.aic.power_law_counts`), over the equal-groups count the balanced
  constants were fitted with (:func:`skewed_rows`);
- the step model: the user's ``--routing`` (zipf:S, freq:FILE) at T tokens, each expert's rows
  binomial in T with its inclusion probability (:func:`expected_m_tiles`), over the same
  equal-groups count of the experts that routing touches (:func:`routing_tile_factor`); uniform
  routing takes no factor and keeps its numbers.
"""

from __future__ import annotations

import functools

import numpy as np

from .analytical import _TILE_M_MIN, grouped_fixed_block, grouped_launch_block, tile_m_rows
from ..specs.kernel_calib import KernelCalib

__all__ = ["expected_m_tiles", "grouped_tile_m", "padded_m_tiles", "routing_tile_factor",
           "skewed_rows", "tile_factor_table"]


def grouped_tile_m(m, calib: KernelCalib, kernel_tokens=None, local_experts=None,
                   launch_rows=None):
    """The M block a fused-MoE backend's grouped GEMM takes at ``m`` mean rows per expert (as
    :func:`moesym.kernels.analytical.gemm_time` picks it for a grouped layout; a backend with
    fixed blocks: :func:`moesym.kernels.analytical.grouped_fixed_block`; one whose tile follows
    the launch's assignments per local expert, ``launch_rows``, ``m`` where not given:
    :func:`moesym.kernels.analytical.grouped_launch_block`)."""
    if calib.grouped_launch_tile_max_rows:
        return grouped_launch_block(calib, m if launch_rows is None else launch_rows)
    if calib.grouped_tile_m_rows:
        return grouped_fixed_block(calib, kernel_tokens, local_experts)
    return tile_m_rows(m, calib, calib.grouped_tile_m_min_rows or _TILE_M_MIN)


def padded_m_tiles(counts, tile_m) -> np.ndarray:
    """M tiles of a grouped GEMM whose experts hold ``counts`` rows (last axis: experts):
    ``sum_e ceiling(n_e / t_m)``; an expert without rows takes no tile.

    >>> float(padded_m_tiles([0, 1, 64, 65, 200], 64))  # 0 + 1 + 1 + 2 + 4
    8.0
    """
    return np.ceil(np.asarray(counts, dtype=float) / float(tile_m)).sum(axis=-1)


def expected_m_tiles(inclusion, tokens: float, tile_m: float) -> float:
    """Expected :func:`padded_m_tiles` when ``tokens`` tokens each pick expert ``e`` with
    probability ``inclusion[e]`` (independently across tokens): ``n_e ~ Binomial(T, pi_e)`` and
    ``E ceiling(n / t) = sum_{j >= 0} P(n > j t)``.

    >>> round(expected_m_tiles([0.5], 4, 2), 4)  # n ~ Bin(4, 1/2): P(n>0) + P(n>2) = 15/16 + 5/16
    1.25
    """
    from scipy.stats import binom  # imported here: scipy.stats takes ~1 s to load

    pi = np.asarray(inclusion, dtype=float)
    t, tm = float(tokens), float(tile_m)
    top = float(np.max(binom.ppf(1 - 1e-12, t, pi))) if t >= 1 else 1.0
    j = np.arange(int(np.ceil(top / tm)) + 1)
    # T tokens may be fractional in a sweep's mean: the binomial of the nearest whole count
    return float(binom.sf(j[:, None] * tm, round(max(t, 1.0)), pi[None, :]).sum())


def routing_tile_factor(inclusion, tokens: float, calib: KernelCalib) -> float:
    """A skewed routing's expected M tiles at ``tokens`` tokens over the equal-groups count the
    kernel model takes, ``g x ceiling(rows / g / t_m)`` with ``g`` the rank's expected experts
    with rows (the groups the step launches,
    :func:`moesym.terms.routing.touched_local_experts_expr`) and ``rows`` its expected rows, at
    the M block the kernel picks for ``rows / g`` (:func:`grouped_tile_m`): the fit's
    ``m_tile_factor`` (:func:`skewed_rows`) in expectation. The experts the skew leaves without
    rows are the groups' part; this factor is the padding of the hot experts' extra tiles.
    ``inclusion``: the per-token inclusion probabilities of the rank's local experts."""
    pi = np.asarray(inclusion, dtype=float)
    t = float(tokens)
    touched = max(float(np.sum(-np.expm1(t * np.log1p(-np.minimum(pi, 1 - 1e-15))))), 1.0)
    rows = t * float(pi.sum())
    # a launch-following tile at the rank's own assignments per local expert (the EP-1 launch)
    tm = float(grouped_tile_m(rows / touched, calib, launch_rows=rows / len(pi)))
    return expected_m_tiles(pi, t, tm) / (touched * float(np.ceil(rows / touched / tm)))


# log-spaced token counts of the step model's table (the rank's tokens routed per micro-batch)
_KNOTS = tuple(float(x) for x in np.unique(np.round(np.geomspace(1, 2 ** 17, 52))))


@functools.lru_cache(maxsize=256)
def tile_factor_table(inclusion: tuple,
                      calib: KernelCalib) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(tokens, factors)``: :func:`routing_tile_factor` at log-spaced token counts (1 to
    131072), the numeric table the step model interpolates in log T (as
    :func:`moesym.routing.zipf.rank_imbalance_table`)."""
    return _KNOTS, tuple(routing_tile_factor(inclusion, t, calib) for t in _KNOTS)


def skewed_rows(rows, counts_of, calib: KernelCalib, draws: int = 16, seed: int = 0):
    """Fused-MoE rows measured under a skewed routing, with the expected per-rank values the
    fit's row model reads (:func:`moesym.kernels.fit.moe_assignments`): ``rank_assignments``
    (the measured rank's rows), ``active_experts`` (its experts with rows) and ``m_tile_factor``
    (expected :func:`padded_m_tiles` over ``active x ceiling(rows / active / t_m)``, the count
    the balanced constants were fitted with). ``counts_of(row, rng)``: one draw of the measured
    rank's per-expert counts for a row (e.g. :func:`moesym.kernels.aic.power_law_counts`);
    ``draws`` draws per distinct routing shape, averaged."""
    keys = ["tokens", "experts", "topk", "ep", "distribution"]
    rng = np.random.default_rng(seed)
    cols = {"rank_assignments": [], "active_experts": [], "m_tile_factor": []}
    memo: dict = {}
    for r in rows.itertuples(index=False):
        key = tuple(getattr(r, k) for k in keys)
        if key not in memo:
            memo[key] = np.array([counts_of(r, rng) for _ in range(draws)], dtype=float)
        c = memo[key]
        a = c.sum(axis=1).mean()
        g = max((c > 0).sum(axis=1).mean(), 1.0)
        tm = float(grouped_tile_m(a / g, calib, r.tokens, r.local_experts,
                                  r.tokens * r.topk / r.local_experts))
        cols["rank_assignments"].append(a)
        cols["active_experts"].append(g)
        equal = g * np.ceil(a / g / tm)  # 0 only where the rank has no rows in any draw
        cols["m_tile_factor"].append(padded_m_tiles(c, tm).mean() / equal if equal else 1.0)
    return rows.assign(**cols)
