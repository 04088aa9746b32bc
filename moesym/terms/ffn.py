"""FFN terms: dense SwiGLU FFN, routed experts, shared experts, router, LM head, embedding.

Routed experts follow seed 000 section 4: FLOPs = 6 x tokens x d x d_e x k (gate, up and down,
2 FLOPs per multiply-add), with the weight-load floor max(compute, load) applied by the layer
model, which keeps the two apart so both show in the breakdown.

>>> from moesym.terms.ffn import routed_expert_compute
>>> from moesym.terms.dims import symbolic_dims
>>> from moesym.symbolic.symbols import S
>>> D = symbolic_dims()
>>> sum(c.flops for c in routed_expert_compute(D, S.batch, imbalance=1))
6*B*d*d_e*k/t_p
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..specs.model import expert_weights
from .attention import gemm
from .cost import Cost, KernelClass
from ..symbolic.expr import sym
from .dims import Dims

__all__ = ["dense_ffn", "fused_shared_rows", "launched_tokens", "routed_expert_compute",
           "routed_expert_weight_load", "shared_expert", "router", "lm_head", "embedding",
           "moe_tokens_per_gpu"]


def dense_ffn(D: Dims, tokens) -> list[Cost]:
    """Dense SwiGLU FFN, intermediate split over TP: gate+up (N = 2 d_ff / tp) and down GEMMs."""
    t = sym(tokens)
    inter = D.dense_inter / D.tp
    return [gemm("ffn_gate_up", t, 2 * inter, D.hidden, D.w_bytes, D.act_bytes),
            gemm("ffn_down", t, D.hidden, inter, D.w_bytes, D.act_bytes)]


def moe_tokens_per_gpu(D: Dims, tokens) -> sp.Expr:
    """Tokens each GPU sends into the MoE layer: its DP rank's tokens split over the TP group."""
    return sym(tokens) / D.tp


def routed_expert_compute(D: Dims, tokens, imbalance=1, padded_rows=None,
                          layout: str = "contiguous", active_experts=None,
                          tile_skew: tuple = (), routed_tokens=0,
                          fused_shared: int = 0) -> list[Cost]:
    """Grouped GEMMs of the routed experts on the busiest GPU (weights excluded: see load term).

    Rows per GPU = (tokens / tp) x k x imbalance (expert-TP ranks see gpus/ep times the rows at
    1/(gpus/ep) of the width, so FLOPs per GPU do not depend on the EP x expert-TP split).
    FLOPs = 6 x rows x d x d_e / expert_tp ... summed over gate+up (4) and down (2).
    ``padded_rows`` replaces the rows when tile padding or a batched layout computes more rows.
    ``active_experts``: the local experts with at least one row (default all): grouped-GEMM
    kernels launch no tiles for an empty expert (DeepGEMM's contiguous and masked layouts), so
    the rows spread over those.
    ``layout`` ``grouped`` and ``per-token`` are seed 003's dispatch granularities, plain GEMM
    kernels launched one after another, each on the whole GPU: ``grouped`` one GEMM per active
    expert of rows / active rows (seed 003 issues them in descending order of rows; serial
    kernels take the same sum in any order), ``per-token`` one GEMV (M = 1) per token-expert
    assignment, each reading its expert's weights itself (``w_bytes`` per weight element; the
    load term then has none: :func:`routed_expert_weight_load` with 0 experts).
    ``tile_skew`` and ``routed_tokens``: skewed routing's per-expert inclusion probabilities
    (:func:`moesym.terms.routing.tile_skew`) and the tokens routed across the group, with which
    the kernel model pads each expert's rows to its M tile (:mod:`moesym.kernels.skew`).
    ``fused_shared``: shared experts the engine runs as more experts of the same kernel
    (:func:`fused_shared_rows` rows each, every token of the launch, at the experts' width).
    """
    routed_real = moe_tokens_per_gpu(D, tokens) * D.topk * sym(imbalance) * D.expert_tp
    rows_real = routed_real + fused_shared_rows(D, tokens, fused_shared)
    rows = rows_real if padded_rows is None else sym(padded_rows) + fused_shared_rows(
        D, tokens, fused_shared)
    inter = D.moe_inter / D.expert_tp
    g = (D.local_experts if active_experts is None else sym(active_experts)) + fused_shared
    if layout in ("grouped", "per-token"):
        per_token = layout == "per-token"
        m, wb, n_kernels = (1, D.w_bytes, rows) if per_token else (rows / g, 0, g)
        up = gemm("experts_gate_up", m, 2 * inter, D.hidden, wb, D.act_bytes, layout=layout)
        down = gemm("experts_down", m, D.hidden, inter, wb, D.act_bytes, layout=layout)
        return [up.scaled(n_kernels), down.scaled(n_kernels)]
    m = rows / g
    up = gemm("experts_gate_up", m, 2 * inter, D.hidden, 0, D.act_bytes, KernelClass.GROUPED_GEMM,
              groups=g, layout=layout)
    down = gemm("experts_down", m, D.hidden, inter, 0, D.act_bytes, KernelClass.GROUPED_GEMM,
                groups=g, layout=layout)
    # the mean rank's assignments times (EP - 1): those routed to other ranks' experts, which a
    # kernel launched over every token x top-k assignment still covers (timed only by a
    # backend that sets grouped_masked_passes: moesym.kernels.analytical.grouped_extra_s)
    masked = routed_real / sym(imbalance) * (D.ep - 1)
    launched = launched_tokens(D, tokens)
    return [replace(c, shape=replace(c.shape, masked_rows=masked, tile_skew=tile_skew,
                                     routed_tokens=sym(routed_tokens), kernel_tokens=launched,
                                     local_experts=D.local_experts)) for c in (up, down)]


