"""Pipeline parallelism (``--pp``): a step of ``pp`` stages, each on its slot of the batch."""

from __future__ import annotations

import sympy as sp

from ..specs.deployment import Deployment, Workload
from ..symbolic.expr import substitute
from ..symbolic.symbols import S
from ..terms.dims import Dims
from ..terms.tokens import step_tokens

__all__ = ["pipelined"]


def pipelined(stage, per_layer, work, layer, layer_compute, dep: Deployment, wl: Workload,
               D: Dims) -> tuple:
    """Pipeline parallelism over ``pp`` stages: the batch runs as ``pp`` micro-batches in flight
    (one per stage), each stage holding 1 / pp of the layers (the bindings' layer counts). A
    stage's step on ``B / pp`` requests (``T / pp`` tokens) plus the send of its activations to
    the next stage, ``t_s``, repeats every slot: a token crosses all stages in ``pp t_s`` (the
    TPOT, or the prefill step), in which every slot's ``B / pp`` requests advance. The send goes
    over RDMA when a stage fills whole nodes, else over the scale-up link. Busy times and work
    per layer cover all the rank's micro-batches (``pp`` slots)."""
    slot = {S.batch: S.batch / S.pp, S.tokens: S.tokens / S.pp}
    tokens = step_tokens(wl, dep)
    on_fabric = sp.Ge(D.gpus, D.gpus_per_node)  # a stage fills whole nodes (a bound symbol in a sweep)
    bw = sp.Piecewise((S.bw_out * S.eff_out, on_fabric), (S.bw_up * S.eff_up, True))
    lat = sp.Piecewise((S.lat_out, on_fabric), (S.lat_up, True))
    send = tokens * D.hidden * D.act_bytes / bw + lat
    t_s = substitute(stage + send / S.eff_serve, slot)
    scale = lambda e: S.pp * substitute(e, slot)  # noqa: E731
    per_layer = {k: scale(v) for k, v in per_layer.items()}
    work = {k: {f: scale(e) for f, e in w.items()} for k, w in work.items()}
    return S.pp * t_s, per_layer, work, scale(layer), scale(layer_compute)
