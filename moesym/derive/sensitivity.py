"""``moesym derive sensitivity``: the elasticity d ln y / d ln x of a quantity of the step model, a
term of ``derive solve`` or a differentiable derive answer to every parameter, exact from the
symbolic model (the maths: :mod:`moesym.solve.sensitivity`)."""

from __future__ import annotations

from ..errors import MoesymError
from ..model.step import build_step
from ..numbers.metrics import step_rates
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec
from ..symbolic.compile import evaluate
from ..symbolic.expr import restrict, smax, symbols_of
from ..symbolic.symbols import S
from ..solve.sensitivity import elasticities
from .decode_point import refuse_unfit
from .registry import ANSWERS
from .solve import solve_terms

__all__ = ["sensitivity", "QUANTITIES", "DIFFERENTIABLE", "ask", "PAGES"]

#: quantities ``derive sensitivity --of`` names besides the terms of ``derive solve``
QUANTITIES = ("step_time", "tokens_per_gpu_s", "tpot", "ttft")
#: derive answers whose elasticities ``--of`` can ask for (the registry's differentiable ones:
#: they need no target beyond the decode point and have a smooth form), by subcommand
DIFFERENTIABLE = {a.command: a for a in ANSWERS if a.differentiable}


def sensitivity(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                of: str = "step_time") -> dict:
    """``moesym derive sensitivity``: the elasticity d ln y / d ln x of the quantity ``of``
    to every parameter x of the model ``predict`` evaluates at this point, exact from the
    symbolic model (reverse-mode differentiation of its expression graph,
    :mod:`moesym.solve.sensitivity`: each maximum on its active branch, tile and wave counts
    held), largest first. ``of``: step_time, tokens_per_gpu_s, tpot (decode), ttft (prefill),
    a term of ``derive solve``, or a differentiable derive answer (:data:`DIFFERENTIABLE`: the
    elasticities of its smooth closed form)."""
    if of in DIFFERENTIABLE:
        cf = DIFFERENTIABLE[of].load().at_point(model, hw, dep, wl)
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
                          f"({', '.join(DIFFERENTIABLE)}) or a term ({', '.join(sorted(terms))})"))
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


def ask(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, flags) -> dict:
    """``moesym derive sensitivity``: refused, in one line with the memory numbers, where the
    deployment cannot hold the model."""
    refuse_unfit(model, hw, dep, wl)
    return sensitivity(model, hw, dep, wl, flags.of)


PAGES = ()
