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

import numpy as np
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
from .terms.cost import substitute
from .terms.dims import symbolic_dims

__all__ = ["ClosedForm", "crossover", "routed_times", "attention_overtakes_moe", "max_batch_for_tpot",
           "kink_ep", "optimal_ep", "comm_hidden", "ep_min_tpot", "gpus_for_throughput",
           "numeric_check", "CLOSED_FORMS"]


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

    The step model (roofline time model, whose regimes have clean closed forms; the calibrated
    kernel model's tile and wave steps do not) is solved in the regime that holds at the numeric
    root (brentq on the compiled model); the closed form is that regime's solution, valid under
    its condition. ``moesym optimize`` answers the same question numerically with the default
    kernel model.
    """
    from .timing import RooflineTiming

    step = build_step(model, hw, dep, Workload(Phase.DECODE, batch=1, context=context),
                      timing=RooflineTiming())
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
                      "Step model of the deployment with the roofline time model, ceilings "
                      "relaxed, regime found at the root.",
                      eq, S.batch)


def numeric_check(cf: ClosedForm, lo: float, hi: float) -> float:
    """brentq root of the closed form's equation on the compiled expression, for comparison."""
    vals = {s: v for s, v in cf.values.items() if s != cf.variable}
    f = lambda x: float(evaluate(cf.equation, vals, {cf.variable: x}))  # noqa: E731
    return brentq(f, lo, hi, xtol=1e-12, rtol=1e-15)


CLOSED_FORMS = ("crossover", "crossover_no_lazy", "attention_overtakes_moe", "max_batch_for_tpot",
                "optimal_ep", "comm_hidden", "ep_min_tpot", "gpus_for_throughput")


def kink_ep() -> tuple[sp.Expr, sp.Expr]:
    """(closed form, equation) of the EP where routed compute equals the weight load, when the
    instance grows with EP (N_gpu = e_p) at a fixed decode batch B per attention DP rank.

    compute = 6 (B / t_p) k d d_e / (F_g eta_gg) does not depend on EP; the weight read per GPU
    (E + R) 3 d d_e b_w / (e_p W eta_m) falls as 1 / e_p. Below e_p* more EP shortens the MoE
    layer; above it the layer is compute-bound and only communication and imbalance grow:
    e_p* = (E + R) b_w F_g eta_gg t_p / (2 W eta_m k B).
    """
    comp, load = routed_times(lazy=False)
    eq = (comp - load).xreplace({S.gpus: S.ep})
    (root,) = sp.solve(sp.Eq(comp.xreplace({S.gpus: S.ep}), load.xreplace({S.gpus: S.ep})), S.ep)
    return root, eq


def optimal_ep(model: ModelSpec, hw: HardwareSpec, workload: Workload,
               base: Deployment | None = None, max_ep: int | None = None,
               memory_limit: bool = True) -> ClosedForm:
    """Best EP degree for decode when the instance grows with EP (N_gpu = e_p).

    The closed form is :func:`kink_ep`; ``value`` is the EP (a power of two dividing E, up to
    ``max_ep``) with the highest tokens per GPU per second under the full step model, raised to
    the smallest EP whose per-GPU memory fits when ``memory_limit`` is set.
    """
    if not model.is_moe:
        raise MoesymError(f"{model.name} is dense: it has no expert parallelism to choose")
    base = base or Deployment()
    expr, eq = kink_ep()
    vals = _values(model, hw, base.with_(gpus=1, ep=1), workload)
    vals = {s: v for s, v in vals.items() if s in eq.free_symbols | expr.free_symbols}
    cont = _num(expr, vals)
    max_ep = max_ep or model.num_experts
    eps = [e for e in (2 ** i for i in range(0, 12)) if e <= max_ep and model.num_experts % e == 0]
    table = []
    for e in eps:
        dep = base.with_(gpus=e, ep=e)
        try:
            dep.check_model(model)
        except MoesymError:
            continue
        r = build_step(model, hw, dep, workload).predict()
        fits = True
        if memory_limit:
            from .memory import memory_model

            mm = memory_model(model, hw, dep, workload)
            fits = mm.number(mm.used_expr()) <= mm.values[S.hbm_capacity]
        table.append((e, r["tokens_per_gpu_s"], fits))
    ok = [t for t in table if t[2]]
    if not ok:
        raise MoesymError("no EP up to --max-ep fits in memory at this batch and context")
    best = max(ok, key=lambda t: t[1])
    cf = ClosedForm("optimal_ep", "EP degree where more EP stops shortening the MoE layer",
                    expr, {**vals, S.ep: float(best[0])}, float(best[0]), sp.true,
                    ("Decode, instance grows with EP (N_gpu = e_p), balanced routing, no lazy "
                     f"loading for the closed form (continuous e_p* = {cont:.4g}); value = best "
                     "power-of-two EP of the full step model"
                     + (" among those that fit in memory" if memory_limit else "")),
                    eq, S.ep)
    return cf


def comm_hidden(model: ModelSpec, hw: HardwareSpec, dep: Deployment, context: int,
                b_max: float = 1 << 16) -> ClosedForm:
    """Decode batch per attention DP rank at which communication stops hiding behind compute
    under n >= 2 micro-batches.

    Per micro-batch compute c(B) and dispatch + combine x(B) come from the step model with the
    roofline time model and balanced routing; communication holding a share phi of the SMs
    hides while c >= (1 - phi) x (see :func:`moesym.model.overlap.stage`). The root of
    c(B) = (1 - phi) x(B) is solved in the regime that holds there (each regime is linear in B,
    so the closed form is the ratio of the regime's intercepts and slopes).
    """
    from .model.overlap import resolve_a2a, sm_share
    from .terms.cost import smax
    from .timing import RooflineTiming

    if not model.is_moe or dep.ep == 1:
        raise MoesymError("no expert-parallel communication to hide (dense model or --ep 1)")
    if dep.micro_batches < 2:
        dep = dep.with_(micro_batches=2)
    dep = dep.with_(routing="balanced")
    step = build_step(model, hw, dep, Workload(Phase.DECODE, batch=1, context=context),
                      timing=RooflineTiming())
    t = step.terms
    compute = (t["attention_proj"].total_s + t["attention_core"].total_s
               + smax(t["moe_routed"].total_s, t["moe_weight_load"].total_s)
               + t["shared_expert"].total_s + t["tp_comm"].total_s + t["other"].total_s)
    comm = t["dispatch"].total_s + t["combine"].total_s
    phi = sm_share(resolve_a2a(dep, Phase.DECODE))
    eq = substitute(compute - (1 - phi) * comm, {S.micro_batches: sp.Integer(dep.micro_batches)})
    vals = {k: v for k, v in step.values.items() if k in eq.free_symbols and k != S.batch}
    f = lambda b: float(evaluate(eq, vals, {S.batch: b}))  # noqa: E731
    lo, hi = float(dep.micro_batches), b_max
    note = (f"{dep.micro_batches} micro-batches, balanced routing, roofline terms; the closed form "
            "holds in the regime found at the root.")
    if f(lo) < 0 and f(hi) < 0:
        return ClosedForm("comm_hidden", "Batch where communication stops hiding behind compute",
                          sp.oo, vals, float("inf"), sp.true,
                          note + " Communication is never hidden up to the batch cap.", eq, S.batch)
    if f(lo) >= 0 and f(hi) >= 0:
        return ClosedForm("comm_hidden", "Batch where communication stops hiding behind compute",
                          sp.Integer(0), vals, 0.0, sp.true,
                          note + " Communication is hidden at every batch.", eq, S.batch)
    root, x0 = solve_at_root(eq, S.batch, vals, lo, hi)
    value = _num(root.value, vals) if root.value.free_symbols else float(root.value)
    return ClosedForm("comm_hidden", "Batch where communication stops hiding behind compute",
                      root.value, vals, value, root.condition, note, eq, S.batch)


def _instance_time(model: ModelSpec, hw: HardwareSpec, base: Deployment, context: int,
                   per_rank_batch: sp.Expr) -> tuple[sp.Expr, dict]:
    """Roofline decode step time of an instance that grows with EP (N_gpu = e_p), with the
    per-attention-DP-rank batch given as an expression of e_p; lazy loading off (every local
    expert is read each step: exact once every expert gets a token, conservative below).
    Returns (relaxed expression in e_p and the workload symbols, numeric values)."""
    from .solve import RELAX_CEILING, apply_rules
    from .timing import RooflineTiming

    if not model.is_moe:
        raise MoesymError(f"{model.name} is dense: it has no expert parallelism to choose")
    rep = base.with_(gpus=16, ep=16, routing="balanced")
    step = build_step(model, hw, rep, Workload(Phase.DECODE, batch=1, context=context),
                      timing=RooflineTiming())
    expr = substitute(substitute(step.expr, {S.gpus: S.ep}), {S.batch: per_rank_batch})
    lazy = [p for p in expr.atoms(sp.Pow) if p.base.has(S.topk) and p.base.has(S.experts)]
    expr = apply_rules(substitute(expr, {p: 0 for p in lazy}), [RELAX_CEILING])
    vals = {k: v for k, v in step.values.items() if k in expr.free_symbols and k != S.ep}
    return expr, vals


def ep_min_tpot(model: ModelSpec, hw: HardwareSpec, total_batch: int, context: int,
                base: Deployment | None = None, max_ep: int | None = None) -> ClosedForm:
    """EP degree that minimizes the decode step time (TPOT) of a fixed number of requests
    B_tot spread over an instance that grows with EP (N_gpu = e_p, B = B_tot t_p / e_p per
    attention DP rank).

    Per-token work, routed compute and the routed-weight read per GPU fall as 1 / e_p; the
    replicated attention weights stay; a ring all-gather's hop latency grows with e_p (one
    tau_out per node beyond the first). In the regime that holds at the optimum the step time
    is A / e_p + C e_p + const, so dT/de_p = 0 gives the square root e_p* = sqrt(A / C); with
    DeepEP (no latency that grows with e_p) the step time falls all the way to the largest EP.
    """
    from scipy.optimize import minimize_scalar

    from .solve import branch_at, solve_smooth

    base = base or Deployment()
    expr, vals = _instance_time(model, hw, base, context,
                                S.total_batch * S.tp / S.ep)
    vals[S.total_batch] = float(total_batch)
    max_ep = float(max_ep or model.num_experts)
    f = lambda e: float(evaluate(expr, vals, {S.ep: e}))  # noqa: E731
    lo = float(base.gpus_per_node) + 1e-6  # ring latency grows only across nodes
    if max_ep <= lo:
        raise MoesymError(f"--max-ep {int(max_ep)} leaves no EP beyond one node to choose")
    grid = np.geomspace(lo, max_ep, 64)
    i = int(np.argmin([f(e) for e in grid]))
    if i in (0, len(grid) - 1):
        where = "smallest" if i == 0 else "largest"
        raise MoesymError(f"step time is monotone in EP here (best at the {where} EP): no "
                          f"interior optimum with --a2a {base.a2a.value}; try --a2a allgather")
    r = minimize_scalar(f, bounds=(grid[i - 1], grid[i + 1]), method="bounded",
                        options={"xatol": 1e-10})
    e0 = float(r.x)
    branch, cond, _labels = branch_at(expr, S.ep, {**vals, S.ep: e0})
    root = solve_smooth(sp.diff(branch, S.ep), S.ep, vals, e0)
    value = _num(root, vals)
    return ClosedForm("ep_min_tpot", "EP degree that minimizes TPOT at a fixed total batch", root,
                      vals, value, substitute(cond, {S.ep: root}),
                      (f"Decode, roofline terms, balanced routing, every local expert read, "
                       f"A2A {base.a2a.value}; N_gpu = e_p; the square root holds in the regime "
                       f"found at the numeric optimum (e_p = {e0:.6g})."),
                      expr, S.ep)


def gpus_for_throughput(model: ModelSpec, hw: HardwareSpec, target_tokens_s: float,
                        tpot_s: float, context: int, base: Deployment | None = None,
                        max_gpus: int = 4096) -> ClosedForm:
    """Smallest instance (N_gpu = e_p GPUs) whose decode throughput reaches X tokens/s while
    every request gets a token each tau_tpot seconds.

    The instance serves B_tot = X tau_tpot requests, B = X tau_tpot t_p / e_p per attention DP
    rank; it meets the target when its step time T(B, e_p) <= tau_tpot. In the regime that holds
    at the root, T = c_0 + c_1 / e_p (+ c_2 e_p for ring latencies): per-token work c_1 / e_p
    scales with X tau_tpot, the routed-weight read (E + R) 3 d d_e b_w / (e_p W eta_m) adds to
    c_1, and the replicated attention weights and fixed latencies form c_0, so
    e_p* = c_1 / (tau_tpot - c_0) (a quadratic's root with ring latencies). No instance
    reaches X when tau_tpot <= c_0.
    """
    base = base or Deployment()
    expr, vals = _instance_time(model, hw, base, context,
                                S.target_tokens_s * S.tpot_target * S.tp / S.ep)
    vals[S.target_tokens_s] = float(target_tokens_s)
    vals[S.tpot_target] = float(tpot_s)
    eq = expr - S.tpot_target
    f = lambda e: float(evaluate(eq, vals, {S.ep: e}))  # noqa: E731
    grid = np.geomspace(1.0, float(max_gpus), 200)
    ok = np.array([f(e) <= 0 for e in grid])
    if not ok.any():
        raise MoesymError(f"no instance up to {max_gpus} GPUs reaches {target_tokens_s:g} "
                          f"tokens/s at TPOT {tpot_s * 1e3:g} ms: relax --tpot-ms")
    i = int(np.argmax(ok))  # the first grid point that meets the target
    if i == 0:
        return ClosedForm("gpus_for_throughput", "Smallest instance meeting a throughput target",
                          sp.Integer(1), vals, 1.0, sp.true,
                          "One GPU already meets the target.", eq, S.ep)
    root, _x0 = solve_at_root(eq, S.ep, vals, grid[i - 1], grid[i])
    value = _num(root.value, vals)
    valid = [e for e in (2 ** i for i in range(0, 13))
             if e >= value - 1e-9 and model.num_experts % e == 0]
    pick = f"; the smallest power-of-two EP dividing E at or above it is {valid[0]}" if valid else ""
    return ClosedForm("gpus_for_throughput", "Smallest instance meeting a throughput target",
                      root.value, vals, value, root.condition,
                      ("Decode, roofline terms, balanced routing, every local expert read, "
                       f"A2A {base.a2a.value}, N_gpu = e_p; continuous GPU count" + pick
                       + ". Memory is not part of the closed form: check with moesym memory."),
                      eq, S.ep)
