"""Fit moesym's analytical kernel model per GPU to AIConfigurator's measured kernel tables.

    python benchmarks/kernel_fit_aic.py DIR [--gpu h200 --gpu b200 ...] [--write]
        [--markdown benchmarks/kernel_fit_aic.md]

DIR is in AIConfigurator's layout (``<gpu>/<family>/<framework>/<version>/<table>.parquet``, e.g.
``aiconfigurator/aic-core/src/aiconfigurator_core/systems/data`` at commit 095f58a); the
reading is :mod:`moesym.kernels.aic`, the fitting :mod:`moesym.kernels.fit`. Per GPU (GEMM and
attention on TensorRT-LLM's tables):

- GEMM: the dtype moesym times that GPU's weights in by default: FP8 with 128-block scales
  (``fp8_block``, DeepSeek-style checkpoints) where the GPU has FP8, else BF16; shapes with
  N, K >= 256 (every linear layer of the built-in models; smaller N or K are not layer shapes).
- Fused MoE (``moe_perf``): the same dtype, balanced routing (the model's mean-rank rows;
  skewed routing is the routing model's part); TensorRT-LLM's tables where they have such rows,
  else SGLang's. The two engines differ by up to 2x at few tokens (one calibration per GPU
  here; per-engine calibration is issue 32 item 3).
- Attention: GQA prefill/decode (full attention, BF16 compute, BF16 or FP8 KV; decode with at
  most 16 query heads per KV head: larger groups run another, far slower kernel) and
  DeepSeek MLA prefill/decode.

Rows faster than physics allows (FLOPs at the dtype's datasheet peak, or bytes at the
datasheet HBM bandwidth: :func:`moesym.kernels.fit.physical_floor_s`) are excluded and counted.
Held-out error: every other shape (sorted shape keys) is left out of the fit and reported.
The engine's custom all-reduce (``[allreduce]``: fixed time, one-shot and two-shot bandwidth) is
fitted on SGLang's CUDA-graph timings (``custom_allreduce_perf``, messages up to its 8 MiB limit).
``--write`` stores each fitted ``[kernel]`` table (with the source, engine, date and held-out
errors) and ``[allreduce]`` table in hardware/<gpu>.toml (the rest of the file kept);
``--markdown`` writes the held-out table.
"""

from __future__ import annotations

import argparse
import datetime as _dt
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from moesym._resources import data_dir
from moesym.kernels import aic
from moesym.kernels.calib import DEFAULTS, kernel_calib
from moesym.kernels.fit import (fit_attention, fit_gemm, fit_moe, physical_floor_s,
                                replace_toml_table, split_shapes, write_kernel_table)
from moesym.specs.hardware import load_hardware

SOURCE = "AIConfigurator kernel tables (ai-dynamo/aiconfigurator @ 095f58a, Apache-2.0)"
MIN_GEMM_DIM = 256  # smallest N and K of the fitted GEMM shapes
GEMM_SHAPE = ("n", "k")
MOE_SHAPE = ("hidden", "inter", "topk", "experts", "tp", "ep")
ATTN_SHAPE = ("family", "phase", "shape", "kv_bytes")
# GQA decode rows with more query heads per KV head run another kernel, 10-100x below the
# bandwidth bound (median 1% of it on H200 at 48-128 heads per KV head): outside the model
MAX_DECODE_GROUP = 16
# GPUs whose SM is that of a GPU with measured DeepGEMM grouped GEMMs (InferSim's H800 tables,
# hardware/h800.toml): moesym's contiguous and masked grouped layouts are DeepGEMM's, which
# SGLang runs on Hopper; the fused-MoE tables here are other engines' kernels (TensorRT-LLM's
# CUTLASS at 0.31 of the FP8 peak, SGLang's Triton at 0.24), so these GPUs keep DeepGEMM's
# fractions and the tables are evaluated, not fitted (per-engine kernels: issue 32 item 3).
# They keep DeepGEMM's per-SM load rate too: fitted freely on TensorRT-LLM's GEMMs it falls to
# 65 GB/s, where every large FP8 GEMM tile waits on its loads and the model never turns
# tensor-bound (the GEMM held-out median is 12.3-12.8% with it kept, 10.0-10.7% without)
DEEPGEMM_FIT = {"h100": "h800", "h200": "h800"}
DEEPGEMM_KEYS = ("grouped_contiguous_tensor_frac", "grouped_masked_tensor_frac",
                 "elementwise_launch_s")
# fused-MoE tables: TensorRT-LLM's first (as GEMM and attention; on H200 its held-out error is
# 12.9% against SGLang's 20.8%), else SGLang's
MOE_FRAMEWORKS = ("trtllm", "sglang")
ENGINE_NAMES = {"sglang": "SGLang", "trtllm": "TensorRT-LLM"}


