"""The step model: :func:`build_step` composes the time of one prefill or decode step, one line
per stage over the modules beside it (layer costs, layer time, expert tiers, draft, pipeline
parallelism, step tokens), into a :class:`StepModel`.

>>> from moesym import load_model, load_hardware, Deployment, Workload, build_step
>>> step = build_step(load_model("qwen3-30b-a3b"), load_hardware("h20"), Deployment(),
...                   Workload("decode", batch=64, context=4096))
>>> sorted(str(s) for s in step.expr.free_symbols)[:4]
['B', 'E', 'F_a', 'F_g']
>>> 0 < step.predict()["step_time_s"] < 1
True
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from functools import cache, cached_property, partial
from types import MappingProxyType
from typing import Mapping

import numpy as np
import sympy as sp

from ..attention import compose
from ..engines import host_overlapped, load_engine
from ..errors import MoesymError, SpecError
from ..kernels.registry import time_model
from ..kernels.tile_step import TileStepTiming
from ..kernels.time_model import TimeModel
from ..memory import memory_model
from ..numbers.bindings import bindings, gemm_table_dtypes, workload_values
from ..numbers.metrics import (at_lengths, clamp_micro_batches, length_symbol, micro_batches_run,
                               warn_micro_batches)
from ..numeric.compiled import CompiledModel
from ..plan.rules import check_engine_format
from ..schedules import load, resolve_name, simulate
from ..specs.deployment import Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec
from ..symbolic.compile import compile_model, evaluate
from ..symbolic.expr import smax, symbols_of
from ..symbolic.symbols import S, by_name, check_bindings
from ..symbolic.symtab import N
from ..terms import ffn
from ..terms.cost import KernelClass, TermTime
from ..terms.dims import Dims, symbolic_dims
from ..terms.routing import group_var_factor
from ..terms.tokens import context_parallel, queries, step_tokens
from . import overlap
from .draft import draft_s
from .expert_tiers import with_expert_tiers
from .layer_costs import (engine_moe_kernel, layer_costs, layer_work, tile_stepped_experts,
                          weight_only)
from .layer_time import layer_time, operation_times, reserved_terms, timed
from .pipeline_parallel import pipelined
from .report import BREAKDOWN_KEYS, report_expressions, serve_prediction, step_report

__all__ = ["StepModel", "build_step", "BREAKDOWN_KEYS"]


@dataclass(frozen=True)
class StepModel:
    """A composed step model: expressions plus the numbers that bind them.

    ``terms``: per-micro-batch TermTime of each breakdown key of one MoE (or dense-FFN) layer.
    ``per_layer_s``: busy time of each key over one layer for the whole per-GPU batch (no overlap).
    ``layer_s``: one MoE layer with overlap; ``dense_layer_s`` one dense layer; ``expr`` the step.
    """

    model: ModelSpec
    hardware: HardwareSpec
    deployment: Deployment
    workload: Workload
    terms: Mapping[str, TermTime]
    per_layer_s: Mapping[str, sp.Expr]
    layer_s: sp.Expr
    layer_compute_s: sp.Expr
    dense_layer_s: sp.Expr
    once_s: sp.Expr
    expr: sp.Expr
    values: Mapping[sp.Symbol, float] = field(repr=False)
    # per breakdown key, one layer (all micro-batches): {"flop", "hbm_bytes", "net_bytes"} per GPU
    work: Mapping[str, Mapping[str, sp.Expr]] = field(default_factory=dict, repr=False)
    # the terms with FP8 GEMMs capped at the SMs communication leaves (a function; None when
    # nothing is capped), for schedules with gemm_sms = "reserve_comm"
    capped_terms: object = field(default=None, repr=False)
    # the step's GPU time (at the serving efficiency) and its host time (scheduling and, in an
    # eager step, launching the kernels): the serving simulation times an overlap scheduler's
    # steps from the two, each step's launches overlapping the previous step's GPU work
    gpu_s: sp.Expr | None = field(default=None, repr=False)
    host_s: sp.Expr | None = field(default=None, repr=False)

    @property
    def free_symbols(self) -> set[sp.Symbol]:
        return set(symbols_of(self.expr))

    def evaluate(self, expr: sp.Expr | None = None, **grid) -> np.ndarray:
        """Evaluate ``expr`` (default: step time) with any symbols overridden by arrays.

        Keys are symbol attribute names (``batch=np.arange(1, 257)``) or symbols' printed names,
        each a free symbol of the step model or of ``expr`` (anything else, such as a batch
        given to a prefill step, is an error naming it: never a silent constant). As
        ``predict``: an engine runs no more micro-batches than requests (decode) or prompt
        tokens (prefill) (:func:`moesym.numbers.metrics.micro_batches_run`, with a warning), and
        a workload's length distribution is averaged over unless its length is a grid key.
        """
        e = self.expr if expr is None else sp.sympify(expr)
        free = symbols_of(e)
        g = self._symbols(grid, free | self.free_symbols, "evaluate")
        g.update(self._micro_batches(g, free))
        length = by_name(length_symbol(self.workload.phase))
        lengths = () if length in g or length not in free else self.workload.lengths
        return at_lengths(lambda env: evaluate(e, self.values, env), g, length, lengths)

    def values_with(self, **overrides) -> dict:
        """:attr:`values` with ``overrides`` (keys as :meth:`evaluate`'s: free symbols of the
        step model, by attribute or printed name)."""
        v = dict(self.values)
        v.update(self._symbols(overrides, self.free_symbols | set(self.values), "values_with"))
        return v

    def _symbols(self, given: Mapping, free, where: str) -> dict:
        """``{symbol: value}`` of keyword arguments; a key that names no symbol, or one the
        expression does not contain, is an error naming it (never a silent constant)."""
        out = {}
        for k, v in given.items():
            try:
                s = by_name(k)
            except KeyError:
                raise MoesymError(f"{where}({k}=...): moesym declares no symbol {k!r} (use an "
                                  "attribute name such as batch or a printed name such as B)") \
                    from None
            if s not in free:
                raise MoesymError(
                    f"{where}({k}=...): {s} is not a free symbol of this "
                    f"{self.workload.phase.value} step model, so it would not change the "
                    f"result; its free symbols: {', '.join(sorted(map(str, free)))}")
            out[s] = v
        return out

    def _micro_batches(self, grid: dict, free) -> dict:
        """The micro-batch count to bind where the engine would split fewer than asked
        (:func:`moesym.numbers.metrics.micro_batches_run`); empty where it splits them all."""
        if S.micro_batches not in free or self.workload.phase is Phase.SERVE:
            return {}
        size = S.batch if self.workload.phase is Phase.DECODE else S.tokens
        asked = grid.get(S.micro_batches, self.values.get(S.micro_batches))
        work = grid.get(size, self.values.get(size))
        if work is None:
            return {}
        if not warn_micro_batches(asked, work, self.workload.phase, stacklevel=4):
            return {}
        run = micro_batches_run(asked, work)
        return {S.micro_batches: run}

    @cached_property
    def compiled(self):
        """Every report quantity of this model compiled into one function
        (:class:`moesym.numeric.compiled.CompiledModel`, built once per step model)."""
        return compile_model([(report_expressions(self), self.values)])

    def timeline(self) -> list[dict]:
        """One steady-state layer period of the overlap schedule this deployment runs,
        operation by operation (name, stream, micro_batch, layer relative to the period's,
        start_s, end_s; times from the period's start, the end of the previous layer), from
        :func:`moesym.schedules.simulate` with this model's numbers."""

        dep, wl = self.deployment, self.workload
        name = resolve_name(dep.overlap, dep.micro_batches, wl.phase.engine)
        sched = load(name)
        if not self.model.is_moe:
            raise MoesymError(f"--timeline shows an MoE layer's overlap schedule; "
                              f"{self.model.name} is dense")
        if sched.ideal:
            raise MoesymError("--timeline needs an overlap schedule; this deployment runs the "
                              "ideal bound (pick one with --overlap none, sbo or tbo-sglang)")
        num = lambda e: float(evaluate(sp.sympify(e), self.values, {}))  # noqa: E731
        lay = sched.layout(wl.phase.engine)
        terms = self.terms
        phi = num(overlap.sm_share(dep.resolved_a2a(wl.phase)))
        capped = self.capped_terms() if lay.gemm_sms == "reserve_comm" and phi else None
        if capped is not None:  # as the step model times it (_scheduled)
            terms, phi = capped, 0.0
        ops = {k: num(v) for k, v in operation_times(terms, S.micro_batches).items()}
        tr = {k: num(terms[k].total_s) for k in ("dispatch", "combine")}
        ends, events = simulate(lay, ops, tr, phi)
        t0, t1 = ends[1], ends[2]  # one steady-state period of the stream
        return [{"name": e.name, "stream": e.stream, "micro_batch": e.micro_batch,
                 "layer": e.layer - 2, "start_s": e.start - t0, "end_s": e.end - t0}
                for e in events if t0 <= e.start < t1 or (e.start < t0 < e.end)]

    def predict(self) -> dict:
        """Numbers for the configured point: ``moesym predict``'s report (without memory),
        through the same metrics (:func:`moesym.model.predictor.step_report`): no more micro-batches
        than requests or prompt tokens, a length distribution averaged. A serve workload
        answers with ``moesym predict --phase serve``'s steady state of in-flight batching
        (:func:`moesym.model.predictor.predict_serve`), not this one mixed step."""
        if self.workload.phase is Phase.SERVE:
            return serve_prediction(_compiled_now, self.model, self.hardware, self.deployment,
                                    self.workload, memory=False)
        dep = clamp_micro_batches(self.deployment, self.workload)
        return step_report(self.compiled, self.model, self.hardware, dep, self.workload,
                           memory=False)




def build_step(model: ModelSpec, hardware: HardwareSpec, deployment: Deployment, workload: Workload,
               timing: TimeModel | None = None) -> StepModel:
    """Compose the step model of ``model`` on ``hardware`` under ``deployment`` for ``workload``.

    ``timing`` turns each cost into time (a :class:`moesym.kernels.time_model.TimeModel`); by default the
    deployment's time model (``deployment.timing``, built by
    :func:`moesym.kernels.registry.time_model`: the analytical kernel model calibrated for this GPU,
    :class:`moesym.kernels.timing.KernelTiming`, the plain roofline with named efficiency
    symbols, :class:`moesym.kernels.time_model.RooflineTiming`, or measured tables). The stages: checks,
    time model, layer costs, their times, the layer under its overlap schedule, expert tiers,
    once-per-step terms, serving efficiency and host time, pipeline stages, bindings.
    """
    hardware = _checked(model, hardware, deployment, workload)  # the engine's kernels
    numbers = cache(partial(bindings, model, hardware, deployment, workload))  # once, when needed
    timing = _time_model(timing, model, hardware, deployment, workload, numbers)
    D = symbolic_dims()
    n = D.micro_batches
    main_costs, dense_costs = layer_costs(model, deployment, workload, D, hardware)
    dense_terms = timed(dense_costs, timing)
    main = timed(main_costs, timing) if model.is_moe else dense_terms
    capped = partial(reserved_terms, main_costs, timing, model, deployment)  # FP8 GEMMs capped
    layer, layer_compute, edges = layer_time(main, deployment, workload, n, capped)
    layer, per_layer = with_expert_tiers(layer, main, {k: n * v.total_s for k, v in main.items()},
                                         model, hardware, deployment, workload, D)
    dense_layer, _, _ = layer_time(dense_terms, deployment, workload, n)
    once = _once_s(model, deployment, workload, D, timing, hardware, edges)
    fixed, launches = _host_s(model, deployment, workload, main_costs, dense_costs, n)
    gpu = (_layers_s(model, layer, dense_layer) + once) / S.eff_serve
    expr = _served(gpu, deployment, fixed, launches)
    work = layer_work(main_costs, n)
    if deployment.pp > 1:
        expr, per_layer, work, layer, layer_compute = pipelined(
            expr, per_layer, work, layer, layer_compute, deployment, workload, D)
    _report(timing)
    vals = _bound(numbers(), expr, work, workload)
    return StepModel(model, hardware, deployment, workload, MappingProxyType(main),
                     MappingProxyType(per_layer), layer, layer_compute, dense_layer, once, expr,
                     MappingProxyType(vals), MappingProxyType(work), capped,
                     gpu if deployment.pp == 1 else None,
                     fixed + launches if deployment.pp == 1 else None)


def _checked(model: ModelSpec, hardware: HardwareSpec, deployment: Deployment,
             workload: Workload) -> HardwareSpec:
    """``hardware`` with the deployment's engine kernels, once the deployment is checked against
    the model and workload (a combination not modelled is an error; one with no effect, a
    warning)."""
    deployment.check_model(model)
    check_engine_format(deployment)
    hardware = load_engine(deployment.engine).hardware(hardware)  # the engine's kernels
    if deployment.dequant == "separate" and not weight_only(model, deployment, hardware):
        warnings.warn(f"--dequant separate has no effect: no weight class of --weights "
                      f"{deployment.weights} runs weight-only GEMMs on {hardware.name}",
                      stacklevel=3)
    if deployment.cp > 1 and compose.no_cp(model):  # the attention variant cannot split
        raise SpecError(compose.no_cp(model))
    if deployment.cp > 1 and workload.phase is not Phase.PREFILL:
        raise SpecError(f"--cp {deployment.cp} splits prompts across GPUs in prefill; a "
                        f"{workload.phase.value} step takes --cp 1")
    return hardware


def _time_model(timing: TimeModel | None, model: ModelSpec, hardware: HardwareSpec,
                deployment: Deployment, workload: Workload, numbers) -> TimeModel:
    """The time model the step runs: ``timing``, or by default the deployment's (with the
    engine's fused-MoE kernel), bound to this configuration's numbers (``numbers()``, for
    measured tables that match shapes), replayed as a CUDA graph in decode and with tile-stepped
    experts where the hardware has them."""
    if timing is None:  # the deployment's time model (default: the calibrated kernel model)
        timing = time_model(deployment.timing, hardware,
                            engine_moe_kernel(model, hardware, deployment, workload))

    def configuration() -> tuple[dict, dict]:  # every number but the workload's, GEMM dtypes
        fixed = {by_name(k) for k in workload_values(workload)}
        return ({s: v for s, v in numbers().items() if s not in fixed},
                gemm_table_dtypes(model, hardware, deployment))

    timing = timing.bind(configuration)
    floor = _graph_kernel_s(hardware, deployment, workload)
    if floor is not None:
        timing = timing.graph_replayed(floor)
    if tile_stepped_experts(hardware, deployment):  # expert GEMMs in row tiles (seed 004)
        timing = TileStepTiming(timing)
    return timing


def _graph_kernel_s(hardware: HardwareSpec, deployment: Deployment, workload: Workload):
    """The per-kernel floor of a decode step as the engines run it, replayed as a CUDA graph
    (each profile captures the decode batch sizes it serves): an elementwise kernel costs the
    graph's floor (``[latency_us] graph_kernel``, measured: benchmarks/gpu_small_batch.md)
    instead of a host launch. None for other steps, eager deployments (``cuda_graphs``
    false), engines without graphs and hardware without the measurement."""
    if workload.phase is not Phase.DECODE or not deployment.cuda_graphs:
        return None
    floor = hardware.latency.graph_kernel_s
    if floor is None or not load_engine(deployment.engine).cuda_graph_batch_sizes:
        return None
    return floor


def _once_s(model: ModelSpec, dep: Deployment, wl: Workload, D: Dims, timing: TimeModel,
            hw: HardwareSpec, edges) -> sp.Expr:
    """The terms a step pays once, not per layer: the LM head (one logit row per decode token
    verified and per prompt, its last token), the embedding, the overlap schedule's fill and
    drain (``edges``, MoE models) and the speculative draft."""
    tokens = step_tokens(wl, dep)
    q = queries(dep)
    logits_tokens = {Phase.DECODE: S.batch * q,
                     Phase.PREFILL: S.tokens / S.context / context_parallel(dep),
                     Phase.SERVE: S.batch * q + S.tokens / S.isl}[wl.phase]
    once = (timing.time(ffn.lm_head(D, logits_tokens)).total_s
            + timing.time(ffn.embedding(D, tokens)).total_s)
    if model.is_moe:
        once += edges
    if dep.mtp:
        once += draft_s(model, dep, wl, D, timing, hw)
    return once


def _layers_s(model: ModelSpec, layer, dense_layer) -> sp.Expr:
    """Time of the model's layers: its MoE layers and dense ones (a model without dense layers
    may have no dense FFN width: its dense layer does not enter)."""
    if not model.is_moe:
        return S.n_dense_layers * dense_layer
    body = S.n_moe_layers * layer
    if model.dense_layers:
        body += S.n_dense_layers * dense_layer
    return body


def _served(gpu_s, dep: Deployment, fixed_s, launch_s) -> sp.Expr:
    """The step as a serving engine runs it: ``gpu_s``, the modeled GPU time at eta_sv of the
    isolated-kernel speed (``[efficiency] serving``, fitted per GPU on end-to-end measurements,
    moesym.report.validation; 1 where none exist), and the host's time: its fixed part per step
    (``fixed_s``: scheduling, sampling) and, in a step not replayed as a CUDA graph, launching
    its kernels (``launch_s``), which the GPU runs as they come (the longer of the two, not
    their sum). An engine with an overlap scheduler prepares step i+1 while the GPU runs step
    i: in the steady state the step takes the longer of the GPU's and the host's whole time
    (the serving simulation times each step from the previous one's, moesym.serving.simulator);
    without it the fixed part comes first."""
    if host_overlapped(dep):
        return smax(gpu_s, fixed_s + launch_s)
    if launch_s == 0:
        return gpu_s + fixed_s / S.eff_serve
    return fixed_s / S.eff_serve + smax(gpu_s, launch_s)


def _host_s(model: ModelSpec, dep: Deployment, wl: Workload, main_costs, dense_costs, n):
    """The host's time per step, (fixed, launching): its fixed part (``t_step``) and, where the engine launches the
    step's kernels one by one from its runtime (a prefill or mixed step, unless the engine
    captures those in graphs; a decode step without CUDA graphs), ``t_host_launch`` per kernel:
    every computing kernel of the step's layers (its costs' launches; collectives not
    counted), per micro-batch. The per-kernel time is the engine profile's ``host_launch_us``,
    fitted on the time to first token of published serving runs (moesym.engines)."""
    engine = load_engine(dep.engine)
    if not engine.eager(wl.phase, dep):
        return S.t_step, sp.Integer(0)

    def kernels(costs) -> sp.Expr:
        return sp.Add(*[c.launches for v in costs.values() for c in v
                        if c.kind is not KernelClass.COMM])

    per_step = S.n_dense_layers * kernels(dense_costs)
    if model.is_moe:
        per_step += S.n_moe_layers * kernels(main_costs)
    return S.t_step, n * per_step * S.t_host_launch


def _report(timing: TimeModel) -> None:
    """Say how the step was timed where the time model has something to say (measured tables:
    which kernels they timed), as a warning."""
    message = timing.report()
    if message is not None:
        warnings.warn(message, stacklevel=3)


def _bound(vals: Mapping, expr: sp.Expr, work: Mapping, wl: Workload) -> dict:
    """The numbers of the symbols the step and its work use: every symbol left is bound or a
    workload variable (a missing number is an error here, not a NaN later; the bindings cover
    every model, so the unused ones are dropped)."""
    exprs = [expr, *(e for w in work.values() for e in w.values())]
    used = set().union(*(symbols_of(e) for e in exprs))
    vals = {s: v for s, v in vals.items() if s in used}
    check_bindings(exprs, vals, free=used & {by_name(k) for k in workload_values(wl)})
    return vals


def compile_step(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload, memory: bool,
                 outputs: tuple | None = None) -> CompiledModel:
    """Build the step model (and with ``memory`` the memory model) and compile every report
    quantity into one :class:`~moesym.numeric.compiled.CompiledModel`; the build's warnings
    are kept in it (``warnings``: the compiled-model cache stores them), not given."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = build_step(model, hw, dep, wl)
        exprs = report_expressions(step)
        if outputs is not None:
            exprs = {k: exprs[k] for k in outputs}
        parts = [(exprs, step.values)]
        if memory:
            mm = memory_model(model, hw, dep, wl)
            parts.append(({"memory_bytes": mm.used_expr()}, mm.values))
    cm = compile_model(parts)
    cm.warnings = tuple(dict.fromkeys(str(w.message) for w in caught))
    if N.group_var in cm.parts[0]["args"]:  # one model serves every EP: rho_G at each
        total = model.num_experts + dep.redundant_experts
        cm.per_ep = {e: {N.group_var: group_var_factor(model, e)}
                     for e in range(1, total + 1) if total % e == 0}
    return cm


def _compiled_now(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload,
                  memory: bool) -> CompiledModel:
    """:func:`compile_step` without the cache, its build's warnings given."""
    cm = compile_step(model, hw, dep, wl, memory)
    for msg in cm.warnings:
        warnings.warn(msg, stacklevel=2)
    return cm
