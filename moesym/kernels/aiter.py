"""Measured kernel tables of AMD's aiter library: its tuner's CSV files (``aiter/configs/``).

aiter (ROCm/aiter, the kernel library SGLang and vLLM run on ROCm) ships, for every shape its
tuner was run on, the fastest kernel it found and that kernel's measured time in microseconds.
A folder ``DIR`` holds the tables as aiter keeps them: ``DIR/<table>.csv`` and
``DIR/model_configs/<model>_<table>.csv``. This module reads them into the normalised frames of
:mod:`moesym.kernels.fit` (SI units), as :mod:`moesym.kernels.aic` reads AIConfigurator's.

The GPU of a row is its ``gfx`` architecture and ``cu_num`` (compute units): gfx942 with 304 CUs
is an MI300X or an MI325X (one die; the tables do not say which HBM ran them), gfx950 with 256
CUs an MI355X; gfx942 with 80 CUs (MI308X) and gfx1250 rows are other parts. A row without a
``gfx`` column is placed by its CU count alone (:data:`AITER_GPUS`).

GEMM classes (:data:`GEMM_CLASSES`: file patterns, the weight format moesym names it by, the
tensor-core format that times it), one row per (M, N, K) of the GPU, the fastest of the class's
kernel layouts where a shape is tuned in several files (plain and ``bpreshuffle``: weights
stored pre-shuffled): ``m, n, k, groups = 1, layout = dense, dtype, op_bytes, latency_s``,
``variant`` (the file family that holds the fastest row) and ``libtype`` (the kernel library).

- ``bf16``: ``bf16_tuned_gemm.csv`` and the per-model BF16 tables;
- ``fp8``: ``a8w8_*`` with FP8 weights, per-token (activations) and per-channel (weights)
  scales; INT8 rows are left out;
- ``fp8_block``: ``a8w8_blockscale_*``, FP8 with 1 x 128 activation and 128 x 128 weight
  scales (DeepSeek-V3's checkpoints);
- ``fp4``: ``a4w4_blockscale_*``, MXFP4 (E2M1 values, one E8M0 scale per 32).

Fused MoE (``tuned_fmoe.csv``, ``model_configs/*_tuned_fmoe.csv``), one expert layer per row:
``tokens, hidden, inter, topk, experts, local_experts, tp = ep = 1`` (a tuned row is one rank's
whole layer: its ``expert`` count is the rank's, shared experts fused in as extra ones),
``dtype`` (:data:`MOE_CLASSES`: activation and weight formats and scale granularity),
``rank_assignments`` (T k) and ``active_experts`` (the experts random routing gives a row:
:func:`active_experts`), ``stages`` (1: one fused kernel, ``run_1stage``; 2: two grouped GEMMs,
``us1`` + ``us2``),
``block_m`` (the M block each expert's rows are padded to by aiter's token sorting),
``stage1_s``, ``stage2_s``, ``latency_s`` (``us``).

Rows the tuner recorded without a time (``us`` <= 0: the shape failed to tune) and GEMM rows
whose kernel failed the accuracy check (``errRatio`` above 5%, aiter's tuner default) are
dropped and counted (:func:`gemm_rows`, :func:`moe_rows` return the counts).

>>> gpu_of("gfx942", 304), gpu_of(None, 256), gpu_of("gfx1250", 256), gpu_of("gfx942", 80)
('mi300x', 'mi355x', None, None)
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import MoesymError
from ..specs.precision import bytes_per_element
from .fit import moe_gemm_rows, predict_rows

__all__ = ["AITER_GPUS", "GEMM_CLASSES", "MOE_CLASSES", "active_experts", "gemm_rows", "gpu_of",
           "moe_rows", "predict_fused_moe", "read_tables"]

# moesym hardware name -> the (gfx, CUs) of its rows; MI325X is MI300X's die (its rows are
# the same 304-CU rows: the tables do not say which of the two ran them)
AITER_GPUS = {"mi300x": ("gfx942", 304), "mi325x": ("gfx942", 304), "mi355x": ("gfx950", 256)}
# the GPU a row without a gfx column is placed on, by its CU count (the README of the tables)
_CU_GPUS = {304: "mi300x", 256: "mi355x"}
# the GPU whose rows a name reads (MI325X reads MI300X's: one die, one set of rows)
AITER_GPUS_ROWS = {"mi325x": "mi300x"}

# GEMM class -> (file patterns, weight format in moesym's names, tensor-core format, operand
# bytes per element with scales: moesym.specs.precision.bytes_per_element of that format)
GEMM_CLASSES = {
    "bf16": (("bf16_tuned_gemm.csv", "model_configs/*bf16_tuned_gemm.csv"), "bf16", "bf16"),
    "fp8": (("a8w8_tuned_gemm.csv", "*a8w8_bpreshuffle_tuned_gemm*.csv",
             "model_configs/*a8w8_bpreshuffle_tuned_gemm*.csv"), "modelopt-fp8", "fp8"),
    "fp8_block": (("a8w8_blockscale*_tuned_gemm*.csv",
                   "model_configs/*a8w8_blockscale*_tuned_gemm*.csv"), "fp8", "fp8"),
    "fp4": (("a4w4_blockscale_tuned_gemm*.csv", "model_configs/*a4w4_blockscale_tuned_gemm*.csv"),
            "mxfp4", "fp4"),
}
# fused-MoE class -> (quant type, activation dtype, weight dtype) as the tables write them; the
# tensor-core format of each class is its activations' (the MFMA reads both operands in the
# wider of the two formats) and the operand bytes are the weights'
MOE_CLASSES = {
    "bf16": ("QuantType.No", "torch.bfloat16", "torch.bfloat16"),
    "fp8": ("QuantType.per_Token", "fp8", "fp8"),
    "fp8_block": ("QuantType.per_1x128", "fp8", "fp8"),
    "mxfp8": ("QuantType.per_1x32", "fp8", "fp8"),
    "fp4": ("QuantType.per_1x32", "torch.float4_e2m1fn_x2", "torch.float4_e2m1fn_x2"),
    "fp8_fp4": ("QuantType.per_1x32", "fp8", "torch.float4_e2m1fn_x2"),
    "bf16_fp4": ("QuantType.per_1x32", "torch.bfloat16", "torch.float4_e2m1fn_x2"),
    "bf16_int4": ("QuantType.per_1x32", "torch.bfloat16", "torch.int4"),
}
# a table dtype -> (tensor-core format, bytes per element with its scales)
_TORCH_DTYPES = {"torch.bfloat16": ("bf16", 2.0), "fp8": ("fp8", 1.0),
                 "torch.float4_e2m1fn_x2": ("fp4", 0.5 + 1 / 32), "torch.int4": ("bf16", 0.5 + 1 / 32)}
_FP8 = re.compile(r"^torch\.float8_e4m3(fn|fnuz)$")  # OCP FP8 (gfx950) and MI300's e4m3fnuz
ERR_RATIO_MAX = 0.05  # aiter's tuner default: a kernel with more mismatching outputs is wrong
US = 1e-6


def gpu_of(gfx, cu_num) -> str | None:
    """The moesym GPU a table row was measured on (None: another part), from its ``gfx`` and
    ``cu_num`` columns; a row without ``gfx`` by its CU count."""
    if gfx is None or (isinstance(gfx, float) and np.isnan(gfx)):
        return _CU_GPUS.get(int(cu_num))
    return next((g for g, (x, cu) in AITER_GPUS.items() if x == gfx and cu == int(cu_num)), None)


def read_tables(root: Path | str, patterns) -> pd.DataFrame:
    """The rows of every CSV under ``root`` matching one of ``patterns`` (aiter's layout), with
    a ``file`` column (the path relative to ``root``); an empty frame where none matches.
    Batched-GEMM tables (``*batched*``) hold other kernels and are left out."""
    root = Path(root)
    if not root.is_dir():
        raise MoesymError(f"aiter tables {root}: folder not found (give the folder that holds "
                          "aiter's *_tuned_*.csv files and model_configs/)")
    files = sorted({p for pat in patterns for p in root.glob(pat)
                    if "batched" not in p.name and p.is_file()})
    parts = [pd.read_csv(p).assign(file=str(p.relative_to(root))) for p in files]
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _on_gpu(df: pd.DataFrame, gpu: str) -> pd.DataFrame:
    if not len(df):
        return df
    gfx = df["gfx"] if "gfx" in df else pd.Series([None] * len(df), index=df.index)
    on = [gpu_of(g, c) == AITER_GPUS_ROWS.get(gpu, gpu) for g, c in zip(gfx, df.cu_num)]
    return df[np.array(on, dtype=bool)]



def _dropped(df: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """``(kept, {reason: rows})``: rows without a time and rows whose kernel failed aiter's
    accuracy check are dropped."""
    us = pd.to_numeric(df.us, errors="coerce")
    untimed = ~(us > 0) | ~np.isfinite(us)
    err_col = next((c for c in ("errRatio", "err_ratio") if c in df), None)
    err = (pd.to_numeric(df[err_col], errors="coerce").fillna(0) if err_col
           else pd.Series(0.0, index=df.index))
    wrong = ~untimed & (err > ERR_RATIO_MAX)
    return df[~untimed & ~wrong], {"untimed": int(untimed.sum()), "inaccurate": int(wrong.sum())}


def _variant(path: str) -> str:
    return "bpreshuffle" if "bpreshuffle" in path else "plain"


def gemm_rows(root: Path | str, gpu: str, cls: str,
              variant: str | None = None) -> tuple[pd.DataFrame, dict]:
    """``(rows, dropped)``: the dense GEMM rows of class ``cls`` (:data:`GEMM_CLASSES`) measured
    on ``gpu``, one per (M, N, K), the fastest where several files time a shape; ``dropped``
    counts the rows left out (``untimed``, ``inaccurate``, ``int8``: INT8 rows of the a8w8
    tables, ``repeated``: a shape's slower rows)."""
    if cls not in GEMM_CLASSES:
        raise MoesymError(f"aiter GEMM class {cls!r}: use one of {', '.join(GEMM_CLASSES)}")
    patterns, fmt, compute = GEMM_CLASSES[cls]
    df = _on_gpu(read_tables(root, patterns), gpu)
    dropped = {"untimed": 0, "inaccurate": 0, "int8": 0, "repeated": 0}
    if not len(df):
        return _gemm_frame(df, fmt, compute), dropped
    if "q_dtype_w" in df:  # a8w8 tables mix FP8 and INT8 weights
        fp8 = df.q_dtype_w.astype(str).str.match(_FP8.pattern)
        dropped["int8"] = int((~fp8).sum())
        df = df[fp8]
    df, d = _dropped(df)
    dropped.update(d)
    df = df.assign(us=pd.to_numeric(df.us), variant=df.file.map(_variant))
    if variant is not None:
        dropped["other_variant"] = int((df.variant != variant).sum())
        df = df[df.variant == variant]
    best = df.sort_values("us", kind="stable").drop_duplicates(["M", "N", "K"])
    dropped["repeated"] = int(len(df) - len(best))
    best = best.sort_values(["N", "K", "M"], kind="stable")
    return _gemm_frame(best, fmt, compute), dropped


def _gemm_frame(df: pd.DataFrame, fmt: str, compute: str) -> pd.DataFrame:
    if not len(df):
        return pd.DataFrame(columns=["m", "n", "k", "groups", "layout", "dtype", "table_dtype",
                                     "op_bytes", "latency_s", "variant", "libtype"])
    return pd.DataFrame({
        "m": df.M.astype(float), "n": df.N.astype(float), "k": df.K.astype(float),
        "groups": 1.0, "layout": "dense", "dtype": compute, "table_dtype": fmt,
        "op_bytes": bytes_per_element(fmt), "latency_s": df.us.astype(float) * US,
        "variant": df.variant.astype(str),
        "libtype": (df.libtype.astype(str) if "libtype" in df else "ck")}).reset_index(drop=True)


def _moe_class(q_type: str, act: str, weight: str) -> str | None:
    norm = lambda d: "fp8" if _FP8.match(str(d)) else str(d)  # noqa: E731
    key = (str(q_type), norm(act), norm(weight))
    return next((c for c, v in MOE_CLASSES.items() if v == key), None)


def moe_rows(root: Path | str, gpu: str) -> tuple[pd.DataFrame, dict]:
    """``(rows, dropped)``: the fused-MoE rows measured on ``gpu`` (module docstring), one per
    layer shape, class and stage count (the fastest where several files time it); ``dropped``
    counts ``untimed``, ``other`` (a quantization :data:`MOE_CLASSES` does not name) and
    ``repeated``. The stages' ``err1`` / ``err2`` columns are kept in: a quantized MoE's
    outputs differ from the BF16 reference by its quantization (up to 7% for INT4 weights)."""
    df = _on_gpu(read_tables(root, ("tuned_fmoe.csv", "model_configs/*tuned_fmoe*.csv")), gpu)
    dropped = {"untimed": 0, "other": 0, "repeated": 0}
    if not len(df):
        return pd.DataFrame(), dropped
    cls = [_moe_class(q, a, w) for q, a, w in zip(df.q_type, df.q_dtype_a, df.q_dtype_w)]
    df = df.assign(cls=cls)
    dropped["other"] = int(df.cls.isna().sum())
    df = df[df.cls.notna()]
    untimed = ~(pd.to_numeric(df.us, errors="coerce") > 0)
    dropped["untimed"] = int(untimed.sum())
    df = df[~untimed]
    stages = np.where(df.run_1stage.astype(int) == 1, 1, 2)
    df = df.assign(stages=stages, us=pd.to_numeric(df.us))
    key = ["token", "model_dim", "inter_dim", "expert", "topk", "cls", "stages", "act_type"]
    best = df.sort_values("us", kind="stable").drop_duplicates(key)
    dropped["repeated"] = int(len(df) - len(best))
    best = best.sort_values(["cls", "stages", "model_dim", "inter_dim", "expert", "topk", "token"],
                            kind="stable")
    act = best.cls.map(lambda c: _TORCH_DTYPES[MOE_CLASSES[c][1]])
    wgt = best.cls.map(lambda c: _TORCH_DTYPES[MOE_CLASSES[c][2]])
    e, t, k = (best[c].astype(float) for c in ("expert", "token", "topk"))
    return pd.DataFrame({
        "tokens": t, "hidden": best.model_dim.astype(float),
        "inter": best.inter_dim.astype(float), "topk": k,
        "experts": e, "local_experts": e, "tp": 1.0, "ep": 1.0,
        "rank_assignments": t * k, "active_experts": active_experts(t, k, e),
        "dtype": act.map(lambda x: x[0]), "table_dtype": best.cls.astype(str),
        "op_bytes": wgt.map(lambda x: x[1]), "distribution": "balanced",
        "stages": best.stages.astype(int), "block_m": best.block_m.astype(float),
        "kernel": np.where(best.stages == 1, "aiter_1stage", "aiter_2stage"),
        "stage1_s": pd.to_numeric(best.us1, errors="coerce").astype(float) * US,
        "stage2_s": pd.to_numeric(best.us2, errors="coerce").fillna(0).astype(float) * US,
        "latency_s": best.us.astype(float) * US,
        "file": best.file.astype(str)}).reset_index(drop=True), dropped


def active_experts(tokens, topk, experts):
    """Expected experts with at least one row when each of ``tokens`` tokens picks ``topk``
    distinct experts of ``experts`` uniformly at random, as aiter's tuner routes its inputs
    (random router scores, top-k): ``E (1 - (1 - k / E)^T)``. At T k = E that is about
    0.64 E (1 - 1/e with many experts), where an even spread would give every expert a row.

    >>> round(float(active_experts(1, 8, 256)), 6), round(float(active_experts(32, 8, 256)), 1)
    (8.0, 163.3)
    """
    t, k, e = (np.asarray(x, dtype=float) for x in (tokens, topk, experts))
    return e * (1 - (1 - k / e) ** t)


def predict_fused_moe(rows: pd.DataFrame, calib, *, sms, hbm_bw_Bps) -> np.ndarray:
    """Model latency (s) of aiter's tuned fused-MoE rows (:func:`moe_rows`): the two grouped
    GEMMs its tuner times, stage 1 (gate and up, the activation in its epilogue) and stage 2
    (down, the routing weights applied), each expert's rows padded to the row's ``block_m``
    (:func:`moesym.kernels.fit.predict_rows`); a one-stage row is one fused kernel, so one
    launch. Token sorting and quantization run outside the timed kernels (the step model
    counts them as its own memory-bound kernels)."""
    t = predict_rows(moe_gemm_rows(rows), calib, sms=sms, peak_flops=None,
                     hbm_bw_Bps=hbm_bw_Bps, infersim_masked=False)
    n = len(rows)
    one = rows.stages.to_numpy() == 1
    return t[:n] + t[n:] - np.where(one, calib.launch_s, 0.0)
