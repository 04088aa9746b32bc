"""Closed forms solved on the model that ``predict`` evaluates.

Every ``derive`` command builds the step model of its arguments exactly as ``predict`` does (same
time model, ``--timing kernel`` by default: the calibrated kernel model; same overlap schedule,
routing and flags), forms its equation from the step model's own expressions, and answers in
two parts (:mod:`moesym.solve.model_root`):

- ``value``: the root of the full model, found by evaluating the compiled model (every integer
  batch, or a fine scan refined by bisection): what ``predict`` shows on either side of it;
- ``expr``: the closed form of the regime that holds there, with the tile and wave counts of that
  regime frozen and each maximum on its active branch (``kind = smooth``: equal to ``value``),
  or, where the answer is a step of the model (a tile or wave count, or a change of form),
  where that step happens (``kind = step``); ``closed_value`` is its number.

``--timing roofline`` runs the same code on the roofline (peaks x the [kernel] fractions), the teaching
form of the same equations (derivations/ shows both).

>>> import moesym as ms
>>> cf = crossover(ms.load_model("deepseek-v3"), ms.load_hardware("h800"),
...                ms.Deployment(gpus=128, ep=128, weights="fp8", timing="roofline"))
>>> cf.value, cf.kind  # the first decode batch per GPU whose routed experts are compute-bound
(51.0, 'step')
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import sympy as sp

from ..symbolic.compile import evaluate
from ..errors import MoesymError
from ..model.step import StepModel, build_step
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec, expert_weights
from ..symbolic.symbols import S
from .model_root import ModelRoot, closed_form_at, first_change, model_root, sign_changes
from .regime_form import RegimeForm, pin, printed, regime_form, tidy
from .sensitivity import root_elasticities
from ..symbolic.expr import restrict, smax, substitute, symbols_of
from ..symbolic.printing import latex, session, text

__all__ = ["ClosedForm", "crossover", "attention_overtakes_moe", "max_batch_for_tpot",
           "optimal_ep", "comm_hidden", "ep_min_tpot", "gpus_for_throughput", "solve",
           "expert_cache_hides", "sensitivity", "max_batch_for_memory",
           "regime_at", "max_concurrency", "CLOSED_FORMS"]

B_MAX = 1 << 16  # widest decode batch per attention-DP rank scanned



def _finite_or_none(v):
    """``v``, or None where it is a number that is not finite (JSON has no infinity)."""
    import math

    return None if isinstance(v, float) and not math.isfinite(v) else v

@dataclass(frozen=True)
class ClosedForm:
    """An answer of ``derive``: the full model's root ``value``, the closed form ``expr`` of the
    regime at it (None where there is none), its number ``closed_value``, and how they relate.

    ``equation``: the expression whose root is sought (in ``variable``, the other symbols bound
    by ``values``); ``kind``: smooth, step or numeric (:class:`~moesym.solve.model_root.ModelRoot`);
    ``regime``: per breakdown key, what limits it at the root (the rule ``predict`` reports).
    """

    name: str
    title: str
    expr: sp.Expr | None
    values: Mapping[sp.Symbol, float] = field(repr=False)
    value: float
    condition: sp.Basic = sp.true
    assumptions: str = ""
    equation: sp.Expr = sp.Integer(0)
    variable: sp.Symbol | None = None
    closed_value: float | None = None
    kind: str = "smooth"
    regime: Mapping[str, str] = field(default_factory=dict)
    timing: str = "kernel"
    # the two sides of the equation (label, expression in ``variable``), for the pages' plots
    sides: tuple = field(default=(), repr=False, compare=False)
    # the regime's smooth closed form with the target in it (moesym.solve.regime_form), what
    # pins the exact answer on a step (one line each), and the answer's elasticities
    # ((symbol, d ln answer / d ln symbol), largest first) on that smooth form
    smooth: RegimeForm | None = field(default=None, repr=False, compare=False)
    pin: tuple = field(default=(), compare=False)
    sensitivity: tuple = field(default=(), repr=False, compare=False)
    # the targets that give this same answer [low, high) (the TPOT answer), else None
    target_range: tuple | None = field(default=None, compare=False)

    @property
    def latex(self) -> str:
        return latex(tidy(self.expr)) if self.expr is not None else ""

    def as_dict(self) -> dict:
        with session():  # one printer for the answer's forms, which share subexpressions
            return self._as_dict()

    def _as_dict(self) -> dict:
        from .regime_form import legend

        return {"name": self.name, "latex": self.latex,
                "sympy": printed(self.expr) if self.expr is not None else "",
                # no answer within the searched range ("hidden at every batch up to ..."): null
                # in JSON, the note says why (the text prints inf)
                "value": _finite_or_none(self.value),
                "closed_form_value": _finite_or_none(self.closed_value), "kind": self.kind,
                "regime": dict(self.regime), "condition": text(self.condition),
                "timing": self.timing, "note": self.assumptions,
                "smooth": self.smooth.as_dict() if self.smooth is not None else None,
                "pin": list(self.pin),
                # the contract's names: the closed form with the target in it (the regime's
                # smooth form where one exists, else the answer's own form) and what pins it
                "closed_form": (printed(self.smooth.expr) if self.smooth is not None
                                and self.smooth.expr is not None else
                                printed(self.expr) if self.expr is not None else None),
                "pinned_by": list(self.pin) or None,
                "target_range": list(self.target_range) if self.target_range else None,
                "sensitivity": [{"symbol": str(s), "elasticity": e} for s, e in self.sensitivity],
                "legend": legend([self.expr, self.smooth.expr if self.smooth else None])}


def _decode_step(model: ModelSpec, hw: HardwareSpec, dep: Deployment, context: int) -> StepModel:
    dep.check_overlap(Phase.DECODE)
    return build_step(model, hw, dep, Workload(Phase.DECODE, batch=1, context=context))


def regime_at(step: StepModel, overrides: Mapping[sp.Symbol, float]) -> dict:
    """What limits each breakdown key of ``step`` with ``overrides`` bound (``predict``'s
    ``bounds`` rule): ``{key: compute | memory | communication | overhead}``, the routed
    experts by their roofline (compute or memory)."""
    from ..numbers.metrics import key_bounds

    cm = step.compiled
    known = set(cm.parts[0]["args"]) | set(cm.parts[0]["static"])
    nums = cm.evaluate(0, {str(k): float(v) for k, v in overrides.items() if str(k) in known})
    out = {}
    for k, b in key_bounds(nums, step.model, step.deployment).items():
        if b["bound"] != "none":
            out[k] = b.get("roofline", b["bound"]) if k == "routed_experts" else b["bound"]
    return out


def _layers(lhs: sp.Expr, rhs: sp.Expr, var: sp.Symbol, values: Mapping, exact: float,
            bracket: tuple[float, float] | None, span: tuple[float, float],
            where: Mapping | None = None, scale: sp.Expr | None = None) -> tuple:
    """(smooth regime form, pin lines, top sensitivities) of an answer ``exact`` of
    ``lhs = rhs`` in ``var`` (module :mod:`moesym.solve.regime_form`): the pin lists the tile
    and wave counts that change across ``bracket`` (an integer answer's two sides)."""
    form = regime_form(lhs, rhs, var, values, max(exact, span[0]), span, scale)
    lines = ()
    if bracket is not None:
        lines = tuple(pin(lhs - rhs, var, values, bracket[0], bracket[1], where))
    return form, lines, _root_sensitivity(form.equation, var, values, form.relaxed_root)


def _root_sensitivity(eq: sp.Expr, var: sp.Symbol, values: Mapping, x: float | None) -> tuple:
    """The elasticities of a closed form's root ``x`` of ``eq`` (() where there is none)."""
    if x is None:
        return ()
    try:  # a derivative unbounded at the point (a kink of the relaxed model) is left out
        return tuple((s, e) for s, e in root_elasticities(eq, var, values, x)
                     if math.isfinite(e) and abs(e) < 1e6)
    except (ValueError, KeyError):
        return ()


def _answer(name: str, title: str, root: ModelRoot, eq: sp.Expr, values: Mapping, note: str,
            step: StepModel | None, var: sp.Symbol, timing: str, sides: tuple = (),
            span: tuple[float, float] = (1.0, float(B_MAX)), pin_note: str = "",
            target_range: tuple | None = None, regime: Mapping | None = None,
            where: Mapping | None = None, scale: sp.Expr | None = None) -> ClosedForm:
    """The answer's three layers; ``regime`` and ``where`` (the expressions by breakdown key
    that own the tile counts a pin names) default to ``step``'s; ``scale``: the regime form's
    (:func:`~moesym.solve.regime_form.regime_form`)."""
    if regime is None:
        regime = regime_at(step, {var: root.exact}) if step is not None else {}
    vals = restrict(values, eq, var)
    used = set().union(*(symbols_of(sp.sympify(e)) for _, e in sides)) if sides else set()
    vals.update({k: v for k, v in values.items() if k != var and k in used})
    lhs, rhs = (sides[0][1], sides[1][1]) if len(sides) == 2 else (eq, sp.Integer(0))
    integer = float(root.exact).is_integer() and root.bracket[1] - root.bracket[0] <= 1
    form, lines, sens = _layers(lhs, rhs, var, vals, float(root.exact),
                                root.bracket if integer else None, span,
                                step.per_layer_s if step is not None and where is None else where,
                                scale)
    if pin_note:
        lines = lines + (pin_note,)
    return ClosedForm(name, title, root.expr, vals, float(root.exact), root.condition,
                      f"{note} Closed form: {root.note}.", eq, var, root.value, root.kind,
                      regime, timing, tuple(sides), form, lines, sens, target_range)


def _all_experts_read(expr: sp.Expr) -> sp.Expr:
    """``expr`` without lazy expert loading: every local expert's weights read each step (the
    touched fraction 1 - (1 - k/E)^T set to 1)."""
    from ..symbolic.expr import nodes

    lazy = nodes(expr, lambda p: isinstance(p, sp.Pow) and p.base.has(S.topk)
                 and p.base.has(S.experts) and (p.exp.has(S.batch) or p.exp.has(S.tokens)))
    return substitute(expr, {p: 0 for p in lazy})


def crossover(model: ModelSpec, hw: HardwareSpec, dep: Deployment, lazy: bool = True,
              b_max: int = B_MAX, context: int = 4096) -> ClosedForm:
    """Decode batch per attention-DP rank where the routed experts turn from memory- to
    compute-bound: the first batch whose routed-expert roofline (``predict``'s
    ``bounds.routed_experts.roofline``) is compute.

    The roofline is :func:`moesym.numbers.metrics.routed_expert_roofline`: tensor time of the expert
    GEMMs against the larger of their own memory time and the expert-weight read. On the
    roofline time model without lazy loading this is InferSim's B* = R / (2 S) across the EP
    group: F_g eta_gg b_w t_p (E + R) / (2 N_gpu W eta_m k) per GPU. On the kernel model the
    GEMM's tensor time moves in tile and wave steps, so the flip is usually a step: the batch at
    which one more wave of tiles is needed.
    """
    from ..model.report import routed_expert_roofline_expr

    if not model.is_moe:
        raise MoesymError(f"{model.name} is dense: it has no routed-expert crossover")
    step = _decode_step(model, hw, dep, context)
    compute, memory = routed_expert_roofline_expr(step.terms)
    eq = compute - memory
    if not lazy:
        eq = _all_experts_read(eq)
    vals = dict(step.values)
    fixed = restrict(vals, eq, S.batch)
    found = sign_changes(eq, S.batch, vals, 1, b_max, integer=True)
    # memory -> compute flips (the side past the change is compute-bound)
    up = [ab for ab in found if float(evaluate(eq, fixed, {S.batch: ab[1]})) > 0]
    if not up:
        f1 = float(evaluate(eq, fixed, {S.batch: 1.0}))
        where = ("compute-bound from the first request" if f1 > 0
                 else f"memory-bound up to {b_max} requests per GPU")
        raise MoesymError(f"the routed experts of {model.name} are {where} here: no crossover")
    root = closed_form_at(eq, S.batch, vals, up[0], up[0][1], integer=True)
    note = ("Decode; the first batch at which the routed experts' roofline (predict's "
            "bounds.routed_experts) turns from memory to compute"
            + ("" if lazy else ", every local expert read each step (no lazy loading)") + ".")
    if found[0] != up[0]:
        note += (f" Below {found[0][1]:.0f} requests they are compute-bound too: few experts "
                 "get a token, so little weight is read, while the expert GEMMs still run whole "
                 "tiles.")
    if len(up) > 1:
        note += f" The roofline flips {len(found)} times up to {b_max} (tile steps)."
    mem_side = memory if lazy else _all_experts_read(memory)
    return _answer("crossover" + ("" if lazy else "_no_lazy"),
                   "Routed-expert crossover batch (memory- to compute-bound)", root, eq, vals,
                   note, step if lazy else None, S.batch, dep.timing,
                   (("routed experts: tensor time", compute), ("routed experts: memory time",
                                                               mem_side)))


def attention_overtakes_moe(model: ModelSpec, hw: HardwareSpec, dep: Deployment,
                            context: int, b_max: int = B_MAX) -> ClosedForm:
    """Decode batch per attention-DP rank where one layer's attention core (its KV read at
    ``context``) takes longer than its MoE experts: attention_core = max(moe_routed,
    moe_weight_load), both as predict times them per micro-batch."""
    if not model.is_moe:
        raise MoesymError(f"{model.name} is dense: no MoE layer to compare with")
    step = _decode_step(model, hw, dep, context)
    t = step.terms
    attn, moe = t["attention_core"].total_s, smax(t["moe_routed"].total_s,
                                                  t["moe_weight_load"].total_s)
    eq = attn - moe
    vals = dict(step.values)
    found = sign_changes(eq, S.batch, vals, 1, b_max, integer=True, until=first_change)
    if not found:
        f1 = float(evaluate(eq, restrict(vals, eq, S.batch), {S.batch: 1.0}))
        raise MoesymError(
            f"attention already takes longer than the MoE layer at one request per GPU at "
            f"context {context}" if f1 >= 0 else
            f"attention never overtakes the MoE layer up to {b_max} requests per GPU at "
            f"context {context}")
    root = closed_form_at(eq, S.batch, vals, found[0], found[0][1], integer=True)
    return _answer("attention_overtakes_moe",
                   "Batch where attention's KV read overtakes the MoE layer", root, eq, vals,
                   f"Decode at context {context}, one layer, as predict times it.", step,
                   S.batch, dep.timing, (("attention core", attn), ("MoE experts", moe)))


def max_batch_for_tpot(model: ModelSpec, hw: HardwareSpec, dep: Deployment, context: int,
                       tpot_s: float, b_max: int = B_MAX) -> ClosedForm:
    """Largest decode batch per attention-DP rank whose step time (``predict``'s TPOT) meets
    ``tpot_s``: the last integer batch with step time <= target, scanned over every batch (the
    step time need not be monotone: tile and wave steps), and the closed form of the step
    model's regime there."""
    step = _decode_step(model, hw, dep, context)
    vals = dict(step.values)
    fixed = {k: v for k, v in vals.items() if k != S.batch}
    batches = np.arange(1, b_max + 1, dtype=float)
    tpot = _tpot(step.expr, dep)
    with warnings.catch_warnings():  # below --micro-batches requests: predict's count, quietly
        warnings.simplefilter("ignore")
        t = step.evaluate(tpot, batch=batches)
    ok = np.flatnonzero(t <= tpot_s)
    if not len(ok):
        raise MoesymError(f"even one request per GPU takes {t[0]:.4g} s per token > the TPOT "
                          f"target {tpot_s:.4g} s")
    last = float(batches[ok[-1]])
    eq = tpot - S.tpot_target
    vals[S.tpot_target] = float(tpot_s)
    title = "Largest batch meeting a TPOT target"
    if last >= b_max:
        return ClosedForm("max_batch_for_tpot", title, None, fixed, last, sp.true,
                          f"the batch cap {b_max} meets the target", eq, S.batch, None,
                          "numeric", regime_at(step, {S.batch: last}), dep.timing)
    root = closed_form_at(eq, S.batch, vals, (last, last + 1), last, integer=True)
    # every target from the TPOT at the answer up to (not including) the smallest TPOT of a
    # larger batch gives the same answer
    i = int(ok[-1])
    hi = float(np.min(t[i + 1:])) if i + 1 < len(t) else float("inf")
    span_note = (f"TPOT targets from {t[i] * 1e3:.6g} ms up to (not including) {hi * 1e3:.6g} "
                 f"ms all give {last:.0f}")
    return _answer("max_batch_for_tpot", title, root, eq, vals,
                   f"Decode at context {context}: predict's TPOT (step time over the tokens "
                   f"a step emits per request) at every batch.", step,
                   S.batch, dep.timing, (("TPOT", tpot), ("TPOT target", S.tpot_target)),
                   pin_note=span_note, target_range=(float(t[i]), hi))


def _decode_rates(step_expr: sp.Expr, dep: Deployment) -> dict:
    """TPOT and tokens per GPU per second as predict reports them
    (:func:`moesym.numbers.metrics.step_rates`), as expressions of the decode step time."""
    from ..numbers.metrics import accepted_tokens, step_rates

    a = accepted_tokens(dep)
    return step_rates(Phase.DECODE, S.batch, step_expr, S.tp, S.pp,
                      accepted=1 if a == 1 else sp.Float(a))


def _tpot(step_expr: sp.Expr, dep: Deployment) -> sp.Expr:
    """TPOT as predict reports it: the step time over the tokens one step emits per request
    (1, or speculative decoding's expected accepted length)."""
    return _decode_rates(step_expr, dep)["tpot_s"]


#: the serve targets: (name, symbol, what it is)
_SERVE_TARGETS = (("tpot", S.tpot_target, "TPOT"), ("ttft", S.ttft_target, "TTFT"))


def _serve_scan(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                b_max: int) -> tuple:
    """(chunk, concurrencies, {tpot, ttft: seconds at each}, saturation) of the steady state
    ``predict --phase serve`` evaluates (its two compiled step models, the metrics layer's
    serve functions), at every concurrency from 1 up to one past where the decoding requests
    reach their cap (beyond it nothing changes: the rank is prefill-bound, more requests
    queue), or ``b_max``."""
    from ..numbers.metrics import accepted_tokens, serve_point, serve_rates, serve_step_times
    from ..model.predictor import serve_models
    from ..symbolic.symtab import N

    chunk, cm_mix, cm_dec = serve_models(model, hw, dep, wl, memory=False)
    a = accepted_tokens(dep)
    steps, new = wl.osl / a, max(wl.isl * (1 - wl.prefix_hit), 1)
    saturation = chunk * (steps + max(1.0, new / chunk)) / new
    cs = np.arange(1, min(b_max, int(math.ceil(saturation)) + 1) + 1, dtype=float)
    p = serve_point(cs, wl.isl, wl.osl, chunk, a, minimum=np.minimum, maximum=np.maximum,
                    exp=np.exp, hit=wl.prefix_hit)
    hit = {N.prefix_hit: wl.prefix_hit} if wl.prefix_hit else {}
    mixed, decode = serve_step_times((cm_mix, cm_dec), hit, p, wl.isl, wl.osl, chunk)
    r = serve_rates(p, mixed, decode, chunk, dep.tp * dep.pp, a, ceil=np.ceil)
    return chunk, cs, {"tpot": np.asarray(r["tpot_s"]), "ttft": np.asarray(r["ttft_s"])}, \
        saturation


def _serve_exprs(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                 chunk: int) -> tuple:
    """({tpot, ttft: expression of the concurrency S.batch}, values, {key: expression}) of the
    steady state: the metrics layer's serve_point and serve_rates on SymPy (smin / smax /
    exp), the mixed step's and the decode step's expressions at its decoding requests and
    mixed-step tokens. ISL, chunk and the mean KV length stay symbols (bound in values); the
    chunks of one prompt (TTFT's count, free of the concurrency) are a number."""
    from ..numbers.metrics import accepted_tokens, serve_point, serve_rates
    from ..symbolic.expr import smin

    mix = build_step(model, hw, dep, Workload(Phase.SERVE, batch=1, isl=wl.isl, osl=wl.osl,
                                              chunk=chunk, prefix_hit=wl.prefix_hit))
    dec = build_step(model, hw, dep, Workload(Phase.DECODE, batch=1, context=wl.context))
    a = accepted_tokens(dep)
    acc = 1 if a == 1 else sp.Float(a)
    hit = S.prefix_hit if wl.prefix_hit else 0
    p = serve_point(S.batch, S.isl, sp.Integer(wl.osl), S.chunk, acc, minimum=smin,
                    maximum=smax, exp=sp.exp, hit=hit)
    chunks = math.ceil(max(wl.isl * (1 - wl.prefix_hit), 1) / chunk)
    t_mix, t_dec = sp.Dummy("t_mix"), sp.Dummy("t_dec")
    r = serve_rates(p, t_mix, t_dec, S.chunk, S.tp * S.pp, acc,
                    ceil=lambda _: sp.Integer(chunks))
    keys = list(mix.per_layer_s)
    on_mix = substitute(sp.Tuple(mix.expr, *mix.per_layer_s.values()),
                        {S.batch: p["decoding"], S.tokens: p["mixed_tokens"]})
    on_dec = substitute(sp.Tuple(dec.expr, *(dec.per_layer_s[k] for k in keys)),
                        {S.batch: p["decoding"]})
    steps = {t_mix: on_mix[0], t_dec: on_dec[0]}
    exprs = {"tpot": substitute(r["tpot_s"], steps), "ttft": substitute(r["ttft_s"], steps)}
    where = {**{f"mixed step {k}": e for k, e in zip(keys, on_mix[1:])},
             **{f"decode step {k}": e for k, e in zip(keys, on_dec[1:])}}
    vals = {k: v for k, v in {**dec.values, **mix.values}.items()
            if k not in (S.batch, S.tokens)}
    return exprs, vals, where


def max_concurrency(model: ModelSpec, hw: HardwareSpec, dep: Deployment, isl: int, osl: int,
                    tpot_s: float | None = None, ttft_s: float | None = None, chunk: int = 0,
                    prefix_hit: float = 0.0, b_max: int = B_MAX) -> ClosedForm:
    """Largest concurrency (requests in flight per attention-DP rank: ``predict --phase
    serve``'s ``--batch``) whose steady-state aggregated-serving TPOT (and TTFT) meets the
    target(s): the last integer concurrency meeting every target given, scanned over every
    concurrency through the compiled serve model, and the closed form of the regime of the
    target that binds there (the one that fails at the next concurrency).

    The steady state gives mean latencies: a percentile SLA is ``moesym optimize --percentile
    P``'s (the serving simulation). TPOT = f t_mix + (1 - f) t_dec with f the share of mixed
    steps (:func:`moesym.numbers.metrics.serve_point`); TTFT = the prompt's chunks x t_mix (no
    queueing)."""
    if tpot_s is None and ttft_s is None:
        raise MoesymError("derive concurrency needs a target: --tpot-ms and/or --ttft-ms")
    wl = Workload(Phase.SERVE, batch=1, isl=isl, osl=osl, chunk=chunk, prefix_hit=prefix_hit)
    targets = {"tpot": tpot_s, "ttft": ttft_s}
    chunk, cs, lat, saturation = _serve_scan(model, hw, dep, wl, b_max)
    meets = np.ones(len(cs), dtype=bool)
    for k, v in targets.items():
        if v is not None:
            meets &= lat[k] <= v
    ok = np.flatnonzero(meets)
    given = [(k, sym, label) for k, sym, label in _SERVE_TARGETS if targets[k] is not None]
    if not len(ok):
        raise MoesymError("even one request per rank misses the target: " + ", ".join(
            f"{label} {lat[k][0] * 1e3:.4g} ms > {targets[k] * 1e3:.4g} ms"
            for k, _, label in given if lat[k][0] > targets[k]))
    i = int(ok[-1])
    last = float(cs[i])
    title = "Largest serving concurrency meeting " + " and ".join(
        f"a {label} target" for _, _, label in given)
    mean = ("Steady-state aggregated serving (predict --phase serve) at ISL "
            f"{isl}, OSL {osl}, chunk {chunk}: mean TPOT and TTFT (no queueing), not percentiles "
            "(moesym optimize --percentile P simulates those).")
    if i == len(cs) - 1:  # every concurrency scanned meets it
        if last > saturation:  # the answer: where the rank saturates
            last = float(math.ceil(saturation))
            why = (f"every concurrency meets the target(s): from {last:.0f} requests per rank "
                   "on, the rank is prefill-bound (the decoding requests stop growing and more "
                   "requests only queue, which the steady state ignores), so more than "
                   f"{last:.0f} adds no throughput")
        else:
            why = f"the cap {b_max} meets the target(s)"
        regime, memory = _serve_regime(model, hw, dep, wl, chunk, last)
        return ClosedForm("max_concurrency", title, None, {}, last, sp.true,
                          f"{mean} {why}. {memory}", sp.Integer(0), S.batch, None, "numeric",
                          regime, dep.timing)
    # the target that binds: the one the next concurrency misses (TPOT where both do)
    k, sym, label = next(g for g in given if lat[g[0]][i + 1] > targets[g[0]])
    others = np.ones(len(cs), dtype=bool)
    for k2, v in targets.items():
        if v is not None and k2 != k:
            others &= lat[k2] <= v
    later = lat[k][i + 1:][others[i + 1:]]
    hi = float(np.min(later)) if len(later) else float("inf")
    span_note = (f"{label} targets from {lat[k][i] * 1e3:.6g} ms up to (not including) "
                 f"{hi * 1e3:.6g} ms all give {last:.0f}")
    exprs, vals, where = _serve_exprs(model, hw, dep, wl, chunk)
    vals.update({s_: float(v) for (k2, s_, _) in given for v in (targets[k2],)})
    eq = exprs[k] - sym
    root = closed_form_at(eq, S.batch, vals, (last, last + 1), last, integer=True)
    regime, memory = _serve_regime(model, hw, dep, wl, chunk, last)
    cf = _answer("max_concurrency", title, root, eq, vals,
                 f"{mean} {label} binds (the next concurrency misses it); B is the concurrency. "
                 f"{memory}",
                 None, S.batch, dep.timing, ((label, exprs[k]), (f"{label} target", sym)),
                 span=(1.0, float(cs[-1])), pin_note=span_note,
                 target_range=(float(lat[k][i]), hi), regime=regime, where=where)
    if cf.smooth is not None and cf.smooth.expr is None and cf.smooth.relaxed_root:
        from dataclasses import replace

        from ..numbers.metrics import accepted_tokens, serve_point

        steps = osl / accepted_tokens(dep)
        p = serve_point(cf.smooth.relaxed_root, isl, osl, chunk, accepted_tokens(dep),
                        hit=prefix_hit)
        if p["mixed_share"] > p["prefill_per_step"] / chunk:  # the Poisson branch
            cf = replace(cf, smooth=replace(cf.smooth, note=(
                "no closed form of this regime: the share of mixed steps is "
                f"1 - exp(-D/{steps:g}) here (D the decoding requests; a prompt of {p['computed_per_prompt']:g} tokens "
                f"is under one chunk of {chunk}) and weighs step times that grow with B: an "
                "equation in B, e^(-cB) and B e^(-cB) has no closed-form root")))
    return cf


def _serve_regime(model, hw, dep, wl: Workload, chunk: int, concurrency: float) -> tuple:
    """(what limits the steady state at ``concurrency``, a line on its memory), as ``predict
    --phase serve`` reports them: the mixed step's breakdown keys (its bounds) and each step's
    bound; the memory per GPU of the requests in flight and whether it fits."""
    from dataclasses import replace

    from ..model.predictor import predict

    r = predict(model, hw, dep, replace(wl, batch=int(concurrency), chunk=chunk), memory=True)
    out = {k: b.get("roofline", b["bound"]) if k == "routed_experts" else b["bound"]
           for k, b in r["bounds"].items() if b["bound"] != "none"}
    memory = (f"Memory per GPU at {concurrency:.0f}: {r['memory_bytes'] / 1e9:.1f} GB, "
              + ("fits." if r["fits"] else f"does NOT fit ({r.get('fits_reason', '')}).")
              if "memory_bytes" in r else "")
    return ({**out, "mixed_step": r["mixed_step"]["bound"],
             "decode_step": r["decode_step"]["bound"]}, memory)


def comm_hidden(model: ModelSpec, hw: HardwareSpec, dep: Deployment, context: int,
                b_max: int = B_MAX) -> ClosedForm:
    """Decode batch per attention-DP rank from which dispatch and combine are no longer fully
    hidden behind compute under the deployment's overlap schedule: the first batch whose
    overlapped layer time exceeds its compute-only time (``predict``'s layer_s against
    layer_compute_s, by more than 1e-9 of it). The closed form is where the schedule's
    communication path overtakes its compute path."""
    if not model.is_moe or dep.ep == 1:
        raise MoesymError("no expert-parallel communication to hide (dense model or --ep 1)")
    step = _decode_step(model, hw, dep, context)
    eq = step.layer_s - step.layer_compute_s
    vals = dict(step.values)
    name, title = "comm_hidden", "Batch where communication stops hiding behind compute"
    found = sign_changes(eq, S.batch, vals, 1, b_max, integer=True, scale=step.layer_compute_s,
                         until=first_change)
    fixed = restrict(vals, eq, S.batch)
    if not found:
        exposed = float(evaluate(eq, fixed, {S.batch: 1.0})) > 0
        v = 1.0 if exposed else float("inf")
        return ClosedForm(name, title, None, fixed, v, sp.true,
                          "Communication is exposed at every batch." if exposed else
                          f"Communication is hidden at every batch up to {b_max}.",
                          eq, S.batch, None, "numeric", {}, dep.timing)
    a, b = found[0]
    root = closed_form_at(eq, S.batch, vals, (a, b), b, integer=True)
    return _answer(name, title, root, eq, vals,
                   f"Decode at context {context}, {dep.micro_batches} micro-batch(es), the "
                   "overlap schedule predict runs.", step, S.batch, dep.timing,
                   (("layer, overlapped", step.layer_s), ("layer, compute only",
                                                          step.layer_compute_s)),
                   scale=step.layer_compute_s)


def micro_batches_pay(model: ModelSpec, hw: HardwareSpec, dep: Deployment, context: int,
                      b_max: int = B_MAX) -> ClosedForm:
    """Decode batch per attention-DP rank from which two micro-batches beat one: the first batch
    whose step with two micro-batches (the schedule the deployment runs for two: SGLang's
    two-batch overlap by default) is shorter than with one (single-batch overlap), at the same
    batch, so the throughput is higher. Below it the split costs more (each micro-batch pays the
    fixed latencies and half-filled kernels) than the overlap hides; SGLang measured -27% at 32
    and +25.5% at 256 requests per GPU for DeepSeek-V3 on 72 H100 (EP72)."""
    if not model.is_moe or dep.ep == 1:
        raise MoesymError("micro-batches overlap expert-parallel communication: a dense model "
                          "or --ep 1 has none to hide")
    two = _decode_step(model, hw, dep.with_(micro_batches=2), context)
    one = _decode_step(model, hw, dep.with_(micro_batches=1, overlap="auto"), context)
    t2 = substitute(two.expr, {S.micro_batches: 2})
    t1 = substitute(one.expr, {S.micro_batches: 1})
    eq = t2 - t1
    vals = {k: v for k, v in {**one.values, **two.values}.items() if k != S.micro_batches}
    name, title = "micro_batches_pay", "Batch from which two micro-batches beat one"
    fixed = restrict(vals, eq, S.batch)
    pays_at = lambda b: float(evaluate(eq, fixed, {S.batch: b})) < 0  # noqa: E731
    found = sign_changes(eq, S.batch, vals, 2, b_max, integer=True,
                         until=lambda f, a, b: pays_at(b))
    pays = [ab for ab in found if pays_at(ab[1])]
    if not pays:
        better = float(evaluate(eq, fixed, {S.batch: 2.0})) < 0
        return ClosedForm(name, title, None, fixed, 2.0 if better else float("inf"), sp.true,
                          "Two micro-batches are faster from the first batch." if better else
                          f"One micro-batch is at least as fast at every batch up to {b_max}.",
                          eq, S.batch, None, "numeric", {}, dep.timing)
    root = closed_form_at(eq, S.batch, vals, pays[0], pays[0][1], integer=True)
    return _answer(name, title, root, eq, vals,
                   f"Decode at context {context}: step time with two micro-batches minus with "
                   f"one (schedules: {dep.overlap} for two, auto for one), A2A "
                   f"{dep.resolved_a2a(Phase.DECODE).value}.", two, S.batch, dep.timing,
                   (("step, two micro-batches", t2), ("step, one micro-batch", t1)))


def expert_cache_hides(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload
                       ) -> ClosedForm:
    """Smallest expert cache (experts per MoE layer resident on the device, ``--expert-cache``)
    at which the expert tier's traffic fits under the layer's device compute: the cold experts a
    pass activates, copied over the host link (``stream``) or run on the host CPU
    (``host-compute``), take no longer than the layer's compute, so ``--prefetch`` hides them.

    Exact value: the step model ``predict`` builds at each cache size (one structure per size;
    bisection, since more cache is never slower), its ``expert_offload`` against
    ``layer_compute``. Closed form: uniform routing and a static cache, where a pass of
    T = B (1 + n_mtp) / n_mb tokens activates each cold expert with probability
    a = 1 - (1 - k/E)^T, so the tier costs n_mb (E - C) a c_x with c_x the time per cold expert
    (3 d d_e b_we / W_host streamed; on the host 3 d d_e b_we / W_dram + 6 d d_e T k / (E F_cpu)
    / a), and C* = E - t_c / (n_mb a c_x), t_c the layer's device compute at the root."""
    from ..model.expert_tiers import tier_s
    from ..model.predictor import predict

    if not model.is_moe:
        raise MoesymError(f"{model.name} is dense: it has no experts to cache")
    if wl.phase is not Phase.DECODE:
        raise MoesymError("derive expert-cache answers for a decode step (--phase decode)")
    if dep.expert_cache is None:
        dep = dep.with_(expert_cache=0)
    E = model.num_experts

    def at(c: int) -> dict:
        return predict(model, hw, dep.with_(expert_cache=int(c)), wl, memory=True)

    def gap(r: dict) -> float:
        return r["per_layer_s"].get("expert_offload", 0.0) - r["layer_compute_s"]

    seen: dict[int, dict] = {}
    lo, hi = 0, E  # gap(E) <= 0: a full cache moves nothing
    seen[0] = at(0)
    if gap(seen[0]) <= 0:
        hi = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        seen[mid] = at(mid)
        lo, hi = (mid, hi) if gap(seen[mid]) > 0 else (lo, mid)
    root = hi
    r = seen.get(root) or at(root)
    # closed form (uniform routing, static cache) with the device compute t_c named
    C, t_c = sp.Symbol("C", nonnegative=True), sp.Symbol("t_c", positive=True)
    T = S.batch * (1 + S.mtp) / S.micro_batches
    a = 1 - (1 - S.topk / S.experts) ** T
    # per cold expert: its assignments under uniform routing are T k / (E a) (module tier_s)
    per_cold = tier_s(dep.expert_placement, 1, T * S.topk / (S.experts * a),
                      expert_weights(S.hidden, S.moe_inter, S.w_bytes_expert),
                      6 * S.hidden * S.moe_inter)
    expr = S.experts - t_c / (S.micro_batches * a * per_cold)
    from ..numbers.bindings import bindings

    vals = restrict(bindings(model, hw, dep, wl), expr)
    vals.update({S.batch: wl.batch, t_c: r["layer_compute_s"]})
    for sym_, v in ((S.mtp, dep.mtp), (S.micro_batches, dep.micro_batches)):
        vals.setdefault(sym_, v)
    closed = float(expr.subs(vals))
    mem = "fits" if r.get("fits") else "does NOT fit"
    routing = str(dep.routing)
    note = (f"Decode, batch {wl.batch}, context {wl.context}, {dep.expert_placement} placement, "
            f"{dep.cache_policy} cache, {routing} routing. Exact: the model predict evaluates at "
            f"each cache size (C={root}: tier {r['per_layer_s'].get('expert_offload', 0) * 1e6:.1f} "
            f"us vs device compute {r['layer_compute_s'] * 1e6:.1f} us per layer; memory "
            f"{r.get('memory_bytes', 0) / 1e9:.2f} GB, {mem} in {hw.hbm_capacity_bytes / 1e9:.0f} GB). "
            f"Closed form: uniform routing and a static cache with t_c = {r['layer_compute_s'] * 1e6:.1f} "
            f"us (the layer's device compute at C={root}), continuous in C; "
            + ("it is the model's own arithmetic for uniform routing." if routing == "uniform"
               and dep.cache_policy != "lru" else
               "the model's routing and cache policy differ from it, hence the gap to the exact value."))
    tier = S.micro_batches * smax(S.experts - C, 0) * a * per_cold
    return ClosedForm("expert_cache_hides", "Expert cache size from which the tier hides under compute",
                      expr, vals, float(root), sp.true, note, expr - C, C, closed, "smooth", {},
                      dep.timing, (("expert tier, uniform relaxation", tier),
                                   ("layer device compute t_c", t_c + 0 * C)),
                      sensitivity=_root_sensitivity(expr - C, C, vals, closed))


def max_batch_for_memory(model: ModelSpec, hw: HardwareSpec, dep: Deployment, context: int,
                         b_max: int = 1 << 20) -> ClosedForm:
    """Largest decode batch per attention-DP rank whose memory per GPU (``predict``'s
    ``memory_bytes``: weights, KV at ``context``, activations, workspaces, communication buffers
    and the runtime reserve) fits in HBM. The memory model is linear in B in its regime, so the
    smooth form is B* = (M_hbm - fixed bytes) / (bytes per request), with the capacity kept
    symbolic."""
    from ..memory import memory_model

    wl = Workload(Phase.DECODE, batch=1, context=context)
    mm = memory_model(model, hw, dep, wl)
    used = mm.used_expr()
    eq = used - S.hbm_capacity
    vals = {k: float(v) for k, v in mm.values.items() if k != S.batch}
    found = sign_changes(eq, S.batch, vals, 1, b_max, integer=True, until=first_change)
    title = "Largest batch that fits in GPU memory"
    fixed = restrict(vals, eq)
    if not found:
        fits = float(evaluate(eq, fixed, {S.batch: 1.0})) <= 0
        if not fits:
            raise MoesymError(f"even one request per GPU does not fit in {hw.name}'s "
                              f"{hw.hbm_capacity_bytes / 1e9:.0f} GB at context {context}: more "
                              "GPUs (--gpus, --ep) or lighter --weights / --kv")
        return ClosedForm("max_batch_for_memory", title, None, fixed, float(b_max), sp.true,
                          f"{b_max} requests per GPU still fit", eq, S.batch, None, "numeric",
                          {}, dep.timing)
    a, b = found[0]
    root = closed_form_at(eq, S.batch, vals, (a, b), a, integer=True)
    return _answer("max_batch_for_memory", title, root, eq, vals,
                   f"Decode at context {context}: predict's memory per GPU at every batch "
                   "(weights, KV, activations, workspaces, communication buffers, reserve).",
                   None, S.batch, dep.timing,
                   (("memory used", used), ("HBM capacity", S.hbm_capacity)),
                   span=(1.0, float(b_max)))


CLOSED_FORMS = ("crossover", "crossover_no_lazy", "attention_overtakes_moe", "max_batch_for_tpot",
                "optimal_ep", "comm_hidden", "micro_batches_pay", "ep_min_tpot",
                "gpus_for_throughput", "expert_cache_hides")


def optimal_ep(model: ModelSpec, hw: HardwareSpec, workload: Workload,
               base: Deployment | None = None, max_ep: int | None = None,
               memory_limit: bool = True) -> ClosedForm:
    """Best EP degree for decode when the instance grows with EP (N_gpu = e_p).

    ``value``: the EP (a power of two dividing E, up to ``max_ep``) with the most tokens per GPU
    per second under the full step model (``predict`` at each EP), raised to the smallest EP
    whose per-GPU memory fits when ``memory_limit`` is set. The closed form is the kink: the
    EP at which the routed experts' roofline flips (their weight read per GPU falls as 1 / e_p,
    their tensor time does not), solved on the same step model with N_gpu = e_p. On the roofline
    without lazy loading: e_p* = (E + R) b_w F_g eta_gg t_p / (2 W eta_m k B).
    """
    from ..model.report import routed_expert_roofline_expr

    if not model.is_moe:
        raise MoesymError(f"{model.name} is dense: it has no expert parallelism to choose")
    base = base or Deployment()
    max_ep = max_ep or model.num_experts
    eps = [e for e in (2 ** i for i in range(0, 12)) if e <= max_ep and model.num_experts % e == 0]
    table = []
    for e in eps:
        dep = base.with_(gpus=e, ep=e)
        try:
            dep.check_model(model)
        except MoesymError:
            continue
        from ..model.predictor import predict

        r = predict(model, hw, dep, workload, memory=memory_limit)
        table.append((e, r["tokens_per_gpu_s"], r.get("fits", True)))
    ok = [t for t in table if t[2]]
    if not ok:
        raise MoesymError("no EP up to --max-ep fits in memory at this batch and context")
    best = max(ok, key=lambda t: t[1])
    rep = base.with_(gpus=_rep_ep(model, base), ep=_rep_ep(model, base))
    step = build_step(model, hw, rep, workload)
    c, m = routed_expert_roofline_expr(step.terms)
    eq = substitute(c - m, {S.gpus: S.ep})
    vals = {k: v for k, v in step.values.items() if k != S.ep}
    note = ("Decode, instance grows with EP (N_gpu = e_p); value = best power-of-two EP of the "
            "full step model" + (" among those that fit in memory" if memory_limit else "")
            + f" ({', '.join(f'EP{e}: {x:.0f}' for e, x, _ in table)} tokens/GPU/s).")
    kink, expr, kind, cnote = None, None, "numeric", "the routed experts' roofline does not flip"
    try:
        r = model_root(eq, S.ep, vals, 1.0, float(model.num_experts + base.redundant_experts))
        kink, expr, kind, cnote = r.value, r.expr, r.kind, r.note
    except MoesymError:
        pass
    cnote += (f"; kink at e_p = {kink:.4g}" if kink is not None else "")
    why = None if expr is not None else RegimeForm(S.ep, None, None, note=_why_ep(
        best[0], ok, base.gpus_per_node))
    return ClosedForm("optimal_ep", "EP degree where more EP stops shortening the MoE layer",
                      expr, restrict(vals, eq),
                      float(best[0]), sp.true, f"{note} Closed form: {cnote}.", eq, S.ep, kink,
                      kind, {}, base.timing, smooth=why)


def _why_ep(best: int, fitting: list, node: int) -> str:
    """One line: why the best EP has no closed form (where it sits in predict's table)."""
    eps = [e for e, _, _ in fitting]
    if best == max(eps):
        return f"the optimum is at the largest EP that fits memory: {best}"
    if best == min(eps):
        return f"the optimum is at the smallest EP that fits memory: {best}"
    if best == node:
        return (f"the optimum is EP {best} = the GPUs per node: beyond it dispatch and combine "
                "cross the scale-out network (a change of the model's structure, not a root)")
    return (f"the optimum EP {best} is interior to predict's table of powers of two; the model's "
            "structure (A2A tiers, experts per GPU) changes with EP, so no single regime holds")


def _instance_time(model: ModelSpec, hw: HardwareSpec, base: Deployment, context: int,
                   per_rank_batch: sp.Expr) -> tuple[sp.Expr, dict]:
    """Decode step time on the roofline (the closed forms' relaxation) of an instance that grows
    with EP (N_gpu = e_p), with the per-attention-DP-rank batch given as an expression of e_p. Two
    approximations make it a function of a continuous e_p: lazy loading off (every local expert
    is read each step: exact once every expert gets a token, conservative below) and tile and
    wave counts relaxed (ceilings dropped); routing is balanced (the busiest rank's expected
    load is a special function of e_p).
    Returns (expression in e_p and the workload symbols, numeric values)."""
    from . import RELAX_CEILING, apply_rules

    if not model.is_moe:
        raise MoesymError(f"{model.name} is dense: it has no expert parallelism to choose")
    e = _rep_ep(model, base)
    rep = base.with_(gpus=e, ep=e, timing="roofline", routing="balanced")
    base.check_overlap(Phase.DECODE)
    step = build_step(model, hw, rep, Workload(Phase.DECODE, batch=1, context=context))
    expr = substitute(substitute(step.expr, {S.gpus: S.ep}), {S.batch: per_rank_batch})
    expr = apply_rules(_all_experts_read(expr), [RELAX_CEILING])
    vals = restrict(step.values, expr, S.ep)
    return expr, vals


def _rep_ep(model: ModelSpec, base: Deployment) -> int:
    """The EP of the representative deployment a closed form in e_p is built on (the EP itself
    becomes a symbol): 16, or the largest power of two below it that divides the experts (an
    8-expert model: 8)."""
    total = model.num_experts + base.redundant_experts
    return next((e for e in (16, 8, 4, 2) if total % e == 0), 1)


_INSTANCE_NOTE = ("Decode, N_gpu = e_p. Value: the model predict evaluates ({timing} timing, "
                  "routing as given) at each power-of-two EP dividing the experts ({table}). "
                  "Closed form: the continuous relaxation on the roofline (balanced routing, "
                  "every local expert read, tile and wave counts relaxed){extra}.")


def _instance_table(model: ModelSpec, hw: HardwareSpec, base: Deployment, context: int,
                    batch_of_ep, max_ep: float) -> list[tuple[int, float, bool, int]]:
    """``predict`` of an instance of e_p GPUs (EP over all of them) at each power-of-two EP that
    divides the experts, up to ``max_ep``: (e_p, step seconds, fits in memory, batch per
    attention DP rank, rounded up from ``batch_of_ep(e_p)``)."""
    from ..model.predictor import predict

    total = model.num_experts + base.redundant_experts
    rows = []
    for e in (2 ** i for i in range(0, 13)):
        if e > max_ep or total % e:
            continue
        dep = base.with_(gpus=e, ep=e)
        try:
            dep.check_model(model)
        except MoesymError:
            continue
        b = max(1, math.ceil(batch_of_ep(e) - 1e-9))
        r = predict(model, hw, dep, Workload(Phase.DECODE, batch=b, context=context))
        rows.append((e, r["step_time_s"], r["fits"], b))
    if not rows:
        raise MoesymError(f"no EP up to {int(max_ep)} divides the {total} experts and the "
                          "deployment's TP")
    return rows


def _table_text(rows, unit="ms") -> str:
    return ", ".join(f"EP{e}: {t * 1e3:.2f} ms" + ("" if ok else " (does not fit)")
                     for e, t, ok, _ in rows)


def _argmin_ep(expr, vals, lo, hi) -> float | None:
    """Interior minimum in e_p of the compiled ``expr`` (None when it is at an end)."""
    from scipy.optimize import minimize_scalar

    f = lambda e: float(evaluate(expr, vals, {S.ep: e}))  # noqa: E731
    grid = np.geomspace(lo, hi, 64)
    i = int(np.argmin([f(e) for e in grid]))
    if i in (0, len(grid) - 1):
        return None
    r = minimize_scalar(f, bounds=(grid[i - 1], grid[i + 1]), method="bounded",
                        options={"xatol": 1e-10})
    return float(r.x)


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
    from . import branch_at, solve_smooth

    base = base or Deployment()
    max_ep = float(max_ep or model.num_experts)
    lo = float(base.gpus_per_node) + 1e-6  # ring latency grows only across nodes
    per_rank = S.total_batch * S.tp / S.ep
    rows = _instance_table(model, hw, base, context, lambda e: total_batch * base.tp / e, max_ep)
    fit = [r for r in rows if r[2]]
    if not fit:
        raise MoesymError(f"no EP up to {int(max_ep)} fits {total_batch} requests in memory")
    value = min(fit, key=lambda r: r[1])[0]
    expr, vals = _instance_time(model, hw, base, context, per_rank)
    vals[S.total_batch] = float(total_batch)
    e_roof = _argmin_ep(expr, vals, lo, max_ep) if max_ep > lo else None
    root, cond, closed, extra, sens = None, sp.true, None, "", ()
    if e_roof is not None:
        branch, cond, _labels = branch_at(expr, S.ep, {**vals, S.ep: e_roof})
        root = solve_smooth(sp.diff(branch, S.ep), S.ep, vals, e_roof)
        closed = float(substitute(root, {k: sp.Float(v) for k, v in vals.items()}).evalf())
        sens = _root_sensitivity(sp.diff(branch, S.ep), S.ep, vals, closed)
        # the regime condition stays in e_p (valid where it holds at e_p*), not with the root
        extra = f": e_p* = {closed:.4g} (the square root of its regime)"
    else:
        extra = (": monotone in e_p, no interior optimum (no latency that grows with EP, e.g. "
                 "DeepEP); the step time falls to the largest EP")
    note = _INSTANCE_NOTE.format(timing=base.timing, table=_table_text(rows), extra=extra)
    return ClosedForm("ep_min_tpot", "EP degree that minimizes TPOT at a fixed total batch", root,
                      vals, float(value), cond, note + f" A2A {base.a2a.value}.", expr, S.ep,
                      closed, "smooth" if root is not None else "numeric", {}, base.timing,
                      sensitivity=sens)


def gpus_for_throughput(model: ModelSpec, hw: HardwareSpec, target_tokens_s: float,
                        tpot_s: float, context: int, base: Deployment | None = None,
                        max_gpus: int = 4096) -> ClosedForm:
    """Smallest instance (N_gpu = e_p GPUs) whose decode throughput reaches X tokens/s while
    every request gets a token each tau_tpot seconds.

    ``value``: the smallest power-of-two EP (dividing the experts) whose ``predict`` step time
    meets tau_tpot and fits in memory. The closed form is the continuous relaxation on the
    roofline. The instance serves B_tot = X tau_tpot requests, B = X tau_tpot t_p / e_p per attention DP
    rank; it meets the target when its step time T(B, e_p) <= tau_tpot. In the regime that holds
    at the root, T = c_0 + c_1 / e_p (+ c_2 e_p for ring latencies): per-token work c_1 / e_p
    scales with X tau_tpot, the routed-weight read (E + R) 3 d d_e b_w / (e_p W eta_m) adds to
    c_1, and the replicated attention weights and fixed latencies form c_0, so
    e_p* = c_1 / (tau_tpot - c_0) (a quadratic's root with ring latencies). No instance
    reaches X when tau_tpot <= c_0.
    """
    base = base or Deployment()
    per_rank = S.target_tokens_s * S.tpot_target * S.tp / S.ep

    title = "Smallest instance meeting a throughput target"
    rows = _instance_table(model, hw, base, context,
                           lambda e: target_tokens_s * tpot_s * base.tp / e, max_gpus)
    from ..numbers.metrics import accepted_tokens, step_rates

    a = accepted_tokens(base)  # tokens a step emits per request
    meets = [r for r in rows
             if r[2] and step_rates(Phase.DECODE, r[3], r[1], base.tp, base.pp, accepted=a)
             ["tpot_s"] <= tpot_s]
    if not meets:
        raise MoesymError(f"no instance up to {max_gpus} GPUs reaches {target_tokens_s:g} "
                          f"tokens/s at TPOT {tpot_s * 1e3:g} ms within memory: relax --tpot-ms")
    value = float(meets[0][0])
    expr, vals = _instance_time(model, hw, base, context, per_rank)
    vals[S.target_tokens_s] = float(target_tokens_s)
    vals[S.tpot_target] = float(tpot_s)
    eq = _tpot(expr, base) - S.tpot_target
    root = None
    if float(evaluate(eq, vals, {S.ep: 1.0})) > 0:
        try:
            root = model_root(eq, S.ep, vals, 1.0, float(max_gpus))
        except MoesymError:
            root = None
    extra = (f": {root.value:.4g} GPUs" if root is not None else ": one GPU already meets it"
             if float(evaluate(eq, vals, {S.ep: 1.0})) <= 0 else ": no root")
    note = (_INSTANCE_NOTE.format(timing=base.timing, table=_table_text(rows), extra=extra)
            + f" A2A {base.a2a.value}; the batch per rank is X tau t_p / e_p rounded up.")
    return ClosedForm("gpus_for_throughput", title, root.expr if root else None, vals, value,
                      root.condition if root else sp.true,
                      note + (f" Closed form: {root.note}." if root else ""), eq, S.ep,
                      root.value if root else None, root.kind if root else "numeric", {},
                      base.timing, sensitivity=_root_sensitivity(
                          eq, S.ep, vals, root.value if root else None))


# ------------------------------------------------------------------ derive solve: any equation

# friendly names of unknowns -> symbol attribute names (any symbol's attribute or printed name
# is accepted too), and whether the unknown is a count (scanned integer by integer)
VARIABLES = {"batch": ("batch", True), "tokens": ("tokens", True), "context": ("context", True),
             "chunk": ("chunk", True), "ep": ("ep", True), "tp": ("tp", True),
             "gpus": ("gpus", True), "micro_batches": ("micro_batches", True),
             "rdma_bandwidth": ("bw_out", False), "nvlink_bandwidth": ("bw_up", False),
             "hbm_bandwidth": ("hbm_bw", False), "flops": ("flops_gemm", False)}
_RANGES = {"batch": (1, B_MAX), "tokens": (1, 1 << 20), "context": (1, 1 << 21),
           "chunk": (1, 1 << 20), "ep": (1, 1024), "tp": (1, 64), "gpus": (1, 4096),
           "micro_batches": (1, 8)}


def solve_terms(step: StepModel) -> dict:
    """The named quantities ``derive solve`` accepts as terms (all seconds unless named
    otherwise), as the step model's own expressions: ``step`` (= ``tpot`` in decode), ``layer``
    (one MoE layer with overlap), ``layer_compute`` (without), ``exposed_comm`` (their
    difference), each breakdown key (busy time over one layer), ``routed_compute`` and
    ``routed_memory`` (the routed experts' roofline sides per micro-batch),
    ``tokens_per_gpu_s``, and ``memory_used`` / ``memory_free`` (bytes per GPU)."""
    from ..memory import memory_model
    from ..numbers.metrics import step_rates
    from ..model.report import routed_expert_roofline_expr

    out = {"step": step.expr, "layer": step.layer_s, "layer_compute": step.layer_compute_s,
           "exposed_comm": step.layer_s - step.layer_compute_s, **step.per_layer_s}
    if step.workload.phase is Phase.DECODE:  # as predict reports them (MTP, PP, CP included)
        rates = _decode_rates(step.expr, step.deployment)
        out["tpot"], out["tokens_per_gpu_s"] = rates["tpot_s"], rates["tokens_per_gpu_s"]
    else:
        out["tokens_per_gpu_s"] = step_rates(step.workload.phase, S.tokens, step.expr, S.tp, S.pp,
                                             S.cp)["tokens_per_gpu_s"]
    if step.model.is_moe:
        out["routed_compute"], out["routed_memory"] = routed_expert_roofline_expr(step.terms)
    mm = memory_model(step.model, step.hardware, step.deployment, step.workload)
    out["memory_used"] = mm.used_expr()
    out["memory_free"] = S.hbm_capacity - mm.used_expr()
    return out, dict(mm.values)


def _parse_term(text: str, terms: Mapping) -> sp.Expr:
    """A term name, a number, or a SymPy expression over term names and symbols (attribute or
    printed names); a one-line error for anything else."""
    from sympy.parsing.sympy_parser import parse_expr

    from ..symbolic.symbols import INFO

    if text in terms:
        return terms[text]
    # every symbol by its printed name (W_out) and its attribute name (bw_out), and the terms
    names = {**{str(s): s for s in INFO}, **{i.name: s for s, i in INFO.items()}, **terms}
    try:
        expr = parse_expr(text, local_dict=names)
    except Exception as exc:  # noqa: BLE001 - any parse failure is the user's input
        raise MoesymError(f"term {text!r} is neither a term name ({', '.join(sorted(terms))}) "
                          f"nor an expression over them and the symbols: {exc}") from None
    if not isinstance(expr, sp.Expr):
        raise MoesymError(f"term {text!r} is not an expression")
    known = set(INFO) | {x for t in terms.values() for x in symbols_of(t)}
    unknown = [s for s in symbols_of(expr) if s not in known]
    if unknown:
        raise MoesymError(f"term {text!r} uses unknown name(s) {', '.join(map(str, unknown))}: "
                          f"use a term ({', '.join(sorted(terms))}) or a moesym symbol "
                          "(README: derive solve)")
    return expr


def _variable(name: str) -> tuple[sp.Symbol, bool, str]:
    from ..symbolic.symbols import by_name

    attr, integer = VARIABLES.get(name, (name, None))
    try:
        sym = by_name(attr)
    except KeyError:
        raise MoesymError(f"--for {name!r}: use {', '.join(VARIABLES)} or a symbol name "
                          "(attribute or printed, e.g. bw_out or W_out)") from None
    if integer is None:
        integer = sym in (S.batch, S.tokens, S.context, S.ep, S.tp, S.gpus, S.micro_batches)
    return sym, integer, attr


def solve(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, var: str,
          equal: tuple[str, str] | None = None, minimize: str | None = None,
          span: tuple[float, float] | None = None) -> ClosedForm:
    """``moesym derive solve``: where TERM_A = TERM_B (``equal``) or where TERM is smallest
    (``minimize``) as ``var`` varies, every other number as ``predict`` binds it for this
    model, hardware, deployment and workload. Counts (batch, context, EP, ...) are scanned
    integer by integer; other unknowns (bandwidths, peaks, efficiencies) over a geometric grid
    from 1/1000 to 1000 times their value, refined by bisection. ``span`` overrides the range.
    The answer is the full model's root (or minimum) and the closed form of its regime."""
    if (equal is None) == (minimize is None):
        raise MoesymError("give exactly one of --equal TERM_A TERM_B and --minimize TERM")
    dep.check_overlap(wl.phase)
    if var in _DEPLOYMENT_VARS:
        return _solve_deployment(model, hw, dep, wl, var, equal, minimize, span)
    step = build_step(model, hw, dep, wl)
    terms, mem_values = solve_terms(step)
    sym, integer, attr = _variable(var)
    values = {**mem_values, **step.values}
    if sym is S.flops_gemm:  # "the GPU's FLOP/s": every GEMM weight class's peak moves with it
        from ..symbolic.expr import substitute

        tie = {s: S.flops_gemm * (float(values[s]) / float(values[S.flops_gemm]))
               for s in (S.flops_moe, S.flops_dense) if s in values}
        terms = {k: substitute(v, tie) for k, v in terms.items()}
    if sym not in values and sym not in (S.batch, S.tokens, S.context):
        raise MoesymError(f"--for {var}: {sym} does not enter this step model")
    if span is None:
        if attr in _RANGES:
            span = _RANGES[attr]
        else:
            v = float(values[sym])
            span = (v / 1000.0, v * 1000.0)
    lo, hi = span
    if not 0 < lo < hi:
        raise MoesymError(f"--range {lo:g}:{hi:g}: need 0 < LO < HI")
    if equal is not None:
        a, b = (_parse_term(t, terms) for t in equal)
        eq = a - b
        if not eq.has(sym):
            raise MoesymError(f"{equal[0]} - {equal[1]} does not depend on {var}")
        found = sign_changes(eq, sym, values, lo, hi, integer,
                             scale=smax(a, -a) + smax(b, -b))  # |a| + |b| (sp.Abs is slow)
        if not found:
            raise MoesymError(f"{equal[0]} = {equal[1]} has no root in {var} between "
                              f"{lo:g} and {hi:g} (--range to widen)")
        x0, x1 = found[0]
        root = closed_form_at(eq, sym, values, (x0, x1), x1 if integer else 0.5 * (x0 + x1),
                              integer)
        title = f"{var} where {equal[0]} = {equal[1]}"
        where = "the" if len(found) == 1 else f"the first of {len(found)}"
        return _answer("solve", title, root, eq, values,
                       f"{title}: {where} sign change in [{lo:g}, {hi:g}].",
                       step, sym, dep.timing, span=(lo, hi))
    term = _parse_term(minimize, terms)
    return _minimum(term, sym, values, lo, hi, integer, minimize, var, step, dep.timing)


#: deployment counts: each value is its own deployment (its structure, A2A mode and the numbers
#: that depend on it change), so ``solve`` evaluates predict's model at every valid value
_DEPLOYMENT_VARS = ("ep", "tp", "gpus", "micro_batches")


def _solve_deployment(model, hw, dep, wl, var, equal, minimize, span) -> ClosedForm:
    """``solve`` over a deployment count: every value in the range that makes a valid
    deployment (predict accepts it) is built as predict builds it and the terms evaluated
    there; the answer is the first sign change of TERM_A - TERM_B or the smallest TERM among
    them. No closed form: the expression changes with the value (A2A mode, EP class, the
    numbers bound per EP). ``gpus`` is scanned over powers of two."""
    field_ = var
    lo, hi = span or _RANGES[field_]
    rows = []
    candidates = range(max(1, int(np.ceil(lo))), int(np.floor(hi)) + 1)
    if field_ == "gpus":  # instance sizes: powers of two (a model build each)
        candidates = [v for v in candidates if v & (v - 1) == 0]
    for v in candidates:
        try:
            d = dep.with_(**{field_: v}) if field_ != "gpus" else dep.with_(gpus=v, ep=None)
            d.check_model(model)
            d.check_overlap(wl.phase)
            step = build_step(model, hw, d, wl)
        except MoesymError:  # SpecError included: not a valid deployment
            continue
        terms, mem_values = solve_terms(step)
        vals = {**mem_values, **step.values}
        num = lambda text: float(evaluate(_parse_term(text, terms), vals, {}))  # noqa: E731
        rows.append((v, num(equal[0]) - num(equal[1]) if equal else num(minimize)))
    if not rows:
        raise MoesymError(f"--for {var}: no value in [{lo:g}, {hi:g}] makes a valid deployment")
    table = ", ".join(f"{var} {v}: {y:.6g}" for v, y in rows)
    if equal is not None:
        title = f"{var} where {equal[0]} = {equal[1]}"
        flip = next((b for a, b in zip(rows, rows[1:]) if (a[1] > 0) != (b[1] > 0)), None)
        if flip is None:
            raise MoesymError(f"{equal[0]} = {equal[1]} changes sign at no valid {var} in "
                              f"[{lo:g}, {hi:g}] ({table})")
        value = flip[0]
    else:
        title = f"{var} minimizing {minimize}"
        value = min(rows, key=lambda r: r[1])[0]
    return ClosedForm("solve", title, None, {}, float(value), sp.true,
                      f"{title} over the valid deployments in [{lo:g}, {hi:g}], each as predict "
                      f"builds it ({table}); no closed form: the model's structure changes "
                      f"with {var}.", sp.Integer(0), getattr(S, field_), None, "numeric", {},
                      dep.timing)


def _minimum(term, sym, values, lo, hi, integer, text, var, step, timing) -> ClosedForm:
    """Minimum of ``term`` over [lo, hi] on the full model and the closed form of where it
    sits: a stationary point of the active regime (its derivative's root) or, when the minimum
    is at a kink or step of the model, the boundary there (:func:`closed_form_at` on the
    derivative's sign change, else numeric)."""
    from scipy.optimize import minimize_scalar

    from . import branch_at, solve_smooth
    from .model_root import _freeze, _step_values, steps_of

    vals = restrict(values, term, sym)
    f = lambda x: evaluate(term, vals, {sym: np.asarray(x, dtype=float)})  # noqa: E731
    if integer:
        xs = np.arange(int(np.ceil(lo)), int(np.floor(hi)) + 1, dtype=float)
    else:
        xs = np.geomspace(lo, hi, 4096)
    ys = f(xs)
    ys = np.where(np.isfinite(ys), ys, np.inf)
    i = int(np.argmin(ys))
    x_best = float(xs[i])
    if not integer and 0 < i < len(xs) - 1:
        r = minimize_scalar(lambda x: float(f(x)), bounds=(xs[i - 1], xs[i + 1]),
                            method="bounded", options={"xatol": 1e-12 * x_best})
        x_best = float(r.x)
    title = f"{var} minimizing {text}"
    note = f"{title} over [{lo:g}, {hi:g}]"
    expr, closed, kind, cnote = None, None, "numeric", "the minimum is at the range's end"
    if 0 < i < len(xs) - 1:
        try:
            sv = _step_values(steps_of(term, sym), sym, vals, x_best)
            branch, _, _ = branch_at(_freeze(term, sv), sym, {**vals, sym: x_best})
            cand = solve_smooth(sp.diff(branch, sym), sym, vals, x_best, general=False)
            cv = float(substitute(cand, {k: sp.Float(v) for k, v in vals.items()}).evalf())
            if abs(cv - x_best) <= 1e-6 * max(1.0, abs(x_best)) + (1.0 if integer else 0.0):
                from .model_root import _clean

                expr, closed, kind = _clean(cand), cv, "smooth"
                cnote = "a stationary point of the regime at the minimum"
            else:
                cnote = "the minimum is at a kink or step of the model, not a stationary point"
        except (ValueError, TypeError, NotImplementedError, RuntimeError) as exc:
            cnote = f"no closed form of the regime's stationary point ({exc})"
    regime = regime_at(step, {sym: x_best})
    return ClosedForm("solve", title, expr, vals, x_best, sp.true,
                      f"{note}; minimum {float(f(x_best)):.6g}. Closed form: {cnote}.",
                      sp.diff(term, sym), sym, closed, kind, regime, timing)


# ------------------------------------------------------------------ derive sensitivity

#: quantities ``derive sensitivity --of`` names besides the terms of ``derive solve``
QUANTITIES = ("step_time", "tokens_per_gpu_s", "tpot", "ttft")
#: derive answers whose elasticities ``--of`` can ask for: those that need no target beyond
#: the model, hardware, deployment and decode workload the command gives
ANSWERS = {"crossover": lambda m, h, d, wl: crossover(m, h, d, context=wl.context),
           "attention": lambda m, h, d, wl: attention_overtakes_moe(m, h, d, wl.context),
           "comm-hidden": lambda m, h, d, wl: comm_hidden(m, h, d, wl.context),
           "micro-batches": lambda m, h, d, wl: micro_batches_pay(
               m, h, d.with_(micro_batches=2), wl.context),
           "memory-batch": lambda m, h, d, wl: max_batch_for_memory(m, h, d, wl.context)}
# optimal-ep and expert-cache carry no smooth form of a root (their closed forms are a kink
# and a ratio), so no elasticities to ask for


def sensitivity(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                of: str = "step_time") -> dict:
    """``moesym derive sensitivity``: the elasticity d ln y / d ln x of the quantity ``of``
    to every parameter x of the model ``predict`` evaluates at this point, exact from the
    symbolic model (reverse-mode differentiation of its expression graph,
    :mod:`moesym.solve.sensitivity`: each maximum on its active branch, tile and wave counts
    held), largest first. ``of``: step_time, tokens_per_gpu_s, tpot (decode), ttft (prefill),
    a term of ``derive solve``, or a derive answer (:data:`ANSWERS`: the elasticities of its
    smooth closed form)."""
    from ..numbers.metrics import step_rates
    from .sensitivity import elasticities

    if of in ANSWERS:
        cf = ANSWERS[of](model, hw, dep, wl)
        if not cf.sensitivity:
            raise MoesymError(f"--of {of}: the answer ({cf.value:g}) has no smooth form to "
                              "differentiate here")
        return {"of": of, "value": cf.smooth.relaxed_root, "exact_answer": cf.value,
                "point": {}, "rows": list(cf.sensitivity)}
    dep.check_overlap(wl.phase)
    step = build_step(model, hw, dep, wl)
    terms, mem_values = solve_terms(step)
    terms["step_time"] = step.expr
    if wl.phase is Phase.PREFILL:
        terms["ttft"] = step_rates(Phase.PREFILL, S.tokens, step.expr, S.tp, S.pp, S.cp,
                                   context=S.context, chunk=S.chunk, maximum=smax,
                                   minimum=lambda a, b: -smax(-a, -b))["ttft_s"]
    if of not in terms:
        phase = "prefill" if of == "ttft" else "decode" if of == "tpot" else None
        raise MoesymError(f"--of {of}: " + (f"needs --phase {phase}" if phase else
                          f"use one of {', '.join(QUANTITIES)}, a derive answer "
                          f"({', '.join(ANSWERS)}) or a term ({', '.join(sorted(terms))})"))
    y = terms[of]
    values = {**mem_values, **step.values}
    if S.chunk in symbols_of(y) and S.chunk not in values:
        values[S.chunk] = float(wl.chunk)  # a prefill workload's (its default: prefill_chunk)
    missing = [s for s in symbols_of(y) if s not in values]
    if missing:
        raise MoesymError(f"--of {of}: no value for {', '.join(map(str, missing))}")
    vals = {k: float(v) for k, v in restrict(values, y).items()}
    try:
        rows = elasticities(y, vals)
    except ValueError as exc:
        raise MoesymError(f"--of {of}: {exc}") from None
    return {"of": of, "value": float(evaluate(y, vals, {})), "point": vals, "rows": rows}
