"""``KernelTiming``: the analytical kernel model as a time model for the step model.

Same interface as :class:`moesym.kernels.time_model.RooflineTiming` (``.time(cost) -> TermTime``). Peaks,
bandwidth and SM count stay the hardware symbols (``F_g``, ``F_a``, ``W``, ``N_SM``) so the
step model's bindings (which pick the compute dtype's peak) apply unchanged; the per-GPU
calibration (tiles, achieved fractions, latencies) enters as numbers from the hardware file's
``[kernel]`` table.

- GEMM / GROUPED_GEMM with a ``shape``: :func:`~moesym.kernels.analytical.gemm_time` per launch
  (compute = tile waves, memory = max(cost bytes / (eta_hbm W), waves x tile bytes / W_SM)),
  times ``cost.launches`` (a scaled cost repeats the kernel). Operand bytes per element are
  ``b_w`` (the GEMM compute format), output bytes ``b_a``.
- GEMM without a shape: compute = FLOPs / (eta_gemm F_g), memory = bytes / (eta_hbm W).
- ATTENTION: compute = FLOPs / (eta_a F_a), memory = bytes / (eta_hbm,a W), + launches tau_attn.
- ELEMENTWISE: bytes / (eta_ew W) + launches tau_ew.
- COMM and OVERHEAD: exactly as RooflineTiming.

Where the hardware file has per-format tables (``[kernel.dtypes.FORMAT]``: AMD's kernel library
runs another GEMM per tensor-core format), each GEMM weight class takes the table of the format
its peak is bound to (:meth:`KernelTiming.bind`).

Always analytical (shapes may hold symbols); measured tables sit on top of it in
:class:`moesym.kernels.table_timing.TableTiming` (``--timing tables:DIR``).

>>> from moesym.kernels.timing import KernelTiming
>>> from moesym.specs.hardware import load_hardware
>>> from moesym.terms.attention import gemm
>>> from moesym.symbolic.symbols import S
>>> kt = KernelTiming.from_hardware(load_hardware("h800"))
>>> tt = kt.time(gemm("g", S.batch, 7168, 2048, S.w_bytes, S.act_bytes))
>>> tt.compute_s.has(sp.ceiling)
True
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import sympy as sp

from ..specs.kernel_calib import DEFAULTS, KernelCalib, dtype_tables, kernel_calib
from ..symbolic.expr import smax
from ..symbolic.special import LogInterp
from ..symbolic.symbols import S
from ..terms.cost import (AttentionShape, Cost, GemmShape, KernelClass, LoadShape, TermTime,
                          component_pass_symbol, component_symbols, component_unpack_symbol)
from ..terms.names import BF16_GEMMS
from .analytical import (_below, attention_decode_time, attention_prefill_time,
                         attention_time_from_cost, elementwise_time, gemm_time)
from .skew import tile_factor_table
from .time_model import RooflineTiming, TimeModel

__all__ = ["KernelTiming"]

_ZERO = sp.Integer(0)


# each GEMM weight class (a cost's ``component``) and the symbol its tensor-core peak is bound to
_COMPONENT_PEAKS = (("", S.flops_gemm), ("moe", S.flops_moe), ("dense", S.flops_dense))


@dataclass(frozen=True)
class KernelTiming(TimeModel):
    """Kernel-model timing with one GPU's calibration (see the module docstring).

    ``formats``: the GPU's per-format calibrations (``[kernel.dtypes.FORMAT]``) as ``((format,
    peak FLOP/s, KernelCalib), ...)``; ``bound``: once :meth:`bind` has the numbers, the
    calibration of each GEMM weight class that computes in one of those formats, ``((component,
    KernelCalib), ...)``; every other cost takes ``calib``."""

    calib: KernelCalib = DEFAULTS
    formats: tuple = ()
    bound: tuple = ()

    @classmethod
    def from_hardware(cls, hw, moe_kernel: str | None = None) -> KernelTiming:
        """Calibration from ``hw``'s ``[kernel]`` table (defaults with a warning if absent) and
        its ``[kernel.dtypes.FORMAT]`` tables; ``moe_kernel``: the engine's fused-MoE backend,
        whose grouped-GEMM fields from the GPU's ``[moe_kernels]`` replace ``[kernel]``'s (None:
        ``[kernel]``'s)."""
        own = dict(hw.moe_kernels[moe_kernel]) if moe_kernel is not None else {}
        formats = tuple((d, hw.peak_flops(d), replace(kernel_calib(hw, d), **own))
                        for d in dtype_tables(hw) if d in hw.peaks_flops)
        return cls(replace(kernel_calib(hw), **own), formats)

    @classmethod
    def named(cls, hw, moe_kernel: str | None, _argument) -> KernelTiming:
        """``kernel``: the analytical kernel model with ``hw``'s calibration."""
        return cls.from_hardware(hw, moe_kernel)

    def bind(self, numbers) -> KernelTiming:
        """Each GEMM weight class timed with the calibration of the tensor-core format its peak
        is bound to (``[kernel.dtypes.FORMAT]`` where the GPU has that table; unchanged without
        such tables)."""
        if not self.formats:
            return self
        values = numbers()[0]
        bound = []
        for component, peak in _COMPONENT_PEAKS:
            got = values.get(peak)
            match = next((c for _d, p, c in self.formats if got is not None and float(got) == p),
                         None)
            if match is not None:
                bound.append((component, match))
        return replace(self, bound=tuple(bound))

    def calib_of(self, c: Cost) -> KernelCalib:
        """The calibration that times cost ``c``: its weight class's format's where bound; a
        GEMM whose weights stay BF16 (:data:`moesym.terms.names.BF16_GEMMS`) the GPU's BF16
        one where it has that table."""
        if c.name in BF16_GEMMS:
            own = next((k for d, _p, k in self.formats if d == "bf16"), None)
            if own is not None:
                return own
        return next((k for comp, k in self.bound if comp == c.component), self.calib)

    def grouped_serial_share(self) -> float:
        """The fused-MoE backend's fitted ``grouped_serial_frac`` (0 for [kernel] fits): the
        routed experts' (component ``moe``) calibration's."""
        return float(next((k for comp, k in self.bound if comp == "moe"),
                          self.calib).grouped_serial_frac)

    def graph_replayed(self, floor_s: float) -> KernelTiming:
        """Elementwise kernels at the CUDA graph's per-kernel floor instead of a host launch
        (GEMM and attention floors are fitted on kernels already timed without host launches)."""
        floor = lambda k: replace(k, elementwise_launch_s=floor_s)  # noqa: E731
        return KernelTiming(floor(self.calib), tuple((d, p, floor(k)) for d, p, k in self.formats),
                            tuple((c, floor(k)) for c, k in self.bound))

    def time(self, c: Cost) -> TermTime:
        """Each kernel is timed once per process (cached): step models of a search share most
        kernels, and building the SymPy time of a GEMM dominates building a model."""
        return _cached_time(self, c, c.shape)  # Cost equality leaves out the shape

    def _time(self, c: Cost) -> TermTime:
        if c.kind in (KernelClass.COMM, KernelClass.OVERHEAD):
            return RooflineTiming().time(c)
        k = _backend_calib(c, self.calib_of(c))
        n = c.launches if c.launches != 0 else sp.Integer(1)  # repetitions of the kernel
        lat = c.launches  # launch latencies actually paid
        if c.kind in (KernelClass.GEMM, KernelClass.GROUPED_GEMM):
            if isinstance(c.shape, GemmShape):
                sh = c.shape
                layout = sh.layout if sh.layout in ("contiguous", "masked", "batched") else "dense"
                if c.kind is KernelClass.GROUPED_GEMM and layout == "dense":
                    layout = "contiguous"
                peak, w_bytes = component_symbols(c.component)
                t = gemm_time(sh.m, sh.n, sh.k, sms=S.sms, peak_flops=peak,
                              hbm_bw_Bps=S.hbm_bw, calib=k, op_bytes=w_bytes,
                              out_bytes=S.act_bytes, groups=sh.groups, layout=layout,
                              hbm_bytes=c.hbm_bytes / n, tile_m_min=sh.tile_m_min,
                              unpack_s=_unpack_s(c) / n, masked_rows=sh.masked_rows,
                              m_tile_factor=_tile_factor(sh, k),
                              kernel_tokens=sh.kernel_tokens if sh.kernel_tokens != 0 else None,
                              local_experts=sh.local_experts if sh.local_experts != 0 else None)
                dq = _dequant_pass(c, sh, k) * n
                return TermTime(c.name, n * t.compute_s, n * t.memory_s, _ZERO,
                                lat * t.launch_s + c.fixed_s + dq)
            if isinstance(c.shape, LoadShape):  # weights read for few rows: matrix-vector kernels
                bulk = c.hbm_bytes / (S.hbm_bw * k.hbm_frac(
                    "contiguous" if c.kind is KernelClass.GROUPED_GEMM else "dense"))
                mv = c.hbm_bytes / (S.hbm_bw * k.matvec_hbm_frac) + _unpack_s(c)
                matvec = k.mv_max_rows and (c.kind is KernelClass.GEMM or k.mv_grouped)
                memory = sp.sympify(_below(c.shape.rows, k.mv_max_rows, mv, bulk)) if matvec else bulk
                return TermTime(c.name, _ZERO, memory, _ZERO, lat * k.launch_s + c.fixed_s)
            frac = k.gemm_tensor_frac if c.kind is KernelClass.GEMM else k.grouped_contiguous_tensor_frac
            compute = c.flops / (component_symbols(c.component)[0] * frac) if c.flops != 0 else _ZERO
            memory = c.hbm_bytes / (S.hbm_bw * k.gemm_hbm_frac) if c.hbm_bytes != 0 else _ZERO
            return TermTime(c.name, compute, memory, _ZERO, lat * k.launch_s + c.fixed_s)
        if c.kind is KernelClass.ATTENTION and isinstance(c.shape, AttentionShape):
            n = c.launches  # every shaped attention cost counts its kernels (a share: < 1, or 0)
            if n == 0:
                return TermTime(c.name, _ZERO, _ZERO, _ZERO, c.fixed_s)
            a = c.shape
            kw = dict(sms=S.sms, peak_flops=S.flops_attn, hbm_bw_Bps=S.hbm_bw, calib=k)
            if a.phase == "decode":
                t = attention_decode_time(a.batch, a.length, a.heads, a.kv_heads, a.qk_dim, a.v_dim,
                                          kv_bytes=a.kv_bytes, shared_kv=a.shared_kv, **kw)
                memory = t.memory_s
            else:
                t = attention_prefill_time(a.batch, a.length, a.heads, a.kv_heads, a.qk_dim,
                                           a.v_dim, act_bytes=a.kv_bytes, **kw)
                # chunked prefill re-reads the cached prefix: keep the cost's byte count
                memory = smax(t.memory_s, c.hbm_bytes / n / (S.hbm_bw * k.attention_hbm_frac))
            # the shape is one kernel's; ``launches`` of them run (a share of the layers: < 1)
            return TermTime(c.name, n * sp.sympify(t.compute_s), n * sp.sympify(memory), _ZERO,
                            lat * t.launch_s + c.fixed_s)
        if c.kind is KernelClass.ATTENTION:
            t = attention_time_from_cost(c.flops, c.hbm_bytes, peak_flops=S.flops_attn,
                                         hbm_bw_Bps=S.hbm_bw, calib=k, launches=lat)
            return TermTime(c.name, sp.sympify(t.compute_s), sp.sympify(t.memory_s), _ZERO,
                            t.launch_s + c.fixed_s)
        t = elementwise_time(c.hbm_bytes, hbm_bw_Bps=S.hbm_bw, calib=k, launches=lat,
                             flops=c.flops, peak_flops=S.flops_gemm)
        return TermTime(c.name, sp.sympify(t.compute_s), sp.sympify(t.memory_s), _ZERO,
                        t.launch_s + c.fixed_s)


def _backend_calib(c: Cost, k: KernelCalib) -> KernelCalib:
    """The calibration that times kernel ``c``: for the fused-MoE backend's own kernels (the
    routed experts' grouped GEMMs and its memory-bound kernels, ``component`` "moe"), every
    launch at its ``moe_launch_us`` where its fit sets one (:meth:`KernelCalib.backend_launches`);
    else ``k``."""
    own = c.component == "moe" and c.kind is not KernelClass.GEMM
    return k.backend_launches() if own else k


def _tile_factor(sh: GemmShape, k: KernelCalib):
    """Skewed routing's M tiles over its equal-groups count (1 without ``tile_skew``): the numeric
    table of :func:`moesym.kernels.skew.tile_factor_table`, interpolated in log of the tokens
    routed (as the rank imbalance, :func:`moesym.terms.routing.imbalance_expr`)."""
    if not sh.tile_skew:
        return 1

    ts, ys = tile_factor_table(sh.tile_skew, k)
    knots = [sp.Float(v) for t, y in zip(ts, ys) for v in (float(np.log(t)), y)]
    return LogInterp(sh.routed_tokens, *knots)


def _unpack_s(c: Cost):
    """Time a matrix-vector kernel spends unpacking the block-format weights ``c`` reads: their
    elements (d hbm_bytes / d b_w) x the component's unpack time per element (0 where the
    format is held as it computes)."""
    w = component_symbols(c.component)[1]
    if not c.hbm_bytes.has(w):
        return _ZERO
    return sp.diff(c.hbm_bytes, w) * component_unpack_symbol(c.component)


def _dequant_pass(c: Cost, sh: GemmShape, k: KernelCalib):
    """A separate dequantization kernel before a 16-bit GEMM of more than ``dequant_pass_rows``
    rows (the hardware's engine kernels, :mod:`moesym.specs.kernel_calib`): the GEMM's N K groups
    weight elements, each read packed and written as 16 bits (b_pass bytes, 0 where the format
    needs no pass) at the elementwise bandwidth, plus its launch; serial with the GEMM (a fixed
    time of the term). Only GEMMs of a weight class (their bytes hold b_w, or another term reads
    their weights): not the LM head or router, whose weights stay 16-bit."""
    w = component_symbols(c.component)[1]
    if not k.dequant_pass_rows or not (c.hbm_bytes.has(w) or sh.weights_elsewhere):
        return _ZERO
    b = component_pass_symbol(c.component)
    t = (sh.n * sh.k * sh.groups * b / (S.hbm_bw * k.elementwise_hbm_frac)
         + sp.Piecewise((k.elementwise_launch_s, b > 0), (0, True)))
    return sp.sympify(_below(sh.m, k.dequant_pass_rows, _ZERO, t))


@lru_cache(maxsize=8192)
def _cached_time(timing: KernelTiming, c: Cost, shape) -> TermTime:
    return timing._time(c)