def _physical(rows: pd.DataFrame, kind: str, hw) -> tuple[pd.DataFrame, int]:
    ok = rows.latency_s.to_numpy() >= physical_floor_s(rows, kind, hw.hbm_bw_Bps)
    return rows[ok].reset_index(drop=True), int((~ok).sum())


def _fit_dtype(hw) -> str:
    return "fp8_block" if "fp8" in hw.peaks_flops else "bfloat16"


def fit_gpu(root: Path, gpu: str) -> dict:
    """Fit one GPU; returns the calibration, the per-class results and the row counts."""
    hw = load_hardware(gpu)
    dtype = _fit_dtype(hw)
    out = {"gpu": gpu, "dtype": dtype, "classes": {}, "excluded": {}, "versions": {}}
    g, v = aic.read_table(root, gpu, "gemm", "gemm_perf")
    out["versions"]["gemm"] = ("trtllm", v)
    g = aic.gemm_rows(g)
    g = g[(g.table_dtype == dtype) & (g.n >= MIN_GEMM_DIM) & (g.k >= MIN_GEMM_DIM)]
    g = g.assign(peak_flops=hw.peak_flops(aic.GEMM_DTYPES[dtype][0]))
    g, out["excluded"]["gemm"] = _physical(g, "gemm", hw)
    deepgemm = DEEPGEMM_FIT.get(gpu)
    base = DEFAULTS
    if deepgemm:  # the per-SM load rate of the same SM, as DeepGEMM measured it
        sm_bw = kernel_calib(load_hardware(deepgemm)).sm_bandwidth_Bps
        base = replace(DEFAULTS, sm_bandwidth_Bps=sm_bw)
    res = fit_gemm(g, sms=hw.sms, peak_flops=None, hbm_bw_Bps=hw.hbm_bw_Bps, base=base,
                   holdout=split_shapes(g, GEMM_SHAPE), infersim_masked=False,
                   keep=("sm_bandwidth_Bps",) if deepgemm else ())
    out["classes"]["gemm"] = (res, len(g))
    calib = res.calib

    m = pd.DataFrame()
    for fw, v in ((fw, v) for fw in MOE_FRAMEWORKS
                  for v in aic.table_versions(root, gpu, "moe", "moe_perf", fw)):
        m = aic.moe_rows(aic.read_table(root, gpu, "moe", "moe_perf", fw, version=v)[0])
        m = m[(m.table_dtype == dtype) & (m.distribution == "balanced")]
        if len(m):  # the first engine, newest version, with such rows
            out["versions"]["moe"] = (fw, v)
            break
    if len(m):
        m = m.assign(peak_flops=hw.peak_flops(aic.GEMM_DTYPES[dtype][0]))
        m, out["excluded"]["moe"] = _physical(m, "moe", hw)
        if deepgemm:  # moesym's grouped layouts are DeepGEMM's, measured on this very SM
            c = kernel_calib(load_hardware(deepgemm))
            calib = replace(calib, **{k: getattr(c, k) for k in DEEPGEMM_KEYS})
            out["moe_kept_from"] = deepgemm
        res = fit_moe(m, sms=hw.sms, hbm_bw_Bps=hw.hbm_bw_Bps, base=calib,
                      holdout=split_shapes(m, MOE_SHAPE), params=() if deepgemm else
                      ("grouped_contiguous_tensor_frac", "elementwise_launch_s"))
        out["classes"]["moe"] = (res, len(m))
        calib = res.calib

    a, v = aic.attention_rows(root, gpu)
    out["versions"]["attention"] = ("trtllm", v)
    if len(a):
        a = a[(a.phase == "prefill") | (a.heads <= MAX_DECODE_GROUP * a.kv_heads) | a.shared_kv]
        a = a.assign(peak_flops=hw.peak_flops("bf16"))
        a, out["excluded"]["attention"] = _physical(a, "attention", hw)
        res = fit_attention(a, sms=hw.sms, peak_flops=hw.peak_flops("bf16"),
                            hbm_bw_Bps=hw.hbm_bw_Bps, base=calib,
                            holdout=split_shapes(a, ATTN_SHAPE), unit_overhead=True)
        out["classes"]["attention"] = (res, len(a))
        calib = res.calib
    out["calib"] = calib
    out["allreduce"] = fit_allreduce(root, gpu)
    return out


# the engine custom all-reduce's switch points (vLLM csrc/custom_all_reduce.cuh, carried over by
# SGLang's sgl-kernel): one-shot below 256 KiB on up to 8 GPUs (512 KiB on 4, always on 2),
# two-shot up to the 8 MiB registered buffer (CustomAllreduce max_size = 8192 * 1024), NCCL beyond
ONESHOT_MAX_KIB, MAX_MIB = 256, 8


