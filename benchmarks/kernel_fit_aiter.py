"""Fit moesym's analytical kernel model per AMD Instinct GPU and kernel class to aiter's tables.

    python benchmarks/kernel_fit_aiter.py DIR [--gpu mi300x --gpu mi355x] [--write] [--heldout]

DIR holds aiter's tuner tables as aiter keeps them (``aiter/configs/``: ``*_tuned_*.csv`` and
``model_configs/``; ROCm/aiter @ e404860, MIT); the reading is
:mod:`moesym.kernels.aiter`, the fitting :mod:`moesym.kernels.fit` and the held-out discipline,
physics check and fused-MoE mechanisms those of ``benchmarks/kernel_fit_aic.py`` (imported).

GPUs. MI300X is fitted on the gfx942 304-CU rows and MI355X on the gfx950 256-CU rows. MI325X
(the MI300X die with faster HBM) takes MI300X's fit, transferred, timed with its own 6.0 TB/s:
the 304-CU rows do not say which of the two ran them. MI350X (the MI355X die at 2.2 GHz) takes
MI355X's fit, transferred by the clock ratio 2.2 / 2.4 (:func:`clock_transfer`).

Kernel classes, each fitted on its own rows with every other shape held out (GEMM: (N, K);
fused MoE: hidden, inter, top-k, experts), rows faster than physics (FLOPs at the datasheet peak
of the class's format, or bytes at the datasheet HBM bandwidth: :func:`moesym.kernels.fit.
physical_floor_s`) excluded and counted:

- dense GEMM (:data:`moesym.kernels.aiter.GEMM_CLASSES`): ``bf16``, ``fp8`` (per-token / per-
  channel scales), ``fp8_block`` (1 x 128 / 128 x 128 block scales, DeepSeek-V3's), ``fp4``
  (MXFP4, MI355X); N and K >= 256 (``kernel_fit_aic.MIN_GEMM_DIM``). A tuner sweeps M finely on
  a few shapes (4112 rows of one (N, K) on MI355X), so the fit sees at most THIN_ROWS rows of each
  shape, spread evenly in log M; the held-out error is over every row of the held-out shapes.
  AMD's tuned GEMMs tile M by 16 at few rows (``tile_m_min_rows``), narrow N only to their
  smallest efficient tile (``tile_n_min_cols``) and split K over idle CUs (``split_k_max``):
  each chosen on GEMM_GRID by the lowest training median.
- fused MoE (:data:`moesym.kernels.aiter.MOE_CLASSES`), one-stage and two-stage apart, on the
  class's GEMM fit of the same tensor-core format: the mechanisms of
  ``kernel_fit_aic.MOE_BACKEND_PARAMS`` and a time per tile of its own
  (``grouped_tile_overhead_us``: aiter's MoE stages run tiles of 16-128 rows and K = inter, whose
  fixed cost the dense GEMMs' does not give), timed as the tuner times them (the two stages'
  GEMMs only: :func:`moesym.kernels.aiter.predict_fused_moe`) with the experts random routing
  gives rows (:func:`moesym.kernels.aiter.active_experts`). The M block each expert's rows pad to
  is the tuner's choice per row (``block_m``), which a model of an untuned shape cannot read: the
  model's rule is the one of the lowest training median of a fixed block (the class's most common
  ``block_m``) and the block following the rows per expert (``grouped_launch_tile_max_rows``),
  and the held-out error is that rule's.

Storage (``--write``): the tensor-core format of each GEMM weight class picks its calibration
(:meth:`moesym.kernels.timing.KernelTiming.bind`): ``[kernel]`` holds the FP8 block-scale GEMM
fit and the FP8 block-scale fused MoE's (FORMATS), ``[kernel.dtypes.bf16]`` and
``[kernel.dtypes.fp4]`` the BF16 and MXFP4 ones; the other classes (FP8 per-token GEMM, MXFP8,
FP8-activation / FP4-weight, BF16-activation / FP4 or INT4-weight MoE) are fitted and reported
but time as their format's table. MI300X has no BF16 table in aiter's files but a 26-row batched
one: its BF16 GEMMs take MI355X's BF16 fit per CU (:func:`moesym.specs.kernel_calib.transferred`),
checked on those rows. Attention has no aiter table: ATTENTION_RULE sets it, written into the
file's ``transferred`` record, which moesym names in a warning whenever the calibration is used.

``--heldout`` writes the AMD rows of ``bench_data/kernel_heldout.json`` (``amd_rows``, beside the
NVIDIA fits' ``rows``; the other GPUs' rows kept): per GPU and class, ``median`` / ``p90`` of
|model / measured - 1| on the held-out shapes for the committed calibration that times the class
(gemm; moe ``kernel_median``) and for the class's own fit (gemm ``own_median``; moe ``median``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import sys
import warnings
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))  # kernel_fit_aic, imported as a module

from kernel_fit_aic import (
    GEMM_SHAPE,
    HELDOUT_JSON,
    MIN_GEMM_DIM,
    MOE_BACKEND_PARAMS,
    MOE_SHAPE,
    MOE_TERM_MIN,
    _physical,
    _stats,
)

from moesym.io.resources import data_dir
from moesym.kernels import aiter
from moesym.specs.kernel_calib import (
    DEFAULTS,
    DTYPES_KEY,
    MOE_KERNEL_KEYS,
    KernelCalib,
    kernel_calib,
    transferred,
)
from moesym.kernels.fit import (
    fit_gemm,
    fit_moe,
    predict_rows,
    replace_toml_table,
    split_shapes,
    write_kernel_table,
)
from moesym.specs.hardware import load_hardware

SOURCE = "aiter tuned kernel tables (ROCm/aiter @ e404860, aiter/configs, MIT)"
ENGINE = "aiter's tuner (ROCm/aiter @ e404860)"
ROWS_OF = {"mi300x": "gfx942, 304 CUs", "mi355x": "gfx950, 256 CUs"}
TRANSFERRED = {"mi325x": "mi300x", "mi350x": "mi355x"}
# tensor-core format -> (GEMM class, fused-MoE class) whose fits its calibration stores; fp8 is
# [kernel] (the FP8 block-scale checkpoints moesym's fp8 weights are, DeepSeek-V3's; as
# kernel_fit_aic._fit_dtype on NVIDIA), the others [kernel.dtypes.FORMAT]
FORMATS = {"fp8": ("fp8_block", "fp8_block"), "bf16": ("bf16", "bf16"), "fp4": ("fp4", "fp4")}
DEFAULT_FORMAT = "fp8"
MIN_FIT_ROWS = 20  # a class is fitted from this many rows (the done-when target counts >= 50)
TARGET_ROWS = 50
THIN_ROWS = 64  # rows of one (N, K) shape the GEMM fit sees at most, evenly spread in log M
# the dense GEMM tiling of AMD's tuned kernels, chosen by the lowest training median
GEMM_GRID = {"tile_m_min_rows": (16, 32, 0), "tile_n_min_cols": (16, 64, 128),
             "split_k_max": (0, 4, 16)}
GEMM_STARTS = (0.76, 0.4)  # gemm_tensor_frac the fit starts from (the cost has local minima)
GEMM_FIELDS = ("tile_m_rows", "tile_n_max_cols", "tile_n_min_cols", "tile_m_min_rows",
               "split_k_max", "gemm_tensor_frac", "tile_overhead_us", "sm_bandwidth_GBps",
               "gemm_hbm_frac", "launch_us")
MOE_PARAMS = MOE_BACKEND_PARAMS + ("grouped_tile_overhead_s",)
MOE_FIELDS = ("grouped_contiguous_tensor_frac", "grouped_masked_tensor_frac", *MOE_KERNEL_KEYS)
MOE_MIN_BLOCKS = (16, 32)  # smallest M block of the launch-following rule, by training median
# attention: aiter publishes no attention tables
ATTENTION_FROM = "h200"
ATTENTION_RULE = ("attention NOT FITTED (aiter publishes no attention tables): tensor fractions "
                  "= this GPU's BF16 GEMM fit's gemm_tensor_frac, HBM fractions = its [kernel] "
                  f"GEMM fit's gemm_hbm_frac; tiles, KV split, launch and per-unit times from "
                  f"hardware/{ATTENTION_FROM}.toml's TensorRT-LLM fit (the kernels' structure, not "
                  "their rates); no CUDA-core MHA decode rate")
ATTENTION_SHORT = (f"transferred by rule (no aiter table): BF16 GEMM tensor fraction, GEMM HBM "
                   f"fraction, hardware/{ATTENTION_FROM}.toml's kernel structure")
CLOCK_GHZ = {"mi355x": 2.4, "mi350x": 2.2}  # peak engine clocks (data sheets)


# ------------------------------------------------------------------------------------ frames
def gemm_frame(root: Path, gpu: str, cls: str, hw) -> tuple[pd.DataFrame, int, dict]:
    """``(rows, excluded, dropped)``: the class's GEMM rows of ``gpu`` with N, K >= 256 and
    their format's peak, rows faster than physics on ``hw`` excluded (counted)."""
    g, dropped = aiter.gemm_rows(root, gpu, cls)
    if not len(g):
        return g, 0, dropped
    g = g[(g.n >= MIN_GEMM_DIM) & (g.k >= MIN_GEMM_DIM)]
    g = g.assign(peak_flops=hw.peak_flops(g.dtype.iloc[0]))
    g, excluded = _physical(g.reset_index(drop=True), "gemm", hw)
    return g, excluded, dropped


