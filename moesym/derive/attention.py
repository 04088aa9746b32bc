"""``moesym derive attention``: the decode batch where one layer's attention core (its KV read)
takes longer than its MoE experts."""

from __future__ import annotations

from ..errors import MoesymError
from ..specs.deployment import Deployment, Workload
from ..specs.hardware import HardwareSpec, load_hardware
from ..readers.model import load_model
from ..specs.model import ModelSpec
from ..symbolic.compile import evaluate
from ..symbolic.expr import restrict, smax
from ..symbolic.symbols import S
from ..solve.model_root import closed_form_at, first_change, sign_changes
from .closed_form import B_MAX, ClosedForm, answer
from .decode_point import decode_step, unfit_answer
from .registry import Page

__all__ = ["attention_overtakes_moe", "ask", "at_point", "PAGES"]

TITLE = "Batch where attention's KV read overtakes the MoE layer"


def attention_overtakes_moe(model: ModelSpec, hw: HardwareSpec, dep: Deployment,
                            context: int, b_max: int = B_MAX) -> ClosedForm:
    """Decode batch per attention-DP rank where one layer's attention core (its KV read at
    ``context``) takes longer than its MoE experts: attention_core = max(moe_routed,
    moe_weight_load), both as predict times them per micro-batch."""
    if not model.is_moe:
        raise MoesymError(f"{model.name} is dense: no MoE layer to compare with")
    step = decode_step(model, hw, dep, context)
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
    return answer("attention_overtakes_moe", TITLE, root, eq, vals,
                   f"Decode at context {context}, one layer, as predict times it.", step,
                   S.batch, dep.timing, (("attention core", attn), ("MoE experts", moe)))


def at_point(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload) -> ClosedForm:
    """The answer at the decode point's context (``derive sensitivity --of attention``)."""
    return attention_overtakes_moe(model, hw, dep, wl.context)


def ask(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, flags) -> ClosedForm:
    """``moesym derive attention``: none where the deployment cannot hold the model."""
    return (unfit_answer("attention_overtakes_moe", TITLE, model, hw, dep, wl)
            or at_point(model, hw, dep, wl))


PAGES = (Page("attention_overtakes_moe",
              "DeepSeek-V3 on 32 x H800, EP32, FP8 weights, context 8192",
              lambda timing: attention_overtakes_moe(
                  load_model("deepseek-v3"), load_hardware("h800"),
                  Deployment(gpus=32, ep=32, weights="fp8", timing=timing), 8192),
              attention_overtakes_moe),)
