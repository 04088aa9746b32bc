"""One prediction, end to end, through the compiled-model cache.

The structure of a step model (which terms, which maxima, which overlap) is fixed by the model,
hardware, deployment and phase; the workload's numbers (batch or tokens, context, chunk) are
bound at evaluation. So the step and memory models are built and compiled once per structure,
into one :class:`~moesym.compiled.CompiledModel` (every report quantity in one function, shared
subexpressions computed once), stored by :mod:`moesym.cache`; a repeated question, at any batch
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

from .. import cache
from ..compiled import CompiledModel
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec
from ..symtab import N
from .bindings import memory_workload_values, workload_values
from .report import accepted_tokens, report_from_numbers

__all__ = ["compiled_predict_model", "predict", "structure", "evaluate_at_lengths"]


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
              memory: bool = True) -> str:
    """What fixes a predict model's expressions and fixed numbers (the cache key's input).

    The workload enters only through its phase (numeric routing statistics are tabulated
    against the token count inside the model)."""
    schedule = Path(dep.overlap).read_text() if dep.overlap.endswith(".toml") else None
    tables = None
    if dep.timing.startswith("tables:"):
        from ..kernels.table_timing import tables_digest, tables_folder

        tables = tables_digest(tables_folder(dep.timing))
    return repr(("predict", memory, model, hw, dep, wl.phase.value, bool(wl.prefix_hit), schedule,
                 tables))


def _build(model, hw, dep, wl, memory: bool) -> CompiledModel:
    from ..compile import compile_model
    from .report import report_expressions
    from .step import build_step

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = build_step(model, hw, dep, wl)
        parts = [(report_expressions(step), step.values)]
        if memory:
            from ..memory import memory_model

            mm = memory_model(model, hw, dep, wl)
            parts.append(({"memory_bytes": mm.used_expr()}, mm.values))
    cm = compile_model(parts)
    cm.warnings = tuple(dict.fromkeys(str(w.message) for w in caught))
    if N.group_var in cm.parts[0]["args"]:  # one model serves every EP: rho_G at each
        from .routing_hooks import group_var_factor

        total = model.num_experts + dep.redundant_experts
        cm.per_ep = {e: {N.group_var: group_var_factor(model, e)}
                     for e in range(1, total + 1) if total % e == 0}
    return cm


def compiled_predict_model(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                           memory: bool = True) -> CompiledModel:
    """The compiled report (and memory) model of this structure: from the disk cache when
    present, else built, compiled and stored. Warnings of the build are given either way."""
    dep.check_model(model)
    key = cache.key_for(structure(model, hw, dep, wl, memory))
    payload = cache.load(key)
    cm = None
    if payload is not None:
        try:
            cm = CompiledModel.from_payload(payload)
        except Exception:  # noqa: BLE001 - a bad entry is rebuilt, never trusted
            cm = None
    if cm is None:
        cm = _build(model, hw, dep, wl, memory)
        cache.store(key, cm.to_payload())
    for msg in cm.warnings:  # from this one line: the default filter says each message once
        warnings.warn(msg, stacklevel=1)
    return cm


def predict(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
            memory: bool = True) -> dict:
    """The ``moesym predict`` report; with ``memory`` also per-GPU memory and whether it fits."""
    if wl.phase is Phase.SERVE:
        return predict_serve(model, hw, dep, wl, memory)
    work = wl.batch if wl.phase is Phase.DECODE else wl.tokens
    if dep.micro_batches > work:  # an engine runs what it can split (SGLang: TBO falls back)
        what = "--batch" if wl.phase is Phase.DECODE else "--tokens"
        warnings.warn(f"--micro-batches {dep.micro_batches} has no effect beyond {what} {work} "
                      f"(an engine cannot split it further): timed as {work} micro-batch(es)",
                      stacklevel=2)
        dep = replace(dep, micro_batches=work)
    dep.check_overlap(wl.phase)
    cm = compiled_predict_model(model, hw, dep, wl, memory)
    values = {**cm.parts[0]["static"], **workload_values(wl), **_lengths(wl)}
    r = report_from_numbers(_averaged(cm.evaluate(0, values)), values, model, dep, wl)
    if dep.expert_cache is not None and model.is_moe:
        r.update(expert_cache_report(model, dep, wl))
    if wl.lengths:
        r["lengths"] = {"mean": wl.context, "points": len(wl.lengths),
                        "min": min(wl.lengths), "max": max(wl.lengths)}
    if memory:
        mem_values = {**memory_workload_values(wl, dep), **_lengths(wl)}
        used = float(_averaged(cm.evaluate(1, mem_values))["memory_bytes"])
        r["memory_bytes"] = used
        r["fits"] = bool(used <= hw.hbm_capacity_bytes)
    return r


def _lengths(wl: Workload) -> dict:
    """A length distribution's representative values bound to the length symbol (the model is
    evaluated at each and averaged: a step's per-request costs add over its requests)."""
    if not wl.lengths:
        return {}
    import numpy as np

    return {N.isl if wl.phase is Phase.SERVE else N.context: np.asarray(wl.lengths, dtype=float)}


