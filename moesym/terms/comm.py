"""Communication terms: EP dispatch / combine and TP collectives.

First version: one volume per collective, split between the scale-up (NVLink) and scale-out
(RDMA) tiers by the share of destinations outside the sender's scale-up domain; both tiers run in
parallel, so time = max(intra / W_up_eff, inter / W_out_eff) + latency.

>>> from moesym.terms.comm import tp_allreduce
>>> from moesym.terms.dims import symbolic_dims
>>> from moesym.symbols import S
>>> tp_allreduce(symbolic_dims(), S.batch, 1e11, 0).net_bytes
2*B*b_a*d*(t_p - 1)/t_p
"""

from __future__ import annotations

import sympy as sp

from .cost import Cost, KernelClass, sym
from .dims import Dims

__all__ = ["remote_share", "dispatch", "combine", "tp_allreduce"]


def remote_share(group, domain) -> sp.Expr:
    """Share of a uniformly spread group of ``group`` GPUs outside one scale-up ``domain``."""
    g = sym(group)
    return 1 - sp.Min(sym(domain), g) / g


def _a2a(name: str, D: Dims, tokens, elem_bytes, bw_up, bw_out, lat_up, lat_out, domain) -> Cost:
    t = sym(tokens) / D.tp
    volume = t * D.topk * D.hidden * sym(elem_bytes) * (1 - 1 / D.ep)
    rs = remote_share(D.gpus, domain)
    time_s = sp.Max(volume * (1 - rs) / sym(bw_up), volume * rs / sym(bw_out))
    fixed = sp.Piecewise((0, sp.Eq(D.ep, 1)), (sym(lat_up) + rs * sym(lat_out), True))
    # express the time through an effective bandwidth so that Cost stays uniform
    return Cost(name, KernelClass.COMM, net_bytes=volume, net_bw=sp.Piecewise(
        (1, sp.Eq(volume, 0)), (volume / time_s, True)), fixed_s=fixed, launches=1)


def dispatch(D: Dims, tokens, bw_up, bw_out, lat_up, lat_out, domain) -> Cost:
    """EP dispatch of ``tokens`` tokens per DP rank: t/tp x k copies of d elements (fp8 + scales)."""
    return _a2a("dispatch", D, tokens, D.dispatch_bytes, bw_up, bw_out, lat_up, lat_out, domain)


def combine(D: Dims, tokens, bw_up, bw_out, lat_up, lat_out, domain) -> Cost:
    """EP combine: the same copies coming back in bf16."""
    return _a2a("combine", D, tokens, D.combine_bytes, bw_up, bw_out, lat_up, lat_out, domain)


def tp_allreduce(D: Dims, tokens, bw_up, lat_up) -> Cost:
    """Ring all-reduce of a (tokens x d) activation over TP: 2 (tp - 1) / tp of it per GPU."""
    vol = 2 * (D.tp - 1) / D.tp * sym(tokens) * D.hidden * D.act_bytes
    return Cost("tp_comm", KernelClass.COMM, net_bytes=vol, net_bw=sym(bw_up),
                fixed_s=2 * (D.tp - 1) * sym(lat_up), launches=sp.Min(D.tp - 1, 1))
