"""Measured kernel tables in the InferSim CSV layout, and lookup by shape.

Layout under a folder ``DIR`` (``<gpu>`` is the hardware name, e.g. ``h800``):

- ``DIR/gemm/<gpu>/data.csv``: ``m,k,n,latency_us,mfu``
- ``DIR/grouped_gemm/{decode,prefill}/<gpu>/data.csv``: ``num_experts,num_gpus,
  num_local_experts,topk,hidden_size,intermediate_size,batch_size_per_gpu|seq_len_per_gpu,
  tokens_per_expert,up_proj_us,up_mfu,down_proj_us,down_mfu``; decode rows are the masked
  layout, prefill rows the contiguous layout; up_proj is gate+up (N = 2 x intermediate, K =
  hidden), down_proj has N = hidden, K = intermediate; M = tokens_per_expert.
- ``DIR/{mha,mla}/decode/<gpu>/<a>-<b>-<c>.csv``: ``dtype,kv_dtype,batch_size,kv_len,latency_us,
  mfu``; ``DIR/{mha,mla}/prefill/<gpu>/<a>-<b>-<c>.csv``: ``dtype,seq_len,latency_us,mfu``
  (mha: heads-kv_heads-head_dim; mla: heads-kv_lora-rope).

Known flaws handled: a file without a header row (the columns are then taken in the documented
order), repeated blocks of identical rows (dropped). ``latency_us`` is trusted over ``mfu``.

Lookup interpolates the latency linearly in log(M) between the two measured rows that bracket M
(never the nearest row), so it is monotone between rows; outside the measured range, or for a
shape with no rows, it returns ``None`` and the analytical model answers.

>>> interp_log(np.array([16.0, 64.0]), np.array([10e-6, 30e-6]), 32.0)
2e-05
>>> interp_log(np.array([16.0, 64.0]), np.array([10e-6, 30e-6]), 128.0) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import MoesymError

__all__ = [
    "DECODE_ATTN_COLUMNS",
    "GEMM_COLUMNS",
    "GROUPED_COLUMNS",
    "PREFILL_ATTN_COLUMNS",
    "KernelTables",
    "gemm_rows",
    "grouped_rows",
    "interp_log",
    "read_attention_table",
    "read_csv_table",
    "read_gemm_table",
    "read_grouped_table",
]

GEMM_COLUMNS = ("m", "k", "n", "latency_us", "mfu")
GROUPED_COLUMNS = ("num_experts", "num_gpus", "num_local_experts", "topk", "hidden_size",
                   "intermediate_size", "tokens_per_gpu", "tokens_per_expert", "up_proj_us",
                   "up_mfu", "down_proj_us", "down_mfu")
DECODE_ATTN_COLUMNS = ("dtype", "kv_dtype", "batch_size", "kv_len", "latency_us", "mfu")
PREFILL_ATTN_COLUMNS = ("dtype", "seq_len", "latency_us", "mfu")
_TOKEN_COLS = ("batch_size_per_gpu", "seq_len_per_gpu")


def read_csv_table(path: Path | str, columns: tuple[str, ...]) -> pd.DataFrame:
    """Read one CSV; a file whose first row is not a header gets ``columns`` as its header.

    Identical repeated rows are dropped. Columns beyond those named are kept as they are.
    """
    path = Path(path)
    try:
        first = path.read_text(encoding="utf-8").splitlines()[0].split(",")
    except (OSError, IndexError, UnicodeDecodeError):
        raise MoesymError(f"kernel table {path}: cannot read or empty") from None
    has_header = any(c.strip() in set(columns) | set(_TOKEN_COLS) for c in first)
    if has_header:
        df = pd.read_csv(path)
        df = df.rename(columns={c: "tokens_per_gpu" for c in _TOKEN_COLS})
    else:
        if len(first) != len(columns):
            raise MoesymError(f"kernel table {path}: no header row and {len(first)} columns; "
                              f"expected {len(columns)} ({','.join(columns)})")
        df = pd.read_csv(path, header=None, names=list(columns))
    missing = [c for c in columns if c not in df.columns and not c.endswith("mfu")]
    if missing:
        raise MoesymError(f"kernel table {path}: missing column(s) {', '.join(missing)}")
    return df.drop_duplicates().reset_index(drop=True)


def read_gemm_table(path: Path | str) -> pd.DataFrame:
    """``m,k,n,latency_us,mfu`` rows (duplicates dropped)."""
    return read_csv_table(path, GEMM_COLUMNS)


def read_grouped_table(path: Path | str) -> pd.DataFrame:
    """Grouped-GEMM rows; the token column is renamed ``tokens_per_gpu``."""
    return read_csv_table(path, GROUPED_COLUMNS)


def read_attention_table(path: Path | str, phase: str) -> pd.DataFrame:
    """Attention rows of one ``<a>-<b>-<c>.csv`` file (decode or prefill columns)."""
    return read_csv_table(path, DECODE_ATTN_COLUMNS if phase == "decode" else PREFILL_ATTN_COLUMNS)


def gemm_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Normalised dense rows: ``m, n, k, groups, layout, latency_s``."""
    out = pd.DataFrame({"m": df.m.astype(float), "n": df.n.astype(float), "k": df.k.astype(float)})
    out["groups"] = 1.0
    out["layout"] = "dense"
    out["latency_s"] = df.latency_us.astype(float) * 1e-6
    if "dtype" in df.columns:  # optional: the GEMM's compute dtype (InferSim's tables are FP8)
        out["dtype"] = df.dtype.astype(str).str.lower()
    return out


