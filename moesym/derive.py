"""Closed forms derived from the composed cost terms, each with its regime and a worked number.

Every closed form is built from the same term functions the step model uses, solved by SymPy
(through the regime-enumeration solver where Max / Min appear), and checked against a numeric
root of the compiled expressions (brentq) by the tests.

>>> import moesym as ms
>>> cf = crossover(ms.load_model("deepseek-v3"), ms.load_hardware("h800"),
...                ms.Deployment(gpus=128, ep=128, weights="fp8"), lazy=False)
>>> cf.expr
F_g*b_w*eta_gg*t_p*(E + R_e)/(2*N_gpu*W*eta_m*k)
>>> round(cf.value, 1)
54.7
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import sympy as sp
from scipy.optimize import brentq

from .compile import evaluate
from .errors import MoesymError
from .model.bindings import bindings
from .model.step import build_step
from .specs.deployment import Deployment, Phase, Workload
from .specs.hardware import HardwareSpec
from .specs.model import ModelSpec
from .symbols import S
from .solve import solve_regimes
from .solve.regimes import numeric_roots, solve_at_root
from .terms import attention as att
from .terms import ffn
from .terms.dims import symbolic_dims

__all__ = ["ClosedForm", "crossover", "routed_times", "attention_overtakes_moe", "max_batch_for_tpot",
           "CLOSED_FORMS"]


@dataclass(frozen=True)
class ClosedForm:
    """A solved expression, the numbers that bind it, and its value for one configuration."""

    name: str
    title: str
    expr: sp.Expr
    values: Mapping[sp.Symbol, float] = field(repr=False)
    value: float
    condition: sp.Basic = sp.true
    assumptions: str = ""
    equation: sp.Expr = sp.Integer(0)
    variable: sp.Symbol | None = None

    @property
    def latex(self) -> str:
        return sp.latex(self.expr)

    def as_dict(self) -> dict:
        return {"name": self.name, "latex": self.latex, "sympy": str(self.expr), "value": self.value,
                "condition": str(self.condition)}


def _values(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload | None = None) -> dict:
    return bindings(model, hw, dep, wl or Workload(Phase.DECODE, batch=1, context=4096))


def _num(expr: sp.Expr, values: Mapping) -> float:
    return float(evaluate(expr, values, {}))


def routed_times(lazy: bool) -> tuple[sp.Expr, sp.Expr]:
    """(compute time, weight-load time) of the routed experts on one GPU for decode batch B.

    compute = 6 (B / t_p) k d d_e / (F_g eta_gg)   (balanced routing, one micro-batch)
    load    = touched x 3 d d_e / etp x b_w / (W eta_m), touched = (E + R) / e_p without lazy
              loading, (E + R) / e_p (1 - (1 - k / E)^(B N_gpu / t_p)) with it.
    """
    D = symbolic_dims()
    B = S.batch
    comp = sp.Add(*(c.flops for c in ffn.routed_expert_compute(D, B))) / (S.flops_gemm * S.eff_grouped)
    touched = D.local_experts
    if lazy:
        touched = touched * (1 - (1 - D.topk / D.experts) ** (B / D.tp * D.gpus))
    load = ffn.routed_expert_weight_load(D, touched).hbm_bytes / (S.hbm_bw * S.eff_mem)
    return comp, load


def crossover(model: ModelSpec, hw: HardwareSpec, dep: Deployment, lazy: bool = True) -> ClosedForm:
    """Decode batch per GPU where the routed experts turn from weight-load- to compute-bound.

    Without lazy loading: B* = F_g eta_gg b_w t_p (E + R) / (2 N_gpu W eta_m k), i.e. seed 000's
    R / (2S) tokens across the EP group. With lazy loading the load term saturates as
    1 - q^(gB) (q = 1 - k/E, g = N_gpu / t_p) and the root is
    B* = (A - W0(lam A e^(lam A)) / lam) / g with lam = ln q, A = g B*_no-lazy (LambertW); it
    exists when -lam A > 1, else the experts are compute-bound from the first token.
    """
    if not model.is_moe:
        raise MoesymError(f"{model.name} is dense: it has no routed-expert crossover")
    dep.check_model(model)
    vals = _values(model, hw, dep)
    comp, load = routed_times(lazy=False)
    (b0,) = sp.solve(sp.Eq(comp, load), S.batch)
    title = "Routed-expert crossover batch (weight-load to compute bound)"
    if not lazy:
        expr = b0
        assumptions = ("Balanced routing, one micro-batch, every local expert's weights read each "
                       "step (no lazy loading); compute at F_g eta_gg, weights at W eta_m.")
        eq = comp - load
    else:
        g = S.gpus / S.tp
        lam = sp.log(1 - S.topk / S.experts)
        A = g * b0
        expr = (A - sp.LambertW(lam * A * sp.exp(lam * A)) / lam) / g
        comp_l, load_l = routed_times(lazy=True)
        eq = comp_l - load_l
        assumptions = ("Balanced routing, one micro-batch, lazy expert loading under uniform "
                       "routing: only experts with at least one token are read. Valid (positive) "
                       "when -ln(1 - k/E) g B*_no-lazy > 1.")
        A_num = _num(A, vals)
        lam_num = _num(lam, vals)
        if -lam_num * A_num <= 1:
            raise MoesymError("with lazy loading the routed experts are compute-bound from the "
                              "first token here; no crossover")
    value = _num(expr, vals)
    return ClosedForm("crossover" + ("" if lazy else "_no_lazy"), title, expr,
                      {s: v for s, v in vals.items() if s in eq.free_symbols | expr.free_symbols},
                      value, sp.true, assumptions, eq, S.batch)


def attention_overtakes_moe(model: ModelSpec, hw: HardwareSpec, dep: Deployment,
                            context: int) -> ClosedForm:
    """Decode batch per GPU where attention's KV read (one layer) overtakes the MoE layer.

    Attention core: max(FLOPs / (F_a eta_a), bytes / (W eta_m)) with bytes = B L kv_bytes + q/o;
    MoE: max(routed compute, weight load) (no lazy loading). Solved per regime; the root that
    holds at the given numbers is reported, as a function of L.
    """
    if not model.is_moe:
        raise MoesymError(f"{model.name} is dense: no MoE layer to compare with")
    D = symbolic_dims()
    core = att.attention_core_decode(D, S.batch, S.context, model.is_mla)
    t_att = sp.Max(core.flops / (S.flops_attn * S.eff_attn), core.hbm_bytes / (S.hbm_bw * S.eff_mem))
    comp, load = routed_times(lazy=False)
    eq = t_att - sp.Max(comp, load)
    vals = _values(model, hw, dep, Workload(Phase.DECODE, batch=1, context=context))
    vals = {s: v for s, v in vals.items() if s in eq.free_symbols}
    roots = [r for r in solve_regimes(eq, S.batch)]
    good = []
    for r in roots:
        nv = numeric_roots(eq, S.batch, vals)
        try:
            v = _num(r.value, vals)
        except (TypeError, ValueError):
            continue
        if v > 0 and any(abs(v - x) <= 1e-9 * max(1, v) for x in nv):
            good.append((r, v))
    if not good:
        raise MoesymError(f"attention never overtakes the MoE layer at context {context}")
    r, v = min(good, key=lambda rv: rv[1])
    return ClosedForm("attention_overtakes_moe", "Batch where attention's KV read overtakes the MoE layer",
                      r.value, vals, v, r.condition,
                      "One layer, decode, balanced routing, no lazy loading, no overlap.", eq, S.batch)


def max_batch_for_tpot(model: ModelSpec, hw: HardwareSpec, dep: Deployment, context: int,
                       tpot_s: float, b_max: float = 1 << 16) -> ClosedForm:
    """Largest decode batch per attention-DP rank whose step time meets ``tpot_s``.

    The step model is solved in the regime that holds at the numeric root (brentq on the
    compiled model); the closed form is that regime's solution, valid under its condition.
    """
    step = build_step(model, hw, dep, Workload(Phase.DECODE, batch=1, context=context))
    vals = dict(step.values)
    t1 = step.evaluate(batch=1.0)
    if float(t1) > tpot_s:
        raise MoesymError(f"even one request per GPU takes {float(t1):.4g} s > --tpot target")
    tmax = float(step.evaluate(batch=float(b_max)))
    if tmax <= tpot_s:
        return ClosedForm("max_batch_for_tpot", "Largest batch meeting a TPOT target", sp.Float(b_max),
                          vals, b_max, sp.true, "batch cap reached")
    eq = step.expr - tpot_s
    root, x0 = solve_at_root(eq, S.batch, vals, 1.0, b_max)
    value = _num(root.value, vals) if root.value.free_symbols - {S.batch} else float(root.value)
    return ClosedForm("max_batch_for_tpot", "Largest batch meeting a TPOT target", root.value,
                      {s: v for s, v in vals.items() if s != S.batch}, value, root.condition,
                      "Step model of the deployment, ceilings relaxed, regime found at the root.",
                      eq, S.batch)


def numeric_check(cf: ClosedForm, lo: float, hi: float) -> float:
    """brentq root of the closed form's equation on the compiled expression, for comparison."""
    vals = {s: v for s, v in cf.values.items() if s != cf.variable}
    f = lambda x: float(evaluate(cf.equation, vals, {cf.variable: x}))  # noqa: E731
    return brentq(f, lo, hi, xtol=1e-12, rtol=1e-15)


CLOSED_FORMS = ("crossover", "crossover_no_lazy", "attention_overtakes_moe", "max_batch_for_tpot")
