"""Weights per GPU, by component, as SymPy expressions of :class:`~moesym.terms.dims.Dims`.

Sharding (seed 002 sections 1-2, 8):

* attention projections: heads split over ``tp``; MLA down-projections (q_a, kv_a) replicated;
  GQA k/v heads replicated when there are fewer KV heads than TP ranks;
* routed experts: ``(E + R_e) / e_p`` experts per rank, each split ``N_gpu / e_p`` ways;
* shared experts and dense FFN: split over ``tp``, never over EP;
* router (gate) and norms: replicated; embeddings and LM head: vocabulary split over ``tp``;
* MTP modules (seed 002 section 7): ``eh_proj`` (2d x d) and two norms, plus their own transformer
  block unless ``mtp_shares_block`` (seed 002's reading: the block reuses the last main layer).

Precision: GEMM weights of attention, shared experts and dense FFN at ``b_w``, routed experts at
``b_we`` (after the FP4 capability expansion), everything else at ``b_hp`` (bf16), each with its
scale overhead folded in (see :mod:`moesym.memory.formats`).

>>> from moesym.terms.dims import symbolic_dims
>>> from moesym.memory.weights import routed_expert_params
>>> routed_expert_params(symbolic_dims())
3*d*d_e*(E + R_e)/N_gpu
"""

from __future__ import annotations

import sympy as sp

from ..specs.model import expert_weights
from ..symbolic.symbols import S
from ..symbolic.expr import sym
from ..terms.dims import Dims

__all__ = [
    "WEIGHT_COMPONENTS",
    "attention_params",
    "dense_ffn_params",
    "embedding_params",
    "mtp_extra_params",
    "norm_params",
    "replication_factors",
    "routed_expert_params",
    "router_params",
    "shared_expert_params",
    "weights_breakdown",
]

WEIGHT_COMPONENTS = ("attention_sharded", "attention_replicated", "routed_experts",
                     "shared_experts", "dense_ffn", "router", "norms", "embeddings", "lm_head",
                     "mtp")


def attention_params(D: Dims, mla: bool, q_lora: bool = True, gate: bool = False
                     ) -> tuple[sp.Expr, sp.Expr]:
    """GEMM weights of one attention layer on one GPU: ``(tp-sharded, replicated)`` elements.

    MLA: sharded = r_q h (d_nope + d_rope) + r_kv h (d_nope + d_v) + h d_v d with h = n_h / t_p,
    replicated = d r_q + d (r_kv + d_rope) (without q LoRA: d h (d_nope + d_rope) sharded, no r_q).
    GQA: sharded = 2 h d_h d (q and o), k and v = 2 d h_kv d_h with h_kv = max(n_kv / t_p, 1)
    (counted as sharded; when n_kv < t_p the copies are replicated).

    >>> from moesym.terms.dims import symbolic_dims
    >>> attention_params(symbolic_dims(), mla=False)
    (2*d*d_h*n_h/t_p + 2*d*d_h*Max(1, n_kv/t_p), 0)
    """
    d, h = D.hidden, D.local_heads
    if mla:
        if q_lora:
            sharded = D.q_lora * h * (D.qk_nope + D.qk_rope)
            replicated = d * D.q_lora
        else:
            sharded = d * h * (D.qk_nope + D.qk_rope)
            replicated = sp.Integer(0)
        sharded += D.kv_lora * h * (D.qk_nope + D.v_head) + h * D.v_head * d
        replicated += d * (D.kv_lora + D.qk_rope)
        return sharded, replicated
    q_and_o = (3 if gate else 2) * h * D.head_dim * d  # a gated output adds the gate's h d_h x d
    return q_and_o + 2 * d * D.local_kv_heads * D.head_dim, sp.Integer(0)


def routed_expert_params(D: Dims) -> sp.Expr:
    """Routed-expert weights of one MoE layer on one GPU: (E + R_e) / e_p * 3 d d_e / (N_gpu / e_p).

    >>> from moesym.terms.dims import symbolic_dims
    >>> import sympy as sp
    >>> D = symbolic_dims()
    >>> sp.simplify(routed_expert_params(D).subs({D.gpus: D.ep}))
    3*d*d_e*(E + R_e)/e_p
    """
    return D.local_experts * expert_weights(D.hidden, D.moe_inter, expert_tp=D.expert_tp)


def shared_expert_params(D: Dims) -> sp.Expr:
    """Shared-expert weights of one MoE layer on one GPU: 3 d d_s / t_p (TP-sharded, never EP).

    >>> from moesym.terms.dims import symbolic_dims
    >>> shared_expert_params(symbolic_dims())
    3*d*d_s/t_p
    """
    return 3 * D.hidden * D.shared_inter / D.tp


def dense_ffn_params(D: Dims) -> sp.Expr:
    """Dense FFN weights of one dense layer on one GPU: 3 d d_ff / t_p.

    >>> from moesym.terms.dims import symbolic_dims
    >>> dense_ffn_params(symbolic_dims())
    3*d*d_ff/t_p
    """
    return 3 * D.hidden * D.dense_inter / D.tp


def router_params(D: Dims) -> sp.Expr:
    """Router (gate) weights of one MoE layer, replicated on every GPU: E d.

    >>> from moesym.terms.dims import symbolic_dims
    >>> router_params(symbolic_dims())
    E*d
    """
    return D.experts * D.hidden


