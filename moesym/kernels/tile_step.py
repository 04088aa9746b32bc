"""Tile-stepped expert compute: matmul engines that work in fixed row tiles (Tenstorrent).

Seed 004 measured DeepSeek-V3's expert compute on a Tenstorrent mesh stepping with the tokens per
expert: 235 us while every expert has at most 32 tokens, about 130 us more for every further
(up to) 32 tokens of any one expert (17/17 -> 235 us, 17/38 -> 365, 38/38 -> 495, 38/70 -> 625).
As a kernel model:

    time = base + step x sum over the device's experts with tokens of (ceil(n_e / rows) - 1)

with ``base``, ``step`` and ``rows`` the hardware file's ``[kernel]`` ``tile_step_base_us``,
``tile_step_us`` and ``tile_step_rows``, measured on one expert shape (``tile_step_ref_hidden`` x
``tile_step_ref_inter``: DeepSeek-V3's 7168 x 2048); an expert of another shape scales both by
d d_e / (ref_hidden ref_inter), the work of one tile (an assumption: first order, no
measurement of another shape). In a step model the token counts are random: the
expected extra tiles of the busiest device are
``x (PaddedRowsMean(T, p, rows) / rows - (1 - (1 - p)^T))`` for its ``x`` local experts, ``T``
tokens routed across the mesh and ``p = min(1, lambda k / E)`` (each expert's selection
probability scaled by the busiest device's load ratio lambda).

>>> float(tile_step_time_s([17, 38], 235e-6, 130e-6)) * 1e6
365.0
>>> round(float(tile_step_time_s([38, 70], 235e-6, 130e-6)) * 1e6, 6)
625.0
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ..symbolic.expr import smin, sym
from ..symbolic.special import PaddedRowsMean
from ..symbolic.symbols import S
from ..terms.cost import Cost, KernelClass, TermTime
from .time_model import TimeModel

__all__ = ["TileStepShape", "TileStepTiming", "expected_extra_tiles", "tile_step_time_s",
           "tile_stepped"]


def tile_step_time_s(tokens_per_expert, base_s, step_s, rows: int = 32) -> sp.Expr:
    """base + step x sum_{e: n_e > 0} (ceil(n_e / rows) - 1) for explicit token counts."""
    extra = sp.Add(*[sp.ceiling(sym(n) / rows) - 1 for n in tokens_per_expert if sym(n) != 0])
    return sym(base_s) + sym(step_s) * extra


def expected_extra_tiles(local_experts, tokens, p, rows) -> sp.Expr:
    """Expected row tiles beyond each expert's first, summed over ``local_experts`` experts whose
    token counts are Binomial(tokens, p): x (E[ceil(n / rows)] - P(n > 0)).

    >>> round(float(expected_extra_tiles(2, 1, sp.Rational(1, 2), 32).evalf()), 9)  # 1 token
    0.0
    """
    p, T = sym(p), sym(tokens)
    padded = PaddedRowsMean(T, p, rows) / rows
    return sym(local_experts) * (padded - (1 - (1 - p) ** T))


@dataclass(frozen=True)
class TileStepShape:
    """A grouped expert GEMM timed by the tile-stepped model: its expected extra tiles and the
    scale of its expert shape against the measured one."""

    extra_tiles: sp.Expr
    scale: sp.Expr = sp.Integer(1)


def tile_stepped(cost: Cost, local_experts, tokens, selection_p, rows, scale=1,
                 extra_tiles=None) -> Cost:
    """``cost`` (the routed experts' GEMM work, kept for the work report and the roofline)
    marked for the tile-stepped model: the expected extra tiles of ``local_experts`` experts with
    Binomial(tokens, selection_p) tokens each, or ``extra_tiles`` where the layout fixes them."""
    if extra_tiles is None:
        extra_tiles = expected_extra_tiles(local_experts, tokens, smin(sym(selection_p), 1), rows)
    return Cost(cost.name, KernelClass.GROUPED_GEMM, flops=cost.flops, hbm_bytes=cost.hbm_bytes,
                launches=cost.launches, component=cost.component,
                shape=TileStepShape(sym(extra_tiles), sym(scale)))


@dataclass(frozen=True)
class TileStepTiming(TimeModel):
    """A time model that times :class:`TileStepShape` costs as tau_gb + tau_gt x extra tiles
    (the symbols ``t_gemm_base`` / ``t_gemm_tile``, bound to the hardware's ``[kernel]``
    ``tile_step_base_us`` / ``tile_step_us``) and everything else with ``inner``."""

    inner: TimeModel

    def time(self, c: Cost) -> TermTime:
        if isinstance(c.shape, TileStepShape):
            z = sp.Integer(0)
            t = c.shape.scale * (S.t_gemm_base + S.t_gemm_tile * c.shape.extra_tiles)
            return TermTime(c.name, t, z, z, z)
        return self.inner.time(c)

    def bind(self, numbers) -> TileStepTiming:
        return TileStepTiming(self.inner.bind(numbers))

    def grouped_serial_share(self) -> float:
        return self.inner.grouped_serial_share()

    def graph_replayed(self, floor_s: float) -> TileStepTiming:
        return TileStepTiming(self.inner.graph_replayed(floor_s))

    def report(self) -> str | None:
        return self.inner.report()
