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
from pathlib import Path

from ..numeric import cache
from ..numeric.compiled import CompiledModel
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec
from ..numbers.metrics import clamp_micro_batches, evaluate_at_lengths, serve_step_times
from . import report
from .report import memory_fit, step_report

# evaluate_at_lengths and serve_step_times are the metrics layer's, step_report and memory_fit
# the report module's, importable from here too
__all__ = ["compiled_predict_model", "predict", "predict_serve", "step_report", "memory_fit",
           "serve_models", "serve_step_times", "structure", "evaluate_at_lengths"]


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
        from .step import compile_step  # SymPy: only when the cache has no entry

        cm = compile_step(model, hw, dep, wl, memory and outputs is None, outputs)
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


def serve_models(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                 memory: bool = True) -> tuple:
    """:func:`moesym.model.report.serve_models` through the compiled-model cache."""
    return report.serve_models(compiled_predict_model, model, hw, dep, wl, memory)


def predict_serve(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                  memory: bool = True) -> dict:
    """Aggregated serving (``--phase serve``, :func:`moesym.model.report.serve_prediction`)
    through the compiled-model cache."""
    return report.serve_prediction(compiled_predict_model, model, hw, dep, wl, memory)
