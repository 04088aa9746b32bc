"""Measured kernel tables in AIConfigurator's layout (ai-dynamo/aiconfigurator, ``systems/data``).

Layout under a folder ``DIR``: ``DIR/<gpu>/<family>/<framework>/<version>/<table>.parquet``
(``<gpu>`` e.g. ``h200_sxm`` or ``gb200``; ``family`` gemm, moe, attention, mla, comm). Latencies
are in milliseconds. The newest version folder of a framework is read. Rows come out in the
normalised frames the fit uses (``moesym.kernels.fit``), SI units:

- GEMM (``gemm_perf``): ``m, n, k, groups = 1, layout = dense, dtype, latency_s``.
- Fused MoE (``moe_perf``, router excluded): ``tokens, hidden, inter`` (per expert-TP rank),
  ``topk, experts, local_experts, tp, ep, dtype, distribution, latency_s``.
- Attention (``context_attention_perf``, ``generation_attention_perf``, ``context_mla_perf``,
  ``generation_mla_perf``): ``family (mha | mla), phase (prefill | decode), shape, heads,
  kv_heads, qk_dim, v_dim, shared_kv, kv_bytes, batch, m (sequence or KV length), latency_s``.
  GQA decode KV length = ``isl + step``; MLA rows are DeepSeek-V3's MLA (heads per rank as
  given): prefill unabsorbed (q/k 128 + 64 rope, v 128), decode on the 512 + 64 latent.

Only the dtypes moesym times as such are kept (GEMM: bf16, fp8, fp8_block; MoE: the same;
attention: bf16 compute with bf16 or fp8 KV); sliding-window attention rows are left out.

>>> newest_version(["1.3.0rc20", "1.3.0rc23", "1.0.0"])
'1.3.0rc23'
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import MoesymError

__all__ = ["GPU_FOLDERS", "attention_rows", "gemm_rows", "gpu_folder", "moe_rows",
           "newest_version", "power_law_counts", "read_table", "table_versions"]

# moesym hardware name -> the folder name AIConfigurator uses
GPU_FOLDERS = {"h100": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "b300": "b300_sxm",
               "gb200": "gb200", "gb300": "gb300", "a100": "a100_sxm"}
GEMM_DTYPES = {"bfloat16": ("bf16", 2.0), "fp8": ("fp8", 1.0), "fp8_block": ("fp8", 1.0)}
# DeepSeek-V3 MLA dimensions the AIConfigurator MLA tables are collected on
MLA_NOPE, MLA_ROPE, MLA_V, MLA_LATENT = 128, 64, 128, 512


def _version_key(v: str):
    return tuple((int(x) if x.isdigit() else x) for x in re.findall(r"\d+|[a-z]+", v))


def newest_version(versions) -> str:
    """The newest of version folder names (numeric parts compared as numbers)."""
    return max(versions, key=_version_key)


def gpu_folder(root: Path | str, gpu: str) -> Path:
    """``root/<folder of gpu>``; a clear error when the folder is missing."""
    root = Path(root)
    d = root / GPU_FOLDERS.get(gpu.lower(), gpu.lower())
    if not d.is_dir():
        raise MoesymError(f"kernel tables {root}: no folder for GPU '{gpu}' (looked for {d.name}/)")
    return d


def table_versions(root: Path | str, gpu: str, family: str, table: str,
                   framework: str = "trtllm") -> list[str]:
    """The version folders holding ``<table>.parquet``, newest first."""
    base = gpu_folder(root, gpu) / family / framework
    versions = [p.name for p in base.glob("*") if (p / f"{table}.parquet").is_file()]
    return sorted(versions, key=_version_key, reverse=True)


def read_table(root: Path | str, gpu: str, family: str, table: str,
               framework: str = "trtllm", version: str | None = None) -> tuple[pd.DataFrame, str]:
    """``(rows, version)`` of ``<gpu>/<family>/<framework>/<version>/<table>.parquet`` (default
    the newest version); an empty frame and '' when that table is absent."""
    versions = table_versions(root, gpu, family, table, framework)
    v = version if version is not None else (versions[0] if versions else None)
    if v not in versions:
        return pd.DataFrame(), ""
    path = gpu_folder(root, gpu) / family / framework / v / f"{table}.parquet"
    return pd.read_parquet(path), v


def gemm_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Dense GEMM rows (``m, n, k, groups, layout, dtype, op_bytes, latency_s``)."""
    df = df[df.gemm_dtype.isin(list(GEMM_DTYPES))]
    return pd.DataFrame({
        "m": df.m.astype(float), "n": df.n.astype(float), "k": df.k.astype(float),
        "groups": 1.0, "layout": "dense",
        "dtype": df.gemm_dtype.map(lambda d: GEMM_DTYPES[d][0]),
        "table_dtype": df.gemm_dtype.astype(str),
        "op_bytes": df.gemm_dtype.map(lambda d: GEMM_DTYPES[d][1]),
        "latency_s": df.latency.astype(float) * 1e-3}).reset_index(drop=True)


