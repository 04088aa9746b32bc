"""The decode point most answers solve on: the step model of a decode workload as ``predict``
builds it, its TPOT and throughput as ``predict`` reports them, the model without lazy expert
loading, and whether the deployment can hold the model at all (the command line asks this first:
a deployment that cannot is answered none, with its memory numbers)."""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..errors import MoesymError
from ..memory import memory_report
from ..model.step import StepModel, build_step
from ..numbers.metrics import accepted_tokens, step_rates
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec
from ..symbolic.expr import nodes, substitute
from ..symbolic.symbols import S
from .closed_form import ClosedForm

__all__ = ["decode_step", "decode_rates", "tpot_of", "all_experts_read", "does_not_fit",
           "unfit_answer", "refuse_unfit"]


def decode_step(model: ModelSpec, hw: HardwareSpec, dep: Deployment, context: int) -> StepModel:
    dep.check_overlap(Phase.DECODE)
    return build_step(model, hw, dep, Workload(Phase.DECODE, batch=1, context=context))


def decode_rates(step_expr: sp.Expr, dep: Deployment) -> dict:
    """TPOT and tokens per GPU per second as predict reports them
    (:func:`moesym.numbers.metrics.step_rates`), as expressions of the decode step time."""
    a = accepted_tokens(dep)
    return step_rates(Phase.DECODE, S.batch, step_expr, S.tp, S.pp,
                      accepted=1 if a == 1 else sp.Float(a))


def tpot_of(step_expr: sp.Expr, dep: Deployment) -> sp.Expr:
    """TPOT as predict reports it: the step time over the tokens one step emits per request
    (1, or speculative decoding's expected accepted length)."""
    return decode_rates(step_expr, dep)["tpot_s"]


def all_experts_read(expr: sp.Expr) -> sp.Expr:
    """``expr`` without lazy expert loading: every local expert's weights read each step (the
    touched fraction 1 - (1 - k/E)^T set to 1)."""
    lazy = nodes(expr, lambda p: isinstance(p, sp.Pow) and p.base.has(S.topk)
                 and p.base.has(S.experts) and (p.exp.has(S.batch) or p.exp.has(S.tokens)))
    return substitute(expr, {p: 0 for p in lazy})


def does_not_fit(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload) -> str | None:
    """Why ``dep`` cannot run ``model`` on ``hw`` at all, with the memory numbers: one request
    of ``wl`` (its batch set to 1) does not fit in GPU memory by ``predict``'s rule
    (:func:`moesym.memory.memory_report`'s ``fits``); None where it fits."""
    r = memory_report(model, hw, dep, replace(wl, batch=1))
    return None if r["fits"] else unfit_message(r["weights_bytes"], r["fits_reason"])


def unfit_message(weights_bytes: float, fits_reason: str) -> str:
    """:func:`does_not_fit`'s message for a memory report's weights per GPU and ``fits_reason``
    (the what-if page writes it from these two)."""
    return (f"the model does not fit: its weights take {weights_bytes / 1e9:.1f} GB per GPU; "
            f"with one request, {fits_reason}: more GPUs (--gpus, --ep) or lighter --weights")


def unfit_answer(name: str, title: str, model: ModelSpec, hw: HardwareSpec, dep: Deployment,
                 wl: Workload) -> ClosedForm | None:
    """The answer none, saying why, where ``dep`` cannot hold the model (:func:`does_not_fit`);
    None where it can."""
    why = does_not_fit(model, hw, dep, wl)
    return None if why is None else ClosedForm.unanswered(name, title, why, dep.timing)


def refuse_unfit(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload) -> None:
    """A one-line error where ``dep`` cannot hold the model (:func:`does_not_fit`)."""
    why = does_not_fit(model, hw, dep, wl)
    if why is not None:
        raise MoesymError(why)
