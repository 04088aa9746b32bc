"""The one record every cost term yields, so that composition is uniform.

>>> from moesym.terms.cost import Cost, KernelClass
>>> from moesym.symbols import S
>>> c = Cost("x", KernelClass.GEMM, flops=2 * S.batch * S.hidden)
>>> (c + c).flops
4*B*d
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from enum import Enum
from typing import Iterable

import sympy as sp

__all__ = ["KernelClass", "GemmShape", "LoadShape", "AttentionShape", "component_unpack_symbol", "component_pass_symbol", "Cost", "sym", "total", "smax", "smin",
           "nodes", "depends", "dependents",
           "nonnegative", "substitute", "transform", "rebuild"]


class KernelClass(str, Enum):
    """Kernel families; each has its own efficiency symbol (or analytical kernel model)."""

    GEMM = "gemm"
    GROUPED_GEMM = "grouped_gemm"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    COMM = "comm"
    OVERHEAD = "overhead"


def _flat(cls, args) -> list:
    out: list = []
    for a in args:
        a = sym(a)
        out.extend(a.args if a.func is cls else (a,))
    return out


def _extremum(cls, pick, args) -> sp.Expr:
    """``cls`` (Max or Min) of ``args`` without SymPy's pairwise simplification (its
    ``_find_localzeros`` dominates building a kernel-model step): nested calls are flattened,
    numbers folded into one, repeated arguments dropped; only the numeric constant is compared,
    and against a symbolic argument only when that argument's sign settles it."""
    xs = _flat(cls, args)
    nums = [a for a in xs if a.is_Number]
    rest = list(dict.fromkeys(a for a in xs if not a.is_Number))
    if nums:
        c = pick(nums)
        # the constant loses to every other argument only where each provably beats it; cheap
        # for the zero floors the terms use (Max(0, x) with x >= 0)
        if not (rest and c == 0 and cls is sp.Max and all(map(nonnegative, rest))):
            rest.append(c)
    if not rest:
        return sp.Integer(0)
    if len(rest) == 1:
        return rest[0]
    if all(a.is_Atom or all(b.is_Atom for b in a.args) for a in rest):
        return cls(*rest, evaluate=False)  # SymPy's canonical order: cheap for shallow args
    # deep arguments (nested schedules): SymPy's ordering counts tree nodes, exponential in the
    # nesting depth of a shared graph; keep the (deterministic) order the terms were built in
    obj = sp.Expr.__new__(cls, *rest)
    obj._argset = frozenset(rest)
    return obj


@lru_cache(maxsize=65536)
def nonnegative(e: sp.Basic) -> bool:
    """True where ``e`` is provably >= 0 from its structure alone: numbers >= 0, symbols declared
    non-negative, and sums, products, powers, maxima, minima, ceilings and floors of such (a
    cheap sufficient test; SymPy's assumption system answers more but costs seconds on a step
    model). False means "not shown", never "negative".

    >>> from moesym.symbols import S
    >>> nonnegative(S.batch * sp.ceiling(S.hidden / 64) + 1), nonnegative(S.batch - 1)
    (True, False)
    """
    if e.is_Number:
        return bool(e >= 0)
    if e.is_Symbol:
        return bool(e.is_nonnegative)
    if e.is_Add or e.is_Mul or isinstance(e, (sp.Min, sp.ceiling, sp.floor)):
        return all(map(nonnegative, e.args))
    if e.is_Pow:
        return nonnegative(e.args[0]) and e.args[1].is_real is True
    if isinstance(e, sp.Max):
        return any(map(nonnegative, e.args))
    if isinstance(e, sp.exp):
        return e.args[0].is_real is True
    return False


def smax(*args) -> sp.Expr:
    """Max without SymPy's pairwise simplification (see :func:`_extremum`).

    >>> from moesym.symbols import S
    >>> smax(S.batch, 0), smax(2, 3), smax(S.batch, smax(S.tokens, 1), 4)
    (B, 3, Max(4, B, T))
    """
    return _extremum(sp.Max, max, args)


def smin(*args) -> sp.Expr:
    """Min without SymPy's pairwise simplification (see :func:`_extremum`)."""
    return _extremum(sp.Min, min, args)


def rebuild(e: sp.Basic, args: tuple) -> sp.Basic:
    """``e.func(*args)`` without SymPy's re-simplification of maxima, minima and symbolic
    ceilings / floors (see :func:`substitute`)."""
    if args == e.args:
        return e
    if e.func is sp.Max:
        return smax(*args)
    if e.func is sp.Min:
        return smin(*args)
    if e.func in (sp.ceiling, sp.floor):
        return e.func(args[0]) if args[0].is_Number else e.func(args[0], evaluate=False)
    return e.func(*args)