def moe_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Fused-MoE rows (one whole expert layer per row; see the module docstring)."""
    df = df[df.moe_dtype.isin(list(GEMM_DTYPES))]
    ep = df.moe_ep_size.astype(float)
    return pd.DataFrame({
        "tokens": df.num_tokens.astype(float), "hidden": df.hidden_size.astype(float),
        "inter": df.inter_size.astype(float) / df.moe_tp_size.astype(float),
        "topk": df.topk.astype(float), "experts": df.num_experts.astype(float),
        "local_experts": df.num_experts.astype(float) / ep, "tp": df.moe_tp_size.astype(float),
        "ep": ep, "dtype": df.moe_dtype.map(lambda d: GEMM_DTYPES[d][0]),
        "table_dtype": df.moe_dtype.astype(str),
        "op_bytes": df.moe_dtype.map(lambda d: GEMM_DTYPES[d][1]),
        "distribution": df.distribution.astype(str), "kernel": df.kernel_source.astype(str),
        "latency_s": df.latency.astype(float) * 1e-3}).reset_index(drop=True)


def _kv_bytes(col: pd.Series) -> np.ndarray:
    return np.where(col.astype(str).str.contains("fp8"), 1.0, 2.0)


def attention_rows(root: Path | str, gpu: str,
                   framework: str = "trtllm") -> tuple[pd.DataFrame, str]:
    """All attention rows of ``gpu`` (GQA and MLA, prefill and decode) in one frame, and the
    version read (the attention family's)."""
    parts, version = [], ""
    for phase, table in (("prefill", "context_attention_perf"),
                         ("decode", "generation_attention_perf")):
        df, v = read_table(root, gpu, "attention", table, framework)
        if not len(df):
            continue
        version = version or v
        df = df[(df.window_size == 0) & (df.attn_dtype == "bfloat16")]
        if phase == "prefill":
            df = df[df.kv_cache_dtype == "bfloat16"]
        h, kvh, hd = (df[c].astype(float) for c in ("num_heads", "num_key_value_heads", "head_dim"))
        parts.append(pd.DataFrame({
            "family": "mha", "phase": phase,
            "shape": (df.num_heads.astype(str) + "-" + df.num_key_value_heads.astype(str) + "-"
                      + df.head_dim.astype(str)),
            "heads": h, "kv_heads": kvh, "qk_dim": hd, "v_dim": hd, "shared_kv": False,
            "kv_bytes": _kv_bytes(df.kv_cache_dtype) if phase == "decode" else 2.0,
            "batch": df.batch_size.astype(float),
            "m": (df.isl + df.step).astype(float) if phase == "decode" else df.isl.astype(float),
            "latency_s": df.latency.astype(float) * 1e-3}))
    for phase, table in (("prefill", "context_mla_perf"), ("decode", "generation_mla_perf")):
        df, v = read_table(root, gpu, "mla", table, framework)
        if not len(df):
            continue
        df = df[df.mla_dtype == "bfloat16"]
        if phase == "prefill":
            df = df[df.kv_cache_dtype == "bfloat16"]
        h = df.num_heads.astype(float)
        decode = phase == "decode"
        parts.append(pd.DataFrame({
            "family": "mla", "phase": phase, "shape": df.num_heads.astype(str) + "-mla",
            "heads": h, "kv_heads": 1.0 if decode else h,
            "qk_dim": float(MLA_LATENT + MLA_ROPE if decode else MLA_NOPE + MLA_ROPE),
            "v_dim": float(MLA_LATENT if decode else MLA_V), "shared_kv": decode,
            "kv_bytes": _kv_bytes(df.kv_cache_dtype) if decode else 2.0,
            "batch": df.batch_size.astype(float),
            "m": (df.isl + df.step).astype(float) if decode else df.isl.astype(float),
            "latency_s": df.latency.astype(float) * 1e-3}))
    if not parts:
        return pd.DataFrame(), ""
    return pd.concat(parts, ignore_index=True), version


def power_law_counts(tokens: int, experts: int, topk: int, ep: int, alpha: float,
                     rng: np.random.Generator) -> np.ndarray:
    """One draw of the per-expert token counts on the measured EP rank of a ``power_law_ALPHA``
    fused-MoE row: AIConfigurator's collector generator as reconstructed here (its source,
    ``power_law_logits_v3`` in the collector's helper module, ships in none of the PyPI
    artefacts; the rows agree with it: docs/explanation/validation.md, "Skewed routing"):

    - each expert draws a weight from a power law of exponent ``alpha`` on ``[1, 0.8 T]``
      (``[0.01, 2]`` where ``T k <= E``), by the inverse CDF
      ``((x_max^(1-a) - x_min^(1-a)) u + x_min^(1-a))^(1/(1-a))``, u uniform;
    - counts = round(T k w / sum w), the rounding's remainder added to (or taken from) the
      largest counts one by one, so they sum to T k;
    - experts are laid out on EP ranks in contiguous blocks of E / EP and the rank with the most
      assignments is swapped into rank 0, the rank the collector times;
    - no expert takes a token twice (the collector spreads each expert's assignments over
      distinct tokens), so a count is at most T.

    >>> c = power_law_counts(512, 256, 8, 1, 1.01, np.random.default_rng(0))
    >>> int(c.sum()), c.size, bool(c.max() > 4 * c.mean())
    (4096, 256, True)
    """
    t, e, k, a = int(tokens), int(experts), int(topk), float(alpha)
    lo, hi = (1.0, 0.8 * t) if t * k > e else (0.01, 2.0)
    u = rng.random(e)
    w = ((hi ** (1 - a) - lo ** (1 - a)) * u + lo ** (1 - a)) ** (1 / (1 - a))
    target = t * k
    n = np.round(w / w.sum() * target).astype(np.int64)
    order = np.argsort(-n, kind="stable")
    delta = target - int(n.sum())
    for i in range(abs(delta)):
        j = order[i % e] if delta > 0 else order[-(i % e) - 1]
        n[j if delta > 0 or n[j] > 0 else int(np.argmax(n))] += 1 if delta > 0 else -1
    n = np.minimum(n, t)
    ranks = n.reshape(int(ep), -1)
    return ranks[int(np.argmax(ranks.sum(axis=1)))].copy()
