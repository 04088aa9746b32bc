"""Expert dispatch and combine along one axis of a 2D device mesh (seed 004, Tenstorrent).

Layout (seed 004): R x C devices, each holding x = E / (R C) routed experts; activations are
data-parallel over the R rows and tensor-parallel over the C columns, all-gathered along the
columns before the gate, so device (r, c) holds all T tokens of its row. Each column dispatches
on its own: device (r, c) sends each of its tokens to the devices of column c that hold one of
the token's experts (the column holds E / C experts, x per device). The column is a ring when
its axis wraps (else a line).

Routing statistics (uniform top-k over E experts, exact, no sampling): a token's experts that
lie in the column all lie within h hops of its own device with probability

    q(h) = C(E - x (R - w(h)), k) / C(E, k)      (w(h): devices within h hops, own included)

so the farthest destination is sum_h (1 - q(h)) hops away, and the farthest over N tokens
sum_h (1 - q(h)^N). The token's experts in the column are Hypergeometric(E, E / C, k); the most
any of N tokens has, m_max = sum_m (1 - F(m - 1)^N). A remote device holds at least one of the
token's experts with probability 1 - C(E - x, k) / C(E, k).

Dispatch (ring sparse multicast): a token travels both ways round the ring, written once at each
device that holds its experts, split at the far side. Fixed cost from the fabric
(:class:`moesym.specs.mesh.RingFabric`: per chain, per hop to the farthest destination, per
destination device, per expert entry) at the batch's farthest hop and most active experts (the
seed's table is indexed by the most active experts in a column; each on its own device, the
table's D = E), plus the payload: each directed link carries T d b x (expected link crossings of
a token) / 2 bytes (every device sends T tokens; 2 R directed links on a ring).

Combine (point to point, locally reduced): a device sends back one message per token it holds
experts of, not one per expert; each message travels its shortest path. Fixed cost: chain, the
farthest hop, one message per device; payload T d b x (expected hop sum over the devices hit) / 2
per directed link.

>>> col = ColumnRouting(experts=256, topk=8, per_device=2, ring=16, wrap=True, columns=8)
>>> round(float(col.devices_per_token), 4)  # 15 (1 - 248 x 247 / (256 x 255))
0.9246
>>> col.max_hops
8
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import comb

import sympy as sp

from .cost import Cost, KernelClass
from ..symbolic.expr import smin, sym

__all__ = ["ColumnRouting", "mesh_combine", "mesh_dispatch"]


def _ratio(a: int, b: int, k: int) -> sp.Rational:
    """C(a, k) / C(b, k) (0 when a < k)."""
    return sp.Rational(comb(a, k), comb(b, k)) if a >= k else sp.Integer(0)


@dataclass(frozen=True)
class ColumnRouting:
    """Routing statistics of one column of ``ring`` devices (see the module docstring); all
    numbers exact (rationals) for integer experts, top-k, experts per device and ring size."""

    experts: int
    topk: int
    per_device: int
    ring: int
    wrap: bool
    columns: int = 1

    @property
    def max_hops(self) -> int:
        return self.ring // 2 if self.wrap else self.ring - 1

    def _dist(self, s: int, j: int) -> int:
        d = abs(s - j)
        return min(d, self.ring - d) if self.wrap else d

    def _sources(self) -> range:
        return range(1) if self.wrap else range(self.ring)  # a ring looks alike from every device

    def _within(self, s: int, h: int) -> int:
        return sum(1 for j in range(self.ring) if self._dist(s, j) <= h)

    @cached_property
    def within_probs(self) -> tuple:
        """((q(0), q(1), ...) for each source device): the token's experts in the column all
        within h hops."""
        E, k, x = self.experts, self.topk, self.per_device
        return tuple(tuple(_ratio(E - x * (self.ring - self._within(s, h)), E, k)
                           for h in range(self.max_hops)) for s in self._sources())

    def farthest_hops(self, tokens=1) -> sp.Expr:
        """Expected farthest hop over ``tokens`` tokens of one device (one token: the mean)."""
        N = sym(tokens)
        n = len(self.within_probs)
        return sp.Add(*[1 - q ** N for qs in self.within_probs for q in qs]) / n

    @cached_property
    def column_count_cdf(self) -> tuple:
        """P(a token has <= m experts in the column), m = 0 .. min(k, E / C)."""
        E, k, K = self.experts, self.topk, self.experts // self.columns
        pmf = [sp.Rational(comb(K, m) * comb(E - K, k - m), comb(E, k))
               for m in range(min(k, K) + 1)]
        out, acc = [], sp.Integer(0)
        for p in pmf:
            acc += p
            out.append(acc)
        return tuple(out)

    def max_active(self, tokens=1) -> sp.Expr:
        """Expected most experts of one token in the column, over ``tokens`` tokens."""
        N = sym(tokens)
        cdf = self.column_count_cdf
        return sp.Add(*[1 - cdf[m - 1] ** N for m in range(1, len(cdf))])

    @property
    def hit_probability(self) -> sp.Rational:
        """A given remote device holds at least one of a token's experts."""
        return 1 - _ratio(self.experts - self.per_device, self.experts, self.topk)

    @property
    def devices_per_token(self) -> sp.Expr:
        """Expected remote devices holding a token's experts (combine messages per token)."""
        return (self.ring - 1) * self.hit_probability

    @cached_property
    def link_crossings_per_token(self) -> sp.Expr:
        """Expected links a multicast token crosses: the reach in each direction (a ring splits
        at the far side: positions up to R/2 go one way, the rest the other)."""
        E, k, x = self.experts, self.topk, self.per_device
        total = sp.Integer(0)
        srcs = self._sources()
        for s in srcs:
            if self.wrap:
                sides = [list(range(1, self.ring // 2 + 1)),
                         list(range(1, (self.ring + 1) // 2))]  # distances one way, the other
            else:
                sides = [list(range(1, self.ring - s)), list(range(1, s + 1))]
            for side in sides:
                for h in range(len(side)):  # P(reach > h): some expert beyond h on this side
                    beyond = sum(1 for d in side if d > h)
                    total += 1 - _ratio(E - x * beyond, E, k)
        return total / len(srcs)

    @cached_property
    def p2p_hops_per_token(self) -> sp.Expr:
        """Expected hops of one token's combine messages (one per remote device hit)."""
        total = sp.Integer(0)
        srcs = self._sources()
        for s in srcs:
            hops = sum(self._dist(s, j) for j in range(self.ring) if j != s)
            total += hops * self.hit_probability
        return total / len(srcs)

    @property
    def directed_links(self) -> int:
        return 2 * self.ring if self.wrap else 2 * (self.ring - 1)


def mesh_dispatch(col: ColumnRouting, tokens, hidden, elem_bytes, link_bw, base, hop, device,
                  expert) -> Cost:
    """Ring sparse-multicast dispatch of ``tokens`` tokens per device along one column:
    fixed = base + hop H_N + (device + expert) m_N, H_N and m_N the farthest hop and the most
    active experts over the column's R x tokens tokens; payload T d b x crossings R / links on
    the busiest (average) directed link. No cost on a one-device column.

    >>> from moesym.symbolic.symbols import S
    >>> one = ColumnRouting(256, 8, 32, 1, True, 8)
    >>> mesh_dispatch(one, S.batch, 7168, 2, 1e10, 1, 1, 1, 1).fixed_s
    0
    """
    if col.ring <= 1:
        return Cost("dispatch", KernelClass.COMM)
    T = sym(tokens)
    N = T * col.ring
    m = col.max_active(N)
    fixed = sym(base) + sym(hop) * col.farthest_hops(N) + (sym(device) + sym(expert)) * m
    load = T * sym(hidden) * sym(elem_bytes) * col.link_crossings_per_token * col.ring \
        / col.directed_links
    return Cost("dispatch", KernelClass.COMM, net_bytes=load, net_bw=sym(link_bw), fixed_s=fixed,
                launches=1)


def mesh_combine(col: ColumnRouting, tokens, hidden, elem_bytes, link_bw, base, hop,
                 device) -> Cost:
    """Point-to-point combine with local reduction: one message per (token, remote device
    holding its experts), never one per expert. fixed = base + hop H_N + device min(m_N, R - 1);
    payload T d b x (hop sum of a token's messages) R / links per directed link.

    >>> col = ColumnRouting(256, 8, 2, 16, True, 8)
    >>> c = mesh_combine(col, 1, 7168, 2, 1e10, 0, 0, 1)  # device cost 1: messages only
    >>> round(float(c.fixed_s), 3)  # most experts of one of the 16 tokens in the column
    2.811
    """
    if col.ring <= 1:
        return Cost("combine", KernelClass.COMM)
    T = sym(tokens)
    N = T * col.ring
    msgs = smin(col.max_active(N), col.ring - 1)
    fixed = sym(base) + sym(hop) * col.farthest_hops(N) + sym(device) * msgs
    load = T * sym(hidden) * sym(elem_bytes) * col.p2p_hops_per_token * col.ring \
        / col.directed_links
    return Cost("combine", KernelClass.COMM, net_bytes=load, net_bw=sym(link_bw), fixed_s=fixed,
                launches=1)
