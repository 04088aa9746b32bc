"""The table of moesym's symbols as plain data (no SymPy): attribute, printed name, unit,
meaning, kind and assumptions. :mod:`moesym.symbolic.symbols` makes the SymPy symbols from it; code that
only needs the names (bindings, the compiled-model cache) reads :data:`N` and never imports SymPy.

>>> from moesym.symbolic.symtab import N
>>> N.hidden, N.batch
('d', 'B')
"""

from __future__ import annotations

__all__ = ["N", "TABLE", "NAME_OF"]

# (attribute, printed name, unit, meaning, kind, assumptions)
TABLE: tuple[tuple[str, str, str, str, str, dict], ...] = (
    # --- workload
    ("batch", "B", "requests", "decode requests per attention data-parallel rank (all micro-batches)", "workload", {"positive": True}),
    ("tokens", "T", "tokens", "prefill tokens per attention data-parallel rank per step (all micro-batches)", "workload", {"positive": True}),
    ("context", "L", "tokens", "prompt length (prefill) or mean KV length per request (decode)", "workload", {"positive": True}),
    ("chunk", "C", "tokens", "prefill chunk length of one prompt (chunked prefill; C = L when unchunked)", "workload", {"positive": True}),
    ("mtp", "N_d", "tokens", "draft tokens per request a speculative decode step verifies (MTP / EAGLE)", "deployment", {"nonnegative": True}),
    ("prefix_hit", "F_hit", "1", "share of each prompt found in the prefix cache (not recomputed; its KV is still read)", "workload", {"nonnegative": True}),
    ("isl", "L_in", "tokens", "prompt length of the requests a mixed serving step prefills (serve: L is the decode requests' mean KV)", "workload", {"positive": True}),
    ("total_batch", "B_tot", "requests", "decode requests in flight across the whole serving instance", "workload", {"positive": True}),
    ("target_tokens_s", "X", "tokens/s", "decode throughput target of one serving instance", "workload", {"positive": True}),
    ("tpot_target", "tau_tpot", "s", "time-per-output-token limit", "workload", {"positive": True}),
    ("ttft_target", "tau_ttft", "s", "time-to-first-token limit", "workload", {"positive": True}),
    # --- deployment
    ("gpus", "N_gpu", "GPUs", "GPUs in one serving instance", "deployment", {"positive": True}),
    ("gpus_per_node", "N_node", "GPUs", "GPUs per node (scale-up domain)", "deployment", {"positive": True}),
    ("tp", "t_p", "GPUs", "attention tensor-parallel degree", "deployment", {"positive": True}),
    ("ep", "e_p", "GPUs", "expert-parallel degree", "deployment", {"positive": True}),
    ("cp", "c_p", "1", "context-parallel GPUs sharing each prompt (ring attention, prefill)", "deployment", {"positive": True}),
    ("pp", "p_p", "1", "pipeline-parallel stages (each holds 1 / p_p of the layers; p_p micro-batches in flight)", "deployment", {"positive": True}),
    ("micro_batches", "n_mb", "1", "micro-batches pipelined through a layer", "deployment", {"positive": True}),
    ("redundant", "R_e", "experts", "redundant expert replicas added for load balancing (EPLB)", "deployment", {"nonnegative": True}),
    # --- model shape
    ("hidden", "d", "elements", "model hidden size", "model", {"positive": True}),
    ("vocab", "V", "tokens", "vocabulary size", "model", {"positive": True}),
    ("n_moe_layers", "N_moe", "layers", "number of MoE layers", "model", {"nonnegative": True}),
    ("n_dense_layers", "N_dense", "layers", "number of layers with a dense FFN", "model", {"nonnegative": True}),
    ("heads", "n_h", "heads", "attention query heads", "model", {"positive": True}),
    ("kv_heads", "n_kv", "heads", "attention key/value heads (GQA)", "model", {"positive": True}),
    ("head_dim", "d_h", "elements", "attention head size (q, k, v)", "model", {"positive": True}),
    ("q_lora", "r_q", "elements", "MLA query low-rank size (q_lora_rank)", "model", {"positive": True}),
    ("kv_lora", "r_kv", "elements", "MLA key/value latent size (kv_lora_rank)", "model", {"positive": True}),
    ("qk_nope", "d_nope", "elements", "MLA per-head q/k size without rotary part", "model", {"positive": True}),
    ("qk_rope", "d_rope", "elements", "MLA per-head rotary q/k size (shared rotary key)", "model", {"positive": True}),
    ("v_head", "d_v", "elements", "MLA per-head value size", "model", {"positive": True}),
    ("experts", "E", "experts", "routed experts", "model", {"positive": True}),
    ("topk", "k", "experts", "routed experts selected per token", "model", {"positive": True}),
    ("moe_inter", "d_e", "elements", "routed expert intermediate size", "model", {"positive": True}),
    ("shared_inter", "d_s", "elements", "total shared-expert intermediate size (all shared experts)", "model", {"positive": True}),
    ("dense_inter", "d_ff", "elements", "dense FFN intermediate size", "model", {"positive": True}),
    ("n_groups", "G", "groups", "expert groups for group-limited routing (n_group)", "model", {"positive": True}),
    ("topk_groups", "k_G", "groups", "groups a token may route into (topk_group)", "model", {"positive": True}),
    # --- precision (bytes per element, scale-factor overhead included)
    ("w_bytes", "b_w", "bytes", "bytes per weight element of attention-projection GEMM weights (scales included)", "precision", {"positive": True}),
    ("kv_bytes", "b_kv", "bytes", "bytes per KV-cache element", "precision", {"positive": True}),
    ("act_bytes", "b_a", "bytes", "bytes per activation element (bf16 = 2)", "precision", {"positive": True}),
    ("dispatch_bytes", "b_disp", "bytes", "bytes per dispatched activation element (fp8 + scales)", "precision", {"positive": True}),
    ("combine_bytes", "b_comb", "bytes", "bytes per combined activation element (bf16 = 2)", "precision", {"positive": True}),
    # --- hardware peaks
    ("flops_gemm", "F_g", "FLOP/s", "dense tensor-core peak for the GEMM compute dtype", "hardware", {"positive": True}),
    ("flops_attn", "F_a", "FLOP/s", "dense tensor-core peak for attention (bf16)", "hardware", {"positive": True}),
    ("hbm_bw", "W", "bytes/s", "HBM bandwidth peak", "hardware", {"positive": True}),
    ("hbm_capacity", "M_hbm", "bytes", "HBM capacity per GPU", "hardware", {"positive": True}),
    ("bw_up", "W_up", "bytes/s", "scale-up (NVLink) bandwidth per GPU per direction", "hardware", {"positive": True}),
    ("bw_out", "W_out", "bytes/s", "scale-out (RDMA) bandwidth per GPU per direction", "hardware", {"positive": True}),
    ("sms", "N_SM", "SMs", "streaming multiprocessors per GPU", "hardware", {"positive": True}),
    # --- efficiencies and fixed latencies (calibration)
    ("eff_gemm", "eta_g", "1", "achieved fraction of peak FLOP/s in dense GEMMs", "calibration", {"positive": True}),
    ("eff_grouped", "eta_gg", "1", "achieved fraction of peak FLOP/s in grouped (expert) GEMMs", "calibration", {"positive": True}),
    ("eff_attn", "eta_a", "1", "achieved fraction of peak FLOP/s in attention kernels", "calibration", {"positive": True}),
    ("eff_mem", "eta_m", "1", "achieved fraction of HBM bandwidth in GEMMs (weight and activation reads)", "calibration", {"positive": True}),
    ("eff_mem_attn", "eta_ma", "1", "achieved fraction of HBM bandwidth in attention kernels (KV reads)", "calibration", {"positive": True}),
    ("eff_mem_ew", "eta_me", "1", "achieved fraction of HBM bandwidth in elementwise kernels (norms, casts, copies)", "calibration", {"positive": True}),
    ("eff_up", "eta_up", "1", "achieved fraction of scale-up bandwidth", "calibration", {"positive": True}),
    ("eff_out", "eta_out", "1", "achieved fraction of scale-out bandwidth", "calibration", {"positive": True}),
    ("eff_serve", "eta_sv", "1", "fraction of the modeled step speed a serving engine sustains end to end (fitted per GPU on end-to-end measurements; 1 = kernels as timed in isolation)", "calibration", {"positive": True}),
    ("lat_up", "tau_up", "s", "fixed latency of one scale-up transfer", "calibration", {"nonnegative": True}),
    ("lat_out", "tau_out", "s", "fixed latency of one scale-out transfer", "calibration", {"nonnegative": True}),
    ("t_kernel", "tau_k", "s", "fixed time per kernel launch (launch + tail)", "calibration", {"nonnegative": True}),
    ("t_layer", "tau_l", "s", "fixed overhead per layer beyond its kernels", "calibration", {"nonnegative": True}),
    ("t_step", "tau_s", "s", "fixed overhead per step (scheduler, sampling, host)", "calibration", {"nonnegative": True}),
    ("t_host_launch", "tau_hl", "s", "host time per kernel an engine launches from its runtime in a step not replayed as a CUDA graph (eager prefill)", "calibration", {"nonnegative": True}),
    # --- routing statistics
    ("zipf_s", "s_z", "1", "Zipf exponent of expert popularity", "routing", {"nonnegative": True}),
    ("tile_m", "m_tile", "rows", "grouped-GEMM M tile (rows each expert is padded to)", "calibration", {"positive": True}),
    ("imbalance", "lambda_ep", "1", "busiest EP rank's load over the mean load", "routing", {"positive": True}),
    ("group_var", "rho_G", "1", "per-token load variance on one EP rank under group-limited routing over that under uniform top-k (a number at each EP; 1 without expert groups)", "routing", {"positive": True}),
    # --- memory model (moesym.memory)
    ("w_bytes_expert", "b_we", "bytes", "bytes per routed-expert weight element as stored in HBM (scales included)", "precision", {"positive": True}),
    ("host_bw", "W_host", "bytes/s", "host-to-device link bandwidth per GPU (PCIe, NVLink-C2C; expert offload)", "hardware", {"positive": True}),
    ("host_dram_bw", "W_cpu", "bytes/s", "host CPU memory bandwidth (experts computed on the host)", "hardware", {"positive": True}),
    ("host_flops", "F_cpu", "FLOP/s", "host CPU matrix throughput (experts computed on the host)", "hardware", {"positive": True}),
    ("w_bytes_dense", "b_wd", "bytes", "bytes per weight element of shared experts and dense FFN layers (their format, scales included)", "precision", {"positive": True}),
    ("flops_moe", "F_ge", "FLOP/s", "peak tensor FLOP/s of the routed experts' GEMMs (their weight format's compute format)", "hardware", {"positive": True}),
    ("flops_dense", "F_gd", "FLOP/s", "peak tensor FLOP/s of shared-expert and dense-FFN GEMMs", "hardware", {"positive": True}),
    ("w_bytes_hp", "b_hp", "bytes", "bytes per element of high-precision weights (embeddings, LM head, router, norms)", "precision", {"positive": True}),
    ("n_sliding_layers", "N_sw", "layers", "layers with sliding-window attention", "model", {"nonnegative": True}),
    ("window", "L_sw", "tokens", "sliding-window length", "model", {"positive": True}),
    ("n_mtp_layers", "N_mtp", "layers", "multi-token-prediction (MTP) modules served as draft layers", "model", {"nonnegative": True}),
    ("hc_mult", "n_hc", "1", "hyper-connection multiplier of the residual stream (1 = plain residual)", "model", {"positive": True}),
    ("block_size", "P_blk", "tokens", "paged KV-cache block size", "deployment", {"positive": True}),
    ("max_dispatch_tokens", "N_ll", "tokens", "DeepEP low-latency num_max_dispatch_tokens_per_rank", "deployment", {"positive": True}),
    ("max_rank_tokens", "T_cap", "tokens", "most tokens one rank submits to one dispatch (chunked-prefill cap)", "deployment", {"positive": True}),
    ("prefill_tokens", "T_pf", "tokens", "tokens per rank in the largest prefill chunk held beside decode", "workload", {"nonnegative": True}),
    ("nccl_bytes", "M_nccl", "bytes", "NCCL buffers per communicator", "calibration", {"nonnegative": True}),
    ("deepep_normal_bytes", "M_dpn", "bytes", "DeepEP normal-mode buffer per rank", "calibration", {"nonnegative": True}),
    ("reserve_frac", "phi_rsv", "1", "share of HBM held back for CUDA graphs and allocator slack", "calibration", {"nonnegative": True}),
    ("reserve_bytes", "M_rsv", "bytes", "fixed runtime reserve (CUDA context, library workspaces)", "calibration", {"nonnegative": True}),
    # --- routing statistics (moesym.routing)
    ("expert_index", "i_x", "1", "popularity rank of a routed expert (1 = hottest); summation index", "routing", {"positive": True, "integer": True}),
    ("leader_c", "c_g", "1", "experts a selected group holds under group-limited routing (leader model); summation index", "routing", {"positive": True, "integer": True}),
    ("leader_pmf", "P_c", "1", "P(c_g): 1 + Hypergeometric(kG E/G - kG, E/G - 1, k - kG) at c_g", "routing", {"nonnegative": True}),
    ("zipf_rate", "Lambda_z", "1", "successive-sampling rate solving sum_i (1 - exp(-Lambda_z p_i)) = k", "routing", {"positive": True}),
    ("cache_experts", "C_x", "experts", "routed experts per MoE layer resident in GPU memory (expert cache)", "deployment", {"positive": True}),
    ("expert_buffer_tokens", "T_buf", "tokens", "rows per local expert in a batched activation buffer", "deployment", {"positive": True}),
    ("t_unpack", "tau_uq", "s", "matrix-vector kernel time to unpack one attention-projection weight element held in a block format (0: held as computed)", "calibration", {"nonnegative": True}),
    ("t_unpack_expert", "tau_ue", "s", "matrix-vector kernel time to unpack one routed-expert weight element (0: held as computed)", "calibration", {"nonnegative": True}),
    ("t_unpack_dense", "tau_ud", "s", "matrix-vector kernel time to unpack one shared-expert or dense-FFN weight element (0: held as computed)", "calibration", {"nonnegative": True}),
    ("b_pass", "b_dq", "bytes", "bytes per attention-projection weight element a separate dequantization pass moves before a 16-bit GEMM (packed read + 16-bit write; 0: no pass)", "calibration", {"nonnegative": True}),
    ("b_pass_expert", "b_dqe", "bytes", "the same for a routed-expert weight element", "calibration", {"nonnegative": True}),
    ("b_pass_dense", "b_dqd", "bytes", "the same for a shared-expert or dense-FFN weight element", "calibration", {"nonnegative": True}),
    ("t_gemm_base", "tau_gb", "s", "grouped-GEMM time when every expert fits in one M tile", "calibration", {"nonnegative": True}),
    ("t_gemm_tile", "tau_gt", "s", "grouped-GEMM time added per extra M tile of one expert", "calibration", {"nonnegative": True}),
    # --- communication / overlap (moesym.terms.comm, moesym.model.overlap)
    ("comm_sms", "N_SM_comm", "SMs", "SMs a communication kernel holds while it overlaps compute (DeepEP normal: 20-24)", "calibration", {"nonnegative": True}),
    # --- 2D device meshes (moesym.specs.mesh, moesym.terms.mesh; seed 004)
    ("mesh_bw_disp", "W_ax", "bytes/s", "link bandwidth per direction between neighbouring devices along the mesh's dispatch (EP) axis", "hardware", {"positive": True}),
    ("mesh_bw_tp", "W_tx", "bytes/s", "link bandwidth per direction between neighbouring devices along the mesh's TP axis", "hardware", {"positive": True}),
    ("mesh_lat_tp", "tau_tx", "s", "fixed latency of one hop along the mesh's TP axis", "calibration", {"nonnegative": True}),
    ("mc_base", "tau_mc0", "s", "ring sparse-multicast dispatch: fixed cost of one chain", "calibration", {"nonnegative": True}),
    ("mc_hop", "tau_mch", "s", "ring sparse-multicast dispatch: cost per hop to the farthest destination", "calibration", {"nonnegative": True}),
    ("mc_device", "tau_mcd", "s", "ring sparse-multicast dispatch: cost per destination device (one write)", "calibration", {"nonnegative": True}),
    ("mc_expert", "tau_mce", "s", "ring sparse-multicast dispatch: cost per expert entry", "calibration", {"nonnegative": True}),
    ("mesh_rows", "R_m", "devices", "devices along a mesh's dispatch axis (derive mesh-rows)", "deployment", {"positive": True}),
)

NAME_OF: dict[str, str] = {row[0]: row[1] for row in TABLE}
_twice = sorted({n for n in NAME_OF.values() if list(NAME_OF.values()).count(n) > 1})
if _twice or len(NAME_OF) != len(TABLE):  # one symbol per name: two rows would collapse into one
    raise ValueError(f"symbol table: printed name(s) {_twice} declared more than once")


class _Names:
    """Read-only attribute access to the printed names (``N.hidden == 'd'``)."""

    __slots__ = ()

    def __getattr__(self, item: str) -> str:
        try:
            return NAME_OF[item]
        except KeyError:
            raise AttributeError(f"moesym declares no symbol {item!r}") from None


N = _Names()