def moe_frames(root: Path, gpu: str, hw) -> dict:
    """``{(class, stages): (rows, excluded)}``: the fused-MoE rows of ``gpu`` by class and
    stage count, each with its activations' format peak, rows faster than physics excluded."""
    m, _dropped = aiter.moe_rows(root, gpu)
    out = {}
    if not len(m):
        return out
    for (cls, stages), r in m.groupby(["table_dtype", "stages"], sort=True):
        r = r.assign(peak_flops=[hw.peak_flops(d) for d in r.dtype])
        out[(cls, int(stages))] = _physical(r.reset_index(drop=True), "moe", hw)
    return out


def thinned(rows: pd.DataFrame, cap: int = THIN_ROWS) -> np.ndarray:
    """Mask of at most ``cap`` rows per (N, K) shape, the rows nearest to ``cap`` points evenly
    spread in log M over the shape's range.

    >>> df = pd.DataFrame({"n": [1.0] * 5 + [2.0], "k": [1.0] * 6, "m": [1, 2, 4, 8, 16, 1.0]})
    >>> thinned(df, 3).tolist()
    [True, False, True, False, True, True]
    """
    keep = np.zeros(len(rows), bool)
    lm = np.log(rows.m.to_numpy(float))
    for idx in rows.groupby(list(GEMM_SHAPE)).indices.values():
        if len(idx) <= cap:
            keep[idx] = True
            continue
        for t in np.linspace(lm[idx].min(), lm[idx].max(), cap):
            keep[idx[np.argmin(np.abs(lm[idx] - t))]] = True
    return keep


