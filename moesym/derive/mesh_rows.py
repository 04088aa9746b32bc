"""How many devices along a mesh's dispatch axis (``moesym derive mesh-rows``).

More rows spread a column's experts over more devices (each reads fewer expert weights) but
lengthen the ring every dispatch and combine travels. The value: the row count whose MoE layer
(experts, dispatch and combine, per layer as ``predict`` reports them) is fastest, evaluating the
step model ``predict`` builds at every power-of-two row count whose devices divide the experts,
at the same requests per row. The closed form is the regime a large batch reaches:

    t(R) = max(tau_gb, A / R) + 2 h tau_mch R

with A = (E / C) 3 d d_e b_we / (W eta_m) the time one device would take to read a whole
column's expert weights, tau_gb the tile-stepped compute floor (a device's experts never take
less), tau_mch the multicast's cost per hop, and h = 1/2 on a ring (the farthest destination
of a batch is R / 2 hops away, dispatch and combine each) or 1 on a line. It is smallest at

    R* = min(sqrt(A / (2 h tau_mch)), A / tau_gb)

(the square root where the weight read still falls with R; past A / tau_gb the expert time is
the floor and more rows only lengthen the ring).
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import sympy as sp

from ..errors import MoesymError
from ..model.step import build_step
from ..numbers.bindings import bindings
from ..specs.deployment import Deployment, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec, expert_weights
from ..symbolic.symbols import S

__all__ = ["mesh_rows", "ask", "PAGES"]


def _candidates(experts: int, cols: int) -> list[int]:
    out, r = [], 1
    while r * cols <= experts:
        if experts % (r * cols) == 0:
            out.append(r)
        r *= 2
    return out


def mesh_rows(model, hw, dep: Deployment, wl: Workload) -> dict:
    """The fastest dispatch-axis length for ``dep``'s mesh (see the module docstring)."""
    if dep.mesh is None or hw.mesh is None:
        raise MoesymError("derive mesh-rows needs --mesh RxC on a mesh hardware file "
                          "(wormhole-tg)")
    if not model.is_moe:
        raise MoesymError(f"derive mesh-rows: {model.name} has no routed experts")
    _, cols = dep.mesh_axes
    rows_axis = dep.dispatch_axis
    rows = []
    for r in _candidates(model.num_experts, cols):
        shape = (r, cols) if rows_axis == "rows" else (cols, r)
        mesh = replace(hw.mesh, shapes=tuple(sorted(set(hw.mesh.shapes) | {shape})))
        d = replace(dep, gpus=r * cols, ep=r * cols, mesh=shape)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = build_step(model, replace(hw, mesh=mesh), d, wl).predict()
        pl = p["per_layer_s"]
        moe = max(pl["moe_routed"], pl["moe_weight_load"]) + pl["dispatch"] + pl["combine"]
        rows.append({"rows": r, "moe_layer_s": moe, "experts_s": max(pl["moe_routed"],
                                                                      pl["moe_weight_load"]),
                     "dispatch_s": pl["dispatch"], "combine_s": pl["combine"],
                     "step_time_s": p["step_time_s"]})
    best = min(rows, key=lambda x: x["moe_layer_s"])
    # the closed form, bound with this configuration's numbers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = build_step(model, hw, dep, wl)
    v = step.values
    wrap = hw.mesh.axis(rows_axis).wrap
    h = sp.Rational(1, 2) if wrap else sp.Integer(1)
    A = (S.experts / cols) * expert_weights(S.hidden, S.moe_inter, S.w_bytes_expert) / (S.hbm_bw * S.eff_mem)
    tiled = S.t_gemm_base in v
    smooth = sp.sqrt(A / (2 * h * S.mc_hop))
    expr = sp.Min(smooth, A / S.t_gemm_base) if tiled else smooth
    allv = bindings(model, hw, dep, wl)
    val = lambda e: float(e.xreplace({s: allv[s] for s in e.free_symbols}))  # noqa: E731
    num = val(expr)
    floor = tiled and num < val(smooth)
    return {"name": "mesh-rows", "value": best["rows"], "closed_form_value": num,
            "latex": sp.latex(expr), "sympy": str(expr), "rows": rows,
            "regime": {"experts": "tile-stepped floor" if floor else "weight read",
                       "dispatch": "farthest hop of the batch"},
            "note": f"{cols} devices across (TP); rows = devices along the dispatch axis "
                    f"({rows_axis}, {'ring' if wrap else 'line'}); same requests per row"}


def ask(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, flags) -> dict:
    """``moesym derive mesh-rows`` at the decode point (each row count is its own deployment)."""
    return mesh_rows(model, hw, dep, wl)


PAGES = ()
