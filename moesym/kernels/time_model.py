"""Turn a :class:`~moesym.terms.cost.Cost` into time: the roofline with named efficiencies.

time = max(FLOPs / (peak x eta_class), HBM bytes / (W x eta_m,class)) + network bytes / bandwidth
       + launches x tau_k + fixed latency

Each kernel class has its own compute and memory efficiency symbol: eta_g / eta_m for GEMMs,
eta_gg / eta_m for grouped GEMMs, eta_a / eta_ma for attention, eta_me for elementwise kernels.
Their values are the hardware file's ``[kernel]`` fractions, the same numbers the kernel model
reads (one set per GPU); the roofline leaves out tiles, waves and launch floors.

>>> from moesym.kernels.time_model import RooflineTiming
>>> from moesym.terms.attention import gemm
>>> from moesym.symbolic.symbols import S
>>> tt = RooflineTiming().time(gemm("g", S.batch, S.hidden, S.hidden, S.w_bytes, S.act_bytes))
>>> tt.compute_s
2*B*d**2/(F_g*eta_g)
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ..symbolic.symbols import S
from ..terms.cost import Cost, KernelClass, TermTime, component_symbols

__all__ = ["TimeModel", "RooflineTiming"]


class TimeModel:
    """What the step model asks of a time model (:func:`moesym.model.step.build_step`): the time
    of each cost, and three steps that a model which needs them overrides (the defaults change
    nothing): bind it to one configuration's numbers, replay a decode step as a CUDA graph,
    and report what it did once the step is built. The models: :class:`RooflineTiming`,
    :class:`moesym.kernels.timing.KernelTiming`, :class:`moesym.kernels.table_timing.TableTiming`
    and :class:`moesym.kernels.tile_step.TileStepTiming`; :data:`moesym.kernels.registry.TIME_MODEL_CLASSES`
    builds the ones a deployment names."""

    @classmethod
    def named(cls, hw, moe_kernel: str | None, argument: str | None) -> TimeModel:
        """The model for GPU ``hw`` as a deployment names it (``--timing``): ``moe_kernel``, the
        engine's fused-MoE backend or None; ``argument``, what follows ``name:`` or None."""
        raise NotImplementedError

    def time(self, c: Cost) -> TermTime:
        """The time of one cost (SymPy expressions in seconds)."""
        raise NotImplementedError

    def bind(self, numbers) -> TimeModel:
        """The model for one configuration: ``numbers()`` gives (the value of every symbol but
        the workload's, each GEMM weight class's compute dtype), for a model that matches
        shapes to measurements; called only by a model that needs them. Default: unchanged."""
        return self

    def graph_replayed(self, floor_s: float) -> TimeModel:
        """The model of a step replayed as a CUDA graph, where an elementwise kernel costs the
        graph's per-kernel floor ``floor_s`` instead of a host launch. Default: unchanged (the
        model times no launches of its own)."""
        return self

    def report(self) -> str | None:
        """One line on how the built step was timed (a warning), or None: nothing to say."""
        return None

    def grouped_serial_share(self) -> float:
        """Share of the shorter of the routed experts' tile and weight-load time not hidden under
        the longer (:func:`moesym.model.layer_time.loads_overlap`). Default: 0 (full overlap)."""
        return 0.0


#: HBM efficiency symbol per kernel class (others: the elementwise one)
_MEM_EFF = {KernelClass.GEMM: S.eff_mem, KernelClass.GROUPED_GEMM: S.eff_mem,
            KernelClass.ATTENTION: S.eff_mem_attn}


@dataclass(frozen=True)
class RooflineTiming(TimeModel):
    """Roofline timing with per-class efficiency symbols (the teaching form)."""

    @classmethod
    def named(cls, _hw, _moe_kernel, _argument) -> RooflineTiming:
        """``roofline``: peaks times named efficiency symbols, the same for every GPU."""
        return cls()

    def peak(self, kind: KernelClass, component: str = "") -> sp.Expr:
        gemm = component_symbols(component)[0]
        return {
            KernelClass.GEMM: gemm * S.eff_gemm,
            KernelClass.GROUPED_GEMM: gemm * S.eff_grouped,
            KernelClass.ATTENTION: S.flops_attn * S.eff_attn,
        }.get(kind, gemm * S.eff_gemm)

    def time(self, c: Cost) -> TermTime:
        compute = c.flops / self.peak(c.kind, c.component) if c.flops != 0 else sp.Integer(0)
        memory = c.hbm_bytes / (S.hbm_bw * _MEM_EFF.get(c.kind, S.eff_mem_ew)) \
            if c.hbm_bytes != 0 else sp.Integer(0)
        if c.kind is KernelClass.COMM:
            comm = (c.net_bytes / c.net_bw if c.net_bytes != 0 else sp.Integer(0)) + c.fixed_s
            overhead = c.launches * S.t_kernel
        else:
            comm = sp.Integer(0)
            overhead = c.launches * S.t_kernel + c.fixed_s
        return TermTime(c.name, compute, memory, comm, overhead)
