"""The one record every cost term yields, so that composition is uniform.

>>> from moesym.terms.cost import Cost, KernelClass
>>> from moesym.symbols import S
>>> c = Cost("x", KernelClass.GEMM, flops=2 * S.batch * S.hidden)
>>> (c + c).flops
4*B*d
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Iterable

import sympy as sp

__all__ = ["KernelClass", "GemmShape", "AttentionShape", "Cost", "sym", "total", "smax", "smin"]


class KernelClass(str, Enum):
    """Kernel families; each has its own efficiency symbol (or analytical kernel model)."""

    GEMM = "gemm"
    GROUPED_GEMM = "grouped_gemm"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    COMM = "comm"
    OVERHEAD = "overhead"


def smax(*args) -> sp.Expr:
    """Max without SymPy's pairwise simplification (slow on large terms); zeros dropped.

    >>> from moesym.symbols import S
    >>> smax(S.batch, 0)
    B
    """
    xs = [sym(a) for a in args]
    nz = [a for a in xs if not (a.is_number and a == 0)]
    if not nz:
        return sp.Integer(0)
    if len(nz) == 1 and len(nz) == len(xs):
        return nz[0]
    if len(nz) == 1 and nz[0].is_nonnegative:
        return nz[0]
    return sp.Max(*(nz if len(nz) < len(xs) and all(a.is_nonnegative for a in nz) else xs),
                  evaluate=False)


def smin(*args) -> sp.Expr:
    """Min without SymPy's pairwise simplification."""
    xs = [sym(a) for a in args]
    return xs[0] if len(xs) == 1 else sp.Min(*xs, evaluate=False)


def sym(x) -> sp.Expr:
    """Accept a SymPy expression or a plain number (never a string)."""
    return sp.sympify(x, strict=True)


@dataclass(frozen=True)
class GemmShape:
    """Shape of one (grouped) GEMM: ``groups`` problems of M x N x K (M = rows per group)."""

    m: sp.Expr
    n: sp.Expr
    k: sp.Expr
    groups: sp.Expr = sp.Integer(1)
    layout: str = "dense"  # 'dense', 'contiguous', 'masked'


@dataclass(frozen=True)
class AttentionShape:
    """Shape of one attention kernel call: ``batch`` sequences (decode: requests) of ``length``
    keys (decode: KV length; prefill: prompt length), heads per GPU, KV heads per GPU, head sizes.
    ``shared_kv``: MLA decode on the latent, where one cached vector serves as K and V."""

    phase: str  # 'decode' or 'prefill'
    batch: sp.Expr
    length: sp.Expr
    heads: sp.Expr
    kv_heads: sp.Expr
    qk_dim: sp.Expr
    v_dim: sp.Expr
    kv_bytes: sp.Expr = sp.Integer(2)
    shared_kv: bool = False


@dataclass(frozen=True)
class Cost:
    """FLOPs, HBM bytes, network bytes and fixed latency of one kernel (or collective).

    ``net_bw`` is the bandwidth the network bytes move at (bytes/s), ``launches`` the number of
    kernel launches, ``fixed_s`` any other fixed latency in seconds.
    """

    name: str
    kind: KernelClass
    flops: sp.Expr = sp.Integer(0)
    hbm_bytes: sp.Expr = sp.Integer(0)
    net_bytes: sp.Expr = sp.Integer(0)
    net_bw: sp.Expr = sp.Integer(1)
    launches: sp.Expr = sp.Integer(0)
    fixed_s: sp.Expr = sp.Integer(0)
    shape: GemmShape | AttentionShape | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for f in ("flops", "hbm_bytes", "net_bytes", "net_bw", "launches", "fixed_s"):
            object.__setattr__(self, f, sym(getattr(self, f)))

    def __add__(self, other: "Cost") -> "Cost":
        if other.kind is not self.kind or (self.net_bytes != 0 and other.net_bytes != 0
                                           and self.net_bw != other.net_bw):
            raise ValueError(f"cannot add costs of different kinds: {self.name}, {other.name}")
        return Cost(self.name, self.kind, self.flops + other.flops, self.hbm_bytes + other.hbm_bytes,
                    self.net_bytes + other.net_bytes,
                    self.net_bw if self.net_bytes != 0 else other.net_bw,
                    self.launches + other.launches, self.fixed_s + other.fixed_s)

    def scaled(self, factor) -> "Cost":
        """This cost repeated ``factor`` times."""
        f = sym(factor)
        return replace(self, flops=self.flops * f, hbm_bytes=self.hbm_bytes * f,
                       net_bytes=self.net_bytes * f, launches=self.launches * f,
                       fixed_s=self.fixed_s * f)

    def renamed(self, name: str) -> "Cost":
        return replace(self, name=name)


def total(costs: Iterable[Cost], attr: str) -> sp.Expr:
    return sp.Add(*(getattr(c, attr) for c in costs))
