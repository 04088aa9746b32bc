"""``moesym derive crossover``: the decode batch where the routed experts turn from memory- to
compute-bound.

>>> import moesym as ms
>>> cf = crossover(ms.load_model("deepseek-v3"), ms.load_hardware("h800"),
...                ms.Deployment(gpus=128, ep=128, weights="fp8", timing="roofline"))
>>> cf.value, cf.kind  # the first decode batch per GPU whose routed experts are compute-bound
(51.0, 'step')
"""

from __future__ import annotations

from ..errors import MoesymError
from ..model.report import routed_expert_roofline_expr
from ..specs.deployment import Deployment, Workload
from ..specs.hardware import HardwareSpec, load_hardware
from ..readers.model import load_model
from ..specs.model import ModelSpec
from ..symbolic.compile import evaluate
from ..symbolic.expr import restrict
from ..symbolic.symbols import S
from ..solve.model_root import closed_form_at, sign_changes
from .closed_form import B_MAX, ClosedForm, answer
from .decode_point import all_experts_read, decode_step, unfit_answer
from .registry import Page

__all__ = ["crossover", "ask", "at_point", "PAGES"]

TITLE = "Routed-expert crossover batch (memory- to compute-bound)"


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
    if not model.is_moe:
        raise MoesymError(f"{model.name} is dense: it has no routed-expert crossover")
    step = decode_step(model, hw, dep, context)
    compute, memory = routed_expert_roofline_expr(step.terms)
    eq = compute - memory
    if not lazy:
        eq = all_experts_read(eq)
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
    mem_side = memory if lazy else all_experts_read(memory)
    return answer("crossover" + ("" if lazy else "_no_lazy"),
                   TITLE, root, eq, vals,
                   note, step if lazy else None, S.batch, dep.timing,
                   (("routed experts: tensor time", compute), ("routed experts: memory time",
                                                               mem_side)))


def at_point(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload) -> ClosedForm:
    """The crossover at the decode point's context (``derive sensitivity --of crossover``)."""
    return crossover(model, hw, dep, context=wl.context)


def ask(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, flags) -> ClosedForm:
    """``moesym derive crossover``: none where the deployment cannot hold the model."""
    name = "crossover" + ("_no_lazy" if flags.no_lazy else "")
    return (unfit_answer(name, TITLE, model, hw, dep, wl)
            or crossover(model, hw, dep, lazy=not flags.no_lazy, context=wl.context))


def _deepseek_128(lazy: bool):
    return lambda timing: crossover(load_model("deepseek-v3"), load_hardware("h800"),
                                    Deployment(gpus=128, ep=128, weights="fp8", timing=timing),
                                    lazy=lazy)


_CONFIG = "DeepSeek-V3 on 128 x H800, EP128, FP8 weights"
PAGES = (Page("crossover", _CONFIG, _deepseek_128(True), crossover),
         Page("crossover_no_lazy", _CONFIG + ", every local expert read", _deepseek_128(False),
              crossover))
