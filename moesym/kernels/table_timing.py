"""``TableTiming``: measured kernel tables as the step model's time model (``--timing tables:DIR``).

The third backend beside the roofline and the analytical kernel model. Every kernel a table
covers takes its measured latency; everything else (shapes no table holds, rows outside the
measured range, communication, host time) keeps the kernel model's time, and a one-line warning
names which kernels came from which source.

How a measured latency enters the symbolic model. A table holds latencies at measured rows; the
step model's row count M (or batch and KV length) is a SymPy expression in the workload. The
table becomes a ``Piecewise`` linear in log M between consecutive measured rows (the same
interpolation as :func:`moesym.kernels.tables.interp_log`), with the analytical time outside the
measured range, so the model still compiles, sweeps and solves (a root in a measured stretch is
a root of that segment). The kernel model's split of the time into compute, memory and launch is
kept and scaled to the measured total, so the bound each kernel reports still follows the
analytical model while its time is the measurement:

    scale = Piecewise((L_measured / t_analytical, M in range), (1, True))
    compute, memory, launch = scale x (the kernel model's)

What is matched (values of every symbol but the workload's are known when the model is built):

- dense GEMM: N, K and the compute dtype of its weight class (a table without a ``dtype`` column
  is FP8, InferSim's DeepGEMM layout); weight-only formats (w4a16, ...) and FP4 never match.
- grouped GEMM: N, K, local experts and layout (decode tables: masked; prefill: contiguous), with
  M = rows / local experts, as the tables' uniform-routing ``tokens_per_expert``. The routed
  weight read stays its own term and the layer takes the larger of the two, as for the models.
- attention: the file ``<heads>-<kv_heads>-<head_dim>`` (MHA/GQA) or ``<heads>-<kv_lora>-<rope>``
  (MLA), the KV dtype; decode interpolates in log KV length within each measured batch and in
  log batch between them; prefill tables hold one sequence, and B sequences take B times its
  latency (a long prompt fills the GPU on its own).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import sympy as sp

from ..errors import SpecError
from ..symbolic.expr import smax
from ..symbolic.symbols import S
from ..terms.cost import AttentionShape, Cost, GemmShape, KernelClass, TermTime
from .tables import KernelTables
from .time_model import TimeModel
from .timing import KernelTiming

__all__ = ["TableTiming", "piecewise_log_interp", "tables_digest", "tables_folder"]

_DTYPE_OF_BYTES = {1: "fp8", 2: "bf16"}


def tables_folder(timing: str) -> Path | None:
    """The folder of a ``tables:DIR`` time-model name (None for the other models)."""
    if not timing.startswith("tables:"):
        return None
    return Path(timing[len("tables:"):]).expanduser()


def tables_digest(folder: Path) -> str:
    """SHA-256 of every CSV under ``folder`` (relative path and bytes): what a compiled model
    built on these tables depends on, so an edited table is never answered from the cache."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*.csv")):
        h.update(str(p.relative_to(folder)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def piecewise_log_interp(x: sp.Expr, xs, ys) -> tuple[sp.Expr, sp.Expr] | None:
    """(value, in-range condition) of the linear-in-log(x) interpolation through (xs, ys).

    Rows with the same x are averaged; fewer than two distinct rows give None.

    >>> m = sp.Symbol("m", positive=True)
    >>> v, ok = piecewise_log_interp(m, [16, 64], [10.0, 30.0])
    >>> round(float(v.subs(m, 32)), 12), bool(ok.subs(m, 128))
    (20.0, False)
    """
    xs = np.asarray(xs, dtype=float)
    ys = np.asarray(ys, dtype=float)
    ux = np.unique(xs[np.isfinite(xs) & (xs > 0)])
    if ux.size < 2:
        return None
    uy = [float(ys[xs == u].mean()) for u in ux]
    pieces = []
    for j in range(1, ux.size):
        x0, x1, y0, y1 = float(ux[j - 1]), float(ux[j]), uy[j - 1], uy[j]
        slope = (y1 - y0) / math.log(x1 / x0)
        pieces.append((y0 + slope * (sp.log(x) - math.log(x0)), x <= x1))
    pieces[-1] = (pieces[-1][0], True)
    value = sp.Piecewise(*pieces)
    return value, (x >= float(ux[0])) & (x <= float(ux[-1]))


@dataclass(eq=False)
class TableTiming(TimeModel):
    """Measured tables over the analytical kernel model (see the module docstring).

    Build with :meth:`for_hardware`, then :meth:`bind` to the numbers of one model, hardware and
    deployment (``build_step`` does both); ``used`` records (kernel name, source) per kernel."""

    kernel: KernelTiming  # the fallback and the compute/memory/launch split
    tables: KernelTables
    values: dict = field(default_factory=dict)
    formats: dict = field(default_factory=dict)  # GEMM weight class -> compute dtype or None
    used: dict = field(default_factory=dict)

    @classmethod
    def named(cls, hw, _moe_kernel, folder: str) -> TableTiming:
        """``tables:DIR``: the measured kernel tables in ``folder`` over the kernel model."""
        return cls.for_hardware(hw, Path(folder).expanduser())

    @classmethod
    def for_hardware(cls, hw, folder: Path) -> TableTiming:
        if not folder.is_dir():
            raise SpecError(f"--timing tables:{folder}: folder not found (give the folder that "
                            "holds gemm/, grouped_gemm/, mha/, mla/ in the layout of bench_data/README.md)")
        tables = KernelTables.load(folder, hw.name)
        if not (len(tables.gemm) or len(tables.grouped) or tables.attention):
            raise SpecError(f"--timing tables:{folder}: no table for hardware {hw.name} there "
                            f"(expected e.g. {folder}/gemm/{hw.name.lower()}/data.csv)")
        return cls(KernelTiming.from_hardware(hw), tables)

    def bind(self, numbers) -> TableTiming:
        """A copy that knows the numbers of every non-workload symbol and each weight class's
        compute dtype (None: no table applies, e.g. weight-only 4-bit): ``numbers()``."""
        values, formats = numbers()
        return TableTiming(self.kernel, self.tables, {s: sp.sympify(v) for s, v in values.items()},
                           dict(formats), {})

    def grouped_serial_share(self) -> float:
        return self.kernel.grouped_serial_share()

    def graph_replayed(self, floor_s: float) -> TableTiming:
        """The kernel model under the tables replayed as a CUDA graph (the measured kernels keep
        their measurements)."""
        return replace(self, kernel=self.kernel.graph_replayed(floor_s))

    def report(self) -> str:
        """One line: which kernels the tables time and which the analytical model."""
        tab = sorted(k for k, v in self.used.items() if v == "table")
        ana = sorted(k for k, v in self.used.items() if v != "table")
        return (f"--timing tables:{self.tables.root}: measured ({self.tables.gpu}) for "
                f"{', '.join(tab) or 'no kernel'} within the measured range; analytical kernel "
                f"model for {', '.join(ana) or 'nothing else'}")

    # --- the time model interface -------------------------------------------------------------

    def time(self, c: Cost) -> TermTime:
        base = self.kernel.time(c)
        if c.kind in (KernelClass.COMM, KernelClass.OVERHEAD, KernelClass.ELEMENTWISE):
            return base
        found = self._measured(c)
        self.used[c.name] = "table" if found is not None else "analytical"
        if found is None:
            return base
        measured, ok = found
        t = smax(base.compute_s, base.memory_s) + base.overhead_s
        scale = sp.Piecewise((measured / t, ok), (1, True))
        return TermTime(c.name, scale * base.compute_s, scale * base.memory_s, base.comm_s,
                        scale * base.overhead_s)

    # --- lookups ------------------------------------------------------------------------------

    def _num(self, e):
        """``e`` with every bound symbol replaced; a float when nothing symbolic is left."""
        v = sp.sympify(e).xreplace(self.values)
        return float(v) if v.is_number else None

    def _measured(self, c: Cost):
        reps = self._num(c.launches) or 1.0
        if isinstance(c.shape, GemmShape) and c.kind in (KernelClass.GEMM, KernelClass.GROUPED_GEMM):
            got = self._gemm(c)
        elif isinstance(c.shape, AttentionShape):
            got = self._attention(c.shape)
        else:
            return None
        if got is None:
            return None
        value, ok = got
        return reps * value, ok

    def _gemm(self, c: Cost):
        sh = c.shape
        dtype = self.formats.get(c.component or "attn")
        n, k = self._num(sh.n), self._num(sh.k)
        if dtype is None or n is None or k is None:
            return None
        rows = sp.sympify(sh.m * sh.groups).xreplace(self.values)
        if c.kind is KernelClass.GROUPED_GEMM:
            df = self.tables.grouped
            groups = self._num((S.experts + S.redundant) / S.ep)
            layout = "masked" if sh.layout in ("masked", "batched") else "contiguous"
            if groups is None or not len(df):
                return None
            sel = df[(df.n == n) & (df.k == k) & (df.groups == groups) & (df.layout == layout)]
            m = rows / groups
        else:
            df = self.tables.gemm
            if not len(df):
                return None
            sel = df[(df.n == n) & (df.k == k)]
            m = rows
        if "dtype" in sel.columns:
            sel = sel[sel.dtype.astype(str).str.lower() == dtype]
        elif dtype != "fp8":  # InferSim's GEMM tables are FP8 DeepGEMM
            return None
        return piecewise_log_interp(m, sel.m.to_numpy(), sel.latency_s.to_numpy())

    def _attention(self, a: AttentionShape):
        h, kvh, qk, v = (self._num(x) for x in (a.heads, a.kv_heads, a.qk_dim, a.v_dim))
        kv_bytes = self._num(a.kv_bytes)
        if None in (h, kvh, qk, v):
            return None
        h, kvh, qk, v = (int(round(x)) for x in (h, kvh, qk, v))
        mla = a.shared_kv or qk != v
        family, key = ("mla", f"{h}-{v}-{qk - v}") if mla else ("mha", f"{h}-{kvh}-{qk}")
        df = self.tables.attention.get((family, a.phase, key))
        if df is None or not len(df):
            return None
        length = sp.sympify(a.length).xreplace(self.values)
        batch = sp.sympify(a.batch).xreplace(self.values)
        if a.phase == "prefill":
            got = piecewise_log_interp(length, df.seq_len.to_numpy(), df.latency_us.to_numpy() * 1e-6)
            return None if got is None else (batch * got[0], got[1])
        want = _DTYPE_OF_BYTES.get(int(kv_bytes)) if kv_bytes is not None else None
        if "kv_dtype" in df.columns and want is not None:
            df = df[df.kv_dtype.astype(str).str.lower() == want]
        per_batch = {}
        for b, rows in df.groupby("batch_size"):
            got = piecewise_log_interp(length, rows.kv_len.to_numpy(), rows.latency_us.to_numpy() * 1e-6)
            if got is not None:
                per_batch[float(b)] = got
        bs = sorted(per_batch)
        if len(bs) < 2:
            return None
        pieces, conds = [], []
        for b0, b1 in zip(bs, bs[1:]):
            (y0, ok0), (y1, ok1) = per_batch[b0], per_batch[b1]
            w = (sp.log(batch) - math.log(b0)) / math.log(b1 / b0)
            pieces.append((y0 + w * (y1 - y0), batch <= b1))
            conds.append(((batch >= b0) & (batch <= b1)) & ok0 & ok1)
        pieces[-1] = (pieces[-1][0], True)
        return sp.Piecewise(*pieces), sp.Or(*conds)
