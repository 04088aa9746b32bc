"""Routing statistics wired into the MoE layer: load imbalance and lazy expert loading.

The busiest EP rank sets the pace of an EP step, so routed-expert compute uses its load
(mean x imbalance); the weight-load floor charges only the local experts that receive at least
one token (lazy expert loading, seed 004).
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from .. import routing as rt
from ..symbolic.symbols import S
from .dims import Dims

__all__ = ["imbalance_expr", "touched_local_experts_expr", "group_tokens", "group_limited",
           "group_var_factor", "tile_skew"]


def group_tokens(D: Dims, tokens_mb) -> sp.Expr:
    """Tokens routed in one micro-batch across the whole MoE group (all GPUs)."""
    return tokens_mb / D.tp * D.gpus


def imbalance_expr(model, deployment, D: Dims, tokens_mb) -> sp.Expr:
    """Busiest EP rank's load over the mean.

    balanced: 1. uniform: the closed form of :func:`moesym.routing.max_rank_load_ratio` in
    E, k, ep and the tokens routed across the group (group-limited when the model has expert
    groups). zipf:S, freq:FILE and redundant experts (EPLB): the numeric estimators of
    :mod:`moesym.routing` tabulated against the tokens routed in the step
    (:func:`moesym.routing.zipf.rank_imbalance_table`, within 0.1% of the estimator between
    its knots) and interpolated in log T, so the imbalance follows the batch in sweeps,
    optimize and derive as it does in predict.
    """
    kind = deployment.routing.kind
    if kind == "balanced" or not model.is_moe or model.num_experts == 1:
        return sp.Integer(1)
    if deployment.routing.numeric or deployment.redundant_experts:
        if deployment.ep == 1:
            return sp.Integer(1)
        from ..routing.zipf import rank_imbalance_table
        from ..symbolic.special import LogInterp

        s = deployment.routing.skew
        ts, ys = rank_imbalance_table(model.num_experts, model.experts_per_token, deployment.ep,
                                      deployment.redundant_experts, s)
        knots = [sp.Float(float(v)) for pair in zip(np.log(ts), ys) for v in pair]
        return LogInterp(group_tokens(D, tokens_mb), *knots)
    # group-limited routing scales the per-token variance by rho_G, a number at each EP
    # (group_var_factor) bound like any other: one model serves every EP
    scale = S.group_var if group_limited(model) else 1
    ratio = rt.max_rank_load_ratio(D.experts, D.topk, D.ep, group_tokens(D, tokens_mb),
                                   var_scale=scale)
    return sp.Piecewise((1, sp.Eq(D.ep, 1)), (ratio, True))


def tile_skew(model, deployment) -> tuple:
    """``(inclusion, uniform)``: per-token inclusion probabilities of the busiest EP rank's
    local experts (rank 0 of the round-robin placement the rank imbalance assumes; every expert
    at EP 1) under zipf:S or freq:FILE routing, and under uniform routing (k / E each), as
    tuples; ``()`` where the routing is uniform or balanced, or redundant experts (EPLB) replace
    the placement. The kernel model pads each of these experts' binomial rows to its M tile
    (:func:`moesym.kernels.skew.routing_tile_factor`)."""
    if (not deployment.routing.numeric or deployment.redundant_experts or not model.is_moe
            or model.num_experts == 1):
        return ()
    from ..routing.zipf import zipf_inclusion_probabilities

    E, k, ep = model.num_experts, model.experts_per_token, deployment.ep
    pi = zipf_inclusion_probabilities(E, k, deployment.routing.skew)[::ep]
    return tuple(float(x) for x in pi), tuple(float(k / E) for _ in pi)


def group_limited(model) -> bool:
    """The model routes within a subset of expert groups (DeepSeek-V3: top-4 of 8 groups)."""
    return model.is_moe and model.expert_groups > 1 and model.groups_per_token < model.expert_groups


def group_var_factor(model, ep: int) -> float:
    """rho_G: per-token load variance on one EP rank under group-limited routing over that
    under uniform top-k routing (:func:`moesym.routing.rank_load_variance_per_token`), at ``ep``
    ranks; 1 where routing is not group-limited, at EP 1, and where neither of EP and the group
    count divides the other (the closed form needs one to)."""
    n, G, kG = int(ep), model.expert_groups, model.groups_per_token
    if not group_limited(model) or n <= 1 or (n % G and G % n):
        return 1.0
    E0, k0 = model.num_experts, model.experts_per_token
    grouped = rt.rank_load_variance_per_token(E0, k0, n, G, kG)
    uniform = rt.rank_load_variance_per_token(E0, k0, n)
    return float(grouped / uniform)


def touched_local_experts_expr(model, deployment, D: Dims, tokens_mb) -> sp.Expr:
    """Expected local experts with at least one token on the rank that sets the step (lazy
    expert loading).

    Mean rank: (E + R) / ep x (1 - (1 - k / E) ** T_group), T_group = tokens routed across the
    MoE group. Under uniform routing with EP the busiest rank's count instead
    (:func:`moesym.routing.stats.busiest_touched_local_experts`): at a small batch the slowest
    rank reads more experts' weights than the mean rank. Balanced routing gives every rank the
    mean; skewed (zipf, freq) routing keeps the mean rank's count (its hot experts are the
    load imbalance's part).
    """
    T = group_tokens(D, tokens_mb)
    if deployment.routing.kind == "uniform" and deployment.ep > 1:
        return rt.busiest_touched_local_experts(D.experts, D.topk, T, D.ep, D.local_experts)
    return D.local_experts * rt.touched_share(D.experts, D.topk, T)