def grouped_rows(df: pd.DataFrame, layout: str) -> pd.DataFrame:
    """Each grouped row as two GEMMs (up: N = 2 inter, K = hidden; down: N = hidden, K = inter)."""
    g = df.num_local_experts.astype(float)
    m = df.tokens_per_expert.astype(float)
    h, i = df.hidden_size.astype(float), df.intermediate_size.astype(float)
    up = pd.DataFrame({"m": m, "n": 2 * i, "k": h, "groups": g, "layout": layout,
                       "latency_s": df.up_proj_us.astype(float) * 1e-6})
    down = pd.DataFrame({"m": m, "n": h, "k": i, "groups": g, "layout": layout,
                         "latency_s": df.down_proj_us.astype(float) * 1e-6})
    if "dtype" in df.columns:
        up["dtype"] = down["dtype"] = df.dtype.astype(str).str.lower()
    return pd.concat([up, down], ignore_index=True)


def interp_log(xs: np.ndarray, ys: np.ndarray, x: float) -> float | None:
    """Linear interpolation of ``ys`` in log(x) between bracketing rows; None outside the range.

    Rows with the same ``x`` are averaged first; an exact hit returns that row.
    """
    xs = np.asarray(xs, dtype=float)
    ys = np.asarray(ys, dtype=float)
    if xs.size == 0 or not np.isfinite(x) or x <= 0:
        return None
    ux = np.unique(xs)
    uy = np.array([ys[xs == u].mean() for u in ux])
    if x < ux[0] or x > ux[-1]:
        return None
    j = int(np.searchsorted(ux, x))
    if ux[j] == x:
        return float(uy[j])
    x0, x1, y0, y1 = ux[j - 1], ux[j], uy[j - 1], uy[j]
    w = (np.log(x) - np.log(x0)) / (np.log(x1) - np.log(x0))
    return float(y0 + w * (y1 - y0))


@dataclass
class KernelTables:
    """The tables of one GPU under a bench-data folder (any subset may be missing)."""

    root: Path
    gpu: str
    gemm: pd.DataFrame = field(default_factory=pd.DataFrame)
    grouped: pd.DataFrame = field(default_factory=pd.DataFrame)
    attention: dict = field(default_factory=dict)  # (family, phase, "a-b-c") -> DataFrame

    @classmethod
    def load(cls, root: Path | str, gpu: str) -> KernelTables:
        """Read every table of ``gpu`` under ``root``; an absent folder raises MoesymError."""
        root = Path(root)
        if not root.is_dir():
            raise MoesymError(f"--timing tables:{root}: folder not found")
        gpu = gpu.lower()
        t = cls(root, gpu)
        p = root / "gemm" / gpu / "data.csv"
        if p.is_file():
            t.gemm = gemm_rows(read_gemm_table(p))
        parts = []
        for phase, layout in (("decode", "masked"), ("prefill", "contiguous")):
            p = root / "grouped_gemm" / phase / gpu / "data.csv"
            if p.is_file():
                parts.append(grouped_rows(read_grouped_table(p), layout))
        if parts:
            t.grouped = pd.concat(parts, ignore_index=True)
        for family in ("mha", "mla"):
            for phase in ("decode", "prefill"):
                d = root / family / phase / gpu
                if d.is_dir():
                    for f in sorted(d.glob("*.csv")):
                        t.attention[(family, phase, f.stem)] = read_attention_table(f, phase)
        return t

    def all_gemm_rows(self) -> pd.DataFrame:
        """Dense and grouped rows together (``m, n, k, groups, layout, latency_s``)."""
        frames = [f for f in (self.gemm, self.grouped) if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
            columns=["m", "n", "k", "groups", "layout", "latency_s"])

    def gemm_latency_s(self, m: float, n: float, k: float, groups: float = 1,
                       layout: str = "dense") -> float | None:
        """Measured latency of this shape, interpolated in log M; None when not covered."""
        df = self.gemm if layout == "dense" else self.grouped
        if not len(df):
            return None
        sel = df[(df.n == n) & (df.k == k) & (df.groups == groups) & (df.layout == layout)]
        if not len(sel):
            return None
        return interp_log(sel.m.to_numpy(), sel.latency_s.to_numpy(), float(m))

    def attention_latency_s(self, family: str, phase: str, key: str, *, batch: float = 1,
                            length: float) -> float | None:
        """Measured attention latency (decode: at ``batch``, interpolated in log kv_len;
        prefill: interpolated in log seq_len); None when not covered."""
        df = self.attention.get((family, phase, key))
        if df is None or not len(df):
            return None
        if phase == "decode":
            sel = df[df.batch_size == batch]
            return interp_log(sel.kv_len.to_numpy(), sel.latency_us.to_numpy() * 1e-6, float(length))
        return interp_log(df.seq_len.to_numpy(), df.latency_us.to_numpy() * 1e-6, float(length))