# ------------------------------------------------------------------------------------- fits
def fit_gemm_class(g: pd.DataFrame, hw):
    """The class's GEMM fit (every other (N, K) held out, training rows thinned): GEMM_GRID and
    GEMM_STARTS tried, the lowest training median kept."""
    ho = split_shapes(g, GEMM_SHAPE)
    use = thinned(g) | ho  # every held-out row is evaluated; the fit sees the thinned rest
    sub, ho_sub = g[use].reset_index(drop=True), ho[use]
    best = None
    for values in itertools.product(*GEMM_GRID.values()):
        for start in GEMM_STARTS:
            base = replace(DEFAULTS, gemm_tensor_frac=start, **dict(zip(GEMM_GRID, values)))
            r = fit_gemm(sub, sms=hw.sms, peak_flops=None, hbm_bw_Bps=hw.hbm_bw_Bps, base=base,
                         holdout=ho_sub, infersim_masked=False)
            if best is None or r.train_median < best.train_median:
                best = r
    return best.calib, gemm_errors(g, best.calib, hw), int((~ho_sub).sum())


def gemm_errors(g: pd.DataFrame, calib: KernelCalib, hw) -> dict:
    """median / p90 of |model / measured - 1| on the held-out shapes (every row), and train."""
    ho = split_shapes(g, GEMM_SHAPE)
    pred = predict_rows(g, calib, sms=hw.sms, peak_flops=None, hbm_bw_Bps=hw.hbm_bw_Bps,
                        infersim_masked=False)
    meas = g.latency_s.to_numpy()
    return {**_stats(pred[ho], meas[ho]), "train_median": _stats(pred[~ho], meas[~ho])["median"],
            "rows_held_out": int(ho.sum()), "rows_train": int((~ho).sum())}


def moe_rule_calibs(r: pd.DataFrame, base: KernelCalib) -> list[tuple[str, KernelCalib, tuple]]:
    """The M-block rules a fused-MoE class's model may run (``(name, base, tile_m_min)``): the
    class's most common block (a fixed block) and the block following the rows per expert up
    to the class's largest block."""
    mode, top = int(r.block_m.mode().iloc[0]), int(r.block_m.max())
    return [(f"fixed {mode}-row block", replace(base, grouped_tile_m_rows=mode), (0,)),
            (f"block following the rows per expert, at most {top}",
             replace(base, grouped_launch_tile_max_rows=top), MOE_MIN_BLOCKS)]


def fit_moe_class(r: pd.DataFrame, hw, base: KernelCalib):
    """``(calib, rule, errors, rows_fitted)``: the class's fused-MoE fit on ``base`` (its
    format's GEMM calibration), every other shape held out, with the M-block rule of the
    lowest training median (:func:`moe_rule_calibs`); errors of that rule on the held-out
    shapes, and of the tuner's own blocks (``tuner_block_median``)."""
    ho = split_shapes(r, MOE_SHAPE)
    plain = r.drop(columns=["block_m"])
    best = None
    for name, b, tmin in moe_rule_calibs(r, base):
        res = fit_moe(plain, sms=hw.sms, hbm_bw_Bps=hw.hbm_bw_Bps, base=b, holdout=ho,
                      params=MOE_PARAMS, tile_m_min=tmin, predict=aiter.predict_fused_moe)
        if best is None or res.train_median < best[1].train_median:
            best = (name, res)
    tuner = fit_moe(r, sms=hw.sms, hbm_bw_Bps=hw.hbm_bw_Bps, base=base, holdout=ho,
                    params=MOE_PARAMS, predict=aiter.predict_fused_moe)
    name, res = best
    calib = _moe_terms(res.calib)
    return calib, name, {**moe_errors(r, calib, hw), "tuner_block_median": tuner.test_median}, \
        int((~ho).sum())


