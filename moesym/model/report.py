"""Numbers out of a step model: step time, throughput, per-layer breakdown and the bound."""

from __future__ import annotations


from ..compile import evaluate
from ..specs.deployment import Phase
from ..symbols import S

__all__ = ["predict_report", "bound_shares"]


def _num(step, expr) -> float:
    return float(evaluate(expr, step.values, {}))


def _parts(tt):
    return getattr(tt, "parts", (tt,))


def bound_shares(step) -> dict:
    """Seconds of one step attributed to compute, memory, communication and fixed overhead.

    Each kernel counts as compute or memory by its own roofline; communication counts only where
    it is not hidden behind compute (overlapped layer time minus compute-only time).
    """
    m = step.model
    n = step.values[S.micro_batches]
    layers = (m.moe_layers if m.is_moe else m.dense_layers)
    shares = {"compute": 0.0, "memory": 0.0, "communication": 0.0, "overhead": 0.0}
    for key, tt in step.terms.items():
        if key in ("dispatch", "combine"):
            continue
        for p in _parts(tt):
            c, mem = _num(step, p.compute_s), _num(step, p.memory_s)
            if key == "moe_routed":  # weight-load floor: the larger of compute and weight read
                continue
            if key == "moe_weight_load":
                rc = sum(_num(step, q.compute_s) for q in _parts(step.terms["moe_routed"]))
                rm = sum(_num(step, q.memory_s) for q in _parts(step.terms["moe_routed"]))
                mem = max(mem, rm)
                c = rc
            shares["compute" if c >= mem else "memory"] += max(c, mem) * n * layers
            shares["communication"] += _num(step, p.comm_s) * n * layers
            shares["overhead"] += _num(step, p.overhead_s) * n * layers
    exposed = _num(step, step.layer_s) - _num(step, step.layer_compute_s)
    shares["communication"] += max(exposed, 0.0) * layers
    shares["overhead"] += step.values.get(S.t_step, 0.0) + step.values.get(S.t_layer, 0.0) * layers
    # what the serving engine loses against the modeled kernels (eta_sv < 1) is overhead too
    serving = step.values.get(S.eff_serve, 1.0)
    shares["overhead"] += sum(shares.values()) * (1 / serving - 1)
    return shares


def predict_report(step) -> dict:
    wl, dep = step.workload, step.deployment
    t = _num(step, step.expr)
    out: dict = {"step_time_s": t}
    if wl.phase is Phase.DECODE:
        out["tokens_per_gpu_s"] = wl.batch / dep.tp / t
        out["tpot_s"] = t
    else:
        out["tokens_per_gpu_s"] = wl.tokens / dep.tp / t
        out["ttft_s"] = t * max(1.0, wl.context / wl.tokens)
    shares = bound_shares(step)
    out["bound"] = max(shares, key=shares.get)
    out["bound_shares_s"] = shares
    out["per_layer_s"] = {k: _num(step, v) for k, v in step.per_layer_s.items()}
    out["layer_s"] = _num(step, step.layer_s)
    out["layer_compute_s"] = _num(step, step.layer_compute_s)
    out["serving_frac"] = float(step.values.get(S.eff_serve, 1.0))
    return out


