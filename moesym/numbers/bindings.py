"""Numbers for the symbols of a step model, from the model, hardware, deployment and workload."""

from __future__ import annotations

import warnings
from dataclasses import replace

from ..engines import load_engine
from ..specs.deployment import DTYPE_BYTES, Deployment, Phase, Workload, activation_dispatch_bytes
from ..specs.hardware import HardwareSpec
from ..specs.kernel_calib import kernel_calib
from ..specs.mesh import mesh_values
from ..specs.model import ModelSpec
from ..specs.precision import COMPONENTS, FORMATS, bytes_per_element, storage_format
from ..symbolic.symtab import N
from .metrics import prefill_memory_values, serve_chunk, serve_point

#: SMs a DeepEP normal-mode (or NCCL) kernel holds while it overlaps compute: DeepEP's
#: ``Buffer.num_sms`` default, 20, as DeepSeek-V3 dedicates 20 of the H800's 132 SMs to
#: communication (DeepSeek-V3 technical report, section 3.2.2)
COMM_SMS = 20

__all__ = ["bindings", "fabric_values", "scale_up_domain", "workload_values",
           "memory_workload_values"]


def workload_values(wl: Workload) -> dict[str, float]:
    """Numbers of the workload's symbols, keyed by printed name (no SymPy needed): decode binds
    B and L, prefill T, L and C. Everything else a step model binds is fixed by the model,
    hardware and deployment (what the compiled-model cache stores)."""
    if wl.phase is Phase.DECODE:
        return {N.batch: wl.batch, N.context: wl.context}
    hit = {N.prefix_hit: wl.prefix_hit} if wl.prefix_hit else {}
    if wl.phase is Phase.SERVE:  # the mixed step of the steady state (moesym.numbers.metrics)
        # chunk 0 (the engine's default, which needs the hardware): :func:`bindings` binds it
        # (moesym.numbers.metrics.serve_chunk); here only the names count then
        chunk = wl.chunk or wl.isl
        p = serve_point(wl.batch, wl.isl, wl.osl, chunk, hit=wl.prefix_hit)
        return {N.batch: p["decoding"], N.tokens: p["mixed_tokens"], N.context: wl.context,
                N.isl: wl.isl, N.chunk: chunk, **hit}
    return {N.tokens: wl.tokens, N.context: wl.context, N.chunk: wl.chunk, **hit}


def memory_workload_values(wl: Workload, dep: Deployment | None = None) -> dict[str, float]:
    """:func:`workload_values` for the memory model: a prefill step also holds the KV of the
    prompts it advances (:func:`moesym.numbers.metrics.prefill_memory_values`)."""
    v = workload_values(wl)
    if wl.phase is Phase.PREFILL:  # with context parallelism 1 / cp of each on a GPU
        v.update(prefill_memory_values(wl.tokens, wl.context, dep.cp if dep is not None else 1))
    return v


def scale_up_domain(hw: HardwareSpec, dep: Deployment) -> int:
    """GPUs that reach each other over the scale-up fabric (NVL72 keeps 72 on NVLink)."""
    return max(dep.gpus_per_node, hw.scale_up_domain_gpus) if hw.scale_up_domain_gpus > hw.gpus_per_node \
        else dep.gpus_per_node


def _formats(model: ModelSpec, hw: HardwareSpec, dep: Deployment) -> tuple:
    """(recipe, {component: storage format}, {component: format its GEMMs compute in}) of the
    deployment's weights on this GPU."""
    if dep.weights == "bf16" and model.weight_dtype != "bf16":  # the checkpoint's own is not
        warnings.warn(f"{model.name}: its checkpoint holds {model.weight_dtype} weights; "
                      f"modelled as bf16 (the --weights default): pass --weights "
                      f"{model.weight_dtype} to model it as shipped", stacklevel=2)
    recipe = dep.weight_recipe(model.is_moe)
    stored = {c: storage_format(getattr(recipe, c), hw.peaks_flops) for c in COMPONENTS}
    compute = {c: hw.compute_format(getattr(recipe, c)) for c in COMPONENTS}
    return recipe, stored, compute