def _moe_terms(c: KernelCalib) -> KernelCalib:
    """Fitted backend terms below MOE_TERM_MIN (in their TOML units) set to 0: not used (the
    time per tile kept: its 0 would mean the dense GEMMs', and its bound, 1 ns, none)."""
    small = {k: v for k, v in c.to_toml_values().items()
             if k in MOE_KERNEL_KEYS and 0 < abs(v) < MOE_TERM_MIN
             and k != "grouped_tile_overhead_us"}
    return replace(c, **{_field(k): 0 for k in small}) if small else c


def _field(toml_key: str) -> str:
    from moesym.specs.kernel_calib import _KEYS

    return _KEYS[toml_key][0]


def moe_errors(r: pd.DataFrame, calib: KernelCalib, hw) -> dict:
    """median / p90 on the held-out shapes of a fused-MoE class, timed by ``calib``'s rule."""
    ho = split_shapes(r, MOE_SHAPE)
    pred = aiter.predict_fused_moe(r.drop(columns=["block_m"]), calib, sms=hw.sms,
                                   hbm_bw_Bps=hw.hbm_bw_Bps)
    meas = r.latency_s.to_numpy()
    return {**_stats(pred[ho], meas[ho]), "train_median": _stats(pred[~ho], meas[~ho])["median"],
            "rows_held_out": int(ho.sum()), "rows_train": int((~ho).sum())}


def fit_gpu(root: Path, gpu: str) -> dict:
    """Every class of ``gpu`` with MIN_FIT_ROWS rows or more, and the calibration of each
    tensor-core format (:data:`FORMATS`) built from them."""
    hw = load_hardware(gpu)
    out = {"gpu": gpu, "gemm": {}, "moe": {}, "calibs": {}, "notes": {}}
    for cls in aiter.GEMM_CLASSES:
        g, exc, dropped = gemm_frame(root, gpu, cls, hw)
        if len(g) < MIN_FIT_ROWS:
            continue
        calib, err, n_fit = fit_gemm_class(g, hw)
        out["gemm"][cls] = {"calib": calib, "errors": err, "rows_fitted": n_fit,
                            "excluded": exc, "dropped": dropped, "rows": len(g)}
        print(f"== {gpu} gemm {cls}: {len(g)} rows ({exc} faster than physics, dropped {dropped}"
              f"): held-out median {err['median']:.1%} p90 {err['p90']:.1%} "
              f"(train {err['train_median']:.1%}, {n_fit} rows fitted)", flush=True)
    for fmt, (gcls, _m) in FORMATS.items():
        if gcls in out["gemm"]:
            out["calibs"][fmt] = out["gemm"][gcls]["calib"]
    if "bf16" not in out["calibs"] and DEFAULT_FORMAT in out["calibs"]:
        out["calibs"]["bf16"], out["notes"]["bf16"] = bf16_transfer(root, gpu, hw)
    frames = moe_frames(root, gpu, hw)
    for (cls, stages), (r, exc) in frames.items():
        fmt = r.dtype.iloc[0]
        if len(r) < MIN_FIT_ROWS or fmt not in out["calibs"]:
            continue
        calib, rule, err, n_fit = fit_moe_class(r, hw, out["calibs"][fmt])
        out["moe"][(cls, stages)] = {"calib": calib, "rule": rule, "errors": err,
                                     "rows_fitted": n_fit, "excluded": exc, "rows": len(r),
                                     "format": fmt}
        print(f"== {gpu} moe {cls} {stages}-stage: {len(r)} rows ({exc} faster than physics): "
              f"held-out median {err['median']:.1%} p90 {err['p90']:.1%} ({rule}; the tuner's "
              f"own blocks {err['tuner_block_median']:.1%})", flush=True)
    for fmt, (_g, mcls) in FORMATS.items():  # each format's fused MoE: its most measured stage
        fits = [(v["rows"], k) for k, v in out["moe"].items() if k[0] == mcls]
        if fits and fmt in out["calibs"]:
            key = max(fits)[1]
            moe = out["moe"][key]["calib"]
            out["calibs"][fmt] = replace(out["calibs"][fmt],
                                         **{f: getattr(moe, f) for f in _moe_field_names()})
            out["notes"][f"moe {fmt}"] = key
    default_moe = out["notes"].get(f"moe {DEFAULT_FORMAT}")
    for fmt, (_g, mcls) in FORMATS.items():  # too few rows to fit: [kernel]'s, checked on them
        few = [(k, r) for k, (r, _e) in frames.items() if k[0] == mcls and k not in out["moe"]]
        if f"moe {fmt}" in out["notes"] or not few or fmt not in out["calibs"] or not default_moe:
            continue
        calib = replace(out["calibs"][fmt], **{f: getattr(out["calibs"][DEFAULT_FORMAT], f)
                                              for f in _moe_field_names()})
        for (cls, stages), r in few:
            pred = aiter.predict_fused_moe(r.drop(columns=["block_m"]), calib, sms=hw.sms,
                                           hbm_bw_Bps=hw.hbm_bw_Bps)
            st = _stats(pred, r.latency_s.to_numpy())
            out["notes"][f"moe check {fmt}"] = (
                f"fused MoE {cls} {stages}-stage: {len(r)} rows, too few to fit (< "
                f"{MIN_FIT_ROWS}): timed with [kernel]'s fused-MoE keys ({default_moe[0]} "
                f"{default_moe[1]}-stage), median {st['median']:.1%} p90 {st['p90']:.1%} on them")
            print(f"== {gpu} {out['notes'][f'moe check {fmt}']}", flush=True)
    return out


