"""Expert tiers (``--expert-cache``): the cold experts a micro-batch activates, streamed over
the host link or computed on the host CPU, and the time they add to an MoE layer."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import sympy as sp

from ..errors import SpecError
from ..routing.cache import cache_tables
from ..specs.deployment import Deployment, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec, expert_weights
from ..symbolic.expr import smax
from ..symbolic.special import LogInterp
from ..symbolic.symbols import S
from ..terms import ffn
from ..terms.cost import TermTime
from ..terms.dims import Dims
from ..terms.routing import group_tokens
from ..terms.tokens import step_tokens

__all__ = ["host_computed", "offload_s", "tier_s", "with_expert_tiers"]


def _cache_tables(model: ModelSpec, dep: Deployment, D: Dims, tokens_mb) -> dict:
    """Cold experts a micro-batch activates per MoE layer and the share of its token-expert
    assignments they take (:mod:`moesym.routing.cache`), tabulated in the tokens routed and
    interpolated in log T (as the load imbalance is), for ``--expert-cache``."""

    s = dep.routing.skew
    ts, cold, share = cache_tables(model.num_experts, model.experts_per_token, dep.expert_cache,
                                   s, dep.cache_policy)
    T = group_tokens(D, tokens_mb)

    def table(ys):
        if not np.any(ys):
            return sp.Integer(0)
        return LogInterp(T, *[sp.Float(float(v)) for pair in zip(np.log(ts), ys) for v in pair])

    return {"cold": table(cold), "miss_share": table(share)}


def host_computed(model: ModelSpec, dep: Deployment, D: Dims, tokens_mb):
    """The cache tables when cold experts are computed on the host CPU, else None."""
    if dep.expert_cache is None or dep.expert_placement != "host-compute" or not model.is_moe:
        return None
    return _cache_tables(model, dep, D, tokens_mb)


def tier_s(placement: str, cold, rows, expert_bytes, row_flops):
    """Time of a pass's ``cold`` experts (``rows`` token-expert assignments among them): each
    copied over the host link (``stream``), or read once from host DRAM with its rows' GEMMs,
    ``row_flops`` each, on the host CPU (``host-compute``). The one home of this arithmetic:
    the step's tier (:func:`offload_s`) and derive's expert-cache closed form use it."""
    if placement == "stream":
        return cold * expert_bytes / S.host_bw
    return cold * expert_bytes / S.host_dram_bw + rows * row_flops / S.host_flops


def offload_s(model: ModelSpec, dep: Deployment, wl: Workload, D: Dims):
    """Time the expert tiers add to one MoE layer (all micro-batches), or None without a cache.

    ``stream``: each cold expert a micro-batch activates is copied over the host link,
    3 d d_e b_we / W_host (seed 003). ``host-compute``: the host CPU runs the cold experts'
    share of the assignments, reading each cold expert once from its DRAM and doing its
    GEMMs: cold x 3 d d_e b_we / W_cpu + rows x 6 d d_e / F_cpu (llama.cpp's CPU-MoE offload,
    KTransformers); the device does the rest (:func:`moe_layer_costs`)."""
    if dep.expert_cache is None or not model.is_moe:
        return None
    t = step_tokens(wl, dep) / D.micro_batches
    tab = _cache_tables(model, dep, D, t)
    expert_bytes = expert_weights(D.hidden, D.moe_inter, S.w_bytes_expert, D.expert_tp)
    rows = ffn.moe_tokens_per_gpu(D, t) * D.topk * tab["miss_share"]
    return D.micro_batches * tier_s(dep.expert_placement, tab["cold"], rows, expert_bytes,
                                    6 * D.hidden * D.moe_inter / D.expert_tp)


def with_expert_tiers(layer, terms: Mapping[str, TermTime], per_layer: dict, model: ModelSpec,
                      hw: HardwareSpec, dep: Deployment, wl: Workload, D: Dims) -> tuple:
    """(time of one MoE layer, busy time per key) with the expert tiers' copies (or host
    compute, :func:`offload_s`) beside the layer where they are prefetched, else after it;
    unchanged without an expert cache."""
    offload = offload_s(model, dep, wl, D)
    if offload is None:
        return layer, per_layer
    if dep.expert_placement == "host-compute" and not hw.host_dram_Bps:
        raise SpecError(f"--expert-placement host-compute needs the host CPU's figures: "
                        f"hardware {hw.name} has no [host] section (dram_GBps, "
                        "peak_TFLOPs)")
    per_layer = {**per_layer, "expert_offload": offload}
    if dep.prefetch and hw.host_unified:  # one DRAM: copies hide only under
        # the layer's compute, never under its own memory traffic
        offload = offload + D.micro_batches * sum((tt.memory_s for tt in terms.values()),
                                                  sp.Integer(0))
    return (smax(layer, offload) if dep.prefetch else layer + offload), per_layer
