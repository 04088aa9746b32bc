"""An instance that grows with EP (N_gpu = e_p), shared by the answers that choose an EP or an
instance size (``optimal-ep``, ``ep-min-tpot``, ``gpus-for-throughput``): ``predict`` at each
power-of-two EP dividing the experts, and the continuous relaxation of its decode step on the
roofline that their closed forms solve."""

from __future__ import annotations

import math

import numpy as np
import sympy as sp
from scipy.optimize import minimize_scalar

from ..errors import MoesymError
from ..model.predictor import predict
from ..model.step import build_step
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec
from ..symbolic.compile import evaluate
from ..symbolic.expr import restrict, substitute
from ..symbolic.symbols import S
from ..solve.rewrite import RELAX_CEILING, apply_rules
from .decode_point import all_experts_read

__all__ = ["instance_time", "representative_ep", "instance_table", "table_text", "argmin_ep",
           "INSTANCE_NOTE"]


def instance_time(model: ModelSpec, hw: HardwareSpec, base: Deployment, context: int,
                   per_rank_batch: sp.Expr) -> tuple[sp.Expr, dict]:
    """Decode step time on the roofline (the closed forms' relaxation) of an instance that grows
    with EP (N_gpu = e_p), with the per-attention-DP-rank batch given as an expression of e_p. Two
    approximations make it a function of a continuous e_p: lazy loading off (every local expert
    is read each step: exact once every expert gets a token, conservative below) and tile and
    wave counts relaxed (ceilings dropped); routing is balanced (the busiest rank's expected
    load is a special function of e_p).
    Returns (expression in e_p and the workload symbols, numeric values)."""
    if not model.is_moe:
        raise MoesymError(f"{model.name} is dense: it has no expert parallelism to choose")
    e = representative_ep(model, base)
    rep = base.with_(gpus=e, ep=e, timing="roofline", routing="balanced")
    base.check_overlap(Phase.DECODE)
    step = build_step(model, hw, rep, Workload(Phase.DECODE, batch=1, context=context))
    expr = substitute(substitute(step.expr, {S.gpus: S.ep}), {S.batch: per_rank_batch})
    expr = apply_rules(all_experts_read(expr), [RELAX_CEILING])
    vals = restrict(step.values, expr, S.ep)
    return expr, vals


def representative_ep(model: ModelSpec, base: Deployment) -> int:
    """The EP of the representative deployment a closed form in e_p is built on (the EP itself
    becomes a symbol): 16, or the largest power of two below it that divides the experts (an
    8-expert model: 8)."""
    total = model.num_experts + base.redundant_experts
    return next((e for e in (16, 8, 4, 2) if total % e == 0), 1)


INSTANCE_NOTE = ("Decode, N_gpu = e_p. Value: the model predict evaluates ({timing} timing, "
                  "routing as given) at each power-of-two EP dividing the experts ({table}). "
                  "Closed form: the continuous relaxation on the roofline (balanced routing, "
                  "every local expert read, tile and wave counts relaxed){extra}.")


def instance_table(model: ModelSpec, hw: HardwareSpec, base: Deployment, context: int,
                    batch_of_ep, max_ep: float) -> list[tuple[int, float, bool, int]]:
    """``predict`` of an instance of e_p GPUs (EP over all of them) at each power-of-two EP that
    divides the experts, up to ``max_ep``: (e_p, step seconds, fits in memory, batch per
    attention DP rank, rounded up from ``batch_of_ep(e_p)``)."""
    total = model.num_experts + base.redundant_experts
    rows = []
    for e in (2 ** i for i in range(0, 13)):
        if e > max_ep or total % e:
            continue
        dep = base.with_(gpus=e, ep=e)
        try:
            dep.check_model(model)
        except MoesymError:
            continue
        b = max(1, math.ceil(batch_of_ep(e) - 1e-9))
        r = predict(model, hw, dep, Workload(Phase.DECODE, batch=b, context=context))
        rows.append((e, r["step_time_s"], r["fits"], b))
    if not rows:
        raise MoesymError(f"no EP up to {int(max_ep)} divides the {total} experts and the "
                          "deployment's TP")
    return rows


def table_text(rows, unit="ms") -> str:
    return ", ".join(f"EP{e}: {t * 1e3:.2f} ms" + ("" if ok else " (does not fit)")
                     for e, t, ok, _ in rows)


def argmin_ep(expr, vals, lo, hi) -> float | None:
    """Interior minimum in e_p of the compiled ``expr`` (None when it is at an end)."""
    f = lambda e: float(evaluate(expr, vals, {S.ep: e}))  # noqa: E731
    grid = np.geomspace(lo, hi, 64)
    i = int(np.argmin([f(e) for e in grid]))
    if i in (0, len(grid) - 1):
        return None
    r = minimize_scalar(f, bounds=(grid[i - 1], grid[i + 1]), method="bounded",
                        options={"xatol": 1e-10})
    return float(r.x)
