"""``moesym derive gpus-for-throughput``: the smallest instance (GPUs = EP) whose decode throughput
reaches a target while every request meets a TPOT."""

from __future__ import annotations

import sympy as sp

from ..errors import MoesymError
from ..numbers.metrics import accepted_tokens, step_rates
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec, load_hardware
from ..readers.model import load_model
from ..specs.model import ModelSpec
from ..symbolic.compile import evaluate
from ..symbolic.symbols import S
from ..solve.model_root import model_root
from .closed_form import ClosedForm, root_sensitivity
from .decode_point import tpot_of
from .instance import INSTANCE_NOTE, instance_table, instance_time, table_text
from .registry import Page

__all__ = ["gpus_for_throughput", "ask", "PAGES"]


def gpus_for_throughput(model: ModelSpec, hw: HardwareSpec, target_tokens_s: float,
                        tpot_s: float, context: int, base: Deployment | None = None,
                        max_gpus: int = 4096) -> ClosedForm:
    """Smallest instance (N_gpu = e_p GPUs) whose decode throughput reaches X tokens/s while
    every request gets a token each tau_tpot seconds.

    ``value``: the smallest power-of-two EP (dividing the experts) whose ``predict`` step time
    meets tau_tpot and fits in memory. The closed form is the continuous relaxation on the
    roofline. The instance serves B_tot = X tau_tpot requests, B = X tau_tpot t_p / e_p per attention DP
    rank; it meets the target when its step time T(B, e_p) <= tau_tpot. In the regime that holds
    at the root, T = c_0 + c_1 / e_p (+ c_2 e_p for ring latencies): per-token work c_1 / e_p
    scales with X tau_tpot, the routed-weight read (E + R) 3 d d_e b_w / (e_p W eta_m) adds to
    c_1, and the replicated attention weights and fixed latencies form c_0, so
    e_p* = c_1 / (tau_tpot - c_0) (a quadratic's root with ring latencies). No instance
    reaches X when tau_tpot <= c_0.
    """
    base = base or Deployment()
    per_rank = S.target_tokens_s * S.tpot_target * S.tp / S.ep

    title = "Smallest instance meeting a throughput target"
    rows = instance_table(model, hw, base, context,
                           lambda e: target_tokens_s * tpot_s * base.tp / e, max_gpus)
    a = accepted_tokens(base)  # tokens a step emits per request
    meets = [r for r in rows
             if r[2] and step_rates(Phase.DECODE, r[3], r[1], base.tp, base.pp, accepted=a)
             ["tpot_s"] <= tpot_s]
    if not meets:
        raise MoesymError(f"no instance up to {max_gpus} GPUs reaches {target_tokens_s:g} "
                          f"tokens/s at TPOT {tpot_s * 1e3:g} ms within memory: relax --tpot-ms")
    value = float(meets[0][0])
    expr, vals = instance_time(model, hw, base, context, per_rank)
    vals[S.target_tokens_s] = float(target_tokens_s)
    vals[S.tpot_target] = float(tpot_s)
    eq = tpot_of(expr, base) - S.tpot_target
    root = None
    if float(evaluate(eq, vals, {S.ep: 1.0})) > 0:
        try:
            root = model_root(eq, S.ep, vals, 1.0, float(max_gpus))
        except MoesymError:
            root = None
    extra = (f": {root.value:.4g} GPUs" if root is not None else ": one GPU already meets it"
             if float(evaluate(eq, vals, {S.ep: 1.0})) <= 0 else ": no root")
    note = (INSTANCE_NOTE.format(timing=base.timing, table=table_text(rows), extra=extra)
            + f" A2A {base.a2a.value}; the batch per rank is X tau t_p / e_p rounded up.")
    return ClosedForm("gpus_for_throughput", title, root.expr if root else None, vals, value,
                      root.condition if root else sp.true,
                      note + (f" Closed form: {root.note}." if root else ""), eq, S.ep,
                      root.value if root else None, root.kind if root else "numeric", {},
                      base.timing, sensitivity=root_sensitivity(
                          eq, S.ep, vals, root.value if root else None))


def ask(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, flags) -> ClosedForm:
    """``moesym derive gpus-for-throughput`` at the decode point's context."""
    return gpus_for_throughput(model, hw, flags.tokens_per_s, flags.tpot_ms / 1e3, wl.context,
                               dep, max_gpus=flags.max_gpus)


PAGES = (Page("gpus_for_throughput",
              "DeepSeek-V3 on H800, FP8, DeepEP low-latency, 200,000 tokens/s at TPOT 50 ms, "
              "context 4096",
              lambda timing: gpus_for_throughput(
                  load_model("deepseek-v3"), load_hardware("h800"), 200_000, 0.05, 4096,
                  Deployment(weights="fp8", a2a="deepep-ll", timing=timing)),
              gpus_for_throughput),)
