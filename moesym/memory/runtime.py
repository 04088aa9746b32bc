"""Transient memory per GPU: activations, MoE workspaces, communication buffers, runtime reserve
and the MTP overhead, as SymPy expressions of :class:`~moesym.terms.dims.Dims`.

Activations (seed 002 section 4; the peak is the largest prefill chunk, not decode):

* decode, per token: residual n_hc d 4 (fp32) + max(q buffer h d_q b_a, MoE accumulator d 4 +
  FFN gate/up d_i 2 4, logits V / t_p 4), with h = n_h / t_p, d_q = r_kv + d_rope for absorbed
  MLA or d_h, and d_i the TP-split shared-expert or dense-FFN intermediate;
* prefill, per token of the chunk: n_hc d 4 + h d_qk b_a + d_i 2 4 (all live together).

MoE workspaces (seed 002 section 5, seed 001 layouts): a rank dispatches
t = min(T_step / n_mb, T_cap) tokens at once (T_cap: the chunked-prefill cap; DeepEP processes
a dispatch of any size through its fixed buffer, so the cap on the tensors is the engine's token
budget). The experts' input rows on a rank are, in the contiguous layout,
lambda t (N_gpu / t_p) k / e_p (global tokens x top-k / EP), and in the batched layout
(E + R_e) / e_p x e_p max(N_ll, t) (num_local_experts x num_dispatchers x
max_tokens_per_rank, padded whatever the load). The dispatch buffer holds those rows at b_disp,
double-buffered; the grouped GEMM needs, like vLLM's modular kernel, workspace13
rows x max(2 d_e', d), workspace2 rows x d_e' and its output rows x d at b_a (d_e' = d_e / (N_gpu
/ e_p)).

Communication buffers: NCCL, M_nccl per communicator (one for the TP group when t_p > 1, one for
the EP group when e_p > 1); DeepEP normal mode a fixed M_dpn (default 1e9 bytes); DeepEP low
latency its own sizing (``deepep_low_latency_bytes``).

>>> from moesym.terms.dims import symbolic_dims
>>> from moesym.memory.runtime import nccl_buffer_bytes
>>> nccl_buffer_bytes(symbolic_dims())
M_nccl*(Min(1, e_p - 1) + Min(1, t_p - 1))
"""

from __future__ import annotations

import sympy as sp

from ..symbolic.symbols import S
from ..symbolic.expr import smax, smin, sym
from ..terms.dims import Dims

__all__ = [
    "FP32_BYTES",
    "decode_activation_bytes",
    "deepep_low_latency_bytes",
    "dispatch_buffer_bytes",
    "dispatch_tokens",
    "expert_rows",
    "ffn_intermediate",
    "grouped_gemm_workspace_bytes",
    "mtp_activation_bytes",
    "nccl_buffer_bytes",
    "prefill_activation_bytes",
    "runtime_reserve_bytes",
]

FP32_BYTES = 4


def ffn_intermediate(D: Dims, *, is_moe: bool, has_dense: bool) -> sp.Expr:
    """Per-GPU intermediate width of the non-routed FFN path: max(d_s / t_p, d_ff / t_p) over
    the layer kinds present (routed experts live in the MoE workspace).

    >>> from moesym.terms.dims import symbolic_dims
    >>> ffn_intermediate(symbolic_dims(), is_moe=True, has_dense=False)
    d_s/t_p
    """
    parts = []
    if is_moe:
        parts.append(D.shared_inter / D.tp)
    if has_dense:
        parts.append(D.dense_inter / D.tp)
    return smax(*parts) if parts else sp.Integer(0)


def _q_width(D: Dims, mla: bool, absorbed: bool) -> sp.Expr:
    if mla:
        return (D.kv_lora + D.qk_rope) if absorbed else (D.qk_nope + D.qk_rope)
    return D.head_dim


