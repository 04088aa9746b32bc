"""``moesym derive concurrency``: the largest serving concurrency whose steady-state TPOT (and TTFT)
meets the targets, on the steady state ``predict --phase serve`` evaluates."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import sympy as sp

from ..errors import MoesymError
from ..model.predictor import predict, serve_models
from ..numbers.metrics import accepted_tokens, serve_point, serve_rates, serve_step_times
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec
from ..model.step import build_step
from ..symbolic.expr import smax, smin, substitute
from ..symbolic.symbols import S
from ..symbolic.symtab import N
from ..solve.model_root import closed_form_at
from .closed_form import B_MAX, ClosedForm, answer
from .decode_point import unfit_answer

__all__ = ["max_concurrency", "ask", "PAGES"]


#: the serve targets: (name, symbol, what it is)
_SERVE_TARGETS = (("tpot", S.tpot_target, "TPOT"), ("ttft", S.ttft_target, "TTFT"))


def _serve_scan(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                b_max: int) -> tuple:
    """(chunk, concurrencies, {tpot, ttft: seconds at each}, saturation) of the steady state
    ``predict --phase serve`` evaluates (its two compiled step models, the metrics layer's
    serve functions), at every concurrency from 1 up to one past where the decoding requests
    reach their cap (beyond it nothing changes: the rank is prefill-bound, more requests
    queue), or ``b_max``."""
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


def _title(targets: dict) -> str:
    """The question, naming the targets given (``{tpot, ttft: seconds or None}``)."""
    return "Largest serving concurrency meeting " + " and ".join(
        f"a {label} target" for k, _, label in _SERVE_TARGETS if targets[k] is not None)


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
    title = _title(targets)
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
    cf = answer("max_concurrency", title, root, eq, vals,
                 f"{mean} {label} binds (the next concurrency misses it); B is the concurrency. "
                 f"{memory}",
                 None, S.batch, dep.timing, ((label, exprs[k]), (f"{label} target", sym)),
                 span=(1.0, float(cs[-1])), pin_note=span_note,
                 target_range=(float(lat[k][i]), hi), regime=regime, where=where)
    if cf.smooth is not None and cf.smooth.expr is None and cf.smooth.relaxed_root:
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
    r = predict(model, hw, dep, replace(wl, batch=int(concurrency), chunk=chunk), memory=True)
    out = {k: b.get("roofline", b["bound"]) if k == "routed_experts" else b["bound"]
           for k, b in r["bounds"].items() if b["bound"] != "none"}
    memory = (f"Memory per GPU at {concurrency:.0f}: {r['memory_bytes'] / 1e9:.1f} GB, "
              + ("fits." if r["fits"] else f"does NOT fit ({r.get('fits_reason', '')}).")
              if "memory_bytes" in r else "")
    return ({**out, "mixed_step": r["mixed_step"]["bound"],
             "decode_step": r["decode_step"]["bound"]}, memory)


def ask(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, flags) -> ClosedForm:
    """``moesym derive concurrency`` on the steady state of ``wl`` (its request lengths, chunk
    and prefix hit): none where the deployment cannot hold the model."""
    if flags.percentile is not None:
        raise MoesymError(f"--percentile {flags.percentile:g}: derive concurrency solves the "
                          "steady state, which gives mean TPOT and TTFT; for a percentile SLA "
                          "run moesym optimize --phase serve --percentile P (a simulation)")
    if flags.tpot_ms is None and flags.ttft_ms is None:
        raise MoesymError("no target: give --tpot-ms and/or --ttft-ms")
    targets = {k: getattr(flags, f"{k}_ms") / 1e3 if getattr(flags, f"{k}_ms") else None
               for k, _, _ in _SERVE_TARGETS}
    return (unfit_answer("max_concurrency", _title(targets), model, hw, dep, wl)
            or max_concurrency(model, hw, dep, wl.isl, wl.osl, targets["tpot"], targets["ttft"],
                               chunk=wl.chunk, prefix_hit=wl.prefix_hit))


PAGES = ()
