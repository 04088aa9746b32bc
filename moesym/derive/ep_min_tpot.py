"""``moesym derive ep-min-tpot``: the EP degree that minimizes TPOT for a fixed number of requests
spread over an instance that grows with EP (the square-root form)."""

from __future__ import annotations

import sympy as sp

from ..errors import MoesymError
from ..specs.deployment import Deployment, Workload
from ..specs.hardware import HardwareSpec, load_hardware
from ..readers.model import load_model
from ..specs.model import ModelSpec
from ..symbolic.expr import substitute
from ..symbolic.symbols import S
from ..solve.regimes import branch_at, solve_smooth
from .closed_form import ClosedForm, root_sensitivity
from .instance import INSTANCE_NOTE, argmin_ep, instance_table, instance_time, table_text
from .registry import Page

__all__ = ["ep_min_tpot", "ask", "PAGES"]


def ep_min_tpot(model: ModelSpec, hw: HardwareSpec, total_batch: int, context: int,
                base: Deployment | None = None, max_ep: int | None = None) -> ClosedForm:
    """EP degree that minimizes the decode step time (TPOT) of a fixed number of requests
    B_tot spread over an instance that grows with EP (N_gpu = e_p, B = B_tot t_p / e_p per
    attention DP rank).

    ``value``: the power-of-two EP (dividing the experts, up to ``max_ep``) with the shortest
    step under the model ``predict`` evaluates (the deployment's time model and routing), among
    those that fit in memory. The closed form is the continuous relaxation on the roofline:
    per-token work, routed compute and the routed-weight read per GPU fall as 1 / e_p; the
    replicated attention weights stay; a ring all-gather's hop latency grows with e_p (one
    tau_out per node beyond the first). In the regime that holds at the optimum the roofline
    step time is A / e_p + C e_p + const, so dT/de_p = 0 gives the square root
    e_p* = sqrt(A / C); with DeepEP (no latency that grows with e_p) the step time falls all
    the way to the largest EP.
    """
    base = base or Deployment()
    max_ep = float(max_ep or model.num_experts)
    lo = float(base.gpus_per_node) + 1e-6  # ring latency grows only across nodes
    per_rank = S.total_batch * S.tp / S.ep
    rows = instance_table(model, hw, base, context, lambda e: total_batch * base.tp / e, max_ep)
    fit = [r for r in rows if r[2]]
    if not fit:
        raise MoesymError(f"no EP up to {int(max_ep)} fits {total_batch} requests in memory")
    value = min(fit, key=lambda r: r[1])[0]
    expr, vals = instance_time(model, hw, base, context, per_rank)
    vals[S.total_batch] = float(total_batch)
    e_roof = argmin_ep(expr, vals, lo, max_ep) if max_ep > lo else None
    root, cond, closed, extra, sens = None, sp.true, None, "", ()
    if e_roof is not None:
        branch, cond, _labels = branch_at(expr, S.ep, {**vals, S.ep: e_roof})
        root = solve_smooth(sp.diff(branch, S.ep), S.ep, vals, e_roof)
        closed = float(substitute(root, {k: sp.Float(v) for k, v in vals.items()}).evalf())
        sens = root_sensitivity(sp.diff(branch, S.ep), S.ep, vals, closed)
        # the regime condition stays in e_p (valid where it holds at e_p*), not with the root
        extra = f": e_p* = {closed:.4g} (the square root of its regime)"
    else:
        extra = (": monotone in e_p, no interior optimum (no latency that grows with EP, e.g. "
                 "DeepEP); the step time falls to the largest EP")
    note = INSTANCE_NOTE.format(timing=base.timing, table=table_text(rows), extra=extra)
    return ClosedForm("ep_min_tpot", "EP degree that minimizes TPOT at a fixed total batch", root,
                      vals, float(value), cond, note + f" A2A {base.a2a.value}.", expr, S.ep,
                      closed, "smooth" if root is not None else "numeric", {}, base.timing,
                      sensitivity=sens)


def ask(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, flags) -> ClosedForm:
    """``moesym derive ep-min-tpot`` at the decode point's context."""
    return ep_min_tpot(model, hw, flags.total_batch, wl.context, dep, max_ep=flags.max_ep)


PAGES = (Page("ep_min_tpot",
              "DeepSeek-V3 on H800, FP8, all-gather A2A, 4096 requests in flight, context 4096",
              lambda timing: ep_min_tpot(load_model("deepseek-v3"), load_hardware("h800"), 4096,
                                         4096, Deployment(weights="fp8", a2a="allgather",
                                                          timing=timing)),
              ep_min_tpot),)