def gemm_table_dtypes(model: ModelSpec, hw: HardwareSpec, dep: Deployment) -> dict:
    """{GEMM weight class: dtype a measured GEMM table must hold} (None: no table applies).

    A class whose weights are stored as they compute (bf16, fp8) runs a plain GEMM of that
    dtype; weight-only and 4-bit formats run other kernels (dequantising, FP4) that no table of
    the bench-data layout describes."""
    _, stored, compute = _formats(model, hw, dep)
    return {c: compute[c] if stored[c] == compute[c] and compute[c] in ("bf16", "fp8") else None
            for c in stored}


def _unpack(stored: str, compute: str, calib) -> float:
    """Seconds per weight element a matrix-vector kernel spends unpacking ``stored`` weights
    that compute as ``compute``: sub-8-bit values, or a format its GPU has no tensor cores for
    (converted to 16-bit floats in the kernel); 0 for 16-bit floats and 8-bit formats on their
    own tensor cores (llama.cpp's Q8_0 dp4a/MMQ dot products, FP8, INT8)."""
    f = FORMATS[stored]
    packed = f.bits < 8 or (f.bits < 16 and compute != f.compute)
    return calib.unpack_s_per_weight if packed else 0.0


def _pass_bytes(stored: str, w_bytes: float, calib) -> float:
    """Bytes per weight element of a separate dequantization pass (``dequant_pass_rows``): any
    format below 16 bits is read as stored and written as 16-bit floats; 0 without a pass."""
    return w_bytes + 2.0 if (calib.dequant_pass_rows and FORMATS[stored].bits < 16) else 0.0


def fabric_values(hw: HardwareSpec, dep: Deployment) -> dict:
    """``{symbol: number}`` of the links between GPUs (rates, their efficiencies, latencies, the
    scale-up domain) and the kernel launch: what a collective or an all-to-all is timed with,
    in :func:`bindings` and in ``moesym comm`` alike."""
    from ..symbolic.symbols import S

    return {S.bw_up: hw.scale_up_Bps, S.bw_out: hw.scale_out_Bps,
            S.eff_up: hw.efficiency.scale_up, S.eff_out: hw.efficiency.scale_out,
            S.lat_up: hw.latency.scale_up_s, S.lat_out: hw.latency.scale_out_s,
            S.t_kernel: hw.latency.kernel_s, S.gpus_per_node: scale_up_domain(hw, dep)}