def transform(expr: sp.Basic, fn) -> sp.Basic:
    """Bottom-up rewrite: every node is rebuilt from its rewritten arguments (:func:`rebuild`)
    and then passed through ``fn`` (return the node unchanged to keep it). Shared
    subexpressions are visited once."""
    memo: dict = {}

    def go(e):
        if e in memo:
            return memo[e]
        out = fn(e if e.is_Atom else rebuild(e, tuple(go(a) for a in e.args)))
        memo[e] = out
        return out

    return go(sp.sympify(expr))


def substitute(expr: sp.Basic, mapping) -> sp.Basic:
    """``expr.xreplace(mapping)`` that rebuilds maxima and minima with :func:`smax` /
    :func:`smin` and symbolic ceilings / floors unevaluated: SymPy's own rebuild re-simplifies
    every Max it touches (minutes on a step model). Shared subexpressions are rebuilt once.

    >>> from moesym.symbols import S
    >>> substitute(smax(S.batch, 2 * S.tokens), {S.tokens: 3})
    Max(6, B)
    """
    memo = {sp.sympify(k): sp.sympify(v) for k, v in dict(mapping).items()}
    if not memo:
        return expr

    def go(e):
        if e in memo:
            return memo[e]
        if e.is_Atom:
            return e
        out = rebuild(e, tuple(go(a) for a in e.args))
        memo[e] = out
        return out

    return go(sp.sympify(expr))


def nodes(expr: sp.Basic, test) -> list[sp.Basic]:
    """Every unique node of ``expr`` for which ``test`` holds, each before the nodes inside it
    (a topological order of the shared graph: SymPy's tree walks, ``atoms``, ``has`` and
    ``preorder_traversal``, visit a shared subexpression once per path to it, exponentially
    often on a large model)."""
    order, seen, stack = [], set(), [(sp.sympify(expr), False)]
    while stack:
        e, done = stack.pop()
        if done:
            order.append(e)
            continue
        if e in seen:
            continue
        seen.add(e)
        stack.append((e, True))
        stack.extend((a, False) for a in e.args if a not in seen)
    return [e for e in reversed(order) if test(e)]


def dependents(expr: sp.Basic, x: sp.Basic) -> set:
    """The nodes of ``expr`` that contain ``x`` (``x`` included), in one pass over the shared
    graph (see :func:`nodes`)."""
    out = set()
    for e in reversed(nodes(expr, lambda e: True)):  # children before parents
        if e == x or any(a in out for a in e.args):
            out.add(e)
    return out


@lru_cache(maxsize=512)
def symbols_of(expr: sp.Basic) -> frozenset:
    """``expr.free_symbols`` walking the shared graph once (SymPy's property recurses into every
    path to a shared subexpression, exponentially often on a large model).

    >>> from moesym.symbols import S
    >>> sorted(map(str, symbols_of(smax(S.batch, S.hidden) * S.batch)))
    ['B', 'd']
    """
    return frozenset(nodes(expr, lambda e: e.is_Symbol))


def depends(expr: sp.Basic, x: sp.Basic) -> bool:
    """``expr.has(x)`` walking the shared graph once."""
    return expr in dependents(expr, x)


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
    # smallest M block of the kernel: 64 (Hopper FP8/BF16 GEMMs), 16 for weight-only quantized
    # GEMMs that dequantize in the kernel (Marlin-style, 16-row tiles at small batch)
    tile_m_min: int = 64
    # the GEMM multiplies its weight class's weights though another term reads them (routed
    # experts and dense FFNs: the weight-load term): a dequantization pass still converts them
    weights_elsewhere: bool = False


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
        from ..symbols import S

        w = component_symbols(component)[1]
        return replace(self, hbm_bytes=self.hbm_bytes.xreplace({S.w_bytes: w}),
                       component=component)


def component_symbols(component: str) -> tuple:
    """(peak tensor FLOP/s, bytes per weight element) symbols of a GEMM weight class."""
    from ..symbols import S

    return {"": (S.flops_gemm, S.w_bytes), "moe": (S.flops_moe, S.w_bytes_expert),
            "dense": (S.flops_dense, S.w_bytes_dense)}[component]


def component_unpack_symbol(component: str):
    """Symbol of the time a matrix-vector kernel spends unpacking one weight element of a GEMM
    weight class (0 where its format is held as it computes)."""
    from ..symbols import S

    return {"": S.t_unpack, "moe": S.t_unpack_expert, "dense": S.t_unpack_dense}[component]


def component_pass_symbol(component: str):
    """Symbol of the bytes per weight element a separate dequantization pass moves for a GEMM
    weight class (0 where its GEMMs read the weights as stored)."""
    from ..symbols import S

    return {"": S.b_pass, "moe": S.b_pass_expert, "dense": S.b_pass_dense}[component]


def total(costs: Iterable[Cost], attr: str) -> sp.Expr:
    return sp.Add(*(getattr(c, attr) for c in costs))
