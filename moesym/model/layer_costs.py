"""The costs of one layer: per breakdown key, the kernels one micro-batch of an MoE (or dense)
layer runs, with the weight classes they read, the communication they need, and their work."""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..attention import compose
from ..engines import load_engine
from ..kernels.tile_step import tile_stepped
from ..routing.stats import GroupRouting
from ..specs.deployment import A2AMode, Deployment, Phase, Workload
from ..specs.hardware import DeepEPKernel, HardwareSpec
from ..specs.mesh import check_mesh
from ..specs.model import ModelSpec
from ..specs.precision import COMPONENTS, FORMATS, quantizes_activations
from ..specs.time_models import lookup
from ..symbolic.expr import smax, sym
from ..symbolic.symbols import S
from ..terms import attention as att
from ..terms import comm, ffn, mesh
from ..terms import elementwise as ew
from ..terms.cost import Cost, GemmShape, KernelClass, LoadShape, component_symbols
from ..terms.dims import Dims
from ..terms.routing import (group_limited, group_tokens, imbalance_expr, tile_skew,
                             touched_local_experts_expr)
from ..terms.tokens import step_tokens
from .expert_tiers import host_computed
from .report import BREAKDOWN_KEYS

__all__ = ["dense_layer_costs", "engine_moe_fields", "engine_moe_kernel", "fused_shared_experts",
           "layer_costs", "layer_work", "moe_layer_costs", "quantized", "tile_stepped_experts",
           "weight_only"]


def layer_costs(model: ModelSpec, dep: Deployment, wl: Workload, D: Dims,
                hw: HardwareSpec | None = None) -> tuple[dict, dict]:
    """(costs of the model's main layer: an MoE layer, or a dense model's dense layer; costs of
    a dense layer), per micro-batch and breakdown key."""
    moe = moe_layer_costs(model, dep, wl, D, hw) if model.is_moe else None
    dense = dense_layer_costs(model, dep, wl, D, hw)
    return (dense if moe is None else moe), dense


def moe_layer_costs(model: ModelSpec, dep: Deployment, wl: Workload, D: Dims,
                     hw: HardwareSpec | None = None) -> dict:
    """Per-micro-batch costs of one MoE layer, grouped by breakdown key (``hw``: decides which
    weight classes run weight-only kernels, :func:`weight_only`)."""
    q = quantized(model, dep)
    wo = weight_only(model, dep, hw)
    dq = dep.dequant
    fp8 = q["moe"]
    t = step_tokens(wl, dep) / D.micro_batches  # tokens of one micro-batch on one attention DP rank
    t_moe = ffn.moe_tokens_per_gpu(D, t)
    costs: dict[str, list[Cost]] = {k: [] for k in BREAKDOWN_KEYS}
    costs["attention_proj"] = _tagged(_projections(model, dep, D, t), "attn", wo, dq)
    costs["attention_core"] = compose.step_core(model, dep, wl, D, t)
    lam = imbalance_expr(model, dep, D, t)
    rows = t_moe * D.topk * lam * D.expert_tp
    layout = dep.resolved_layout(wl.phase)
    padded = None
    if layout == "batched":  # the whole (local experts x max tokens) buffer is computed
        padded = D.local_experts * group_tokens(D, t)
    on_host = host_computed(model, dep, D, t)  # experts the host CPU computes (offload)
    if on_host is not None:  # the device computes and reads only its resident experts' share
        lam = lam * (1 - on_host["miss_share"])
    touched = touched_local_experts_expr(model, dep, D, t)
    active = None if layout == "batched" else touched  # a batched buffer computes every expert
    shared_in_moe = fused_shared_experts(model, hw, dep, wl)
    routed = ffn.routed_expert_compute(D, t, imbalance=lam, padded_rows=padded, layout=layout,
                                       active_experts=active, tile_skew=tile_skew(model, dep),
                                       routed_tokens=group_tokens(D, t),
                                       fused_shared=shared_in_moe)
    if shared_in_moe:  # the shared experts' rows go through the MoE's own kernels too
        touched = touched + shared_in_moe
        rows = rows + ffn.fused_shared_rows(D, t, shared_in_moe)
    if layout == "per-token":  # every GEMV reads its expert's weights itself (seed 003)
        touched = sp.Integer(0)
    if tile_stepped_experts(hw, dep) and layout != "per-token" and model.num_experts > 1:
        # row-tiled matmul engines (seed 004); a single expert is a dense FFN's GEMMs, and
        # per-token GEMVs tile nothing
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
    if model.shared_intermediate_size and not shared_in_moe:
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
            costs.update({k: [c] for k, c in
                          expert_all_to_all(hw, dep, a2a, D, t_gpu, groups).items()})
    # attention output all-reduce + seed 004's all-gather before / reduce-scatter after the MoE
    # (on a mesh: ring hops along its TP axis)
    tp_bw, tp_lat = _tp_link(dep, D, bw_up, bw_out, _links(hw))
    car = _custom_allreduce(hw, dep, D)
    ar = (comm.tp_allreduce(D, t, tp_bw, tp_lat) if car is None else
          comm.tp_allreduce_custom(D, t, car, tp_bw, tp_lat))
    if car is not None and (dep.ep == 1 or (dep.mesh is None and dep.tp == dep.stage_gpus)):
        # the engine all-reduces the attention and MoE outputs over the TP group: its tokens are
        # replicated there, and with experts over EP ranks of the same GPUs each adds its own
        # experts' share (SGLang's DeepseekV2MoE with ep_size = tp_size ends in
        # tensor_model_parallel_all_reduce)
        tp = [ar.scaled(2)]
    else:
        tp = [ar] + comm.tp_moe_boundary(D, t, tp_bw, tp_lat)
    costs["tp_comm"] = tp + _cp_ring(model, dep, wl, D, t)
    costs["other"] = [ew.norm_residual(D, t).scaled(2), *compose.elementwise(model, D, t, q["attn"]),
                      ew.swiglu_activation("experts_act", rows, D.moe_inter / D.expert_tp, D.act_bytes),
                      *_absorbed_cast(model, hw, dep, wl, D, q["attn"])]
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
        launches = engine_moe_fields(model, hw, dep, wl).get("moe_elementwise_launches")
        if launches and not fused:
            costs["other"] = _fused_moe_elementwise(costs["other"], launches)
    else:
        costs["moe_routed"] = [replace(c, kind=KernelClass.GEMM, shape=replace(c.shape, layout="dense"))
                               for c in costs["moe_routed"]]
        costs["moe_weight_load"] = [replace(c, kind=KernelClass.GEMM) for c in costs["moe_weight_load"]]
        if fp8:  # as a dense FFN's block-FP8 linears: gate_up's and down's inputs are cast
            costs["other"] += [ew.fp8_input_cast("ffn_cast", t, D.hidden + D.moe_inter / D.expert_tp,
                                                 D.act_bytes)]
    if q["dense"] and model.shared_intermediate_size and not shared_in_moe:
        costs["other"] += [ew.fp8_input_cast("shared_cast", t, D.hidden + D.shared_inter / D.tp,
                                             D.act_bytes)]
    return costs