def decode_activation_bytes(D: Dims, batch, *, mla: bool, ffn_inter, hc_mult=S.hc_mult,
                            residual_bytes=FP32_BYTES) -> sp.Expr:
    """Decode activation peak on one GPU (seed 002 section 4), B requests of one token:

    B (n_hc d 4 + max(h d_q b_a, d 4 + d_i 2 4, V / t_p 4)).

    >>> from moesym.terms.dims import symbolic_dims
    >>> from moesym.symbolic.symbols import S
    >>> D = symbolic_dims()
    >>> decode_activation_bytes(D, S.batch, mla=False, ffn_inter=0, hc_mult=1).free_symbols == {
    ...     S.batch, S.hidden, S.heads, S.tp, S.head_dim, S.act_bytes, S.vocab}
    True
    """
    per_token = (sym(hc_mult) * D.hidden * sym(residual_bytes)
                 + smax(D.local_heads * _q_width(D, mla, absorbed=True) * D.act_bytes,
                          D.hidden * FP32_BYTES + sym(ffn_inter) * 2 * FP32_BYTES,
                          D.vocab / D.tp * FP32_BYTES))
    return sym(batch) * per_token


def prefill_activation_bytes(D: Dims, tokens, *, mla: bool, ffn_inter, hc_mult=S.hc_mult,
                             residual_bytes=FP32_BYTES) -> sp.Expr:
    """Prefill activation peak on one GPU for a chunk of T tokens (seed 002 section 4):

    T (n_hc d 4 + h d_qk b_a + d_i 2 4).

    >>> from moesym.terms.dims import symbolic_dims
    >>> from moesym.symbolic.symbols import S
    >>> prefill_activation_bytes(symbolic_dims(), S.tokens, mla=False, ffn_inter=0, hc_mult=1)
    T*(b_a*d_h*n_h/t_p + 4*d)
    """
    return sym(tokens) * (sym(hc_mult) * D.hidden * sym(residual_bytes)
                          + D.local_heads * _q_width(D, mla, absorbed=False) * D.act_bytes
                          + sym(ffn_inter) * 2 * FP32_BYTES)


def dispatch_tokens(step_tokens, micro_batches=S.micro_batches, cap=S.max_rank_tokens) -> sp.Expr:
    """Tokens one rank submits to one dispatch: min(T_step / n_mb, T_cap).

    >>> from moesym.symbolic.symbols import S
    >>> dispatch_tokens(S.batch)
    Min(T_cap, B/n_mb)
    """
    return smin(sym(step_tokens) / sym(micro_batches), sym(cap))


def expert_rows(D: Dims, tokens, *, layout: str, imbalance=1,
                max_dispatch_tokens=S.max_dispatch_tokens) -> sp.Expr:
    """Rows of the routed experts' input on one rank for a dispatch of ``tokens`` per rank.

    contiguous: lambda t (N_gpu / t_p) k / e_p; batched (seed 001):
    (E + R_e) / e_p x e_p max(N_ll, t) = (E + R_e) max(N_ll, t).

    >>> from moesym.terms.dims import symbolic_dims
    >>> from moesym.symbolic.symbols import S
    >>> expert_rows(symbolic_dims(), S.batch, layout="contiguous")
    B*N_gpu*k/(e_p*t_p)
    >>> expert_rows(symbolic_dims(), S.batch, layout="batched")
    (E + R_e)*Max(B, N_ll)
    """
    t = sym(tokens)
    if layout == "contiguous":
        return sym(imbalance) * t * (D.gpus / D.tp) * D.topk / D.ep
    if layout == "batched":
        return D.local_experts * D.ep * smax(sym(max_dispatch_tokens), t)
    raise ValueError(f"layout {layout!r}: use contiguous or batched")


def dispatch_buffer_bytes(D: Dims, rows) -> sp.Expr:
    """Received-token buffer of the EP dispatch, double-buffered: 2 rows d b_disp.

    >>> from moesym.terms.dims import symbolic_dims
    >>> dispatch_buffer_bytes(symbolic_dims(), 10)
    20*b_disp*d
    """
    return 2 * sym(rows) * D.hidden * D.dispatch_bytes


