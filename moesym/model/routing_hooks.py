"""Routing statistics wired into the MoE layer: load imbalance and lazy expert loading."""

from __future__ import annotations

import sympy as sp

from ..terms.dims import Dims

__all__ = ["imbalance_expr", "touched_local_experts_expr", "group_tokens"]


def group_tokens(D: Dims, tokens_mb) -> sp.Expr:
    """Tokens routed in one micro-batch across the whole MoE group (all GPUs)."""
    return tokens_mb / D.tp * D.gpus


def imbalance_expr(model, deployment, D: Dims, tokens_mb) -> sp.Expr:
    """Busiest EP rank's load over the mean (1 for balanced routing)."""
    return sp.Integer(1)


def touched_local_experts_expr(model, deployment, D: Dims, tokens_mb) -> sp.Expr:
    """Expected local experts with at least one token (lazy expert loading, uniform routing).

    (E + R) / ep x (1 - (1 - k / E) ** T_group), T_group = tokens routed across the MoE group.
    """
    T = group_tokens(D, tokens_mb)
    return D.local_experts * (1 - (1 - D.topk / D.experts) ** T)
