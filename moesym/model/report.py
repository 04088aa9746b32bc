"""Numbers out of a step model: step time, throughput, per-layer breakdown and the bound.

Two halves: :func:`report_expressions` names every expression a report needs (SymPy objects of a
built step model), and :func:`report_from_numbers` turns their values into the report (plain
numbers, no SymPy), so a report from the disk cache is computed by the same code as a fresh one.
"""

from __future__ import annotations

from ..specs.deployment import Phase
from ..symtab import N

__all__ = ["BREAKDOWN_KEYS", "report_expressions", "report_from_numbers"]

# contract keys of per_layer_s (issue 2 / CONTRACT.md), in display order
BREAKDOWN_KEYS = ("attention_proj", "attention_core", "moe_routed", "moe_weight_load", "shared_expert",
                  "dispatch", "combine", "tp_comm", "other")
_PART_FIELDS = ("compute_s", "memory_s", "comm_s", "overhead_s")


def _parts(tt):
    return getattr(tt, "parts", (tt,))


def report_expressions(step) -> dict:
    """``{name: expression}`` of everything :func:`report_from_numbers` reads: the step, the
    overlapped and compute-only layer, each breakdown key, and the compute / memory /
    communication / overhead time of every kernel of the layer (``part/KEY/I/FIELD``)."""
    out = {"step_time_s": step.expr, "layer_s": step.layer_s,
           "layer_compute_s": step.layer_compute_s}
    for k, v in step.per_layer_s.items():
        out[f"per_layer_s/{k}"] = v
    for key, tt in step.terms.items():
        for i, p in enumerate(_parts(tt)):
            for f in _PART_FIELDS:
                out[f"part/{key}/{i}/{f}"] = getattr(p, f)
    return out


def _kernels(nums) -> dict:
    """``{key: [{field: seconds}, ...]}`` from the ``part/...`` outputs."""
    out: dict = {}
    for name, v in nums.items():
        if name.startswith("part/"):
            _, key, i, f = name.split("/")
            parts = out.setdefault(key, [])
            while len(parts) <= int(i):
                parts.append({})
            parts[int(i)][f] = float(v)
    return out


def bound_shares(nums, values, model, deployment) -> dict:
    """Seconds of one step attributed to compute, memory, communication and fixed overhead.

    Each kernel counts as compute or memory by its own roofline (routed experts: their GEMMs
    against the larger of their own bytes and the weight read); communication counts only where
    it is not hidden behind compute (overlapped layer time minus compute-only time).
    """
    n = deployment.micro_batches
    layers = model.moe_layers if model.is_moe else model.dense_layers
    kernels = _kernels(nums)
    shares = {"compute": 0.0, "memory": 0.0, "communication": 0.0, "overhead": 0.0}
    routed = kernels.get("moe_routed", [])
    for key, parts in kernels.items():
        if key in ("dispatch", "combine", "moe_routed"):
            continue
        for p in parts:
            c, mem = p["compute_s"], p["memory_s"]
            if key == "moe_weight_load":  # weight-load floor: the larger of GEMMs and the read
                mem = max(mem, sum(q["memory_s"] for q in routed))
                c = sum(q["compute_s"] for q in routed)
            shares["compute" if c >= mem else "memory"] += max(c, mem) * n * layers
            shares["communication"] += p["comm_s"] * n * layers
            shares["overhead"] += p["overhead_s"] * n * layers
    exposed = float(nums["layer_s"]) - float(nums["layer_compute_s"])
    shares["communication"] += max(exposed, 0.0) * layers
    shares["overhead"] += values.get(N.t_step, 0.0) + values.get(N.t_layer, 0.0) * layers
    # what the serving engine loses against the modeled kernels (eta_sv < 1) is overhead too
    serving = values.get(N.eff_serve, 1.0)
    shares["overhead"] += sum(shares.values()) * (1 / serving - 1)
    return shares


def report_from_numbers(nums, values, model, deployment, workload) -> dict:
    """The ``predict`` report from the values of :func:`report_expressions` (``nums``) and the
    numbers bound to the step model's symbols (``values``, by printed name)."""
    t = float(nums["step_time_s"])
    out: dict = {"step_time_s": t}
    if workload.phase is Phase.DECODE:
        out["tokens_per_gpu_s"] = workload.batch / deployment.tp / t
        out["tpot_s"] = t
    else:
        out["tokens_per_gpu_s"] = workload.tokens / deployment.tp / t
        out["ttft_s"] = t * max(1.0, workload.context / workload.tokens)
    shares = bound_shares(nums, values, model, deployment)
    out["bound"] = max(shares, key=shares.get)
    out["bound_shares_s"] = shares
    out["per_layer_s"] = {k[len("per_layer_s/"):]: float(v) for k, v in nums.items()
                          if k.startswith("per_layer_s/")}
    out["layer_s"] = float(nums["layer_s"])
    out["layer_compute_s"] = float(nums["layer_compute_s"])
    out["serving_frac"] = float(values.get(N.eff_serve, 1.0))
    return out
