"""``moesym derive memory-batch``: the largest decode batch whose memory per GPU (as ``predict``
counts it) fits in HBM."""

from __future__ import annotations

import sympy as sp

from ..errors import MoesymError
from ..memory import memory_model
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec
from ..symbolic.compile import evaluate
from ..symbolic.expr import restrict
from ..symbolic.symbols import S
from ..solve.model_root import closed_form_at, first_change, sign_changes
from .closed_form import ClosedForm, answer

__all__ = ["max_batch_for_memory", "ask", "at_point", "PAGES"]

TITLE = "Largest batch that fits in GPU memory"


def max_batch_for_memory(model: ModelSpec, hw: HardwareSpec, dep: Deployment, context: int,
                         b_max: int = 1 << 20) -> ClosedForm:
    """Largest decode batch per attention-DP rank whose memory per GPU (``predict``'s
    ``memory_bytes``: weights, KV at ``context``, activations, workspaces, communication buffers
    and the runtime reserve) fits in HBM. The memory model is linear in B in its regime, so the
    smooth form is B* = (M_hbm - fixed bytes) / (bytes per request), with the capacity kept
    symbolic."""
    wl = Workload(Phase.DECODE, batch=1, context=context)
    mm = memory_model(model, hw, dep, wl)
    used = mm.used_expr()
    eq = used - S.hbm_capacity
    vals = {k: float(v) for k, v in mm.values.items() if k != S.batch}
    found = sign_changes(eq, S.batch, vals, 1, b_max, integer=True, until=first_change)
    title = TITLE
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
    return answer("max_batch_for_memory", title, root, eq, vals,
                   f"Decode at context {context}: predict's memory per GPU at every batch "
                   "(weights, KV, activations, workspaces, communication buffers, reserve).",
                   None, S.batch, dep.timing,
                   (("memory used", used), ("HBM capacity", S.hbm_capacity)),
                   span=(1.0, float(b_max)))


def at_point(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload) -> ClosedForm:
    """The answer at the decode point's context (``derive sensitivity --of memory-batch``)."""
    return max_batch_for_memory(model, hw, dep, wl.context)


def ask(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, flags) -> ClosedForm:
    """``moesym derive memory-batch``: a deployment that cannot hold one request is its own
    answer's error (the memory question itself)."""
    return at_point(model, hw, dep, wl)


PAGES = ()