def dense_layer_costs(model: ModelSpec, dep: Deployment, wl: Workload, D: Dims,
                       hw: HardwareSpec | None = None) -> dict:
    """Per-micro-batch costs of one dense layer, grouped by breakdown key."""
    q = quantized(model, dep)
    wo = weight_only(model, dep, hw)
    dq = dep.dequant
    t = step_tokens(wl, dep) / D.micro_batches
    costs: dict[str, list[Cost]] = {k: [] for k in BREAKDOWN_KEYS}
    costs["attention_proj"] = _tagged(_projections(model, dep, D, t), "attn", wo, dq)
    costs["attention_core"] = compose.step_core(model, dep, wl, D, t)
    # a dense FFN stands in for the MoE: its GEMMs are moe_routed, its weight read moe_weight_load
    g_up, g_down = ffn.dense_ffn(D, t)
    w_up = g_up.shape.n * g_up.shape.k * D.w_bytes
    w_down = g_down.shape.n * g_down.shape.k * D.w_bytes
    costs["moe_routed"] = _tagged([replace(g_up, hbm_bytes=g_up.hbm_bytes - w_up),
                                   replace(g_down, hbm_bytes=g_down.hbm_bytes - w_down)],
                                  "dense", wo, dq)
    costs["moe_weight_load"] = _tagged([Cost("ffn_weight_load", g_up.kind, hbm_bytes=w_up + w_down,
                                             shape=LoadShape(g_up.shape.m))], "dense", wo, dq)
    car = _custom_allreduce(hw, dep, D)
    bw = S.bw_up * S.eff_up
    if _links(hw):  # a switchless domain: the TP group's share of the links
        bw = bw * comm.link_share(D.tp, _links(hw))
    ar = (comm.tp_allreduce(D, t, bw, S.lat_up) if car is None else
          comm.tp_allreduce_custom(D, t, car, bw, S.lat_up))
    costs["tp_comm"] = [ar.scaled(2)] + _cp_ring(model, dep, wl, D, t)
    costs["other"] = [ew.norm_residual(D, t).scaled(2), *compose.elementwise(model, D, t, q["attn"]),
                      ew.swiglu_activation("ffn_act", t, D.dense_inter / D.tp, D.act_bytes),
                      *_absorbed_cast(model, hw, dep, wl, D, q["attn"])]
    if q["dense"]:  # block-FP8 linears quantize their inputs: gate_up's (hidden) and down's (inter)
        costs["other"] += [ew.fp8_input_cast("ffn_cast", t, D.hidden + D.dense_inter / D.tp,
                                             D.act_bytes)]
    return costs


