"""The expressions a report reads from a step model, in one place.

:func:`report_expressions` names every SymPy expression of a built step model that a report
needs; :mod:`moesym.symbolic.compile` compiles them into one function and :mod:`moesym.numbers.metrics`
turns their values into the report (plain numbers, no SymPy), so a report from the disk cache
is computed by the same code as a fresh one.
"""

from __future__ import annotations

from ..numbers.metrics import routed_expert_roofline

__all__ = ["BREAKDOWN_KEYS", "report_expressions", "routed_expert_roofline_expr"]

# contract keys of per_layer_s (issue 2 / CONTRACT.md), in display order
BREAKDOWN_KEYS = ("attention_proj", "attention_core", "moe_routed", "moe_weight_load", "shared_expert",
                  "dispatch", "combine", "tp_comm", "other")
_PART_FIELDS = ("compute_s", "memory_s", "comm_s", "overhead_s")


def _parts(tt):
    return getattr(tt, "parts", (tt,))


def report_expressions(step) -> dict:
    """``{name: expression}`` of everything :func:`moesym.numbers.metrics.report_from_numbers`
    reads: the step, the overlapped and compute-only layer, each breakdown key, and the compute /
    memory / communication / overhead time of every kernel of the layer (``part/KEY/I/FIELD``),
    and each kernel's time over the layer's micro-batches by name (``kernel/KEY/I/NAME``)."""
    out = {"step_time_s": step.expr, "layer_s": step.layer_s,
           "layer_compute_s": step.layer_compute_s}
    if step.host_s is not None:
        out["gpu_s"], out["host_s"] = step.gpu_s, step.host_s
    for k, v in step.per_layer_s.items():
        out[f"per_layer_s/{k}"] = v
    from ..symbolic.symbols import S

    n = S.micro_batches  # per_layer_s's factor: every micro-batch of the layer
    for key, tt in step.terms.items():
        for i, p in enumerate(_parts(tt)):
            for f in _PART_FIELDS:
                out[f"part/{key}/{i}/{f}"] = getattr(p, f)
            out[f"kernel/{key}/{i}/{p.name}"] = n * p.total_s
    for key, w in step.work.items():
        for f, e in w.items():
            out[f"work/{key}/{f}"] = e
    return out


def routed_expert_roofline_expr(terms) -> tuple:
    """:func:`moesym.numbers.metrics.routed_expert_roofline` of a step model's per-micro-batch
    terms (expressions)."""
    from ..symbolic.expr import smax

    pairs = lambda key: [(p.compute_s, p.memory_s) for p in _parts(terms[key])]  # noqa: E731
    return routed_expert_roofline(pairs("moe_routed"), pairs("moe_weight_load"), smax)
