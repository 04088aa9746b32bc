"""``moesym derive micro-batches``: the decode batch from which two micro-batches beat one."""

from __future__ import annotations

import sympy as sp

from ..errors import MoesymError
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec, load_hardware
from ..readers.model import load_model
from ..specs.model import ModelSpec
from ..symbolic.compile import evaluate
from ..symbolic.expr import restrict, substitute
from ..symbolic.symbols import S
from ..solve.model_root import closed_form_at, sign_changes
from .closed_form import B_MAX, ClosedForm, answer
from .decode_point import decode_step, unfit_answer
from .registry import Page

__all__ = ["micro_batches_pay", "ask", "at_point", "PAGES"]

TITLE = "Batch from which two micro-batches beat one"


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
    two = decode_step(model, hw, dep.with_(micro_batches=2), context)
    one = decode_step(model, hw, dep.with_(micro_batches=1, overlap="auto"), context)
    t2 = substitute(two.expr, {S.micro_batches: 2})
    t1 = substitute(one.expr, {S.micro_batches: 1})
    eq = t2 - t1
    vals = {k: v for k, v in {**one.values, **two.values}.items() if k != S.micro_batches}
    name, title = "micro_batches_pay", TITLE
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
    return answer(name, title, root, eq, vals,
                   f"Decode at context {context}: step time with two micro-batches minus with "
                   f"one (schedules: {dep.overlap} for two, auto for one), A2A "
                   f"{dep.resolved_a2a(Phase.DECODE).value}.", two, S.batch, dep.timing,
                   (("step, two micro-batches", t2), ("step, one micro-batch", t1)))


def at_point(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload) -> ClosedForm:
    """The answer at the decode point's context, with the two micro-batches the question is
    about (``derive sensitivity --of micro-batches``)."""
    return micro_batches_pay(model, hw, dep.with_(micro_batches=2), wl.context)


def ask(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, flags) -> ClosedForm:
    """``moesym derive micro-batches``: none where the deployment cannot hold the model."""
    return (unfit_answer("micro_batches_pay", TITLE, model, hw, dep, wl)
            or at_point(model, hw, dep, wl))


PAGES = (Page("micro_batches_pay",
              "DeepSeek-V3 on 72 x H100, EP72, 32 redundant experts, FP8, DeepEP low-latency, "
              "context 2048 (SGLang's published two-batch-overlap setup: -27% at 32, +25.5% at "
              "256 requests per GPU)",
              lambda timing: micro_batches_pay(
                  load_model("deepseek-v3"), load_hardware("h100"),
                  Deployment(gpus=72, ep=72, redundant_experts=32, a2a="deepep-ll",
                             weights="fp8", timing=timing), 2048),
              micro_batches_pay),)