def evaluate_at_lengths(cm: CompiledModel, i: int, env: dict, symbol: str, lengths) -> dict:
    """``cm.evaluate(i, env)`` at each of a distribution's representative ``lengths`` bound to
    ``symbol``, averaged, for arrays broadcast against each other (``sweep``, ``optimize``):
    the lengths take a new last axis, every array of ``env`` one more length-1 axis (so the
    others keep their alignment), and each output is averaged over that axis, as ``predict``
    averages its scalar workload over the lengths. No lengths: ``cm.evaluate`` as is."""
    if not lengths:
        return cm.evaluate(i, env)
    import numpy as np

    env = {k: (np.asarray(v)[..., None] if np.ndim(v) else v) for k, v in env.items()}
    env[symbol] = np.asarray(lengths, dtype=float)
    return {k: (np.asarray(v, dtype=float).mean(axis=-1) if np.ndim(v) else v)
            for k, v in cm.evaluate(i, env).items()}


def _averaged(nums: dict) -> dict:
    """Each output averaged over the representative lengths (scalars unchanged)."""
    import numpy as np

    return {k: float(np.mean(v)) for k, v in nums.items()}


def serve_models(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                 memory: bool = True) -> tuple:
    """(chunk, mixed-step compiled model, decode-step compiled model) of a serve workload; the
    decode model also holds the memory of the in-flight requests beside one prefill chunk."""
    from .serve import default_chunk_tokens

    dep.check_overlap(Phase.SERVE)
    dep.check_overlap(Phase.DECODE)
    chunk = wl.chunk or default_chunk_tokens(hw.hbm_capacity_bytes, dep.dp)
    mixed = compiled_predict_model(model, hw, dep, replace(wl, chunk=chunk), memory=False)
    opts = dict(dep.memory_options)
    opts.setdefault("prefill_tokens", chunk)  # the chunk's activations sit beside the decode's
    mem_dep = replace(dep, memory_options=tuple(sorted(opts.items())))
    decode = compiled_predict_model(model, hw, mem_dep, Workload(Phase.DECODE, batch=wl.batch,
                                                                 context=wl.context), memory)
    return chunk, mixed, decode


def serve_step_times(cms, env: dict, point: dict, isl, osl, chunk, lengths=()) -> tuple:
    """(mixed-step, decode-step) times at the steady state ``point`` of
    :func:`moesym.model.serve.serve_point` (numbers or arrays, as ``env`` binds the rest), from
    :func:`serve_models`' two compiled models: the decode requests at their mean KV
    ``ISL + OSL / 2`` and the mixed step's prompt tokens beside them. ``sweep`` and
    ``optimize`` both evaluate the serve phase through it. ``lengths``: an ISL distribution's
    representative lengths (``isl`` their mean): the mixed step's prompts are drawn from it,
    its time averaged over them, as :func:`predict_serve` does."""
    import numpy as np

    cm_mix, cm_dec = cms
    dec = {**env, N.batch: point["decoding"], N.context: isl + np.floor(np.asarray(osl) / 2)}
    t_dec = cm_dec.evaluate(0, dec)["step_time_s"]
    t_mix = evaluate_at_lengths(cm_mix, 0, {**dec, N.tokens: point["mixed_tokens"], N.isl: isl,
                                            N.chunk: chunk}, N.isl, lengths)["step_time_s"]
    return t_mix, t_dec