def bindings(model: ModelSpec, hw: HardwareSpec, dep: Deployment, wl: Workload) -> dict:
    """``{symbol: number}`` for every symbol a step model of this configuration can contain."""
    from ..readers.gguf import file_type_bytes
    from ..symbolic.symbols import S, by_name
    capacity_bytes = hw.hbm_capacity_bytes
    engine = load_engine(dep.engine)
    hw = engine.hardware(hw)  # the engine's kernel switches
    calib = kernel_calib(hw)
    recipe, stored, compute = _formats(model, hw, dep)
    for fmt in sorted(recipe.formats()):  # say what runs: the answer is not the one for that format
        nominal, runs = FORMATS[fmt].compute, hw.compute_format(fmt)
        if runs != nominal:
            warnings.warn(f"{hw.name} has no {nominal} tensor cores: --weights {fmt} GEMMs run in "
                          f"{runs} and the weights occupy {storage_format(fmt, hw.peaks_flops)} "
                          "bytes in memory", stacklevel=2)
    w_bytes = {c: bytes_per_element(f, dep.group_size) for c, f in stored.items()}
    w_bytes.update(file_type_bytes(recipe, model) or {})  # a GGUF file's per-tensor mix
    m = model
    v = {
        **fabric_values(hw, dep),
        S.hidden: m.hidden_size, S.vocab: m.vocab_size, S.heads: m.num_heads,
        S.kv_heads: m.num_kv_heads or m.num_heads, S.head_dim: m.head_dim or m.qk_head_dim,
        S.q_lora: m.q_lora_rank, S.kv_lora: m.kv_lora_rank, S.qk_nope: m.qk_nope_head_dim,
        S.qk_rope: m.qk_rope_head_dim, S.v_head: m.v_head_dim,
        S.experts: max(m.num_experts, 1), S.topk: max(m.experts_per_token, 1),
        S.moe_inter: m.moe_intermediate_size or m.dense_intermediate_size,
        S.shared_inter: m.shared_intermediate_size, S.dense_inter: m.dense_intermediate_size,
        S.n_groups: m.expert_groups, S.topk_groups: m.groups_per_token,
        # one pipeline stage's layers (the model's / pp: every stage alike)
        S.n_moe_layers: (m.moe_layers if m.is_moe else 0) / dep.pp,
        S.n_dense_layers: m.dense_layers / dep.pp,
        S.gpus: dep.stage_gpus, S.pp: dep.pp, S.cp: dep.cp, S.tp: dep.tp, S.ep: dep.ep,
        S.micro_batches: dep.micro_batches, S.redundant: dep.redundant_experts, S.mtp: dep.mtp,
        S.w_bytes: w_bytes["attn"], S.w_bytes_expert: w_bytes["moe"],
        S.w_bytes_dense: w_bytes["dense"],
        S.kv_bytes: DTYPE_BYTES[dep.kv], S.act_bytes: DTYPE_BYTES["bf16"],
        S.dispatch_bytes: activation_dispatch_bytes("fp8" if compute["moe"] != "bf16" else "bf16"),
        S.combine_bytes: DTYPE_BYTES["bf16"],
        S.flops_gemm: hw.peak_flops(compute["attn"]), S.flops_moe: hw.peak_flops(compute["moe"]),
        S.flops_dense: hw.peak_flops(compute["dense"]), S.flops_attn: hw.peak_flops("bf16"),
        S.hbm_bw: hw.hbm_bw_Bps, S.hbm_capacity: hw.hbm_capacity_bytes,
        S.sms: hw.sms,
        # the roofline's efficiencies are the kernel model's fractions: one set per GPU
        S.eff_gemm: calib.gemm_tensor_frac, S.eff_grouped: calib.grouped_contiguous_tensor_frac,
        S.eff_attn: calib.attention_tensor_frac, S.eff_mem: calib.gemm_hbm_frac,
        S.eff_mem_attn: calib.attention_hbm_frac, S.eff_mem_ew: calib.elementwise_hbm_frac,
        S.eff_serve: hw.efficiency.serving,
        S.t_layer: hw.latency.layer_s,
        S.t_step: hw.latency.step_s if engine.host_step_s is None else engine.host_step_s,
        S.t_host_launch: engine.host_launch(hw.vendor),
        S.zipf_s: dep.routing.s, S.host_bw: hw.host_link_Bps,
        S.host_dram_bw: hw.host_dram_Bps or 1.0, S.host_flops: hw.host_flops or 1.0,
        S.comm_sms: float(COMM_SMS),
        # matrix-vector kernels unpack a block format in series with their loads; a format held
        # as its GEMMs compute (bf16, fp8 on FP8 tensor cores) has nothing to unpack
        S.t_unpack: _unpack(stored["attn"], compute["attn"], calib),
        S.t_unpack_expert: _unpack(stored["moe"], compute["moe"], calib),
        S.t_unpack_dense: _unpack(stored["dense"], compute["dense"], calib),
        S.b_pass: _pass_bytes(stored["attn"], w_bytes["attn"], calib),
        S.b_pass_expert: _pass_bytes(stored["moe"], w_bytes["moe"], calib),
        S.b_pass_dense: _pass_bytes(stored["dense"], w_bytes["dense"], calib),
    }
    if calib.dequant_pass_rows:  # llama.cpp on CUDA: dequantized and 16-bit float weights run
        # cuBLAS GEMMs computing in FP16 (CUBLAS_COMPUTE_16F, ggml-cuda ggml_cuda_op_mul_mat_cublas)
        f16 = hw.peaks_flops.get("fp16", hw.peak_flops("bf16"))
        for peak, passed, c in ((S.flops_gemm, S.b_pass, "attn"),
                                (S.flops_moe, S.b_pass_expert, "moe"),
                                (S.flops_dense, S.b_pass_dense, "dense")):
            if v[passed] or compute[c] == "bf16":
                v[peak] = f16
    from ..terms.routing import group_var_factor

    v[S.group_var] = group_var_factor(model, dep.ep)
    if calib.tile_stepped:  # tile-stepped expert GEMMs (moesym.kernels.tile_step)
        v[S.t_gemm_base], v[S.t_gemm_tile] = calib.tile_step_base_s, calib.tile_step_s
    v.update({getattr(S, k): x for k, x in mesh_values(hw, dep).items()})  # 2D meshes
    if wl.phase is Phase.SERVE and not wl.chunk:  # the engine's default chunk, as predict's
        wl = replace(wl, chunk=serve_chunk(0, capacity_bytes, dep.dp, dep.engine))
    v.update({by_name(k): x for k, x in workload_values(wl).items()})
    return v