def _moe_field_names() -> tuple[str, ...]:
    return tuple(_field(k) if k in MOE_KERNEL_KEYS else k for k in MOE_FIELDS)


def bf16_transfer(root: Path, gpu: str, hw) -> tuple[KernelCalib, str]:
    """A GPU without BF16 GEMM rows (MI300X): the BF16 fit of the GPU of the other CDNA
    generation with rows (MI355X), carried per CU (:func:`transferred`), and its error on the
    GPU's batched BF16 rows (bf16_tuned_batched_gemm.csv, 16 GEMMs per launch), where it has
    them."""
    other = next(g for g in ROWS_OF if g != gpu)
    ohw = load_hardware(other)
    g, _exc, _d = gemm_frame(root, other, "bf16", ohw)
    calib, _err, _n = fit_gemm_class(g, ohw)
    calib = transferred(calib, ohw, hw, f"transferred from {other}'s BF16 fit")
    note = f"BF16 GEMM transferred from {other}'s BF16 fit (per CU)"
    path = Path(root) / "bf16_tuned_batched_gemm.csv"
    b = pd.read_csv(path) if path.is_file() else pd.DataFrame()
    if len(b):
        b = b[[aiter.gpu_of(x, c) == aiter.AITER_GPUS_ROWS.get(gpu, gpu)
               for x, c in zip(b.get("gfx", [None] * len(b)), b.cu_num)]]
    if len(b):
        rows = pd.DataFrame({"m": b.M.astype(float), "n": b.N.astype(float),
                             "k": b.K.astype(float), "groups": b.B.astype(float),
                             "layout": "dense", "op_bytes": 2.0,
                             "peak_flops": hw.peak_flops("bf16")})
        pred = predict_rows(rows, calib, sms=hw.sms, peak_flops=None, hbm_bw_Bps=hw.hbm_bw_Bps,
                            infersim_masked=False)
        st = _stats(pred, b.us.to_numpy(float) * 1e-6)
        note += (f"; on its {len(b)} batched BF16 rows (bf16_tuned_batched_gemm.csv, 16 GEMMs "
                 f"a launch): median {st['median']:.1%}, p90 {st['p90']:.1%}")
    print(f"== {gpu} {note}", flush=True)
    return calib, note


def attention_transfer(calib: KernelCalib, bf16: KernelCalib) -> KernelCalib:
    """``calib`` with its attention fields set by ATTENTION_RULE."""
    src = kernel_calib(load_hardware(ATTENTION_FROM))
    attn = {f.name: getattr(src, f.name) for f in fields(KernelCalib)
            if f.name.startswith("attention_")}
    attn.update(attention_tensor_frac=bf16.gemm_tensor_frac,
                attention_prefill_tensor_frac=bf16.gemm_tensor_frac,
                attention_hbm_frac=calib.gemm_hbm_frac,
                attention_mla_hbm_frac=calib.gemm_hbm_frac,
                attention_mha_decode_flops_per_s=0.0)
    return replace(calib, **attn)


def clock_transfer(c: KernelCalib, source: str, target: str) -> KernelCalib:
    """A fit carried to the same die at another engine clock (MI355X -> MI350X): fractions and
    tiles kept (per CU and clock), per-CU load rate scaled with the clock (bytes per CU per
    clock), per-tile times scaled with its inverse (cycles); launch and fixed times kept (host
    and command processor).

    >>> c = clock_transfer(DEFAULTS, "mi355x", "mi350x")
    >>> round(c.sm_bandwidth_Bps / DEFAULTS.sm_bandwidth_Bps, 4), c.launch_s == DEFAULTS.launch_s
    (0.9167, True)
    """
    r = CLOCK_GHZ[target] / CLOCK_GHZ[source]
    return replace(c, sm_bandwidth_Bps=c.sm_bandwidth_Bps * r,
                   tile_overhead_s=c.tile_overhead_s / r,
                   grouped_tile_overhead_s=c.grouped_tile_overhead_s / r)


