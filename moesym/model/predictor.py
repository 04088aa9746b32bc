"""One prediction, end to end, through the compiled-model cache.

The structure of a step model (which terms, which maxima, which overlap) is fixed by the model,
hardware, deployment and phase; the workload's numbers (batch or tokens, context, chunk) are
bound at evaluation. So the step and memory models are built and compiled once per structure,
into one :class:`~moesym.numeric.compiled.CompiledModel` (every report quantity in one function, shared
subexpressions computed once), stored by :mod:`moesym.numeric.cache`; a repeated question, at any batch
or context, loads it and never imports SymPy.

>>> from moesym import load_model, load_hardware, Deployment, Workload
>>> r = predict(load_model("qwen3-8b"), load_hardware("h20"), Deployment(weights="fp8"),
...             Workload("decode", batch=32, context=4096))
>>> r["bound"], r["fits"]
('memory', True)
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

from ..numeric import cache
from ..numeric.compiled import CompiledModel
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec
from ..symbolic.symtab import N
from ..numbers.bindings import memory_workload_values, workload_values
from ..numbers.metrics import (accepted_tokens, averaged, clamp_micro_batches, evaluate_at_lengths,
                               expert_cache_report, fits, length_symbol, report_from_numbers,
                               serve_chunk, serve_memory_values, serve_point, serve_rates,
                               serve_report, serve_step_times, serve_steps)

# evaluate_at_lengths and serve_step_times are the metrics layer's, importable from here too
__all__ = ["compiled_predict_model", "predict", "predict_serve", "step_report", "serve_models",
           "serve_step_times", "structure", "evaluate_at_lengths"]


def numeric_routing(dep: Deployment) -> bool:
    """Routing statistics computed numerically at the workload's token count and EP (Zipf
    routing, redundant experts), so baked into the model rather than bound per point."""
    return dep.routing.numeric or dep.redundant_experts > 0


def ep_class(dep: Deployment):
    """What of the EP degree fixes a model's structure: EP 1 (no all-to-all), EP below the GPU
    count (expert tensor parallelism, the all-gather) or not; the EP itself only where routing
    statistics are computed numerically at it (Zipf routing, redundant experts). Deployments of
    one class share one compiled model, the EP a bound number."""
    return (dep.ep == 1, dep.ep < dep.stage_gpus, dep.ep if numeric_routing(dep) else None)


def structure(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
              memory: bool = True, outputs: tuple | None = None) -> str:
    """What fixes a predict model's expressions and fixed numbers (the cache key's input).

    The workload enters only through its phase (numeric routing statistics are tabulated
    against the token count inside the model)."""
    key = ("predict", memory, model, hw, dep, wl.phase.value, bool(wl.prefix_hit), *files_of(dep))
    return repr(key if outputs is None else (*key, "outputs", tuple(outputs)))


def files_of(dep: Deployment) -> tuple:
    """(overlap schedule text, kernel tables digest) of the files a deployment names (None where
    it names none): what of a model's inputs its specs' repr does not hold."""
    schedule = Path(dep.overlap).read_text() if dep.overlap.endswith(".toml") else None
    tables = None
    if dep.timing.startswith("tables:"):
        from ..kernels.table_timing import tables_digest, tables_folder

        tables = tables_digest(tables_folder(dep.timing))
    return schedule, tables


def _build(model, hw, dep, wl, memory: bool, outputs: tuple | None = None) -> CompiledModel:
    from ..symbolic.compile import compile_model
    from .report import report_expressions
    from .step import build_step

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = build_step(model, hw, dep, wl)
        exprs = report_expressions(step)
        if outputs is not None:
            exprs = {k: exprs[k] for k in outputs}
        parts = [(exprs, step.values)]
        if memory:
            from ..memory import memory_model

            mm = memory_model(model, hw, dep, wl)
            parts.append(({"memory_bytes": mm.used_expr()}, mm.values))
    cm = compile_model(parts)
    cm.warnings = tuple(dict.fromkeys(str(w.message) for w in caught))
    if N.group_var in cm.parts[0]["args"]:  # one model serves every EP: rho_G at each
        from ..terms.routing import group_var_factor

        total = model.num_experts + dep.redundant_experts
        cm.per_ep = {e: {N.group_var: group_var_factor(model, e)}
                     for e in range(1, total + 1) if total % e == 0}
    return cm


def compiled_predict_model(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                           memory: bool = True, outputs: tuple | None = None) -> CompiledModel:
    """The compiled report (and memory) model of this structure: from the disk cache when
    present, else built, compiled and stored. Warnings of the build are given either way.
    ``outputs``: only these report quantities (a serving simulation's step times), no
    memory."""
    dep.check_model(model)
    key = cache.key_for(structure(model, hw, dep, wl, memory, outputs))
    payload = cache.load(key)
    cm = None
    if payload is not None:
        try:
            cm = CompiledModel.from_payload(payload)
        except Exception:  # noqa: BLE001 - a bad entry is rebuilt, never trusted
            cm = None
    if cm is None:
        cm = _build(model, hw, dep, wl, memory and outputs is None, outputs)
        cache.store(key, cm.to_payload())
    for msg in cm.warnings:  # from this one line: the default filter says each message once
        warnings.warn(msg, stacklevel=1)
    return cm


def predict(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
            memory: bool = True) -> dict:
    """The ``moesym predict`` report; with ``memory`` also per-GPU memory and whether it fits."""
    if wl.phase is Phase.SERVE:
        return predict_serve(model, hw, dep, wl, memory)
    dep = clamp_micro_batches(dep, wl)  # an engine runs what it can split (SGLang: TBO falls back)
    dep.check_overlap(wl.phase)
    return step_report(compiled_predict_model(model, hw, dep, wl, memory), model, hw, dep, wl,
                       memory)


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


def serve_models(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                 memory: bool = True) -> tuple:
    """(chunk, mixed-step compiled model, decode-step compiled model) of a serve workload; the
    decode model also holds the memory of the in-flight requests beside one prefill chunk."""
    dep.check_overlap(Phase.SERVE)
    dep.check_overlap(Phase.DECODE)
    chunk = serve_chunk(wl.chunk, hw.hbm_capacity_bytes, dep.dp, dep.engine)
    mixed = compiled_predict_model(model, hw, dep, replace(wl, chunk=chunk), memory=False)
    opts = dict(dep.memory_options)
    opts.setdefault("prefill_tokens", chunk)  # the chunk's activations sit beside the decode's
    mem_dep = replace(dep, memory_options=tuple(sorted(opts.items())))
    decode = compiled_predict_model(model, hw, mem_dep, Workload(Phase.DECODE, batch=wl.batch,
                                                                 context=wl.context), memory)
    return chunk, mixed, decode


def predict_serve(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                  memory: bool = True) -> dict:
    """Aggregated serving (``--phase serve``): the steady state of
    :mod:`moesym.numbers.metrics` (its serving section) from the mixed step's and the decode
    step's compiled models. ``per_layer_s`` and the bounds are the mixed step's;
    ``decode_step`` has the decode-only step's."""
    chunk, cm_mix, cm_dec = serve_models(model, hw, dep, wl, memory)
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