def layer_work(costs: dict, n) -> dict:
    """Work of one layer per breakdown key (all ``n`` micro-batches): FLOP, HBM bytes and
    network bytes per GPU, whatever the time model."""
    return {k: {"flop": n * sp.Add(*[c.flops for c in v]),
                "hbm_bytes": n * sp.Add(*[c.hbm_bytes for c in v]),
                "net_bytes": n * sp.Add(*[c.net_bytes for c in v])} for k, v in costs.items()}


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


def quantized(model: ModelSpec, dep: Deployment) -> dict:
    """Per GEMM weight class, whether its GEMMs take 8- or 4-bit inputs (cast kernels before
    them): the recipe's formats on their own tensor cores (``--weights``, per component)."""
    r = dep.weight_recipe(model.is_moe)
    return {c: quantizes_activations(FORMATS[getattr(r, c)].compute) for c in COMPONENTS}


def weight_only(model: ModelSpec, dep: Deployment, hw: HardwareSpec | None) -> frozenset:
    """Weight classes whose GEMMs dequantize sub-8-bit weights in the kernel and run on BF16
    tensor cores (w4a16; mxfp4 / nvfp4 on a GPU without FP4 tensor cores)."""
    if hw is None:
        return frozenset()
    r = dep.weight_recipe(model.is_moe)
    return frozenset(c for c in COMPONENTS
                     if FORMATS[getattr(r, c)].bits < 8 and hw.compute_format(getattr(r, c)) == "bf16")


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
    kv = compose.kv_bytes_per_token_layer(model, D)
    return [Cost("cp_ring", KernelClass.COMM, net_bytes=(S.cp - 1) * t * kv, net_bw=bw,
                 fixed_s=(S.cp - 1) * lat)]


def _mesh_a2a(model: ModelSpec, dep: Deployment, hw: HardwareSpec | None, D: Dims, t) -> tuple:
    """([dispatch], [combine]) of a mesh deployment along its dispatch axis
    (:mod:`moesym.terms.mesh`): ``t`` tokens per device (a row's tokens after the TP
    all-gather) multicast round the column, the locally reduced outputs sent back point to
    point; the fabric and link numbers are the hardware file's ``[mesh]``."""

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


def expert_all_to_all(hw: HardwareSpec | None, dep: Deployment, a2a: A2AMode, D: Dims,
                      tokens_per_gpu, groups=None) -> dict:
    """``{"dispatch": Cost, "combine": Cost}`` of the expert-parallel all-to-all ``a2a`` of
    ``tokens_per_gpu`` tokens: a GPU's fitted DeepEP kernels inside one node
    (:func:`_deepep_one_node`), else the ``[interconnect]`` rates and ``[latency_us]``, over a
    switchless domain's direct links where it has them. ``predict`` and ``moesym comm`` both
    time it."""
    bw_up, bw_out = S.bw_up * S.eff_up, S.bw_out * S.eff_out
    ops = _deepep_one_node(hw, dep, a2a)
    # a switchless domain's direct links (AMD Instinct's Infinity Fabric); DeepEP's fitted rate
    # already is what the node's links give
    links = 0 if ops or hw is None else hw.scale_up_links
    out = {}
    for name, term in (("dispatch", comm.dispatch), ("combine", comm.combine)):
        up, lat = (ops[name].rate_Bps, _deepep_fixed_s(ops[name], D, tokens_per_gpu)) if ops \
            else (bw_up, S.lat_up)
        c = term(D, tokens_per_gpu, up, bw_out, lat, S.lat_out, D.gpus_per_node, a2a, groups,
                 links)
        # the fitted fixed time is the measured kernel's, launch included
        out[name] = replace(c, launches=sp.Integer(0)) if ops else c
    return out