def grouped_gemm_workspace_bytes(D: Dims, rows) -> sp.Expr:
    """Grouped-GEMM workspaces and output (vLLM modular kernel ``workspace_shapes``):
    rows (max(2 d_e', d) + d_e' + d) b_a with d_e' = d_e / (N_gpu / e_p).

    >>> from moesym.terms.dims import symbolic_dims
    >>> D = symbolic_dims()
    >>> grouped_gemm_workspace_bytes(D, 1).subs({D.gpus: 1, D.ep: 1, D.moe_inter: 1, D.hidden: 4})
    9*b_a
    """
    de = D.moe_inter / D.expert_tp
    return sym(rows) * (smax(2 * de, D.hidden) + de + D.hidden) * D.act_bytes


def nccl_buffer_bytes(D: Dims, per_communicator=S.nccl_bytes) -> sp.Expr:
    """NCCL buffers: M_nccl for the TP group (t_p > 1) and for the EP group (e_p > 1).

    With integer degrees min(x - 1, 1) is 0 for x = 1 and 1 above.

    >>> from moesym.terms.dims import symbolic_dims
    >>> D = symbolic_dims()
    >>> nccl_buffer_bytes(D, 100).subs({D.tp: 1, D.ep: 8})
    100
    """
    return sym(per_communicator) * (smin(D.tp - 1, 1) + smin(D.ep - 1, 1))


def deepep_low_latency_bytes(D: Dims, max_tokens) -> sp.Expr:
    """DeepEP low-latency RDMA buffer (its ``get_low_latency_rdma_size_hint`` layout), with
    N = num_max_dispatch_tokens_per_rank and E' = E + R_e experts in the buffer:

    dispatch message m_d = 16 + max(2 d, d + 4 d / 128) bytes (FP8 payload, scales, header),
    combine message m_c = 2 d + 4 d / 128 bytes (BF16 payload and LogFMT scales);
    send = max(N m_d, E' N m_c), receive = max(E' N m_d, E' N m_c); both double-buffered:
    2 (send + receive) (signalling words ignored).

    >>> from moesym.terms.dims import symbolic_dims
    >>> D = symbolic_dims()
    >>> v = deepep_low_latency_bytes(D, 128).subs({D.hidden: 7168, D.experts: 256, D.redundant: 0})
    >>> round(float(v) / 1e9, 3)
    1.908
    """
    n, d, e = sym(max_tokens), D.hidden, D.experts + D.redundant
    m_d = 16 + smax(2 * d, d + 4 * d / 128)
    m_c = 2 * d + 4 * d / 128
    send = smax(n * m_d, e * n * m_c)
    recv = smax(e * n * m_d, e * n * m_c)
    return 2 * (send + recv)


def runtime_reserve_bytes(fraction=S.reserve_frac, fixed=S.reserve_bytes,
                          capacity=S.hbm_capacity) -> sp.Expr:
    """Memory held back from the model: phi_rsv M_hbm (CUDA graphs, allocator slack) + M_rsv
    (CUDA context, cuBLAS and other library workspaces).

    >>> runtime_reserve_bytes()
    M_hbm*phi_rsv + M_rsv
    """
    return sym(fraction) * sym(capacity) + sym(fixed)


def mtp_activation_bytes(D: Dims, tokens, n_mtp_layers=S.n_mtp_layers) -> sp.Expr:
    """MTP activations and logits buffer (seed 002 section 7), for T tokens in flight:
    min(N_mtp, 1) T 2 d b_a (embedding and hidden concatenated) + N_mtp T V 4 (fp32 draft
    logits kept until verification). MTP runs after the main model, so its other activations
    reuse the main model's space.

    >>> from moesym.terms.dims import symbolic_dims
    >>> from moesym.symbolic.symbols import S
    >>> mtp_activation_bytes(symbolic_dims(), S.batch, 1)
    4*B*V + 2*B*b_a*d
    """
    t, n = sym(tokens), sym(n_mtp_layers)
    return smin(n, 1) * t * 2 * D.hidden * D.act_bytes + n * t * D.vocab * FP32_BYTES
