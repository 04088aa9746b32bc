"""The expressions a report reads from a step model, in one place, and the reports made from
their compiled values (a decode or prefill step's, aggregated serving's).

:func:`report_expressions` names every SymPy expression of a built step model that a report
needs; :mod:`moesym.symbolic.compile` compiles them into one function and :mod:`moesym.numbers.metrics`
turns their values into the report (plain numbers, no SymPy), so a report from the disk cache
is computed by the same code as a fresh one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..numbers.bindings import memory_workload_values, workload_values
from ..numbers.metrics import (accepted_tokens, averaged, evaluate_at_lengths,
                               expert_cache_report, fits, length_symbol, report_from_numbers,
                               routed_expert_roofline, serve_chunk, serve_memory_values,
                               serve_point, serve_rates, serve_report, serve_steps)
from ..numeric.compiled import CompiledModel
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec
from ..symbolic.symtab import N

__all__ = ["BREAKDOWN_KEYS", "memory_fit", "report_expressions", "routed_expert_roofline_expr",
           "serve_models", "serve_prediction", "step_report"]

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


def step_report(cm: CompiledModel, model: ModelSpec, hw: HardwareSpec, dep: Deployment,
                wl: Workload, memory: bool = True) -> dict:
    """The report of a decode or prefill step from its compiled model ``cm`` (part 0 the report
    expressions, part 1 the memory when ``memory``), at ``wl``'s numbers and ``dep``'s
    micro-batch count (clamped by the caller, :func:`moesym.numbers.metrics.clamp_micro_batches`;
    a model built for more micro-batches is evaluated at that count); a length distribution
    averaged over its lengths. ``predict`` and ``StepModel.predict`` both answer with it."""
    lengths = (length_symbol(wl.phase), wl.lengths)
    values = {**cm.parts[0]["static"], **workload_values(wl), N.micro_batches: dep.micro_batches}
    r = report_from_numbers(averaged(evaluate_at_lengths(cm, 0, values, *lengths)), values, model,
                            dep, wl)
    if dep.expert_cache is not None and model.is_moe:
        r.update(expert_cache_report(model, dep, wl))
    if wl.lengths:
        r["lengths"] = {"mean": wl.context, "points": len(wl.lengths),
                        "min": min(wl.lengths), "max": max(wl.lengths)}
    if memory:
        used = averaged(evaluate_at_lengths(cm, 1, memory_workload_values(wl, dep), *lengths))
        r["memory_bytes"] = used["memory_bytes"]
        r.update(memory_fit(model, hw, dep, r["memory_bytes"]))
    return r


def memory_fit(model: ModelSpec, hw: HardwareSpec, dep: Deployment, memory_bytes) -> dict:
    """``fits`` of a prediction: the device's memory, and the host tier's where
    ``--expert-cache`` leaves experts there (``fits_reason`` says why not)."""
    ok = bool(fits(memory_bytes, hw.hbm_capacity_bytes))
    if ok and (dep.expert_cache is None or not model.is_moe):
        return {"fits": True}  # (the memory package imports SymPy: a cached predict skips it)
    from ..memory.capacity import device_short, host_tier

    out = {"fits": ok, **({} if ok else {"fits_reason": device_short(float(memory_bytes), hw)})}
    host = host_tier(model, hw, dep, float(memory_bytes))
    return {**out, **host, "fits": ok and host.get("fits", True)}


def serve_models(compiled: Callable, model: ModelSpec, hw: HardwareSpec, dep: Deployment,
                 wl: Workload, memory: bool = True) -> tuple:
    """(chunk, mixed-step compiled model, decode-step compiled model) of a serve workload, each
    from ``compiled(model, hw, dep, wl, memory)`` (the cache's or a fresh build); the decode
    model also holds the memory of the in-flight requests beside one prefill chunk."""
    dep.check_overlap(Phase.SERVE)
    dep.check_overlap(Phase.DECODE)
    chunk = serve_chunk(wl.chunk, hw.hbm_capacity_bytes, dep.dp, dep.engine)
    mixed = compiled(model, hw, dep, replace(wl, chunk=chunk), memory=False)
    opts = dict(dep.memory_options)
    opts.setdefault("prefill_tokens", chunk)  # the chunk's activations sit beside the decode's
    mem_dep = replace(dep, memory_options=tuple(sorted(opts.items())))
    decode = compiled(model, hw, mem_dep, Workload(Phase.DECODE, batch=wl.batch,
                                                                 context=wl.context), memory)
    return chunk, mixed, decode


def serve_prediction(compiled: Callable, model: ModelSpec, hw: HardwareSpec, dep: Deployment,
                     wl: Workload, memory: bool = True) -> dict:
    """Aggregated serving (``--phase serve``): the steady state of
    :mod:`moesym.numbers.metrics` (its serving section) from the mixed step's and the decode
    step's compiled models (:func:`serve_models`, through ``compiled``). ``per_layer_s`` and the bounds are the mixed step's;
    ``decode_step`` has the decode-only step's."""
    chunk, cm_mix, cm_dec = serve_models(compiled, model, hw, dep, wl, memory)
    a = accepted_tokens(dep)
    p = serve_point(wl.batch, wl.isl, wl.osl, chunk, a, hit=wl.prefix_hit)
    hit = {N.prefix_hit: wl.prefix_hit} if wl.prefix_hit else {}
    nums_mix, nums_dec = serve_steps((cm_mix, cm_dec), hit, p, wl.isl, wl.osl, chunk, wl.lengths)
    mixed = report_from_numbers(averaged(nums_mix), cm_mix.parts[0]["static"], model, dep, wl)
    dec_wl = Workload(Phase.DECODE, batch=wl.batch, context=wl.context)
    dec = report_from_numbers(nums_dec, cm_dec.parts[0]["static"], model, dep, dec_wl)
    rates = serve_rates(p, mixed["step_time_s"], dec["step_time_s"], chunk, dep.tp * dep.pp, a)
    if dep.mtp:
        rates["accepted_tokens_per_step"] = a
    r = serve_report(p, rates, chunk, wl.context, mixed, dec)
    if memory:
        used = cm_dec.evaluate(1, serve_memory_values(wl.batch, wl.isl, wl.osl, chunk))
        r["memory_bytes"] = float(used["memory_bytes"])
        r.update(memory_fit(model, hw, dep, r["memory_bytes"]))
    return r