def _deepep_one_node(hw: HardwareSpec | None, dep: Deployment, a2a: A2AMode) -> dict | None:
    """DeepEP inside one node on a GPU with a fitted ``[deepep]``: ``{"dispatch":
    DeepEPKernel, "combine": ...}`` of the mode that runs; None elsewhere (across nodes, or no
    fit: the [interconnect] rate and [latency_us] apply)."""
    if (hw is None or not hw.deepep or not a2a.is_deepep or dep.mesh is not None
            or dep.ep > hw.gpus_per_node):
        return None
    mode = "ll" if a2a is A2AMode.DEEPEP_LL else "normal"
    return {op: hw.deepep[f"{mode}_{op}"] for op in ("dispatch", "combine")}


def _deepep_fixed_s(k: DeepEPKernel, D: Dims, tokens_per_gpu) -> sp.Expr:
    """The part of a fitted DeepEP kernel's time that is not its bytes at its rate: the fixed
    time, one poll per expert (every expert the kernel is launched over, redundant copies
    included) and the tokens each thread block casts and sends (or receives and reduces) one
    after another, ceil(tokens / blocks) with ceil(experts / 3) blocks (:class:`DeepEPKernel`)."""
    out = sp.Float(k.fixed_s)
    experts = D.experts + D.redundant
    if k.expert_s:
        out += sp.Float(k.expert_s) * experts
    if k.block_token_s:
        blocks = sp.ceiling(experts / DeepEPKernel.LL_WARP_GROUPS)
        out += sp.Float(k.block_token_s) * sp.ceiling(sym(tokens_per_gpu) / blocks)
    return out


def _engine_kernels(dep: Deployment):
    """The deployment's engine's ``[ENGINE.kernels]`` (None: the engine names none)."""
    return load_engine(dep.engine).kernels


def _absorbed_cast(model: ModelSpec, hw: HardwareSpec | None, dep: Deployment, wl: Workload,
                   D: Dims, attn_quantized: bool) -> list:
    """The per-step BF16 cast of MLA's absorbed 8-bit weights where the deployment's engine runs
    one on this architecture (``[ENGINE.kernels] absorbed_weight_cast_arch``), in a decode step."""
    kernels = _engine_kernels(dep)
    if (kernels is None or hw is None or not attn_quantized or model.attention != "mla"
            or wl.phase is not Phase.DECODE or hw.arch not in kernels.absorbed_weight_cast_arch):
        return []
    return [ew.absorbed_weight_cast(D)]


def _projections(model: ModelSpec, dep: Deployment, D: Dims, t) -> list:
    """The attention GEMMs of one layer as the deployment's engine runs them: the GEMMs its
    model code runs as one (``fused_gemms``) merged (:func:`moesym.terms.attention.fuse_gemms`)."""
    costs = compose.projections(model, D, t)
    kernels = _engine_kernels(dep)
    return att.fuse_gemms(costs, kernels.fused_gemms, D) if kernels is not None else costs


def fused_shared_experts(model: ModelSpec, hw: HardwareSpec | None, dep: Deployment,
                         wl: Workload) -> int:
    """Shared experts the deployment's engine runs inside its fused-MoE kernel on ``hw``
    (``[ENGINE.kernels] shared_expert_fusion``, :class:`moesym.engines.SharedExpertFusion`);
    0: they run as dense GEMMs of their own (the engine names no fusion, no hardware is given,
    or the rule does not hold)."""
    kernels = _engine_kernels(dep)
    rule = kernels.shared_expert_fusion if kernels is not None else None
    if (rule is None or hw is None or not model.is_moe or not model.shared_intermediate_size
            or model.shared_intermediate_size % model.moe_intermediate_size):
        return 0
    shared = model.shared_intermediate_size // model.moe_intermediate_size
    fmt = dep.weight_recipe(True).moe
    deepep = dep.ep > 1 and dep.resolved_a2a(wl.phase).is_deepep
    ok = rule.applies(architecture=model.architecture, routed=model.num_experts, shared=shared,
                      vendor=hw.vendor, arch=hw.arch, ep=dep.ep, deepep=deepep,
                      expert_format=fmt, expert_compute=hw.compute_format(fmt))
    return shared if ok else 0


def engine_moe_kernel(model: ModelSpec, hw: HardwareSpec, dep: Deployment,
                      wl: Workload) -> str | None:
    """The fused-MoE backend the deployment's engine runs on ``hw`` where the GPU has it fitted
    in the experts' compute format (``[moe_kernels]``;
    :meth:`moesym.engines.EngineKernels.moe_kernel`), else None ([kernel])."""
    if not model.is_moe or not hw.moe_kernels:
        return None
    if hw.compute_format(dep.weight_recipe(True).moe) != hw.moe_kernels_dtype:
        return None  # fitted on another format's kernels
    kernels = _engine_kernels(dep)
    if kernels is None:
        return None
    return kernels.moe_kernel(hw.moe_kernels, ep=dep.ep,
                              deepep=dep.ep > 1 and dep.resolved_a2a(wl.phase).is_deepep)