def _allreduce_model():
    """``f(message_bytes, gpus, fixed_s, oneshot_Bps, twoshot_Bps)``: the step model's own term
    (:func:`moesym.terms.comm.tp_allreduce_custom`) lambdified on 1-byte 'tokens'."""
    from types import SimpleNamespace

    import sympy as sp

    from moesym.terms.comm import tp_allreduce_custom
    from moesym.terms.dims import symbolic_dims

    m, p, tau, w1, w2 = sp.symbols("m p tau w1 w2", positive=True)
    car = SimpleNamespace(fixed_s=tau, oneshot_Bps=w1, twoshot_Bps=w2,
                          oneshot_max_bytes=ONESHOT_MAX_KIB * 1024, max_bytes=MAX_MIB * 2 ** 20)
    D = symbolic_dims()
    c = tp_allreduce_custom(D, m, car, 1.0, 0.0, group=p)
    t = (c.net_bytes / c.net_bw + c.fixed_s).subs({D.hidden: 1, D.act_bytes: 1})
    return sp.lambdify((m, p, tau, w1, w2), t, "numpy")


def fit_allreduce(root: Path, gpu: str) -> dict | None:
    """Fit the custom all-reduce's fixed time and one-/two-shot bandwidths on SGLang's
    CUDA-graph timings (messages up to the custom kernel's limit); every other message size
    held out."""
    from scipy.optimize import least_squares

    df, v = aic.read_table(root, gpu, "comm", "custom_allreduce_perf", "sglang")
    if not len(df):
        return None
    df = df[(df.backend == "sglang_graph") & (df.message_size <= MAX_MIB * 2 ** 20)]
    df = df.sort_values(["num_gpus", "message_size"]).reset_index(drop=True)
    test = (df.groupby("num_gpus").cumcount() % 2 == 1).to_numpy()
    f = _allreduce_model()
    m, p = df.message_size.to_numpy(float), df.num_gpus.to_numpy(float)
    meas = df.latency.to_numpy(float) * 1e-3

    def resid(x, sel):
        return np.log(f(m[sel], p[sel], x[0] * 1e-6, x[1] * 1e9, x[2] * 1e9) / meas[sel])

    r = least_squares(resid, [3.0, 100.0, 100.0], args=(~test,),
                      bounds=([0, 1, 1], [100, 5000, 5000]))
    pred = f(m, p, r.x[0] * 1e-6, r.x[1] * 1e9, r.x[2] * 1e9)
    err = np.abs(pred / meas - 1)
    return {"fixed_us": r.x[0], "oneshot_GBps": r.x[1], "twoshot_GBps": r.x[2], "version": v,
            "rows": len(df), "held_out": int(test.sum()), "test_median": float(np.median(err[test])),
            "test_worst": float(err[test].max()), "train_median": float(np.median(err[~test]))}


def allreduce_block(ar: dict, gpu: str, date: str) -> str:
    """The ``[allreduce]`` table text for a hardware file."""
    return "\n".join([
        f"# engine custom all-reduce, written {date} by benchmarks/kernel_fit_aic.py: fitted on "
        f"{SOURCE}, {aic.GPU_FOLDERS[gpu]}, SGLang {ar['version']} custom all-reduce under CUDA "
        f"graphs, 2-8 GPUs, messages <= {MAX_MIB} MiB ({ar['rows']} rows; every other size held "
        f"out: held-out median {ar['test_median']:.1%}, worst {ar['test_worst']:.1%})",
        "# switch points: vLLM csrc/custom_all_reduce.cuh (SGLang's sgl-kernel carries it over)",
        "[allreduce]",
        f"fixed_us = {ar['fixed_us']:.3g}",
        f"oneshot_GBps = {ar['oneshot_GBps']:.4g}",
        f"twoshot_GBps = {ar['twoshot_GBps']:.4g}",
        f"oneshot_max_KiB = {ONESHOT_MAX_KIB}",
        f"max_MiB = {MAX_MIB}",
        f'source = "fit to {SOURCE} ({aic.GPU_FOLDERS[gpu]}, SGLang {ar["version"]} '
        'custom all-reduce, CUDA graph)"']) + "\n"


def _versions(fit: dict, cls: str | None = None) -> str:
    """'TensorRT-LLM 1.3.0rc20 (gemm, attention); SGLang 0.5.14 (moe)', or one class's engine."""
    by: dict[str, list[str]] = {}
    for c, (fw, v) in fit["versions"].items():
        if v and c in fit["classes"] and cls in (None, c):
            by.setdefault(f"{ENGINE_NAMES[fw]} {v}", []).append(c)
    if cls is not None:
        return next(iter(by), "")
    return "; ".join(f"{e} ({', '.join(cs)})" for e, cs in by.items())