def launched_tokens(D: Dims, tokens) -> sp.Expr:
    """The tokens a GPU's fused-MoE kernel is launched with: the rank's assignments x EP /
    top-k, (tokens / tp) x EP x expert-TP (the DP rank's tokens under TP; every DP rank's under
    expert parallelism, where the tokens are gathered before the experts).

    >>> from moesym.terms.dims import symbolic_dims
    >>> from moesym.symbolic.symbols import S
    >>> launched_tokens(symbolic_dims(), S.batch)  # B tokens x N_gpu / t_p DP ranks
    B*N_gpu/t_p
    """
    return moe_tokens_per_gpu(D, tokens) * D.ep * D.expert_tp


def fused_shared_rows(D: Dims, tokens, fused_shared: int = 0) -> sp.Expr:
    """Rows of ``fused_shared`` shared experts run inside the fused-MoE kernel on one GPU: every
    token it is launched with (:func:`launched_tokens`; under expert parallelism each rank
    computes the whole shared expert for them: SGLang on AMD,
    :class:`moesym.engines.SharedExpertFusion`)."""
    if not fused_shared:
        return sp.Integer(0)
    return launched_tokens(D, tokens) * fused_shared


def routed_expert_weight_load(D: Dims, touched_experts) -> Cost:
    """HBM read of the routed-expert weights a GPU must load: touched local experts x 3 d d_e / etp.

    With lazy expert loading ``touched_experts`` is the expected number of local experts that
    receive at least one token; without it, all local experts.
    """
    per_expert = expert_weights(D.hidden, D.moe_inter, D.w_bytes, D.expert_tp)
    return Cost("moe_weight_load", KernelClass.GROUPED_GEMM, hbm_bytes=sym(touched_experts) * per_expert)


def shared_expert(D: Dims, tokens) -> list[Cost]:
    """Shared experts: a dense SwiGLU FFN of width d_s split over TP, never over EP."""
    t = sym(tokens)
    inter = D.shared_inter / D.tp
    return [gemm("shared_gate_up", t, 2 * inter, D.hidden, D.w_bytes, D.act_bytes),
            gemm("shared_down", t, D.hidden, inter, D.w_bytes, D.act_bytes)]


def router(D: Dims, tokens) -> Cost:
    """Router logits: a (tokens x d) @ (d x E) GEMM with bf16 weights, plus the top-k selection."""
    return gemm("router", sym(tokens), D.experts, D.hidden, D.act_bytes, D.act_bytes)


def lm_head(D: Dims, tokens_out) -> Cost:
    """LM head over the vocabulary (split over TP), bf16 weights, for tokens that emit logits."""
    return gemm("lm_head", sym(tokens_out), D.vocab / D.tp, D.hidden, D.act_bytes, D.act_bytes)


def embedding(D: Dims, tokens) -> Cost:
    """Embedding gather: read and write one d-vector per token."""
    return Cost("embedding", KernelClass.ELEMENTWISE, hbm_bytes=2 * sym(tokens) * D.hidden * D.act_bytes,
                launches=1)
