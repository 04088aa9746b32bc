"""The time of one layer: costs turned into time by a time model, the operations of the
overlap schedule, and the layer's time under the schedule the deployment runs."""

from __future__ import annotations

from typing import Mapping

import sympy as sp

from ..schedules import load, resolve_name, steady_state
from ..specs.deployment import Deployment, Workload
from ..specs.model import ModelSpec
from ..symbolic.expr import smax, smin
from ..symbolic.symbols import S
from ..terms.cost import Cost, KernelClass, TermTime
from . import overlap
from .layer_costs import quantized

__all__ = ["layer_time", "operation_times", "reserved_terms", "timed"]


def timed(costs: dict, timing) -> dict:
    """The breakdown keys' costs turned into time by ``timing`` (one TermTime per key)."""
    return loads_overlap({k: _sum_times(k, [timing.time(c) for c in v]) for k, v in costs.items()},
                         _serial_share(costs, timing))


def _serial_share(costs: dict, timing) -> float:
    """The fused-MoE backend's serial share where the routed experts run as grouped GEMMs (a
    single expert stands in for a dense FFN as plain GEMMs: none)."""
    grouped = any(c.kind is KernelClass.GROUPED_GEMM for c in costs.get("moe_routed", ()))
    return timing.grouped_serial_share() if grouped else 0.0


def loads_overlap(terms: dict, share) -> dict:
    """The routed experts' grouped GEMMs and their weight read as the fused-MoE kernel runs them:
    where its fit gives a share ``s`` of the shorter of tile and load time not hidden under the
    longer (``grouped_serial_frac``, :func:`moesym.kernels.analytical.gemm_time`, fitted on
    whole fused-MoE layers with the weights in), the experts take max(compute, load) +
    s min(compute, load), not the max alone. s min is added to both terms, so that every
    max(moe_routed, moe_weight_load) of the layer, its schedule and the reports gives it.
    Unchanged where s = 0 (every [kernel] fit) or the layer has no routed experts."""
    if not share or "moe_weight_load" not in terms:
        return terms
    r, w = terms["moe_routed"], terms["moe_weight_load"]
    z = sp.Integer(0)
    extra = TermTime("experts_load_overlap", z, z, z,
                     sp.Float(share) * smin(r.compute_s, w.memory_s))
    return {**terms, "moe_routed": r + extra, "moe_weight_load": w + extra}


def _sum_times(name: str, times: list[TermTime]) -> TermTime:
    if not times:
        z = sp.Integer(0)
        return TermTime(name, z, z, z, z)
    out = times[0]
    for t in times[1:]:
        out = out + t
    return out


# kernels whose schedule operation differs from their breakdown key's (data, by kernel name)
_PART_OPS = {"o_proj": "attn_core", "o_a_proj": "attn_core", "o_b_proj": "attn_core",
             "router": "router", "experts_act": "experts",
             "moe_elementwise": "experts", "moe_dispatch": "experts", "moe_combine": "experts",
             "experts_in_cast": "experts",
             "experts_down_cast": "experts", "shared_act": "shared", "shared_cast": "shared"}


_KEY_OPS = {"attention_proj": "attn_prep", "attention_core": "attn_core",
            "shared_expert": "shared", "tp_comm": "attn_core", "other": "attn_prep"}


def operation_times(terms: Mapping[str, TermTime], n) -> dict:
    """Compute time of each schedule operation of one micro-batch's MoE layer
    (:mod:`moesym.schedules`): every kernel of the layer lands in exactly one operation, so they
    add up to the layer's compute time."""
    ops: dict = {}
    for key, tt in terms.items():
        if key in ("dispatch", "combine", "moe_routed", "moe_weight_load"):
            continue
        for p in getattr(tt, "parts", (tt,)):
            op = _PART_OPS.get(p.name, _KEY_OPS[key])
            ops[op] = ops.get(op, 0) + p.total_s
    ops["experts"] = ops.get("experts", 0) + smax(terms["moe_routed"].total_s,
                                                  terms["moe_weight_load"].total_s)
    ops["attn_prep"] = ops.get("attn_prep", 0) + S.t_layer / n
    return ops