# ----------------------------------------------------------------------------------- writing
def _values(c: KernelCalib, keys) -> dict:
    vals = c.to_toml_values()
    return {k: vals[k] for k in keys if k in vals}


def _fmt(v) -> str:
    return str(int(v)) if float(v) == int(v) and abs(v) >= 1 else f"{v:.4g}"


def dtype_block(fmt: str, calib: KernelCalib, comments: list[str], record: dict,
                keys=GEMM_FIELDS) -> str:
    """The ``[kernel.dtypes.FORMAT]`` table: ``calib``'s values of ``keys`` (its GEMM keys,
    and its fused-MoE keys where the format has its own fit) over ``[kernel]``."""
    vals = _values(calib, keys)
    lines = [f"# {c}" for c in comments] + [f"[kernel.{DTYPES_KEY}.{fmt}]"]
    lines += [f"{k} = {_fmt(v)}" for k, v in vals.items()]
    lines.append(f'source = "{calib.source}"')
    if record.get("heldout_error"):
        inner = ", ".join(f"{k} = {v:.3f}" for k, v in record["heldout_error"].items())
        lines.append(f"heldout_error = {{ {inner} }}")
    return "\n".join(lines) + "\n"


def _class_lines(fit: dict, fmt: str) -> tuple[list[str], dict]:
    """Comment lines and held-out record of the classes a format's calibration holds."""
    gcls, mcls = FORMATS[fmt]
    lines, held = [], {}
    if gcls in fit["gemm"]:
        e = fit["gemm"][gcls]
        lines.append(f"gemm {gcls}: {e['rows']} rows, {e['rows_fitted']} fitted (at most "
                     f"{THIN_ROWS} per (N, K)), held-out median {e['errors']['median']:.1%} p90 "
                     f"{e['errors']['p90']:.1%}; {e['excluded']} rows faster than physics "
                     "excluded")
        held["gemm"] = e["errors"]["median"]
    elif fmt in fit["notes"]:
        lines.append(f"gemm {gcls}: NOT FITTED: {fit['notes'][fmt]}")
    key = fit["notes"].get(f"moe {fmt}")
    if key:
        e = fit["moe"][key]
        lines.append(f"fused MoE {key[0]} {key[1]}-stage: {e['rows']} rows, held-out median "
                     f"{e['errors']['median']:.1%} p90 {e['errors']['p90']:.1%} (M block: "
                     f"{e['rule']}); {e['excluded']} rows faster than physics excluded")
        held["moe"] = e["errors"]["median"]
    else:
        lines.append(fit["notes"].get(f"moe check {fmt}", f"fused MoE {mcls}: no rows; the "
                                                          "grouped-GEMM keys are [kernel]'s"))
    return lines, held


def write_gpu(fit: dict, date: str) -> None:
    """Store a fitted GPU's ``[kernel]`` (the FP8 block-scale classes, attention by
    ATTENTION_RULE) and ``[kernel.dtypes.FORMAT]`` tables in hardware/<gpu>.toml."""
    gpu = fit["gpu"]
    path = data_dir("hardware") / f"{gpu}.toml"
    base = fit["calibs"][DEFAULT_FORMAT]
    calib = attention_transfer(base, fit["calibs"].get("bf16", base))
    calib = replace(calib, source=f"fit to {SOURCE} ({ROWS_OF[gpu]}): GEMM and fused MoE; "
                                  f"attention {ATTENTION_SHORT}")
    lines, held = _class_lines(fit, DEFAULT_FORMAT)
    lines = [(f"data: {SOURCE}, the {ROWS_OF[gpu]} rows; each kernel class fitted on its own "
              "rows, every other shape held out; [kernel] times FP8 (block-scale) GEMMs and the "
              f"rest, [kernel.{DTYPES_KEY}.FORMAT] the GEMMs computing in FORMAT"),
             *lines, ATTENTION_RULE,
             (f"refit with: python benchmarks/kernel_fit_aiter.py AITER_CONFIGS_DIR --gpu {gpu} "
              "--write")]
    write_kernel_table(path, calib, lines, date,
                       {"engine": ENGINE, "fit_date": date, "heldout_error": held,
                        "transferred": ATTENTION_RULE})
    for fmt in FORMATS:
        if fmt == DEFAULT_FORMAT or fmt not in fit["calibs"]:
            continue
        c = fit["calibs"][fmt]
        own = FORMATS[fmt][0] in fit["gemm"]
        c = replace(c, source=(f"fit to {SOURCE} ({ROWS_OF[gpu]})" if own else
                               f"{fit['notes'].get(fmt, 'transferred')}"))
        comments, held = _class_lines(fit, fmt)
        comments = [(f"the GEMMs computing in {fmt}, written {date} by "
                     "benchmarks/kernel_fit_aiter.py --write"), *comments]
        keys = GEMM_FIELDS + (MOE_FIELDS if f"moe {fmt}" in fit["notes"] else ())
        replace_toml_table(path, f"kernel.{DTYPES_KEY}.{fmt}",
                           dtype_block(fmt, c, comments, {"heldout_error": held}, keys))
    print(f"wrote [kernel] and its format tables to {path}")


