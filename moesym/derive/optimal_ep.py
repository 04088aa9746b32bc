"""``moesym derive optimal-ep``: the best EP degree for decode when the instance grows with EP,
and the kink of the routed experts' roofline in e_p."""

from __future__ import annotations

import sympy as sp

from ..errors import MoesymError
from ..model.predictor import predict
from ..model.report import routed_expert_roofline_expr
from ..model.step import build_step
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec, load_hardware
from ..readers.model import load_model
from ..specs.model import ModelSpec
from ..symbolic.expr import restrict, substitute
from ..symbolic.symbols import S
from ..solve.model_root import model_root
from ..solve.regime_form import RegimeForm
from .closed_form import ClosedForm
from .instance import representative_ep
from .registry import Page

__all__ = ["optimal_ep", "ask", "PAGES"]


def optimal_ep(model: ModelSpec, hw: HardwareSpec, workload: Workload,
               base: Deployment | None = None, max_ep: int | None = None,
               memory_limit: bool = True) -> ClosedForm:
    """Best EP degree for decode when the instance grows with EP (N_gpu = e_p).

    ``value``: the EP (a power of two dividing E, up to ``max_ep``) with the most tokens per GPU
    per second under the full step model (``predict`` at each EP), raised to the smallest EP
    whose per-GPU memory fits when ``memory_limit`` is set. The closed form is the kink: the
    EP at which the routed experts' roofline flips (their weight read per GPU falls as 1 / e_p,
    their tensor time does not), solved on the same step model with N_gpu = e_p. On the roofline
    without lazy loading: e_p* = (E + R) b_w F_g eta_gg t_p / (2 W eta_m k B).
    """
    if not model.is_moe:
        raise MoesymError(f"{model.name} is dense: it has no expert parallelism to choose")
    base = base or Deployment()
    max_ep = max_ep or model.num_experts
    eps = [e for e in (2 ** i for i in range(0, 12)) if e <= max_ep and model.num_experts % e == 0]
    table = []
    for e in eps:
        dep = base.with_(gpus=e, ep=e)
        try:
            dep.check_model(model)
        except MoesymError:
            continue
        r = predict(model, hw, dep, workload, memory=memory_limit)
        table.append((e, r["tokens_per_gpu_s"], r.get("fits", True)))
    ok = [t for t in table if t[2]]
    if not ok:
        raise MoesymError("no EP up to --max-ep fits in memory at this batch and context")
    best = max(ok, key=lambda t: t[1])
    rep = base.with_(gpus=representative_ep(model, base), ep=representative_ep(model, base))
    step = build_step(model, hw, rep, workload)
    c, m = routed_expert_roofline_expr(step.terms)
    eq = substitute(c - m, {S.gpus: S.ep})
    vals = {k: v for k, v in step.values.items() if k != S.ep}
    note = ("Decode, instance grows with EP (N_gpu = e_p); value = best power-of-two EP of the "
            "full step model" + (" among those that fit in memory" if memory_limit else "")
            + f" ({', '.join(f'EP{e}: {x:.0f}' for e, x, _ in table)} tokens/GPU/s).")
    kink, expr, kind, cnote = None, None, "numeric", "the routed experts' roofline does not flip"
    try:
        r = model_root(eq, S.ep, vals, 1.0, float(model.num_experts + base.redundant_experts))
        kink, expr, kind, cnote = r.value, r.expr, r.kind, r.note
    except MoesymError:
        pass
    cnote += (f"; kink at e_p = {kink:.4g}" if kink is not None else "")
    why = None if expr is not None else RegimeForm(S.ep, None, None, note=_why_ep(
        best[0], ok, base.gpus_per_node))
    return ClosedForm("optimal_ep", "EP degree where more EP stops shortening the MoE layer",
                      expr, restrict(vals, eq),
                      float(best[0]), sp.true, f"{note} Closed form: {cnote}.", eq, S.ep, kink,
                      kind, {}, base.timing, smooth=why)


def _why_ep(best: int, fitting: list, node: int) -> str:
    """One line: why the best EP has no closed form (where it sits in predict's table)."""
    eps = [e for e, _, _ in fitting]
    if best == max(eps):
        return f"the optimum is at the largest EP that fits memory: {best}"
    if best == min(eps):
        return f"the optimum is at the smallest EP that fits memory: {best}"
    if best == node:
        return (f"the optimum is EP {best} = the GPUs per node: beyond it dispatch and combine "
                "cross the scale-out network (a change of the model's structure, not a root)")
    return (f"the optimum EP {best} is interior to predict's table of powers of two; the model's "
            "structure (A2A tiers, experts per GPU) changes with EP, so no single regime holds")


def ask(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, flags) -> ClosedForm:
    """``moesym derive optimal-ep`` at the decode point's batch and context (each EP is
    checked against memory unless ``--no-memory-limit``)."""
    return optimal_ep(model, hw, wl, dep, max_ep=flags.max_ep,
                      memory_limit=not flags.no_memory_limit)


PAGES = (Page("optimal_ep",
              "DeepSeek-V3 on H800, FP8, 64 requests per GPU, context 4096 (value: best EP of "
              "the full step model that fits in memory)",
              lambda timing: optimal_ep(load_model("deepseek-v3"), load_hardware("h800"),
                                        Workload(Phase.DECODE, batch=64, context=4096),
                                        Deployment(weights="fp8", timing=timing), max_ep=256),
              optimal_ep),)