def reserved_terms(costs: dict, timing, model: ModelSpec, dep: Deployment) -> dict | None:
    """The breakdown keys' times with the FP8 GEMMs (DeepGEMM: the weight classes that quantize
    their activations) capped at N_SM - N_SM_comm SMs: their compute time x N_SM / (N_SM -
    N_SM_comm), their memory time unchanged (the remaining SMs still draw the HBM bandwidth).
    None when no weight class runs FP8 GEMMs (nothing is capped)."""
    q = quantized(model, dep)
    if not any(q.values()):
        return None
    cap = S.sms / (S.sms - S.comm_sms)

    def time(c: Cost) -> TermTime:
        t = timing.time(c)
        if c.kind in (KernelClass.GEMM, KernelClass.GROUPED_GEMM) and q[c.component or "attn"]:
            return TermTime(t.name, t.compute_s * cap, t.memory_s, t.comm_s, t.overhead_s)
        return t

    return loads_overlap({k: _sum_times(k, [time(c) for c in v]) for k, v in costs.items()},
                         _serial_share(costs, timing))


def _scheduled(name: str, terms, compute, dep: Deployment, wl: Workload, n,
               reserved=None) -> tuple:
    """(layer time, once-per-step edges, micro-batch count the schedule runs or None for the
    ideal bound) of one MoE layer under the named schedule. ``reserved``: a function giving
    the terms with FP8 GEMMs on the SMs communication leaves (:func:`reserved_terms`), for layouts
    that cap them (``gemm_sms = "reserve_comm"``; they then compete with no transfer, phi = 0)."""
    d, c = terms["dispatch"].total_s, terms["combine"].total_s
    sched = load(name)
    if sched.ideal:
        # the shared expert with its activation and casts, as the schedules' "shared" runs it
        shared = operation_times(terms, n).get("shared", 0)
        return (overlap.layer_time(compute, d, c, n, dep, wl, shared_mb=shared),
                overlap.step_edges(d, c, n, dep, wl), None)
    lay = sched.layout(wl.phase.engine)
    phi = overlap.sm_share(dep.resolved_a2a(wl.phase))
    capped = reserved() if lay.gemm_sms == "reserve_comm" and reserved and phi != 0 else None
    if capped is not None:
        terms, phi = capped, 0
    period, edges = steady_state(lay, operation_times(terms, n), {"dispatch": d, "combine": c},
                                 phi, smax=smax)
    return period, edges, lay.micro_batches


def layer_time(terms: Mapping[str, TermTime], dep: Deployment, wl: Workload, n,
                reserved=None) -> tuple:
    """(overlapped time of one layer for the whole batch, its compute-only time, the
    once-per-step fill and drain of the overlap schedule); ``reserved`` as
    :func:`_scheduled`'s."""
    expert = smax(terms["moe_routed"].total_s, terms["moe_weight_load"].total_s)
    compute = (terms["attention_proj"].total_s + terms["attention_core"].total_s + expert
               + terms["shared_expert"].total_s + terms["tp_comm"].total_s
               + terms["other"].total_s + S.t_layer / n)
    if terms["dispatch"].total_s == 0 and terms["combine"].total_s == 0:
        return n * compute, n * compute, sp.Integer(0)  # nothing to overlap (EP 1, dense layer)
    if dep.overlap != "auto":  # pinned: valid only at the schedule's micro-batch count
        layer, edges, mb = _scheduled(dep.overlap, terms, compute, dep, wl, n, reserved)
        if mb is not None:
            layer = sp.Piecewise((layer, sp.Eq(n, mb)), (sp.nan, True))
            edges = sp.Piecewise((edges, sp.Eq(n, mb)), (sp.nan, True))
        return layer, n * compute, edges
    # auto: what the engine runs for the micro-batch count (moesym.schedules.resolve_name)
    ph = wl.phase.engine
    built = [(_scheduled(resolve_name("auto", k, ph), terms, compute, dep, wl, n, reserved), k)
             for k in (1, 2)]
    beyond = _scheduled(resolve_name("auto", 3, ph), terms, compute, dep, wl, n, reserved)
    layer = sp.Piecewise(*[(b[0], sp.Eq(n, k)) for b, k in built], (beyond[0], True))
    edges = sp.Piecewise(*[(b[1], sp.Eq(n, k)) for b, k in built], (beyond[1], True))
    return layer, n * compute, edges
