"""Tokens of one step: query tokens per decode request, the tokens a step computes on one
attention DP rank, and the context-parallel share of a prompt."""

from __future__ import annotations

import sympy as sp

from ..specs.deployment import Deployment, Phase, Workload
from ..symbolic.symbols import S
from ..symbolic.expr import smax

__all__ = ["computed_tokens", "context_parallel", "queries", "step_tokens"]


def queries(dep: Deployment):
    """Query tokens per decode request in one step: 1, or N + 1 when speculative decoding
    verifies N draft tokens (:mod:`moesym.specs.speculative`)."""
    return 1 + S.mtp if dep.mtp else 1


def step_tokens(wl: Workload, dep: Deployment) -> sp.Expr:
    """Tokens of one step on one attention DP rank (a mixed serving step: the decode requests'
    tokens and the prefill chunk's)."""
    q = queries(dep)
    return {Phase.DECODE: S.batch * q,
            Phase.PREFILL: computed_tokens(S.tokens, wl) / context_parallel(dep),
            Phase.SERVE: S.batch * q + S.tokens}[wl.phase]


def context_parallel(dep: Deployment):
    """Context-parallel GPUs sharing each prompt: each computes 1 / cp of its tokens."""
    return S.cp if dep.cp > 1 else 1


def computed_tokens(tokens, wl: Workload):
    """Prompt tokens a prefill step computes: all, or with a prefix-cache hit F the last
    (1 - F) of each prompt, and at least its last token (the one that gives the logits)."""
    if not wl.prefix_hit:
        return tokens
    return tokens * smax(1 - S.prefix_hit, 1 / S.context)
