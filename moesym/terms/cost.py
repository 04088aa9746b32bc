"""The one record every cost term yields, so that composition is uniform.

>>> from moesym.terms.cost import Cost, KernelClass
>>> from moesym.symbolic.symbols import S
>>> c = Cost("x", KernelClass.GEMM, flops=2 * S.batch * S.hidden)
>>> (c + c).flops
4*B*d
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Iterable

import sympy as sp

from ..symbolic.expr import smax, sym
from ..symbolic.symbols import S

__all__ = ["KernelClass", "GemmShape", "LoadShape", "AttentionShape", "component_unpack_symbol",
           "component_pass_symbol", "Cost", "total", "TermTime"]


class KernelClass(str, Enum):
    """Kernel families; each has its own efficiency symbol (or analytical kernel model)."""

    GEMM = "gemm"
    GROUPED_GEMM = "grouped_gemm"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    COMM = "comm"
    OVERHEAD = "overhead"


@dataclass(frozen=True)
class GemmShape:
    """Shape of one (grouped) GEMM: ``groups`` problems of M x N x K (M = rows per group)."""

    m: sp.Expr
    n: sp.Expr
    k: sp.Expr
    groups: sp.Expr = sp.Integer(1)
    layout: str = "dense"  # 'dense', 'contiguous', 'masked'
    # smallest M block of the kernel: 64 (Hopper FP8/BF16 GEMMs), 16 for weight-only quantized
    # GEMMs that dequantize in the kernel (Marlin-style, 16-row tiles at small batch)
    tile_m_min: int = 64
    # the GEMM multiplies its weight class's weights though another term reads them (routed
    # experts and dense FFNs: the weight-load term): a dequantization pass still converts them
    weights_elsewhere: bool = False
    # grouped GEMMs: token x top-k rows routed to other EP ranks' experts that a kernel launched
    # over every assignment still covers (timed only where the backend's calibration sets
    # grouped_masked_passes: moesym.kernels.analytical.grouped_extra_s)
    masked_rows: sp.Expr = sp.Integer(0)
    # grouped GEMMs under skewed routing: the inclusion probabilities of the busiest rank's local
    # experts under the routing (a tuple) and the tokens routed across the group (their binomial
    # counts); () under uniform or balanced routing.
    # The kernel model pads each expert's rows to its M tile (moesym.kernels.skew)
    tile_skew: tuple = ()
    routed_tokens: sp.Expr = sp.Integer(0)
    # fused-MoE grouped GEMMs: the tokens the kernel is launched with and the rank's experts,
    # which choose the M block of a backend with fixed blocks
    # (moesym.kernels.analytical.grouped_fixed_block); 0: not given
    kernel_tokens: sp.Expr = sp.Integer(0)
    local_experts: sp.Expr = sp.Integer(0)


@dataclass(frozen=True)
class LoadShape:
    """Marks a weight-read term (its bytes only; the GEMMs' work is in other terms): ``rows``,
    the activation rows each weight is multiplied with. At few rows the kernels that read them
    are matrix-vector kernels (:func:`moesym.kernels.analytical.matvec_time`)."""

    rows: sp.Expr


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
    # the GEMM weight class whose format it runs in: "" attention projections (and anything
    # without weights), "moe" routed experts, "dense" shared experts and dense FFN layers
    component: str = ""

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

    def as_component(self, component: str) -> "Cost":
        """This cost with the weights of ``component`` (its bytes per element and its tensor
        cores, :func:`component_symbols`): the weight bytes b_w in its HBM bytes become the
        component's."""
        w = component_symbols(component)[1]
        return replace(self, hbm_bytes=self.hbm_bytes.xreplace({S.w_bytes: w}),
                       component=component)


def component_symbols(component: str) -> tuple:
    """(peak tensor FLOP/s, bytes per weight element) symbols of a GEMM weight class."""
    return {"": (S.flops_gemm, S.w_bytes), "moe": (S.flops_moe, S.w_bytes_expert),
            "dense": (S.flops_dense, S.w_bytes_dense)}[component]


def component_unpack_symbol(component: str):
    """Symbol of the time a matrix-vector kernel spends unpacking one weight element of a GEMM
    weight class (0 where its format is held as it computes)."""
    return {"": S.t_unpack, "moe": S.t_unpack_expert, "dense": S.t_unpack_dense}[component]


def component_pass_symbol(component: str):
    """Symbol of the bytes per weight element a separate dequantization pass moves for a GEMM
    weight class (0 where its GEMMs read the weights as stored)."""
    return {"": S.b_pass, "moe": S.b_pass_expert, "dense": S.b_pass_dense}[component]


def total(costs: Iterable[Cost], attr: str) -> sp.Expr:
    return sp.Add(*(getattr(c, attr) for c in costs))


@dataclass(frozen=True)
class TermTime:
    """Time of one term split by what bounds it (all SymPy expressions in seconds)."""

    name: str
    compute_s: sp.Expr
    memory_s: sp.Expr
    comm_s: sp.Expr
    overhead_s: sp.Expr

    @property
    def total_s(self) -> sp.Expr:
        return smax(self.compute_s, self.memory_s) + self.comm_s + self.overhead_s

    def __add__(self, other: "TermTime") -> "TermTime":
        """Two kernels run one after the other (each keeps its own roofline max)."""
        return _Sum(self.name, (self, other))


class _Sum(TermTime):
    def __init__(self, name, parts):
        flat = []
        for p in parts:
            flat.extend(p.parts if isinstance(p, _Sum) else [p])
        object.__setattr__(self, "parts", tuple(flat))
        object.__setattr__(self, "name", name)
        for f in ("compute_s", "memory_s", "comm_s", "overhead_s"):
            object.__setattr__(self, f, sp.Add(*(getattr(p, f) for p in flat)))

    @property
    def total_s(self) -> sp.Expr:
        return sp.Add(*(p.total_s for p in self.parts))