def write_transferred(target: str, date: str) -> None:
    """Store the committed fit of TRANSFERRED[target] in hardware/<target>.toml, marked
    transferred (MI325X: as measured on the same die; MI350X: by the clock ratio)."""
    import tomllib

    source = TRANSFERRED[target]
    src_path = data_dir("hardware") / f"{source}.toml"
    table = tomllib.loads(src_path.read_text())["kernel"]
    hw_s = load_hardware(source)
    clocked = target in CLOCK_GHZ and source in CLOCK_GHZ
    why = (f"transferred from {source}'s fit on {SOURCE} ({ROWS_OF[source]} rows) by the clock "
           f"ratio {CLOCK_GHZ[target]} / {CLOCK_GHZ[source]} GHz (same die): fractions and "
           "tiles per CU kept, per-CU load rate x the ratio, per-tile times / the ratio"
           if clocked else
           f"transferred from {source}'s fit on {SOURCE} ({ROWS_OF[source]} rows): the same "
           f"die; the tables do not say whether an MI300X or an {target.upper()} ran them, "
           f"timed here with {target}'s own HBM bandwidth")
    path = data_dir("hardware") / f"{target}.toml"

    def carried(fmt: str | None) -> KernelCalib:
        c = kernel_calib(hw_s, fmt)
        return clock_transfer(c, source, target) if clocked else c

    calib = replace(carried(None), source=why)
    write_kernel_table(path, calib, [f"NOT FITTED on {target}: {why}",
                                     f"transferred: {table.get('transferred', '')}",
                                     (f"refit with: python benchmarks/kernel_fit_aiter.py "
                                      f"AITER_CONFIGS_DIR --write (after {source})")],
                       date, {"fit_date": date, "transferred": table.get("transferred", "")})
    for fmt, own in table.get(DTYPES_KEY, {}).items():
        c = replace(carried(fmt), source=why)
        replace_toml_table(path, f"kernel.{DTYPES_KEY}.{fmt}",
                           dtype_block(fmt, c, [f"the GEMMs computing in {fmt}: {why}"], {},
                                       tuple(k for k in own if k not in ("source",
                                                                         "heldout_error"))))
    print(f"wrote [kernel] to {path} ({why})")


# ---------------------------------------------------------------------------------- held out
def heldout_rows(root: Path, fit: dict, gpu: str) -> list[dict]:
    """Rows of the held-out table for ``gpu`` (MI325X: MI300X's rows and fits, timed with its
    own committed calibration and HBM): each class's own fit and the committed calibration of
    the format that times it."""
    hw = load_hardware(gpu)
    out = []
    for cls, e in fit["gemm"].items():
        g, exc, _d = gemm_frame(root, gpu, cls, hw)
        fmt = aiter.GEMM_CLASSES[cls][2]
        committed = kernel_calib(hw, fmt)
        rt = gemm_errors(g, committed, hw)
        own = gemm_errors(g, e["calib"], hw)
        out.append({"gpu": gpu, "class": "gemm", "backend": cls, "engine": ENGINE, "dtype": cls,
                    "rows": len(g), "rows_fitted": e["rows_fitted"],
                    "rows_held_out": rt["rows_held_out"],
                    "excluded": exc, "median": rt["median"], "p90": rt["p90"],
                    "own_median": own["median"], "own_p90": own["p90"],
                    "calibration": _table_of(hw, fmt), "source": SOURCE})
    for (cls, stages), e in fit["moe"].items():
        r, exc = moe_frames(root, gpu, hw)[(cls, stages)]
        committed = kernel_calib(hw, e["format"])
        rt = moe_errors(r, committed, hw)
        own = moe_errors(r, e["calib"], hw)
        used = fit["notes"].get(f"moe {e['format']}") == (cls, stages)
        out.append({"gpu": gpu, "class": "moe", "backend": f"aiter {cls} {stages}-stage",
                    "engine": ENGINE, "dtype": cls, "rows": len(r),
                    "rows_fitted": e["rows_fitted"],
                    "rows_held_out": own["rows_held_out"], "excluded": exc,
                    "median": own["median"], "p90": own["p90"],
                    "kernel_median": rt["median"], "kernel_p90": rt["p90"], "used": used,
                    "m_block": e["rule"], "tuner_block_median": e["errors"]["tuner_block_median"],
                    "calibration": _table_of(hw, e["format"]), "source": SOURCE})
    return out


