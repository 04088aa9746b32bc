"""Compute / communication overlap of one MoE layer under n micro-batches.

Seed 000 section 5.3 gives, for two micro-batches with per-micro-batch compute c, dispatch d and
combine b: d + max(c, d) + max(c, b) + b. Generalised to n >= 2 micro-batches on one compute and
one communication stream (micro-batch i's compute overlaps the combine of i-1 and the dispatch of
i+1): d + max(c, d) + (n - 2) max(c, b + d) + max(c, b) + b. With n = 1 nothing overlaps:
c + d + b.

>>> import sympy as sp
>>> c, d, b = sp.symbols("c d b", positive=True)
>>> pipelined(c, d, b, 2)
b + d + Max(b, c) + Max(c, d)
"""

from __future__ import annotations

import sympy as sp

from ..specs.deployment import A2AMode, Phase

__all__ = ["pipelined", "layer_time", "resolve_a2a"]


def pipelined(c, d, b, n) -> sp.Expr:
    """Time of n micro-batches of (compute c, dispatch d, combine b) on two streams."""
    c, d, b, n = (sp.sympify(x, strict=True) for x in (c, d, b, n))
    many = d + sp.Max(c, d) + (n - 2) * sp.Max(c, b + d) + sp.Max(c, b) + b
    if n.is_number:
        return c + d + b if n == 1 else many
    return sp.Piecewise((c + d + b, sp.Eq(n, 1)), (many, True))


def resolve_a2a(mode: A2AMode, phase: Phase) -> A2AMode:
    if mode is A2AMode.AUTO:
        return A2AMode.DEEPEP_LL if phase is Phase.DECODE else A2AMode.DEEPEP_NORMAL
    return mode


def layer_time(compute_mb, dispatch_mb, combine_mb, n, deployment, workload) -> sp.Expr:
    """One layer's time for the whole batch from per-micro-batch compute and communication."""
    return pipelined(compute_mb, dispatch_mb, combine_mb, n)
