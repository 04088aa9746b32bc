"""Model and deployment dimensions as SymPy expressions (symbols or numbers, your choice).

Cost terms take a :class:`Dims`; :func:`symbolic_dims` gives one made of the declared symbols and
:func:`bindings` the numbers a concrete model, hardware and deployment give them.

>>> from moesym.terms.dims import symbolic_dims
>>> D = symbolic_dims()
>>> D.local_experts
(E + R_e)/e_p
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ..symbolic.symbols import S
from ..symbolic.expr import smax, sym

__all__ = ["Dims", "symbolic_dims"]


@dataclass(frozen=True)
class Dims:
    hidden: sp.Expr
    vocab: sp.Expr
    heads: sp.Expr
    kv_heads: sp.Expr
    head_dim: sp.Expr
    q_lora: sp.Expr
    kv_lora: sp.Expr
    qk_nope: sp.Expr
    qk_rope: sp.Expr
    v_head: sp.Expr
    experts: sp.Expr
    topk: sp.Expr
    moe_inter: sp.Expr
    shared_inter: sp.Expr
    dense_inter: sp.Expr
    n_groups: sp.Expr
    topk_groups: sp.Expr
    tp: sp.Expr
    ep: sp.Expr
    gpus: sp.Expr
    gpus_per_node: sp.Expr
    micro_batches: sp.Expr
    redundant: sp.Expr
    w_bytes: sp.Expr
    kv_bytes: sp.Expr
    act_bytes: sp.Expr
    dispatch_bytes: sp.Expr
    combine_bytes: sp.Expr

    def __post_init__(self) -> None:
        for f in self.__dataclass_fields__:
            object.__setattr__(self, f, sym(getattr(self, f)))

    @property
    def local_heads(self) -> sp.Expr:
        return self.heads / self.tp

    @property
    def local_kv_heads(self) -> sp.Expr:
        """KV heads per TP rank; replicated (one per rank) when there are fewer KV heads than ranks."""
        return smax(self.kv_heads / self.tp, 1)

    @property
    def expert_tp(self) -> sp.Expr:
        return self.gpus / self.ep

    @property
    def local_experts(self) -> sp.Expr:
        return (self.experts + self.redundant) / self.ep


def symbolic_dims() -> Dims:
    """A :class:`Dims` made entirely of moesym's declared symbols."""
    return Dims(
        hidden=S.hidden, vocab=S.vocab, heads=S.heads, kv_heads=S.kv_heads, head_dim=S.head_dim,
        q_lora=S.q_lora, kv_lora=S.kv_lora, qk_nope=S.qk_nope, qk_rope=S.qk_rope, v_head=S.v_head,
        experts=S.experts, topk=S.topk, moe_inter=S.moe_inter, shared_inter=S.shared_inter,
        dense_inter=S.dense_inter, n_groups=S.n_groups, topk_groups=S.topk_groups, tp=S.tp, ep=S.ep,
        gpus=S.gpus, gpus_per_node=S.gpus_per_node, micro_batches=S.micro_batches,
        redundant=S.redundant, w_bytes=S.w_bytes, kv_bytes=S.kv_bytes, act_bytes=S.act_bytes,
        dispatch_bytes=S.dispatch_bytes, combine_bytes=S.combine_bytes,
    )
