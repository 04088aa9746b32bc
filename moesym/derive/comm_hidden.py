"""``moesym derive comm-hidden``: the decode batch from which dispatch and combine are no longer
hidden behind compute under the deployment's overlap schedule."""

from __future__ import annotations

import sympy as sp

from ..errors import MoesymError
from ..specs.deployment import Deployment, Workload
from ..specs.hardware import HardwareSpec, load_hardware
from ..readers.model import load_model
from ..specs.model import ModelSpec
from ..symbolic.compile import evaluate
from ..symbolic.expr import restrict
from ..symbolic.symbols import S
from ..solve.model_root import closed_form_at, first_change, sign_changes
from .closed_form import B_MAX, ClosedForm, answer
from .decode_point import decode_step, unfit_answer
from .registry import Page

__all__ = ["comm_hidden", "ask", "at_point", "PAGES"]

TITLE = "Batch where communication stops hiding behind compute"


def comm_hidden(model: ModelSpec, hw: HardwareSpec, dep: Deployment, context: int,
                b_max: int = B_MAX) -> ClosedForm:
    """Decode batch per attention-DP rank from which dispatch and combine are no longer fully
    hidden behind compute under the deployment's overlap schedule: the first batch whose
    overlapped layer time exceeds its compute-only time (``predict``'s layer_s against
    layer_compute_s, by more than 1e-9 of it). The closed form is where the schedule's
    communication path overtakes its compute path."""
    if not model.is_moe or dep.ep == 1:
        raise MoesymError("no expert-parallel communication to hide (dense model or --ep 1)")
    step = decode_step(model, hw, dep, context)
    eq = step.layer_s - step.layer_compute_s
    vals = dict(step.values)
    name, title = "comm_hidden", TITLE
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
    return answer(name, title, root, eq, vals,
                   f"Decode at context {context}, {dep.micro_batches} micro-batch(es), the "
                   "overlap schedule predict runs.", step, S.batch, dep.timing,
                   (("layer, overlapped", step.layer_s), ("layer, compute only",
                                                          step.layer_compute_s)),
                   scale=step.layer_compute_s)


def at_point(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload) -> ClosedForm:
    """The answer at the decode point's context (``derive sensitivity --of comm-hidden``)."""
    return comm_hidden(model, hw, dep, wl.context)


def ask(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, flags) -> ClosedForm:
    """``moesym derive comm-hidden``: none where the deployment cannot hold the model."""
    return unfit_answer("comm_hidden", TITLE, model, hw, dep, wl) or at_point(model, hw, dep, wl)


PAGES = (Page("comm_hidden", "DeepSeek-V3 on 32 x H100, EP32, FP8, DeepEP low-latency, two "
                             "micro-batches, context 4096",
              lambda timing: comm_hidden(
                  load_model("deepseek-v3"), load_hardware("h100"),
                  Deployment(gpus=32, ep=32, weights="fp8", micro_batches=2, a2a="deepep-ll",
                             timing=timing), 4096),
              comm_hidden),)