def predict_serve(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                  memory: bool = True) -> dict:
    """Aggregated serving (``--phase serve``): the steady state of :mod:`moesym.model.serve`
    from the mixed step's and the decode step's compiled models. ``per_layer_s`` and the
    bounds are the mixed step's; ``decode_step`` has the decode-only step's."""
    from .serve import serve_point, serve_rates

    chunk, cm_mix, cm_dec = serve_models(model, hw, dep, wl, memory)
    a = accepted_tokens(dep)
    p = serve_point(wl.batch, wl.isl, wl.osl, chunk, a, hit=wl.prefix_hit)
    vals_mix = {**cm_mix.parts[0]["static"], N.batch: p["decoding"], N.tokens: p["mixed_tokens"],
                N.context: wl.context, N.isl: wl.isl, N.chunk: chunk,
                **({N.prefix_hit: wl.prefix_hit} if wl.prefix_hit else {})}
    vals_dec = {**cm_dec.parts[0]["static"], N.batch: p["decoding"], N.context: wl.context}
    vals_mix.update(_lengths(wl))  # the chunk's prompts drawn from the ISL distribution
    mixed = report_from_numbers(_averaged(cm_mix.evaluate(0, vals_mix)), vals_mix, model, dep, wl)
    dec_wl = Workload(Phase.DECODE, batch=wl.batch, context=wl.context)
    dec = report_from_numbers(cm_dec.evaluate(0, vals_dec), vals_dec, model, dep, dec_wl)
    rates = serve_rates(p, mixed["step_time_s"], dec["step_time_s"], chunk, dep.tp * dep.pp, a)
    if dep.mtp:
        rates["accepted_tokens_per_step"] = a
    mixed_busy = p["mixed_share"] * mixed["step_time_s"]
    main = mixed if mixed_busy >= rates["step_time_s"] - mixed_busy else dec
    r = {**rates, "tokens_per_gpu_s": rates["output_tokens_per_gpu_s"],
         "bound": main["bound"], "bound_term": main["bound_term"],
         "per_layer_s": mixed["per_layer_s"], "layer_s": mixed["layer_s"],
         "layer_compute_s": mixed["layer_compute_s"], "bounds": mixed["bounds"],
         "work_per_layer": mixed.get("work_per_layer", {}), "serving_frac": mixed["serving_frac"],
         "serve": {"chunk_tokens": chunk, "kv_mean_tokens": wl.context,
                   "decoding_requests": p["decoding"], "prefill_tokens_per_step": p["prefill_per_step"],
                   "mixed_step_tokens": p["mixed_tokens"], "mixed_step_share": p["mixed_share"],
                   "queueing": "ignored: TTFT is the prompt's own chunks"},
         "mixed_step": {k: mixed[k] for k in ("step_time_s", "bound", "bound_term")},
         "decode_step": {k: dec[k] for k in ("step_time_s", "bound", "bound_term", "per_layer_s")}}
    if memory:
        used = float(cm_dec.evaluate(1, memory_workload_values(dec_wl))["memory_bytes"])
        r["memory_bytes"] = used
        r["fits"] = bool(used <= hw.hbm_capacity_bytes)
    return r


def expert_cache_report(model: ModelSpec, dep: Deployment, wl: Workload) -> dict:
    """Hit rate and cold experts per MoE layer of ``--expert-cache`` at this workload's tokens
    per micro-batch (:mod:`moesym.routing.cache`)."""
    from ..routing.cache import hit_rate, misses_per_step

    tokens = (wl.batch * (1 + dep.mtp) if wl.phase is not Phase.PREFILL else wl.tokens)
    T = tokens * dep.stage_gpus / dep.tp / dep.micro_batches / dep.pp  # through a layer per pass
    s = dep.routing.skew
    args = (model.num_experts, model.experts_per_token, dep.expert_cache, s, dep.cache_policy, T)
    return {"expert_cache_hit_rate": hit_rate(*args),
            "expert_cache": {"resident_experts_per_layer": min(dep.expert_cache, model.num_experts),
                             "cold_experts_per_pass": misses_per_step(*args),
                             "policy": dep.cache_policy, "placement": dep.expert_placement,
                             "prefetch": dep.prefetch}}