def _table_of(hw, fmt: str) -> str:
    from moesym.specs.kernel_calib import dtype_tables

    return f"[kernel.{DTYPES_KEY}.{fmt}]" if fmt in dtype_tables(hw) else "[kernel]"


def write_heldout(rows: list[dict], gpus: list[str], date: str) -> Path:
    """Replace the rows of ``gpus`` in bench_data/kernel_heldout.json's ``amd_rows`` (the
    others kept; the NVIDIA fits' ``rows`` untouched: benchmarks/kernel_fit_aic.py writes
    those, and tests/test_validate.py reads them as the AIConfigurator GPUs' alone)."""
    path = data_dir("bench_data") / HELDOUT_JSON
    doc = json.loads(path.read_text())
    doc["amd_rows"] = [r for r in doc.get("amd_rows", []) if r["gpu"] not in gpus] + rows
    doc["amd"] = {"source": SOURCE, "written": date,
                  "how": "benchmarks/kernel_fit_aiter.py AITER_CONFIGS_DIR --heldout: per AMD GPU "
                         "and kernel class, |model / measured - 1| on the shapes held out of the "
                         "fit (every other shape); gemm median / p90: the committed calibration "
                         "of the class's tensor-core format ([kernel] or [kernel.dtypes.FORMAT]), "
                         "own_median / own_p90: the class's own fit; moe median / p90: the "
                         "class's own fit, kernel_median / kernel_p90: the committed calibration "
                         "(used: the class whose fit it holds), m_block: the M-block rule "
                         "timed (tuner_block_median: with the tuner's own block_m per row); "
                         "excluded: rows faster than their FLOPs at peak or bytes at peak HBM "
                         "bandwidth; mi325x: the 304-CU rows timed with MI325X's calibration "
                         "(transferred from mi300x) and HBM"}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def table(rows: list[dict]) -> str:
    """The held-out table as text (median / p90, committed calibration and own fit)."""
    lines = [(f"{'GPU':<7} {'class':<5} {'kernel':<26} {'rows':>6} {'held':>6} {'excl':>5} "
              f"{'median':>7} {'p90':>7}  as timed by the committed table of its format")]
    for r in rows:
        own = ((r["median"], r["p90"]) if r["class"] == "moe" else (r["own_median"], r["own_p90"]))
        timed = ((r["kernel_median"], r["kernel_p90"]) if r["class"] == "moe"
                 else (r["median"], r["p90"]))
        flag = "" if r["rows"] >= TARGET_ROWS else "  (< 50 rows)"
        lines.append(f"{r['gpu']:<7} {r['class']:<5} {r['backend']:<26} "
                     f"{r['rows']:>6} {r['rows_held_out']:>6} {r['excluded']:>5} "
                     f"{own[0]:>7.1%} {own[1]:>7.1%}  {timed[0]:.1%} / {timed[1]:.1%} "
                     f"{r['calibration']}{flag}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="aiter's configs folder (*_tuned_*.csv, "
                                              "model_configs/)")
    ap.add_argument("--gpu", action="append", default=None, choices=sorted(ROWS_OF),
                    help="GPUs to fit (default: both); their transferred siblings follow")
    ap.add_argument("--write", action="store_true",
                    help="store each fitted GPU's [kernel] and [kernel.dtypes.*] tables and the "
                         "transferred ones (mi325x, mi350x) in hardware/")
    ap.add_argument("--heldout", action="store_true",
                    help=f"write the AMD rows of bench_data/{HELDOUT_JSON} (moesym validate "
                         "--kernels)")
    a = ap.parse_args(argv)
    # the committed calibrations are read back here: their "transferred" warnings are this
    # script's own doing, and the files it writes say it
    warnings.filterwarnings("ignore", message=r"hardware mi\d+x: kernel calibration")
    date = _dt.date.today().isoformat()
    gpus = a.gpu or sorted(ROWS_OF)
    rows = []
    for gpu in gpus:
        fit = fit_gpu(a.folder, gpu)
        if a.write:
            write_gpu(fit, date)
        siblings = [t for t, s in TRANSFERRED.items() if s == gpu]
        if a.write:
            for t in siblings:
                write_transferred(t, date)
        if a.heldout:
            rows += heldout_rows(a.folder, fit, gpu)
            rows += [r for t in siblings if t in aiter.AITER_GPUS
                     for r in heldout_rows(a.folder, fit, t)]
    if a.heldout:
        print(table(rows))
        done = sorted({r["gpu"] for r in rows} | {t for g in gpus for t, s in TRANSFERRED.items()
                                                 if s == g})
        print(f"wrote {write_heldout(rows, done, date)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
