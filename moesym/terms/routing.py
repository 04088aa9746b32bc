"""Routing statistics wired into the MoE layer: load imbalance and lazy expert loading.

The busiest EP rank sets the pace of an EP step, so routed-expert compute uses its load
(mean x imbalance); the weight-load floor charges only the local experts that receive at least
one token (lazy expert loading, seed 004).
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from .. import routing as rt
from ..routing.zipf import is_uniform, rank_imbalance_table, rank_slots, touched_table
from ..symbolic.special import LogInterp
from ..symbolic.symbols import S
from .dims import Dims

__all__ = ["imbalance_expr", "touched_local_experts_expr", "group_tokens", "group_limited",
           "group_var_factor", "log_table", "tile_skew"]


def group_tokens(D: Dims, tokens_mb) -> sp.Expr:
    """Tokens routed in one micro-batch across the whole MoE group (all GPUs)."""
    return tokens_mb / D.tp * D.gpus


def log_table(T, ts, ys) -> sp.Expr:
    """A routing statistic tabulated at token counts ``ts`` (values ``ys``) as the step model's
    function of the tokens routed ``T``: interpolated linearly in log T, constant beyond the
    ends (:class:`moesym.symbolic.special.LogInterp`)."""
    return LogInterp(T, *[sp.Float(float(v)) for pair in zip(np.log(ts), ys) for v in pair])


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
        s = deployment.routing.skew
        ts, ys = rank_imbalance_table(model.num_experts, model.experts_per_token, deployment.ep,
                                      deployment.redundant_experts, s)
        return log_table(group_tokens(D, tokens_mb), ts, ys)
    # group-limited routing scales the per-token variance by rho_G, a number at each EP
    # (group_var_factor) bound like any other: one model serves every EP
    scale = S.group_var if group_limited(model) else 1
    ratio = rt.max_rank_load_ratio(D.experts, D.topk, D.ep, group_tokens(D, tokens_mb),
                                   var_scale=scale)
    return sp.Piecewise((1, sp.Eq(D.ep, 1)), (ratio, True))


def tile_skew(model, deployment) -> tuple:
    """The per-token inclusion probabilities of the busiest EP rank's local experts (rank 0 of
    the round-robin placement the rank imbalance assumes; every expert at EP 1) under zipf:S or
    freq:FILE routing, as a tuple; ``()`` where the routing is uniform (zipf:0 included) or
    balanced, or redundant experts (EPLB) replace the placement. The kernel model pads each of
    these experts' binomial rows to its M tile
    (:func:`moesym.kernels.skew.routing_tile_factor`)."""
    if (not deployment.routing.numeric or is_uniform(deployment.routing.skew)
            or deployment.redundant_experts or not model.is_moe or model.num_experts == 1):
        return ()
    rank_of, pi = rank_slots(model.num_experts, model.experts_per_token, deployment.ep, 0,
                             deployment.routing.skew)
    return tuple(float(x) for x in pi[rank_of == 0])


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
    expert loading): the expert weights it reads, and the groups its grouped GEMMs launch.

    Uniform routing: the mean rank's (E + R) / ep x (1 - (1 - k / E) ** T_group), T_group =
    tokens routed across the MoE group, or with EP the busiest rank's count
    (:func:`moesym.routing.stats.busiest_touched_local_experts`): at a small batch the slowest
    rank reads more experts' weights than the mean rank. Balanced routing (and zipf:0) gives
    every rank the mean. Skewed routing (zipf:S, freq:FILE) concentrates the tokens on fewer
    experts: each expert slot is touched with 1 - (1 - pi_i) ** T_group from its inclusion
    probability pi_i, the ranks hold the slots as the rank imbalance places them (round-robin
    in popularity order; with redundant experts the EPLB packing) and the busiest rank's count
    (:func:`moesym.routing.zipf.busiest_touched_slots`) is tabulated in T_group and
    interpolated in log T, as the imbalance is.
    """
    T = group_tokens(D, tokens_mb)
    s = deployment.routing.skew
    if deployment.routing.numeric and not is_uniform(s) and model.is_moe and model.num_experts > 1:
        ts, ys = touched_table(model.num_experts, model.experts_per_token, deployment.ep,
                               deployment.redundant_experts, s)
        return log_table(T, ts, ys)
    if deployment.routing.kind == "uniform" and deployment.ep > 1:
        return rt.busiest_touched_local_experts(D.experts, D.topk, T, D.ep, D.local_experts)
    return D.local_experts * rt.touched_share(D.experts, D.topk, T)