def norm_params(D: Dims, mla: bool, q_lora: bool = True) -> sp.Expr:
    """Norm vectors of one layer (replicated): 2 d, plus the MLA latent norms r_q + r_kv.

    >>> from moesym.terms.dims import symbolic_dims
    >>> norm_params(symbolic_dims(), mla=True)
    2*d + r_kv + r_q
    """
    n = 2 * D.hidden
    if mla:
        n += D.kv_lora + (D.q_lora if q_lora else 0)
    return n


def embedding_params(D: Dims) -> sp.Expr:
    """Token embedding (or LM head) on one GPU, vocabulary split over TP: V d / t_p.

    >>> from moesym.terms.dims import symbolic_dims
    >>> embedding_params(symbolic_dims())
    V*d/t_p
    """
    return D.vocab * D.hidden / D.tp


def mtp_extra_params(D: Dims) -> tuple[sp.Expr, sp.Expr]:
    """Weights an MTP module adds beyond a transformer block, ``(GEMM, norm)`` elements:
    eh_proj 2d x d (replicated) and the enorm, hnorm and output norm vectors (3 d).

    >>> from moesym.terms.dims import symbolic_dims
    >>> mtp_extra_params(symbolic_dims())
    (2*d**2, 3*d)
    """
    return 2 * D.hidden * D.hidden, 3 * D.hidden


def weights_breakdown(D: Dims, *, mla: bool, q_lora: bool = True, tie_embeddings: bool = False,
                      n_moe_layers=S.n_moe_layers, n_dense_layers=S.n_dense_layers,
                      n_mtp_layers=S.n_mtp_layers, mtp_shares_block: bool = False,
                      w_bytes_expert=S.w_bytes_expert, w_bytes_hp=S.w_bytes_hp,
                      w_bytes_dense=S.w_bytes_dense, gate: bool = False) -> dict[str, sp.Expr]:
    """Bytes of each weight component on one GPU (keys: ``WEIGHT_COMPONENTS``).

    attention = N (sharded + replicated) b_w with N = N_moe + N_dense layers; routed =
    N_moe (E + R_e)/e_p 3 d d_e / (N_gpu/e_p) b_we; shared = N_moe 3 d d_s / t_p b_wd; dense FFN =
    N_dense 3 d d_ff / t_p b_wd (b_w, b_we, b_wd: the attention, expert and dense formats); router = N_moe E d b_hp; norms = (N norm + d) b_hp; embeddings and
    LM head V d / t_p b_hp each (one copy when tied); MTP = N_mtp (2 d^2 b_w + 3 d b_hp + [one
    attention + MoE layer with its norms unless the block is shared]).

    >>> from moesym.terms.dims import symbolic_dims
    >>> w = weights_breakdown(symbolic_dims(), mla=False)
    >>> w["lm_head"]
    V*b_hp*d/t_p
    """
    n_moe, n_dense, n_mtp = sym(n_moe_layers), sym(n_dense_layers), sym(n_mtp_layers)
    b_w, b_we, b_hp, b_wd = D.w_bytes, sym(w_bytes_expert), sym(w_bytes_hp), sym(w_bytes_dense)
    n_layers = n_moe + n_dense
    att_s, att_r = attention_params(D, mla, q_lora, gate)
    norms = norm_params(D, mla, q_lora)
    moe_layer_bytes = (routed_expert_params(D) * b_we + shared_expert_params(D) * b_wd
                       + router_params(D) * b_hp)
    mtp_gemm, mtp_norm = mtp_extra_params(D)
    mtp_module = mtp_gemm * b_w + mtp_norm * b_hp
    if not mtp_shares_block:
        mtp_module += (att_s + att_r) * b_w + moe_layer_bytes + norms * b_hp
    return {
        "attention_sharded": n_layers * att_s * b_w,
        "attention_replicated": n_layers * att_r * b_w,
        "routed_experts": n_moe * routed_expert_params(D) * b_we,
        "shared_experts": n_moe * shared_expert_params(D) * b_wd,
        "dense_ffn": n_dense * dense_ffn_params(D) * b_wd,
        "router": n_moe * router_params(D) * b_hp,
        "norms": (n_layers * norms + D.hidden) * b_hp,
        "embeddings": embedding_params(D) * b_hp,
        "lm_head": sp.Integer(0) if tie_embeddings else embedding_params(D) * b_hp,
        "mtp": n_mtp * mtp_module,
    }


def replication_factors(D: Dims) -> dict[str, sp.Expr]:
    """How many copies of each component the whole instance holds (seed 002 section 8).

    Sum over GPUs of a component = factor x (its bytes with t_p = e_p = N_gpu = 1, R_e = 0).
    TP-sharded parts are replicated over attention data-parallel groups (N_gpu / t_p);
    replicated parts on every GPU (N_gpu); routed experts are stored once, plus the redundant
    replicas ((E + R_e) / E). GQA k/v with n_kv < t_p carry extra copies not covered here.
    The MTP entry is ``None``: it mixes sharded and replicated parts.

    >>> from moesym.terms.dims import symbolic_dims
    >>> replication_factors(symbolic_dims())["routed_experts"]
    (E + R_e)/E
    """
    dp = D.gpus / D.tp
    return {
        "attention_sharded": dp, "attention_replicated": D.gpus,
        "routed_experts": (D.experts + D.redundant) / D.experts,
        "shared_experts": dp, "dense_ffn": dp, "router": D.gpus, "norms": D.gpus,
        "embeddings": dp, "lm_head": dp, "mtp": None,
    }
