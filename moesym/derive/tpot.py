"""``moesym derive tpot``: the largest decode batch whose TPOT (as ``predict`` reports it) meets a
target."""

from __future__ import annotations

import warnings

import numpy as np
import sympy as sp

from ..errors import MoesymError
from ..specs.deployment import Deployment, Workload
from ..specs.hardware import HardwareSpec, load_hardware
from ..readers.model import load_model
from ..specs.model import ModelSpec
from ..symbolic.symbols import S
from ..solve.model_root import closed_form_at
from .closed_form import B_MAX, ClosedForm, answer, regime_at
from .decode_point import decode_step, tpot_of, unfit_answer
from .registry import Page

__all__ = ["max_batch_for_tpot", "ask", "PAGES"]

TITLE = "Largest batch meeting a TPOT target"


def max_batch_for_tpot(model: ModelSpec, hw: HardwareSpec, dep: Deployment, context: int,
                       tpot_s: float, b_max: int = B_MAX) -> ClosedForm:
    """Largest decode batch per attention-DP rank whose step time (``predict``'s TPOT) meets
    ``tpot_s``: the last integer batch with step time <= target, scanned over every batch (the
    step time need not be monotone: tile and wave steps), and the closed form of the step
    model's regime there."""
    step = decode_step(model, hw, dep, context)
    vals = dict(step.values)
    fixed = {k: v for k, v in vals.items() if k != S.batch}
    batches = np.arange(1, b_max + 1, dtype=float)
    tpot = tpot_of(step.expr, dep)
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
    title = TITLE
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
    return answer("max_batch_for_tpot", title, root, eq, vals,
                   f"Decode at context {context}: predict's TPOT (step time over the tokens "
                   f"a step emits per request) at every batch.", step,
                   S.batch, dep.timing, (("TPOT", tpot), ("TPOT target", S.tpot_target)),
                   pin_note=span_note, target_range=(float(t[i]), hi))


def ask(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, flags) -> ClosedForm:
    """``moesym derive tpot``: none where the deployment cannot hold the model."""
    return (unfit_answer("max_batch_for_tpot", TITLE, model, hw, dep, wl)
            or max_batch_for_tpot(model, hw, dep, wl.context, flags.tpot_ms / 1e3))


PAGES = (Page("max_batch_for_tpot", "Qwen3-30B-A3B on one H20, FP8, context 4096, TPOT 50 ms",
              lambda timing: max_batch_for_tpot(
                  load_model("qwen3-30b-a3b"), load_hardware("h20"),
                  Deployment(weights="fp8", timing=timing), 4096, 0.05),
              max_batch_for_tpot),)