# the step's memory-bound kernels of the MoE layer a fused-MoE backend with its own kernel count
# (``moe_elementwise_launches``) runs as its own (the fit's moesym.kernels.fit.
# moe_elementwise_bytes: top-k, permute, unpermute-reduce, activation, input cast); the down
# GEMM's input cast is not among them: the backend's activation writes that input in FP8
# itself (FlashInfer TRT-LLM-gen, DeepSeek FP8: activationDeepSeekKernel, the kernel after
# GEMM1, trtllm_fused_moe_runner.cu:859, quantizes its output per 128 columns)
_FUSED_MOE_KERNELS = ("moe_dispatch", "moe_combine", "experts_act", "experts_in_cast")
_FUSED_MOE_DROPPED = ("experts_down_cast",)


def _fused_moe_elementwise(costs: list, launches) -> list:
    """``costs`` with the MoE layer's memory-bound kernels as the fused backend runs them: one
    ``moe_elementwise`` cost of their bytes and the backend's ``launches`` kernels, tagged
    ``moe`` (timed at its ``moe_launch_us``, :class:`moesym.kernels.timing.KernelTiming`)."""
    moe = [c for c in costs if c.name in _FUSED_MOE_KERNELS]
    rest = [c for c in costs if c.name not in _FUSED_MOE_KERNELS + _FUSED_MOE_DROPPED]
    total = sum(moe[1:], moe[0])
    return rest + [replace(total, name="moe_elementwise", launches=sp.Integer(int(launches)),
                           component="moe")]


def engine_moe_fields(model: ModelSpec, hw: HardwareSpec | None, dep: Deployment,
                      wl: Workload) -> dict:
    """The ``[moe_kernels]`` fields (SI) of the fused-MoE backend that times the deployment's
    experts (:func:`engine_moe_kernel`) where its time model reads them (the kernel model),
    else none."""
    if hw is None or not lookup(dep.timing)[0].moe_kernels:
        return {}
    name = engine_moe_kernel(model, hw, dep, wl)
    return dict(hw.moe_kernels[name]) if name else {}


def _links(hw: HardwareSpec | None) -> int:
    """Direct links per GPU of the hardware's switchless scale-up domain (0: a switch)."""
    return 0 if hw is None else hw.scale_up_links


def _tp_link(dep: Deployment, D: Dims, bw_up, bw_out, links: int = 0) -> tuple:
    """(bandwidth, per-step latency) of the TP collectives: the scale-up or scale-out tier of a
    GPU cluster (on a switchless domain, the links among the TP group), or the link along a
    mesh's TP axis (ring hops)."""
    if dep.mesh is not None:
        return S.mesh_bw_tp * S.eff_up, S.mesh_lat_tp
    return (comm.group_bandwidth(D.tp, D.gpus_per_node, bw_up, bw_out, links),
            comm.group_latency(D.tp, D.gpus_per_node, S.lat_up, S.lat_out))


def _custom_allreduce(hw: HardwareSpec | None, dep: Deployment, D: Dims | None = None):
    """The hardware's custom all-reduce (``[allreduce]``) where the TP group is inside one
    scale-up domain (an NVLink node, a GB200 NVL72 rack's NVLink domain, an Infinity Fabric
    node), else None (NCCL's ring). On a switchless domain (direct links) a group of p GPUs
    reads its peers over its p - 1 links: the rates scale by :func:`comm.link_share`."""
    if hw is None or hw.allreduce is None or dep.mesh is not None:
        return None
    if dep.tp > max(hw.gpus_per_node, hw.scale_up_domain_gpus):
        return None
    car = hw.allreduce
    if _links(hw) and D is not None:
        share = comm.link_share(D.tp, _links(hw))
        car = replace(car, oneshot_Bps=car.oneshot_Bps * share,
                      twoshot_Bps=car.twoshot_Bps * share)
    return car


def tile_stepped_experts(hw: HardwareSpec | None, dep: Deployment) -> bool:
    """Expert GEMMs timed by the tile-stepped model (:mod:`moesym.kernels.tile_step`): the
    hardware's ``[kernel]`` sets ``tile_step_base_us`` and the deployment's time model times
    tiles (:data:`moesym.specs.time_models.TIME_MODELS`: the roofline leaves them out)."""
    return (hw is not None and lookup(dep.timing)[0].tiles
            and float(hw.kernel.get("tile_step_base_us", 0) or 0) > 0)
