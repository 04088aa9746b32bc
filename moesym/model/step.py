"""Layer and step models: cost terms composed into the time of one prefill or decode step.

>>> from moesym import load_model, load_hardware, Deployment, Workload, build_step
>>> step = build_step(load_model("qwen3-30b-a3b"), load_hardware("h20"), Deployment(),
...                   Workload("decode", batch=64, context=4096))
>>> sorted(str(s) for s in step.expr.free_symbols)[:4]
['B', 'E', 'F_a', 'F_g']
>>> 0 < step.predict()["step_time_s"] < 1
True
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Mapping

import numpy as np
import sympy as sp

from ..compile import evaluate
from ..specs.deployment import A2AMode, Deployment, Phase, Workload
from ..specs.hardware import HardwareSpec
from ..specs.model import ModelSpec, expert_weights
from ..symbols import S, by_name, check_bindings
from ..terms import attention as att
from ..terms import comm, compressed as cmp, elementwise as ew, ffn
from ..terms.cost import Cost, GemmShape, KernelClass, LoadShape, component_symbols, smax, smin
from ..terms.dims import Dims, symbolic_dims
from ..timing import TermTime
from . import overlap
from .bindings import bindings, workload_values
from .report import BREAKDOWN_KEYS
from ..routing.stats import GroupRouting
from .routing_hooks import group_limited, group_tokens, imbalance_expr, touched_local_experts_expr

__all__ = ["StepModel", "build_step", "BREAKDOWN_KEYS"]



def _sum_times(name: str, times: list[TermTime]) -> TermTime:
    if not times:
        z = sp.Integer(0)
        return TermTime(name, z, z, z, z)
    out = times[0]
    for t in times[1:]:
        out = out + t
    return out


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

    @property
    def free_symbols(self) -> set[sp.Symbol]:
        return set(self.expr.free_symbols)

    def evaluate(self, expr: sp.Expr | None = None, **grid) -> np.ndarray:
        """Evaluate ``expr`` (default: step time) with any symbols overridden by arrays.

        Keys are symbol attribute names (``batch=np.arange(1, 257)``) or symbols' printed names,
        each a free symbol of the step model or of ``expr`` (anything else, such as a batch
        given to a prefill step, is an error naming it: never a silent constant). As
        ``predict``: an engine runs no more micro-batches than requests (decode) or prompt
        tokens (prefill) (:func:`moesym.model.metrics.micro_batches_run`, with a warning), and
        a workload's length distribution is averaged over unless its length is a grid key.
        """
        from .metrics import at_lengths, length_symbol

        e = self.expr if expr is None else sp.sympify(expr)
        g = self._symbols(grid, e.free_symbols | self.free_symbols, "evaluate")
        g.update(self._micro_batches(g, e.free_symbols))
        length = by_name(length_symbol(self.workload.phase))
        lengths = () if length in g or length not in e.free_symbols else self.workload.lengths
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
        from ..errors import MoesymError

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
        (:func:`moesym.model.metrics.micro_batches_run`); empty where it splits them all."""
        from .metrics import micro_batches_run, warn_micro_batches

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
        (:class:`moesym.compiled.CompiledModel`, built once per step model)."""
        from ..compile import compile_model
        from .report import report_expressions

        return compile_model([(report_expressions(self), self.values)])

    def timeline(self) -> list[dict]:
        """One steady-state layer period of the overlap schedule this deployment runs,
        operation by operation (name, stream, micro_batch, layer relative to the period's,
        start_s, end_s; times from the period's start, the end of the previous layer), from
        :func:`moesym.schedules.simulate` with this model's numbers."""
        from ..compile import evaluate
        from ..errors import MoesymError
        from ..schedules import load, resolve_name, simulate

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
        from .metrics import clamp_micro_batches
        from .predictor import predict_serve, step_report

        if self.workload.phase is Phase.SERVE:
            return predict_serve(self.model, self.hardware, self.deployment, self.workload,
                                 memory=False)
        dep = clamp_micro_batches(self.deployment, self.workload)
        return step_report(self.compiled, self.model, self.hardware, dep, self.workload,
                           memory=False)


def _cache_tables(model: ModelSpec, dep: Deployment, D: Dims, tokens_mb) -> dict:
    """Cold experts a micro-batch activates per MoE layer and the share of its token-expert
    assignments they take (:mod:`moesym.routing.cache`), tabulated in the tokens routed and
    interpolated in log T (as the load imbalance is), for ``--expert-cache``."""
    from ..routing.cache import cache_tables
    from ..special import LogInterp

    s = dep.routing.skew
    ts, cold, share = cache_tables(model.num_experts, model.experts_per_token, dep.expert_cache,
                                   s, dep.cache_policy)
    T = group_tokens(D, tokens_mb)

    def table(ys):
        if not np.any(ys):
            return sp.Integer(0)
        return LogInterp(T, *[sp.Float(float(v)) for pair in zip(np.log(ts), ys) for v in pair])

    return {"cold": table(cold), "miss_share": table(share)}


def _host_computed(model: ModelSpec, dep: Deployment, D: Dims, tokens_mb):
    """The cache tables when cold experts are computed on the host CPU, else None."""
    if dep.expert_cache is None or dep.expert_placement != "host-compute" or not model.is_moe:
        return None
    return _cache_tables(model, dep, D, tokens_mb)


def _offload_s(model: ModelSpec, dep: Deployment, wl: Workload, D: Dims):
    """Time the expert tiers add to one MoE layer (all micro-batches), or None without a cache.

    ``stream``: each cold expert a micro-batch activates is copied over the host link,
    3 d d_e b_we / W_host (seed 003). ``host-compute``: the host CPU runs the cold experts'
    share of the assignments, reading each cold expert once from its DRAM and doing its
    GEMMs: cold x 3 d d_e b_we / W_cpu + rows x 6 d d_e / F_cpu (llama.cpp's CPU-MoE offload,
    KTransformers); the device does the rest (:func:`_moe_layer_costs`)."""
    if dep.expert_cache is None or not model.is_moe:
        return None
    t = _tokens(wl, dep) / D.micro_batches
    tab = _cache_tables(model, dep, D, t)
    expert_bytes = expert_weights(D.hidden, D.moe_inter, S.w_bytes_expert, D.expert_tp)
    if dep.expert_placement == "stream":
        one = tab["cold"] * expert_bytes / S.host_bw
    else:
        rows = ffn.moe_tokens_per_gpu(D, t) * D.topk * tab["miss_share"]
        one = (tab["cold"] * expert_bytes / S.host_dram_bw
               + rows * 6 * D.hidden * D.moe_inter / D.expert_tp / S.host_flops)
    return D.micro_batches * one


def _cp_ring(model: ModelSpec, dep: Deployment, wl: Workload, D: Dims, t) -> list[Cost]:
    """Ring attention's KV exchange (context parallelism, prefill): each GPU's KV share passes
    every other GPU of the group, cp - 1 sends of its t tokens' KV per layer, over the scale-up
    link within a node, else RDMA. Counted in full, not hidden under the attention it overlaps
    in the engines (an upper bound; at long prompts it is a small share of that attention)."""
    if dep.cp <= 1 or wl.phase is not Phase.PREFILL:
        return []
    ring = S.cp * D.tp  # GPUs the ring spans: inside one scale-up domain or across them
    bw = comm.group_bandwidth(ring, D.gpus_per_node, S.bw_up * S.eff_up, S.bw_out * S.eff_out)
    lat = comm.group_latency(ring, D.gpus_per_node, S.lat_up, S.lat_out)
    kv = att.kv_bytes_per_token_layer(D, model.is_mla)
    return [Cost("cp_ring", KernelClass.COMM, net_bytes=(S.cp - 1) * t * kv, net_bw=bw,
                 fixed_s=(S.cp - 1) * lat)]


def _quantized(model: ModelSpec, dep: Deployment) -> dict:
    """Per GEMM weight class, whether its GEMMs take 8- or 4-bit inputs (cast kernels before
    them): the recipe's formats on their own tensor cores (``--weights``, per component)."""
    from ..specs.precision import COMPONENTS, FORMATS, quantizes_activations

    r = dep.weight_recipe(model.is_moe)
    return {c: quantizes_activations(FORMATS[getattr(r, c)].compute) for c in COMPONENTS}


def _tagged(costs: list, component: str, weight_only: frozenset = frozenset(),
            dequant: str = "fused") -> list:
    """The costs with ``component``'s weights (bytes and tensor cores, ``Cost.as_component``);
    a component in ``weight_only`` runs Marlin-style kernels that tile M by 16 rows, or with
    ``dequant`` = "separate" a dequantisation kernel before a plain BF16 GEMM
    (:func:`_dequantized`)."""
    out = [_mark_weights(c.as_component("" if component == "attn" else component)) for c in costs]
    if component not in weight_only:
        return out
    if dequant == "separate":
        return [x for c in out for x in _dequantized(c)]
    return [replace(c, shape=replace(c.shape, tile_m_min=16)) if isinstance(c.shape, GemmShape)
            else c for c in out]


def _mark_weights(c: Cost) -> Cost:
    """A tagged GEMM whose weights another term reads (``GemmShape.weights_elsewhere``)."""
    if not isinstance(c.shape, GemmShape) or c.hbm_bytes.has(component_symbols(c.component)[1]):
        return c
    return replace(c, shape=replace(c.shape, weights_elsewhere=True))


def _dequantized(c: Cost) -> list:
    """A weight-only GEMM run as a separate dequantisation kernel and a BF16 GEMM (``--dequant
    separate``): the kernel reads the packed weights (b_w per element, scales included) and
    writes them as BF16 (2 B); the GEMM then reads 2 B per weight element instead of b_w. Weight
    elements: N x K x groups of a GEMM, or the weight-load term's bytes over b_w."""
    w = component_symbols(c.component)[1]
    bf16 = sp.Integer(2)
    if isinstance(c.shape, GemmShape):  # x launches: a kernel repeated (per-token GEMVs)
        elems = c.shape.n * c.shape.k * c.shape.groups * c.launches
        if not c.hbm_bytes.has(w):  # routed expert GEMMs: their weights are the load term's
            return [c]
    elif c.hbm_bytes.has(w):
        elems = c.hbm_bytes.xreplace({w: 1}) - c.hbm_bytes.xreplace({w: 0})
    else:
        return [c]
    gemm = replace(c, hbm_bytes=c.hbm_bytes + elems * (bf16 - w))
    kernels = 2 if not isinstance(c.shape, GemmShape) else c.launches  # the expert load term: gate/up and down
    return [gemm, Cost(f"{c.name}_dequant", KernelClass.ELEMENTWISE, hbm_bytes=elems * (w + bf16),
                       launches=kernels)]


def _weight_only(model: ModelSpec, dep: Deployment, hw: HardwareSpec | None) -> frozenset:
    """Weight classes whose GEMMs dequantize sub-8-bit weights in the kernel and run on BF16
    tensor cores (w4a16; mxfp4 / nvfp4 on a GPU without FP4 tensor cores)."""
    if hw is None:
        return frozenset()
    from ..specs.precision import COMPONENTS, FORMATS

    r = dep.weight_recipe(model.is_moe)
    return frozenset(c for c in COMPONENTS
                     if FORMATS[getattr(r, c)].bits < 8 and hw.compute_format(getattr(r, c)) == "bf16")


def _moe_layer_costs(model: ModelSpec, dep: Deployment, wl: Workload, D: Dims,
                     hw: HardwareSpec | None = None) -> dict:
    """Per-micro-batch costs of one MoE layer, grouped by breakdown key (``hw``: decides which
    weight classes run weight-only kernels, :func:`_weight_only`)."""
    q = _quantized(model, dep)
    wo = _weight_only(model, dep, hw)
    dq = dep.dequant
    fp8 = q["moe"]
    t = _tokens(wl, dep) / D.micro_batches  # tokens of one micro-batch on one attention DP rank
    t_moe = ffn.moe_tokens_per_gpu(D, t)
    costs: dict[str, list[Cost]] = {k: [] for k in BREAKDOWN_KEYS}
    costs["attention_proj"] = _tagged(_attention_projections(model, D, t), "attn", wo, dq)
    costs["attention_core"] = _attention_core(model, dep, wl, D, t)
    lam = imbalance_expr(model, dep, D, t)
    rows = t_moe * D.topk * lam * D.expert_tp
    layout = dep.resolved_layout(wl.phase)
    padded = None
    if layout == "batched":  # the whole (local experts x max tokens) buffer is computed
        padded = D.local_experts * group_tokens(D, t)
    on_host = _host_computed(model, dep, D, t)  # experts the host CPU computes (offload)
    if on_host is not None:  # the device computes and reads only its resident experts' share
        lam = lam * (1 - on_host["miss_share"])
    touched = touched_local_experts_expr(model, dep, D, t)
    active = None if layout == "batched" else touched  # a batched buffer computes every expert
    routed = ffn.routed_expert_compute(D, t, imbalance=lam, padded_rows=padded, layout=layout,
                                       active_experts=active)
    if layout == "per-token":  # every GEMV reads its expert's weights itself (seed 003)
        touched = sp.Integer(0)
    if _tile_stepped(hw, dep) and layout != "per-token" and model.num_experts > 1:
        # row-tiled matmul engines (seed 004); a single expert is a dense FFN's GEMMs, and
        # per-token GEMVs tile nothing
        from ..kernels.tile_step import tile_stepped

        k = hw.kernel
        ref = int(k.get("tile_step_ref_hidden", 7168)) * int(k.get("tile_step_ref_inter", 2048))
        rows_t = int(k.get("tile_step_rows", 32))
        extra = None
        if layout == "batched" and dep.mesh is not None:
            # seed 004's functional (sparse) layout: every local expert computes every token
            # slot of the column (R x B rows, most of them padding) and every expert is loaded
            extra = D.local_experts * (sp.ceiling(group_tokens(D, t) / rows_t) - 1)
            touched = D.local_experts
        routed = [tile_stepped(routed[0] + routed[1], D.local_experts, group_tokens(D, t),
                               lam * D.topk / D.experts, rows_t,
                               D.hidden * D.moe_inter / D.expert_tp / ref, extra)]
    costs["moe_routed"] = _tagged(routed, "moe", wo, dq)
    if on_host is not None:
        touched = smax(touched - on_host["cold"], 0)
    load = ffn.routed_expert_weight_load(D, touched)
    if isinstance(routed[0].shape, GemmShape):  # the rows each loaded expert multiplies
        load = replace(load, shape=LoadShape(routed[0].shape.m))
    costs["moe_weight_load"] = _tagged([load], "moe", wo, dq)
    if model.shared_intermediate_size:
        costs["shared_expert"] = _tagged(ffn.shared_expert(D, t), "dense", wo, dq) + [
            ew.swiglu_activation("shared_act", t, D.shared_inter / D.tp, D.act_bytes)]
    bw_up, bw_out = S.bw_up * S.eff_up, S.bw_out * S.eff_out
    if model.is_moe:
        a2a = dep.resolved_a2a(wl.phase)
        groups = (GroupRouting(model.num_experts, model.experts_per_token, model.expert_groups,
                               model.groups_per_token) if group_limited(model) else None)
        t_gpu = ffn.moe_tokens_per_gpu(D, t)
        if a2a is A2AMode.RING_MCAST:  # a mesh column: multicast out, locally reduced p2p back
            costs["dispatch"], costs["combine"] = _mesh_a2a(model, dep, hw, D, t)
        else:
            ops = _deepep_one_node(hw, dep, a2a)
            for name, term in (("dispatch", comm.dispatch), ("combine", comm.combine)):
                up, lat = ops[name] if ops else (bw_up, S.lat_up)
                c = term(D, t_gpu, up, bw_out, lat, S.lat_out, D.gpus_per_node, a2a, groups)
                # the fitted fixed time is the measured kernel's, launch included
                costs[name] = [replace(c, launches=sp.Integer(0)) if ops else c]
    # attention output all-reduce + seed 004's all-gather before / reduce-scatter after the MoE
    # (on a mesh: ring hops along its TP axis)
    tp_bw, tp_lat = _tp_link(dep, D, bw_up, bw_out)
    car = _custom_allreduce(hw, dep)
    ar = (comm.tp_allreduce(D, t, tp_bw, tp_lat) if car is None else
          comm.tp_allreduce_custom(D, t, car, tp_bw, tp_lat))
    if car is not None and dep.ep == 1:  # the engine all-reduces the attention and MoE outputs
        tp = [ar.scaled(2)]
    else:
        tp = [ar] + comm.tp_moe_boundary(D, t, tp_bw, tp_lat)
    costs["tp_comm"] = tp + _cp_ring(model, dep, wl, D, t)
    costs["other"] = [ew.norm_residual(D, t).scaled(2), _attention_elementwise(model, D, t, q["attn"]),
                      ew.swiglu_activation("experts_act", rows, D.moe_inter / D.expert_tp, D.act_bytes)]
    if model.num_experts > 1:  # a single expert needs no routing: it is a dense FFN
        # DeepEP low-latency dispatch writes tokens straight into the experts' buffers and its
        # combine does the weighted reduce: no separate permute / unpermute kernels
        # (a mesh's dispatch packs tokens densely per expert and its combine restores them)
        fused = dep.ep > 1 and dep.resolved_a2a(wl.phase) in (A2AMode.DEEPEP_LL,
                                                               A2AMode.RING_MCAST)
        costs["other"] += [ffn.router(D, t), *ew.moe_dispatch_combine(
            D, t_moe, rows, fused=fused, grouping=layout != "per-token")]
        if fp8 and not fused:  # low-latency dispatch quantizes in-kernel, and the masked
            # SwiGLU writes FP8 directly; otherwise both expert GEMM inputs are cast
            costs["other"] += [ew.fp8_input_cast("experts_in_cast", t_moe, D.hidden, D.act_bytes),
                               ew.fp8_input_cast("experts_down_cast", rows,
                                                 D.moe_inter / D.expert_tp, D.act_bytes)]
    else:
        costs["moe_routed"] = [replace(c, kind=KernelClass.GEMM, shape=replace(c.shape, layout="dense"))
                               for c in costs["moe_routed"]]
        costs["moe_weight_load"] = [replace(c, kind=KernelClass.GEMM) for c in costs["moe_weight_load"]]
        if fp8:  # as a dense FFN's block-FP8 linears: gate_up's and down's inputs are cast
            costs["other"] += [ew.fp8_input_cast("ffn_cast", t, D.hidden + D.moe_inter / D.expert_tp,
                                                 D.act_bytes)]
    if q["dense"] and model.shared_intermediate_size:
        costs["other"] += [ew.fp8_input_cast("shared_cast", t, D.hidden + D.shared_inter / D.tp,
                                             D.act_bytes)]
    return costs


def _deepep_one_node(hw: HardwareSpec | None, dep: Deployment, a2a: A2AMode) -> dict | None:
    """DeepEP inside one node on a GPU with a fitted ``[deepep]``: ``{"dispatch": (bytes/s,
    fixed s), "combine": ...}`` of the mode that runs; None elsewhere (across nodes, or no
    fit: the [interconnect] rate and [latency_us] apply)."""
    if (hw is None or not hw.deepep or not a2a.is_deepep or dep.mesh is not None
            or dep.ep > hw.gpus_per_node):
        return None
    mode = "ll" if a2a is A2AMode.DEEPEP_LL else "normal"
    return {op: (hw.deepep[f"{mode}_{op}"][1], hw.deepep[f"{mode}_{op}"][0])
            for op in ("dispatch", "combine")}


def engine_moe_kernel(model: ModelSpec, hw: HardwareSpec, dep: Deployment,
                      wl: Workload) -> str | None:
    """The fused-MoE backend the deployment's engine runs on ``hw`` where the GPU has it fitted
    in the experts' compute format (``[moe_kernels]``;
    :meth:`moesym.engines.EngineKernels.moe_kernel`), else None ([kernel])."""
    if not model.is_moe or not hw.moe_kernels:
        return None
    if hw.compute_format(dep.weight_recipe(True).moe) != hw.moe_kernels_dtype:
        return None  # fitted on another format's kernels
    from ..engines import load_engine

    kernels = load_engine(dep.engine).kernels
    if kernels is None:
        return None
    return kernels.moe_kernel(hw.moe_kernels, ep=dep.ep,
                              deepep=dep.ep > 1 and dep.resolved_a2a(wl.phase).is_deepep)


def _tile_stepped(hw: HardwareSpec | None, dep: Deployment) -> bool:
    """Expert GEMMs timed by the tile-stepped model (:mod:`moesym.kernels.tile_step`): the
    hardware's ``[kernel]`` sets ``tile_step_base_us`` and the time model is not the roofline
    (which leaves tiles out)."""
    return (hw is not None and dep.timing != "roofline"
            and float(hw.kernel.get("tile_step_base_us", 0) or 0) > 0)


def _custom_allreduce(hw: HardwareSpec | None, dep: Deployment):
    """The hardware's custom all-reduce (``[allreduce]``) where the TP group is one NVLink node
    of a GPU cluster, else None (NCCL's ring)."""
    if hw is None or hw.allreduce is None or dep.mesh is not None:
        return None
    return hw.allreduce if dep.tp <= hw.gpus_per_node else None


def _tp_link(dep: Deployment, D: Dims, bw_up, bw_out) -> tuple:
    """(bandwidth, per-step latency) of the TP collectives: the scale-up or scale-out tier of a
    GPU cluster, or the link along a mesh's TP axis (ring hops)."""
    if dep.mesh is not None:
        return S.mesh_bw_tp * S.eff_up, S.mesh_lat_tp
    return (comm.group_bandwidth(D.tp, D.gpus_per_node, bw_up, bw_out),
            comm.group_latency(D.tp, D.gpus_per_node, S.lat_up, S.lat_out))


def _mesh_a2a(model: ModelSpec, dep: Deployment, hw: HardwareSpec | None, D: Dims, t) -> tuple:
    """([dispatch], [combine]) of a mesh deployment along its dispatch axis
    (:mod:`moesym.terms.mesh`): ``t`` tokens per device (a row's tokens after the TP
    all-gather) multicast round the column, the locally reduced outputs sent back point to
    point; the fabric and link numbers are the hardware file's ``[mesh]``."""
    from ..specs.mesh import check_mesh
    from ..terms import mesh

    check_mesh(hw, dep)
    ring, cols = dep.mesh_axes
    col = mesh.ColumnRouting(model.num_experts, model.experts_per_token,
                             model.num_experts // dep.gpus, ring,
                             hw.mesh.axis(dep.dispatch_axis).wrap, cols)
    bw = S.mesh_bw_disp * S.eff_up
    return ([mesh.mesh_dispatch(col, t, D.hidden, D.dispatch_bytes, bw, S.mc_base, S.mc_hop,
                                S.mc_device, S.mc_expert)],
            [mesh.mesh_combine(col, t, D.hidden, D.combine_bytes, bw, S.mc_base, S.mc_hop,
                               S.mc_device)])


def _dense_layer_costs(model: ModelSpec, dep: Deployment, wl: Workload, D: Dims,
                       hw: HardwareSpec | None = None) -> dict:
    """Per-micro-batch costs of one dense layer, grouped by breakdown key."""
    q = _quantized(model, dep)
    wo = _weight_only(model, dep, hw)
    dq = dep.dequant
    t = _tokens(wl, dep) / D.micro_batches
    costs: dict[str, list[Cost]] = {k: [] for k in BREAKDOWN_KEYS}
    costs["attention_proj"] = _tagged(_attention_projections(model, D, t), "attn", wo, dq)
    costs["attention_core"] = _attention_core(model, dep, wl, D, t)
    # a dense FFN stands in for the MoE: its GEMMs are moe_routed, its weight read moe_weight_load
    g_up, g_down = ffn.dense_ffn(D, t)
    w_up = g_up.shape.n * g_up.shape.k * D.w_bytes
    w_down = g_down.shape.n * g_down.shape.k * D.w_bytes
    costs["moe_routed"] = _tagged([replace(g_up, hbm_bytes=g_up.hbm_bytes - w_up),
                                   replace(g_down, hbm_bytes=g_down.hbm_bytes - w_down)],
                                  "dense", wo, dq)
    costs["moe_weight_load"] = _tagged([Cost("ffn_weight_load", g_up.kind, hbm_bytes=w_up + w_down,
                                             shape=LoadShape(g_up.shape.m))], "dense", wo, dq)
    car = _custom_allreduce(hw, dep)
    ar = (comm.tp_allreduce(D, t, S.bw_up * S.eff_up, S.lat_up) if car is None else
          comm.tp_allreduce_custom(D, t, car, S.bw_up * S.eff_up, S.lat_up))
    costs["tp_comm"] = [ar.scaled(2)] + _cp_ring(model, dep, wl, D, t)
    costs["other"] = [ew.norm_residual(D, t).scaled(2), _attention_elementwise(model, D, t, q["attn"]),
                      ew.swiglu_activation("ffn_act", t, D.dense_inter / D.tp, D.act_bytes)]
    if q["dense"]:  # block-FP8 linears quantize their inputs: gate_up's (hidden) and down's (inter)
        costs["other"] += [ew.fp8_input_cast("ffn_cast", t, D.hidden + D.dense_inter / D.tp,
                                             D.act_bytes)]
    return costs


def _timed(costs: dict, timing) -> dict:
    """The breakdown keys' costs turned into time by ``timing`` (one TermTime per key)."""
    return {k: _sum_times(k, [timing.time(c) for c in v]) for k, v in costs.items()}


def _work(costs: dict, n) -> dict:
    """Work of one layer per breakdown key (all ``n`` micro-batches): FLOP, HBM bytes and
    network bytes per GPU, whatever the time model."""
    return {k: {"flop": n * sp.Add(*[c.flops for c in v]),
                "hbm_bytes": n * sp.Add(*[c.hbm_bytes for c in v]),
                "net_bytes": n * sp.Add(*[c.net_bytes for c in v])} for k, v in costs.items()}


def _queries(dep: Deployment):
    """Query tokens per decode request in one step: 1, or N + 1 when speculative decoding
    verifies N draft tokens (:mod:`moesym.model.speculative`)."""
    return 1 + S.mtp if dep.mtp else 1


def _tokens(wl: Workload, dep: Deployment) -> sp.Expr:
    """Tokens of one step on one attention DP rank (a mixed serving step: the decode requests'
    tokens and the prefill chunk's)."""
    q = _queries(dep)
    return {Phase.DECODE: S.batch * q, Phase.PREFILL: _computed(S.tokens, wl) / _cp(dep),
            Phase.SERVE: S.batch * q + S.tokens}[wl.phase]


def _cp(dep: Deployment):
    """Context-parallel GPUs sharing each prompt: each computes 1 / cp of its tokens."""
    return S.cp if dep.cp > 1 else 1


def _computed(tokens, wl: Workload):
    """Prompt tokens a prefill step computes: all, or with a prefix-cache hit F the last
    (1 - F) of each prompt, and at least its last token (the one that gives the logits)."""
    if not wl.prefix_hit:
        return tokens
    return tokens * smax(1 - S.prefix_hit, 1 / S.context)


def _attention_core(model: ModelSpec, dep: Deployment, wl: Workload, D: Dims, t) -> list[Cost]:
    """Attention of ``t`` tokens (one micro-batch). A mixed serving step runs two kernels:
    decode attention of its requests over their KV (L) and chunked prefill attention of its
    prefill tokens over their prompts (L_in)."""
    n = D.micro_batches

    hit = S.prefix_hit if wl.prefix_hit else 0

    def core(kind, tokens, ctx):
        if kind == "decode":
            return att.attention_core_decode(D, tokens, ctx, model.is_mla, _queries(dep))
        new = smax(1 - hit, 1 / ctx) * ctx if wl.prefix_hit else ctx  # computed per prompt
        # context parallelism: a GPU's share of a prompt is 1 / cp of it (zigzag-balanced), and
        # its queries read the other shares' KV as a chunked prefill reads its prefix
        return att.attention_core_prefill(D, tokens, ctx, smin(S.chunk, new) / _cp(dep),
                                          model.is_mla, cached=1 - new / ctx if wl.prefix_hit else 0)

    kernels = {Phase.DECODE: [("decode", S.batch / n, S.context)],
               Phase.PREFILL: [("prefill", t, S.context)],
               Phase.SERVE: [("decode", S.batch / n, S.context),
                             ("prefill", S.tokens / n, S.isl)]}[wl.phase]
    if model.is_compressed:  # DeepSeek-V4: window + CSA / HCA entries, indexer per CSA layer
        return [c for kind, tokens, ctx in kernels
                for c in cmp.core(D, model, kind, tokens, ctx, _queries(dep),
                                  1 - smax(1 - hit, 1 / ctx) if wl.prefix_hit else 0)]
    if model.index_topk:  # DeepSeek sparse attention: the selected KV entries, and the indexer
        return [_sparse_core(model, dep, kind, tokens, ctx, D) for kind, tokens, ctx in kernels] + \
            [_indexer(model, dep, kind, tokens, ctx, D) for kind, tokens, ctx in kernels]
    out = []
    for kind, tokens, ctx in kernels:
        full = core(kind, tokens, ctx)
        if not model.sliding_layers:
            out.append(full)
            continue
        f = sp.Rational(model.sliding_layers, model.num_layers)
        # each layer kind runs the whole batch's kernel (its own KV length): share x its time
        window = core(kind, tokens, smin(ctx, model.sliding_window)).scaled(f)
        out += [full.scaled(1 - f), window.renamed(window.name + "_window")]
    if model.linear_layers:  # hybrid: the full-attention layers' share, and the DeltaNet layers'
        f = sp.Rational(model.linear_layers, model.num_layers)
        m = model
        # a share of the layers runs the whole batch's kernel: its work and launches scale,
        # the shape stays one layer's (the timing repeats it ``launches`` times)
        out = [c.scaled(1 - f) for c in out] + [
            att.gdn_core(D, kind, tokens, m.linear_k_heads, m.linear_v_heads, m.linear_k_dim,
                         m.linear_v_dim, m.linear_conv, _queries(dep) if kind == "decode" else 1
                         ).scaled(f) for kind, tokens, _ in kernels]
    return out


def _attention_elementwise(model: ModelSpec, D: Dims, t, fp8_gemm: bool) -> Cost:
    """The attention block's elementwise kernels (DeepSeek-V4's include its compressors' state
    and the hyper-connection seams)."""
    if model.is_compressed:
        return cmp.elementwise(D, t, model, fp8_gemm)
    return ew.attention_elementwise(D, t, model.is_mla, fp8_gemm)


def _attention_projections(model: ModelSpec, D: Dims, t) -> list[Cost]:
    """Attention projections of an average layer: the model's own (MHA/GQA or MLA, plus the
    sparse-attention indexer's), and for a hybrid model the DeltaNet layers' share."""
    if model.is_compressed:
        return cmp.projections(D, t, model)
    full = (att.attention_projections(D, t, model.is_mla, model.attn_output_gate)
            + _indexer_projections(model, D, t))
    if not model.linear_layers:
        return full
    f = sp.Rational(model.linear_layers, model.num_layers)
    m = model
    lin = att.gdn_projections(D, t, m.linear_k_heads, m.linear_v_heads, m.linear_k_dim,
                              m.linear_v_dim)
    return [c.scaled(1 - f) for c in full] + [c.scaled(f) for c in lin]


def _indexer_projections(model: ModelSpec, D: Dims, t) -> list[Cost]:
    """The indexer's own GEMMs (DeepSeek-V3.2): queries from the q latent (r_q -> H_I d_I), one
    key per token (d -> d_I) and the head weights (d -> H_I); none without sparse attention."""
    if not model.index_topk:
        return []
    hi, di = model.index_heads, model.index_head_dim
    wb, ab = D.w_bytes, D.act_bytes
    return [att.gemm("indexer_wq", t, hi * di, D.q_lora, wb, ab),
            att.gemm("indexer_wk", t, di, D.hidden, wb, ab),
            att.gemm("indexer_weights", t, hi, D.hidden, wb, ab)]


def _sparse_core(model: ModelSpec, dep: Deployment, kind: str, tokens, ctx, D: Dims) -> Cost:
    """DeepSeek sparse attention (V3.2): each query attends to the ``k = index_topk`` KV entries
    its indexer selects. Decode reads min(L, k) entries per request; in prefill a query at
    position p attends to min(p, k) keys, a causal mean of k - k^2 / (2L) for L > k, timed as
    causal prompts of length 2k - k^2 / L (the same FLOPs)."""
    k = sp.Integer(model.index_topk)
    if kind == "decode":
        return att.attention_core_decode(D, tokens, smin(ctx, k), model.is_mla, _queries(dep))
    span = sp.Piecewise((ctx, ctx <= k), (2 * k - k ** 2 / ctx, True))
    return att.attention_core_prefill(D, tokens, span, smin(S.chunk, span), model.is_mla)


def _indexer(model: ModelSpec, dep: Deployment, kind: str, tokens, ctx, D: Dims) -> Cost:
    """The lightning indexer of DeepSeek sparse attention (:func:`moesym.terms.attention.indexer`)
    over every earlier key, cached per layer. Decode: L keys per query, read once per request;
    prefill: the causal mean L / 2 keys per query, each chunk reading the prompt's keys."""
    if kind == "decode":
        return att.indexer(model.index_heads, model.index_head_dim, tokens * _queries(dep), ctx,
                           tokens * ctx)
    return att.indexer(model.index_heads, model.index_head_dim, tokens, ctx / 2,
                       tokens * smax(1, ctx / S.chunk))


# kernels whose schedule operation differs from their breakdown key's (data, by kernel name)
_PART_OPS = {"o_proj": "attn_core", "o_a_proj": "attn_core", "o_b_proj": "attn_core",
             "router": "router", "experts_act": "experts",
             "moe_elementwise": "experts", "moe_dispatch": "experts", "moe_combine": "experts",
             "experts_in_cast": "experts",
             "experts_down_cast": "experts", "shared_act": "shared", "shared_cast": "shared"}
_KEY_OPS = {"attention_proj": "attn_prep", "attention_core": "attn_core",
            "shared_expert": "shared", "tp_comm": "attn_core", "other": "attn_prep"}


def operation_times(terms: Mapping[str, TermTime], n) -> dict:
    """Compute time of each schedule operation of one micro-batch's MoE layer
    (:mod:`moesym.schedules`): every kernel of the layer lands in exactly one operation, so they
    add up to the layer's compute time."""
    ops: dict = {}
    for key, tt in terms.items():
        if key in ("dispatch", "combine", "moe_routed", "moe_weight_load"):
            continue
        for p in getattr(tt, "parts", (tt,)):
            op = _PART_OPS.get(p.name, _KEY_OPS[key])
            ops[op] = ops.get(op, 0) + p.total_s
    ops["experts"] = ops.get("experts", 0) + smax(terms["moe_routed"].total_s,
                                                  terms["moe_weight_load"].total_s)
    ops["attn_prep"] = ops.get("attn_prep", 0) + S.t_layer / n
    return ops


def _reserved(costs: dict, timing, model: ModelSpec, dep: Deployment) -> dict | None:
    """The breakdown keys' times with the FP8 GEMMs (DeepGEMM: the weight classes that quantize
    their activations) capped at N_SM - N_SM_comm SMs: their compute time x N_SM / (N_SM -
    N_SM_comm), their memory time unchanged (the remaining SMs still draw the HBM bandwidth).
    None when no weight class runs FP8 GEMMs (nothing is capped)."""
    q = _quantized(model, dep)
    if not any(q.values()):
        return None
    cap = S.sms / (S.sms - S.comm_sms)

    def time(c: Cost) -> TermTime:
        t = timing.time(c)
        if c.kind in (KernelClass.GEMM, KernelClass.GROUPED_GEMM) and q[c.component or "attn"]:
            return TermTime(t.name, t.compute_s * cap, t.memory_s, t.comm_s, t.overhead_s)
        return t

    return {k: _sum_times(k, [time(c) for c in v]) for k, v in costs.items()}


def _scheduled(name: str, terms, compute, dep: Deployment, wl: Workload, n,
               reserved=None) -> tuple:
    """(layer time, once-per-step edges, micro-batch count the schedule runs or None for the
    ideal bound) of one MoE layer under the named schedule. ``reserved``: a function giving
    the terms with FP8 GEMMs on the SMs communication leaves (:func:`_reserved`), for layouts
    that cap them (``gemm_sms = "reserve_comm"``; they then compete with no transfer, phi = 0)."""
    from ..schedules import load, steady_state

    d, c = terms["dispatch"].total_s, terms["combine"].total_s
    sched = load(name)
    if sched.ideal:
        # the shared expert with its activation and casts, as the schedules' "shared" runs it
        shared = operation_times(terms, n).get("shared", 0)
        return (overlap.layer_time(compute, d, c, n, dep, wl, shared_mb=shared),
                overlap.step_edges(d, c, n, dep, wl), None)
    lay = sched.layout(wl.phase.engine)
    phi = overlap.sm_share(dep.resolved_a2a(wl.phase))
    capped = reserved() if lay.gemm_sms == "reserve_comm" and reserved and phi != 0 else None
    if capped is not None:
        terms, phi = capped, 0
    period, edges = steady_state(lay, operation_times(terms, n), {"dispatch": d, "combine": c},
                                 phi, smax=smax)
    return period, edges, lay.micro_batches


def _layer_time(terms: Mapping[str, TermTime], dep: Deployment, wl: Workload, n,
                reserved=None) -> tuple:
    """(overlapped time of one layer for the whole batch, its compute-only time, the
    once-per-step fill and drain of the overlap schedule); ``reserved`` as
    :func:`_scheduled`'s."""
    expert = smax(terms["moe_routed"].total_s, terms["moe_weight_load"].total_s)
    compute = (terms["attention_proj"].total_s + terms["attention_core"].total_s + expert
               + terms["shared_expert"].total_s + terms["tp_comm"].total_s
               + terms["other"].total_s + S.t_layer / n)
    if terms["dispatch"].total_s == 0 and terms["combine"].total_s == 0:
        return n * compute, n * compute, sp.Integer(0)  # nothing to overlap (EP 1, dense layer)
    if dep.overlap != "auto":  # pinned: valid only at the schedule's micro-batch count
        layer, edges, mb = _scheduled(dep.overlap, terms, compute, dep, wl, n, reserved)
        if mb is not None:
            layer = sp.Piecewise((layer, sp.Eq(n, mb)), (sp.nan, True))
            edges = sp.Piecewise((edges, sp.Eq(n, mb)), (sp.nan, True))
        return layer, n * compute, edges
    # auto: what the engine runs for the micro-batch count (moesym.schedules.resolve_name)
    from ..schedules import resolve_name

    ph = wl.phase.engine
    built = [(_scheduled(resolve_name("auto", k, ph), terms, compute, dep, wl, n, reserved), k)
             for k in (1, 2)]
    beyond = _scheduled(resolve_name("auto", 3, ph), terms, compute, dep, wl, n, reserved)
    layer = sp.Piecewise(*[(b[0], sp.Eq(n, k)) for b, k in built], (beyond[0], True))
    edges = sp.Piecewise(*[(b[1], sp.Eq(n, k)) for b, k in built], (beyond[1], True))
    return layer, n * compute, edges


def _draft_s(model: ModelSpec, dep: Deployment, wl: Workload, D: Dims, timing,
             hw: HardwareSpec | None = None) -> sp.Expr:
    """Time of the speculative draft in one step: ``N`` autoregressive passes of the draft
    module over one token per decode request, and in a step that prefills, one pass over the
    prefill tokens (the draft extends over the prompt too). The draft module is DeepSeek's MTP
    block: a projection of the embedding and hidden state (2d -> d), one decoder layer of the
    model and the shared LM head; a model without MTP layers is drafted by an EAGLE-style head
    timed the same way (one of its own layers)."""
    if not model.mtp_layers:
        import warnings

        warnings.warn(f"{model.name} has no MTP layers: --mtp {dep.mtp} drafts with an "
                      "EAGLE-style head timed as one of the model's own layers plus its LM head",
                      stacklevel=2)
    plain = replace(dep, mtp=0, accept=None)
    costs = _moe_layer_costs if model.is_moe else _dense_layer_costs
    # DeepSeek-V4's MTP layer attends its sliding window only (vLLM: compress ratio 0)
    layer_model = replace(model, csa_layers=0, hca_layers=0) if model.is_compressed else model

    def one_pass(phase: Phase, tokens, logits) -> sp.Expr:
        w = Workload(phase, batch=1, tokens=1, context=2, chunk=1)
        cs = costs(layer_model, plain, w, D, hw)
        layer, _, edges = _layer_time(_timed(cs, timing), plain, w, D.micro_batches,
                                      lambda: _reserved(cs, timing, layer_model, plain))
        head = (att.gemm("mtp_eh_proj", tokens, D.hidden, 2 * D.hidden, D.w_bytes, D.act_bytes),
                ffn.lm_head(D, logits))
        return layer + edges + sum(timing.time(c).total_s for c in head)

    out = sp.Integer(0)
    if wl.phase is not Phase.PREFILL:
        out += S.mtp * one_pass(Phase.DECODE, S.batch, S.batch)
    if wl.phase is Phase.PREFILL:
        out += one_pass(Phase.PREFILL, S.tokens, S.tokens / S.context)
    elif wl.phase is Phase.SERVE:  # the chunk's prompts, at their own length
        from ..terms.cost import substitute

        out += substitute(one_pass(Phase.PREFILL, S.tokens, S.tokens / S.isl), {S.context: S.isl})
    return out


def _pipelined(stage, per_layer, work, layer, layer_compute, dep: Deployment, wl: Workload,
               D: Dims) -> tuple:
    """Pipeline parallelism over ``pp`` stages: the batch runs as ``pp`` micro-batches in flight
    (one per stage), each stage holding 1 / pp of the layers (the bindings' layer counts). A
    stage's step on ``B / pp`` requests (``T / pp`` tokens) plus the send of its activations to
    the next stage, ``t_s``, repeats every slot: a token crosses all stages in ``pp t_s`` (the
    TPOT, or the prefill step), in which every slot's ``B / pp`` requests advance. The send goes
    over RDMA when a stage fills whole nodes, else over the scale-up link. Busy times and work
    per layer cover all the rank's micro-batches (``pp`` slots)."""
    from ..terms.cost import substitute

    slot = {S.batch: S.batch / S.pp, S.tokens: S.tokens / S.pp}
    tokens = _tokens(wl, dep)
    on_fabric = sp.Ge(D.gpus, D.gpus_per_node)  # a stage fills whole nodes (a bound symbol in a sweep)
    bw = sp.Piecewise((S.bw_out * S.eff_out, on_fabric), (S.bw_up * S.eff_up, True))
    lat = sp.Piecewise((S.lat_out, on_fabric), (S.lat_up, True))
    send = tokens * D.hidden * D.act_bytes / bw + lat
    t_s = substitute(stage + send / S.eff_serve, slot)
    scale = lambda e: S.pp * substitute(e, slot)  # noqa: E731
    per_layer = {k: scale(v) for k, v in per_layer.items()}
    work = {k: {f: scale(e) for f, e in w.items()} for k, w in work.items()}
    return S.pp * t_s, per_layer, work, scale(layer), scale(layer_compute)


def _graph_replayed(timing, hardware: HardwareSpec, deployment: Deployment):
    """A decode step as the engines run it: replayed as a CUDA graph (each profile captures the
    decode batch sizes it serves), so an elementwise kernel costs the graph's per-kernel floor
    (``[latency_us] graph_kernel``, measured: benchmarks/gpu_small_batch.md) instead of a host
    launch. GEMM and attention floors are fitted on kernel tables already timed without host
    launches; hardware without the measurement, and other time models, keep their costs."""
    from ..engines import load_engine
    from ..kernels.timing import KernelTiming

    floor = hardware.latency.graph_kernel_s
    if floor is None or not load_engine(deployment.engine).cuda_graph_batch_sizes:
        return timing
    if type(timing) is KernelTiming:
        return KernelTiming(replace(timing.calib, elementwise_launch_s=floor))
    if type(getattr(timing, "kernel", None)) is KernelTiming:  # measured tables over the model
        return replace(timing, kernel=_graph_replayed(timing.kernel, hardware, deployment))
    return timing


def build_step(model: ModelSpec, hardware: HardwareSpec, deployment: Deployment, workload: Workload,
               timing=None) -> StepModel:
    """Compose the step model of ``model`` on ``hardware`` under ``deployment`` for ``workload``.

    ``timing`` turns each cost into time; by default the deployment's time model
    (``deployment.timing``: the analytical kernel model calibrated for this GPU,
    :class:`moesym.kernels.timing.KernelTiming`, or the plain roofline with named efficiency
    symbols, :class:`moesym.timing.RooflineTiming`).
    """
    deployment.check_model(model)
    from ..engines import load_engine

    hardware = load_engine(deployment.engine).hardware(hardware)  # the engine's kernels
    if deployment.dequant == "separate" and not _weight_only(model, deployment, hardware):
        import warnings

        warnings.warn(f"--dequant separate has no effect: no weight class of --weights "
                      f"{deployment.weights} runs weight-only GEMMs on {hardware.name}", stacklevel=2)
    if model.is_compressed and deployment.cp > 1:
        from ..errors import SpecError

        raise SpecError("--cp with DeepSeek-V4's compressed attention is not modelled yet (its "
                        "window, compressed entries and compressor state would split "
                        "differently across GPUs); drop --cp")
    if deployment.cp > 1 and workload.phase is not Phase.PREFILL:
        from ..errors import SpecError

        raise SpecError(f"--cp {deployment.cp} splits prompts across GPUs in prefill; a "
                        f"{workload.phase.value} step takes --cp 1")
    vals = None
    if timing is None:  # the deployment's time model (default: the calibrated kernel model)
        from ..timing import time_model

        timing = time_model(deployment.timing, hardware,
                            engine_moe_kernel(model, hardware, deployment, workload))
    if hasattr(timing, "bind"):  # measured tables match shapes: they need the numbers
        from .bindings import gemm_table_dtypes

        fixed = {by_name(k) for k in workload_values(workload)}
        vals = bindings(model, hardware, deployment, workload)
        timing = timing.bind({s: v for s, v in vals.items() if s not in fixed},
                             gemm_table_dtypes(model, hardware, deployment))
    if workload.phase is Phase.DECODE:
        timing = _graph_replayed(timing, hardware, deployment)
    if _tile_stepped(hardware, deployment):  # expert GEMMs in row tiles (seed 004)
        from ..kernels.tile_step import TileStepTiming

        timing = TileStepTiming(timing)
    D = symbolic_dims()
    n = D.micro_batches
    moe_costs = _moe_layer_costs(model, deployment, workload, D, hardware) if model.is_moe else None
    dense_costs = _dense_layer_costs(model, deployment, workload, D, hardware)
    main_costs = moe_costs if moe_costs is not None else dense_costs
    dense_terms = _timed(dense_costs, timing)
    main = _timed(moe_costs, timing) if moe_costs is not None else dense_terms
    per_layer = {k: n * v.total_s for k, v in main.items()}

    def capped():  # the terms with FP8 GEMMs on the SMs communication leaves (_reserved)
        return _reserved(main_costs, timing, model, deployment)

    layer, layer_compute, edges = _layer_time(main, deployment, workload, n, capped)
    offload = _offload_s(model, deployment, workload, D)
    if offload is not None:  # expert tiers: copies (or host compute) beside or after the layer
        if deployment.expert_placement == "host-compute" and not hardware.host_dram_Bps:
            from ..errors import SpecError

            raise SpecError(f"--expert-placement host-compute needs the host CPU's figures: "
                            f"hardware {hardware.name} has no [host] section (dram_GBps, "
                            "peak_TFLOPs)")
        per_layer["expert_offload"] = offload
        if deployment.prefetch and hardware.host_unified:  # one DRAM: copies hide only under
            # the layer's compute, never under its own memory traffic
            offload = offload + n * sum((tt.memory_s for tt in main.values()), sp.Integer(0))
        layer = smax(layer, offload) if deployment.prefetch else layer + offload
    dense_layer, _, _ = _layer_time(dense_terms, deployment, workload, n)
    tokens = _tokens(workload, deployment)
    q = _queries(deployment)
    # one logit row per decode token verified and per prompt (its last token)
    logits_tokens = {Phase.DECODE: S.batch * q, Phase.PREFILL: S.tokens / S.context / _cp(deployment),
                     Phase.SERVE: S.batch * q + S.tokens / S.isl}[workload.phase]
    once = (timing.time(ffn.lm_head(D, logits_tokens)).total_s
            + timing.time(ffn.embedding(D, tokens)).total_s)
    if model.is_moe:
        once += edges
    if deployment.mtp:
        once += _draft_s(model, deployment, workload, D, timing, hardware)
    if model.is_moe:
        body = S.n_moe_layers * layer
        if model.dense_layers:  # a model without dense layers may have no dense FFN width
            body += S.n_dense_layers * dense_layer
    else:
        body = S.n_dense_layers * dense_layer
    # a serving engine sustains eta_sv of the modeled (isolated-kernel) speed: [efficiency] serving,
    # fitted per GPU on end-to-end measurements (moesym.validate); 1 where none exist
    expr = (body + once) / S.eff_serve
    from ..engines import host_overlapped

    # the host's time per step (scheduling, sampling): an engine with an overlap scheduler
    # prepares step i+1 while the GPU runs step i, so the step takes the longer of the two
    expr = smax(expr, S.t_step) if host_overlapped(deployment.engine) else expr + S.t_step / S.eff_serve
    work = _work(main_costs, n)
    if deployment.pp > 1:
        expr, per_layer, work, layer, layer_compute = _pipelined(
            expr, per_layer, work, layer, layer_compute, deployment, workload, D)
    if hasattr(timing, "report"):  # measured tables: say which kernels they timed
        import warnings

        warnings.warn(timing.report(), stacklevel=2)
    if vals is None:  # computed above only when measured tables needed the numbers
        vals = bindings(model, hardware, deployment, workload)
    exprs = [expr, *(e for w in work.values() for e in w.values())]
    used = set().union(*(e.free_symbols for e in exprs))
    vals = {s: v for s, v in vals.items() if s in used}
    # every symbol left is bound or a workload variable: a missing number is an error here,
    # not a NaN later (the bindings cover every model, so the unused ones are dropped above)
    check_bindings(exprs, vals, free=used & {by_name(k) for k in workload_values(workload)})
    return StepModel(model, hardware, deployment, workload, MappingProxyType(main),
                     MappingProxyType(per_layer), layer, layer_compute, dense_layer, once, expr,
                     MappingProxyType(vals), MappingProxyType(work), capped)
