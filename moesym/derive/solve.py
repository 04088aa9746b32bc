"""``moesym derive solve``: any equation over the step model ``predict`` evaluates (TERM_A =
TERM_B, or the minimum of a TERM) as one variable varies, and the terms it names
(:func:`solve_terms`, also ``derive sensitivity``'s)."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import sympy as sp
from scipy.optimize import minimize_scalar
from sympy.parsing.sympy_parser import parse_expr

from ..errors import MoesymError
from ..memory import memory_model
from ..model.report import routed_expert_roofline_expr
from ..model.step import StepModel, build_step
from ..numbers.metrics import step_rates
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec
from ..symbolic.compile import evaluate
from ..symbolic.expr import restrict, smax, substitute, symbols_of
from ..symbolic.symbols import INFO, S, by_name
from ..solve.model_root import closed_form_at, sign_changes, stationary_form
from .closed_form import B_MAX, ClosedForm, answer, regime_at
from .decode_point import decode_rates, unfit_answer

__all__ = ["solve", "solve_terms", "VARIABLES", "ask", "PAGES"]

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
    out = {"step": step.expr, "layer": step.layer_s, "layer_compute": step.layer_compute_s,
           "exposed_comm": step.layer_s - step.layer_compute_s, **step.per_layer_s}
    if step.workload.phase is Phase.DECODE:  # as predict reports them (MTP, PP, CP included)
        rates = decode_rates(step.expr, step.deployment)
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
          span: tuple[float, float] | None = None, unless=None) -> ClosedForm:
    """``moesym derive solve``: where TERM_A = TERM_B (``equal``) or where TERM is smallest
    (``minimize``) as ``var`` varies, every other number as ``predict`` binds it for this
    model, hardware, deployment and workload. Counts (batch, context, EP, ...) are scanned
    integer by integer; other unknowns (bandwidths, peaks, efficiencies) over a geometric grid
    from 1/1000 to 1000 times their value, refined by bisection. ``span`` overrides the range.
    The answer is the full model's root (or minimum) and the closed form of its regime.
    ``unless``: called once the question is checked (the unknown and the terms read), before
    anything is solved; an answer it returns is the answer (the command's: none where the
    deployment cannot hold the model)."""
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
        if unless is not None and (instead := unless()) is not None:
            return instead
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
        return answer("solve", title, root, eq, values,
                       f"{title}: {where} sign change in [{lo:g}, {hi:g}].",
                       step, sym, dep.timing, span=(lo, hi))
    term = _parse_term(minimize, terms)
    if unless is not None and (instead := unless()) is not None:
        return instead
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
        expr, closed, kind, cnote = stationary_form(term, sym, vals, x_best, integer)
    regime = regime_at(step, {sym: x_best})
    return ClosedForm("solve", title, expr, vals, x_best, sp.true,
                      f"{note}; minimum {float(f(x_best)):.6g}. Closed form: {cnote}.",
                      sp.diff(term, sym), sym, closed, kind, regime, timing)


def ask(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, flags) -> ClosedForm:
    """``moesym derive solve`` (``--range LO:HI`` read here): none where the deployment as
    given cannot hold the model (checked once the question is read), unless the unknown is a
    deployment count (each value is then its own deployment, checked as predict checks it)."""
    span = None
    if flags.range is not None:
        try:
            lo, hi = (float(x) for x in flags.range.split(":"))
        except ValueError:
            raise MoesymError(f"--range {flags.range!r}: use LO:HI, e.g. 1e9:1e12") from None
        span = (lo, hi)
    what = (f"where {flags.equal[0]} = {flags.equal[1]}" if flags.equal
            else f"minimizing {flags.minimize}")
    return solve(model, hw, dep, wl, flags.var, equal=flags.equal, minimize=flags.minimize,
                 span=span, unless=lambda: unfit_answer("solve", f"{flags.var} {what}", model,
                                                        hw, dep, wl))


PAGES = ()