def markdown(fits: list[dict], date: str) -> str:
    """The held-out error table (median and 90th percentile |pred / meas - 1|)."""
    lines = [f"Held-out kernel-model error per GPU and kernel class (written {date} by "
             f"benchmarks/kernel_fit_aic.py; data: {SOURCE}). Every other "
             "shape is held out of the fit; |model / measured - 1| over the held-out rows. "
             "Excluded: rows faster than their FLOPs at peak or bytes at peak HBM bandwidth.",
             "",
             "| GPU | engine | GEMM dtype | class | rows fitted / held out | excluded | "
             "held-out median | held-out p90 |",
             "|---|---|---|---|---|---|---|---|"]
    for f in fits:
        for cls, (res, n) in f["classes"].items():
            held = res.per_group[res.per_group["split"] == "held-out"]
            rows_ho = int(held["rows"].sum())
            dtype = f["dtype"] if cls != "attention" else "bfloat16"
            label = (f"moe (evaluated: {f['moe_kept_from']}'s DeepGEMM fractions)"
                     if cls == "moe" and f.get("moe_kept_from") else cls)
            lines.append(f"| {f['gpu']} | {_versions(f, cls)} | {dtype} "
                         f"| {label} | {n - rows_ho} / {rows_ho} | {f['excluded'].get(cls, 0)} | "
                         f"{res.test_median:.1%} | {res.test_p90:.1%} |")
            if cls == "attention":  # each table's held-out median, for where the error sits
                parts = ", ".join(f"{r.table} {r.median:.0%}" for r in held.itertuples())
                lines.append(f"| | | | ({parts}) | | | | |")
        ar = f.get("allreduce")
        if ar:
            lines.append(f"| {f['gpu']} | SGLang {ar['version']} (CUDA graph) | bfloat16 | custom "
                         f"all-reduce | {ar['rows'] - ar['held_out']} / {ar['held_out']} | 0 "
                         f"| {ar['test_median']:.1%} | (worst {ar['test_worst']:.1%}) |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--gpu", action="append", default=None)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--markdown", type=Path, default=None)
    a = ap.parse_args(argv)
    gpus = a.gpu or [g for g, d in aic.GPU_FOLDERS.items() if (a.folder / d).is_dir()]
    date = _dt.date.today().isoformat()
    fits = []
    for gpu in gpus:
        f = fit_gpu(a.folder, gpu)
        fits.append(f)
        for cls, (res, n) in f["classes"].items():
            print(f"== {gpu} {cls} ({n} rows, {f['excluded'].get(cls, 0)} excluded as faster "
                  f"than physics): {res.summary()}")
        if f["allreduce"]:
            ar = f["allreduce"]
            print(f"== {gpu} custom all-reduce ({ar['rows']} rows): fixed {ar['fixed_us']:.2f} "
                  f"us, one-shot {ar['oneshot_GBps']:.0f} GB/s, two-shot "
                  f"{ar['twoshot_GBps']:.0f} GB/s; "
                  f"train median {ar['train_median']:.1%}; held-out median {ar['test_median']:.1%} "
                  f"worst {ar['test_worst']:.1%}")
        vals = f["calib"].to_toml_values()
        print("fitted:", ", ".join(f"{k}={v:.4g}" for k, v in vals.items()))
        if a.write:
            eng = _versions(f)
            calib = replace(f["calib"], source=f"fit to {SOURCE} ({aic.GPU_FOLDERS[gpu]})")
            lines = [f"data: {SOURCE}, {aic.GPU_FOLDERS[gpu]}, {eng}: GEMM and fused MoE in "
                     f"{f['dtype']}, GQA and MLA attention in bf16; every other shape held out",
                     *(f"{cls}: {res.summary()}; {f['excluded'].get(cls, 0)} rows faster than "
                       f"physics excluded" for cls, (res, _) in f["classes"].items()),
                     *([f"NOT fitted here: the per-SM load rate, the grouped-GEMM fractions and the "
                        f"elementwise launch kept from hardware/{f['moe_kept_from']}.toml's "
                        f"DeepGEMM fit (same SM); the moe errors above are that calibration's on "
                        f"this fused-MoE table"]
                       if f.get("moe_kept_from") else []),
                     "refit with: python benchmarks/kernel_fit_aic.py AIC_DATA_DIR "
                     f"--gpu {gpu} --write"]
            record = {"engine": eng, "fit_date": date,
                      "heldout_error": {c: r.test_median for c, (r, _) in f["classes"].items()}}
            write_kernel_table(data_dir("hardware") / f"{gpu}.toml", calib, lines, date, record)
            if f["allreduce"]:
                replace_toml_table(data_dir("hardware") / f"{gpu}.toml", "allreduce",
                                   allreduce_block(f["allreduce"], gpu, date))
            print(f"wrote [kernel] to hardware/{gpu}.toml")
    if a.markdown:
        a.markdown.write_text(markdown(fits, date))
        print(f"wrote {a.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
