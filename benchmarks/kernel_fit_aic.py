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
The engines' custom all-reduce (fixed time, one-shot and two-shot bandwidth; the table's
message_size counts BF16 elements) is fitted per engine on its own CUDA-graph timings
(``custom_allreduce_perf``): ``[allreduce]`` on SGLang's (messages up to the 16 MiB workspace,
one-shot and two-shot as SGLang's own switch points assign them), ``[allreduce.trtllm]`` on
TensorRT-LLM's (its switch points fitted on the table: see TRTLLM_NCCL_MARGIN); an engine
profile's ``[ENGINE.kernels] allreduce`` names the one it runs. ``--write`` stores each fitted
``[kernel]`` table (with the source, engine, date and held-out errors) and the all-reduce
tables in hardware/<gpu>.toml (the rest of the file kept); ``--markdown`` writes the fit's
held-out table; ``--allreduce-only`` fits only the all-reduce tables, ``--deepep-only`` only
DeepEP inside one node; ``--attention-only``
fits only the attention fields of ``[kernel]`` on the committed rest (GEMM and fused-MoE
fields kept as they are).

On the GPUs of DEEPGEMM_FIT, TensorRT-LLM's own dense GEMM is also fitted freely on its table,
its FP8 input cast timed apart (``[kernel.engines.trtllm]``, what ``--engine trtllm`` runs;
``--engine-gemm-only`` fits and writes only that table).

``--heldout`` evaluates the committed ``[kernel]`` (GEMM: ``[kernel.engines.trtllm]`` where
there is one) on the held-out shapes (the table
``moesym validate --kernels`` prints, bench_data/kernel_heldout.json), fits each fused-MoE
kernel on its own rows (``[moe_kernels]``, where that lowers the held-out error) and DeepEP
inside one node (``[deepep]``); with ``--write`` it stores those two tables. A fused-MoE
backend is its mechanisms, fitted on its rows (every other shape held out; apart with EP > 1,
``NAME_ep``) over the GPU's ``[kernel]`` (:func:`moesym.kernels.analytical.gemm_time`,
grouped layouts):

- grouped-GEMM tensor fraction and HBM fraction (``grouped_hbm_frac``, at most 0.95);
- N and K blocks each expert's tiles pad to (``grouped_n_block_cols``, ``grouped_k_block_cols``:
  none, or 256 and 128, FlashInfer's TRT-LLM-gen kernels' weight tiles; see MOE_BLOCKS);
- smallest M block each expert's rows pad to (``grouped_tile_m_min_rows``, 8, 16 or 64, the
  lowest training cost kept; SGLang's Triton takes 16-row blocks at M <= E in
  get_default_config), or, on the BF16 tables' Triton rows, get_default_config's fixed blocks
  whatever the rows per expert (``grouped_tile_m_rows``, ``grouped_few_tokens_tile_m_rows``:
  TRITON_DEFAULT_M_BLOCKS);
- a fixed time per grouped GEMM (the backend's routing / permute / finalize kernels) and a
  time per local expert, with or without rows (``grouped_fixed_us``, ``grouped_expert_us``);
- a time per assignment row the GEMM computes, in HBM passes over the rows' outputs
  (``grouped_row_passes``; kept where it lowers the training median by 1 point: MOE_ROW_PARAMS);
- the share of the shorter of tile and memory time not hidden under the longer
  (``grouped_serial_frac``: time = max + s min);
- where the backend's source fixes them (MOE_BACKEND_KERNELS: FlashInfer-TRTLLM), the
  memory-bound kernels it runs beside its GEMMs (``moe_elementwise_launches``) and, its kernels
  being chained with programmatic dependent launch, a time per kernel (``moe_launch_us``),
  and its default M tile, which follows the launch's assignments per local expert
  (``grouped_launch_tile_max_rows``);
- on the BF16 tables' Triton rows, the load rate of GEMMs whose K is not a multiple of 16
  elements (``grouped_unaligned_load_frac``: TRITON_UNALIGNED_PARAMS) and a time per step of
  the K loop, at get_default_config's BLOCK_SIZE_K (``grouped_k_step_us``:
  TRITON_DEFAULT_K_STEPS);
- with EP > 1, HBM passes over the output rows of assignments to other ranks' experts, which a
  grid launched over every token x top-k assignment still covers (``grouped_masked_passes``;
  SGLang's Triton writes zeros there: fused_moe_triton_kernels.py ``write_zeros_to_output``).

Each backend's balanced-fitted constants are also evaluated on its ``power_law_1.01`` /
``power_law_1.2`` rows of the held-out shapes (``power_law_*`` keys): the per-expert counts
drawn from AIConfigurator's generator (:func:`moesym.kernels.aic.power_law_counts`), each
expert's rows padded to the M tile (:mod:`moesym.kernels.skew`); nothing is fitted on them.

The tables' EP rows are read as the collector's: ``num_tokens`` tokens each with top-k experts
over all ``num_experts``, the rank's share 1/EP of the assignments
(:func:`moesym.kernels.fit.moe_assignments`; AIConfigurator's collector source is not in its
PyPI wheels, so this reading is the one the physics check and the rows agree with); SGLang
0.5.10's as a dispatched rank's input whose other ranks' rows the Triton kernel computes
(SGLANG_DISPATCHED_EP, :func:`dispatched_ep_rows`).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from moesym.engines import load_engine
from moesym.io.resources import data_dir
from moesym.kernels import aic
from moesym.specs.kernel_calib import DEFAULTS, ENGINES_KEY, MOE_KERNEL_KEYS, kernel_calib
from moesym.kernels.fit import (fit_attention, fit_gemm, fit_moe, physical_floor_s,
                                replace_toml_table, split_shapes, write_kernel_table)
from moesym.specs.hardware import DeepEPKernel, load_hardware
from moesym.terms.elementwise import fp8_input_cast

SOURCE = "AIConfigurator kernel tables (ai-dynamo/aiconfigurator @ 095f58a, Apache-2.0)"
MIN_GEMM_DIM = 256  # smallest N and K of the fitted GEMM shapes
GEMM_SHAPE = ("n", "k")
MOE_SHAPE = ("hidden", "inter", "topk", "experts", "tp", "ep")
# a held-out attention shape is held out with both its KV-cache dtypes: with the dtype in the
# key, the sorted keys alternate FP8 / BF16 within each shape, and "every other key" held out
# every BF16 GQA decode row and fitted only the FP8 ones (a dtype split, not a shape split)
ATTN_SHAPE = ("family", "phase", "shape")
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
# tensor-bound (the GEMM held-out median is 12.3-12.8% with it kept, 10.0-10.7% without).
# TensorRT-LLM's own GEMM is fitted freely apart, its input cast timed apart
# ([kernel.engines.trtllm]: 8.8% on both; --engine trtllm runs it)
DEEPGEMM_FIT = {"h100": "h800", "h200": "h800"}
DEEPGEMM_KEYS = ("grouped_contiguous_tensor_frac", "grouped_masked_tensor_frac",
                 "elementwise_launch_s")
# fused-MoE tables: TensorRT-LLM's first (as GEMM and attention; on H200 its held-out error is
# 12.9% against SGLang's 20.8%), else SGLang's
MOE_FRAMEWORKS = ("trtllm", "sglang")
ENGINE_NAMES = {"sglang": "SGLang", "trtllm": "TensorRT-LLM"}
# TensorRT-LLM's block-FP8 linear (the tables' kernel_source torch_flow) quantizes its BF16 input
# to FP8 with 1x128 scales in its own kernel before the GEMM, and the table times both; moesym
# times that cast apart (moesym.terms.elementwise.fp8_input_cast), so each row's model time is
# the GEMM plus that cast (elementwise_time of the cast's bytes). A linear fit of the H100 rows
# with M >= 4096 finds 1.8 ps per M x K element beside the FLOPs (median error 4%); with the cast
# TensorRT-LLM's own GEMM fit ([kernel.engines.trtllm]) reaches a held-out median of 8.8% on H100
# and H200 (11.1% on H100 without it). [kernel]'s GEMM (the default, DeepGEMM's load rate kept)
# is fitted as before, the cast inside the GEMM
CAST_DTYPES = ("fp8_block",)
CAST_BYTES_PER_ELEMENT = float(fp8_input_cast("cast", 1, 1, 2).hbm_bytes)  # 2 + 1 + 4/128


def _physical(rows: pd.DataFrame, kind: str, hw) -> tuple[pd.DataFrame, int]:
    ok = rows.latency_s.to_numpy() >= physical_floor_s(rows, kind, hw.hbm_bw_Bps)
    return rows[ok].reset_index(drop=True), int((~ok).sum())


def _fit_dtype(hw) -> str:
    return "fp8_block" if "fp8" in hw.peaks_flops else "bfloat16"


def _attention_frame(root: Path, gpu: str, hw) -> tuple[pd.DataFrame, int, str]:
    """``(rows, excluded, version)``: the attention rows the fit and the held-out table use."""
    a, v = aic.attention_rows(root, gpu)
    if not len(a):
        return a, 0, v
    a = a[(a.phase == "prefill") | (a.heads <= MAX_DECODE_GROUP * a.kv_heads) | a.shared_kv]
    a = a.assign(peak_flops=hw.peak_flops("bf16"))
    a, excluded = _physical(a, "attention", hw)
    return a, excluded, v


def _fit_attention(a: pd.DataFrame, hw, base):
    return fit_attention(a, sms=hw.sms, peak_flops=hw.peak_flops("bf16"), hbm_bw_Bps=hw.hbm_bw_Bps,
                         base=base, holdout=split_shapes(a, ATTN_SHAPE), unit_overhead=True)


def fit_engine_gemm(g: pd.DataFrame, hw, dtype: str):
    """TensorRT-LLM's own dense GEMM, fitted freely on its table with its input cast apart
    (``[kernel.engines.trtllm]`` of the GPUs whose ``[kernel]`` keeps DeepGEMM's load rate)."""
    return fit_gemm(_with_cast(g, dtype), sms=hw.sms, peak_flops=None, hbm_bw_Bps=hw.hbm_bw_Bps,
                    base=DEFAULTS, holdout=split_shapes(g, GEMM_SHAPE), infersim_masked=False)


def refit_engine_gemm(root: Path, gpu: str, date: str, write: bool):
    """Fit only ``[kernel.engines.trtllm]`` (``--engine-gemm-only``), on GPUs in DEEPGEMM_FIT."""
    if gpu not in DEEPGEMM_FIT:
        return None
    hw = load_hardware(gpu)
    dtype = _fit_dtype(hw)
    g, _exc, v = _gemm_frame(root, gpu, hw, dtype)
    res = fit_engine_gemm(g, hw, dtype)
    if write:
        replace_toml_table(data_dir("hardware") / f"{gpu}.toml", "kernel.engines.trtllm",
                           engine_gemm_block(res, gpu, "trtllm", f"TensorRT-LLM {v}", date))
    return res


def refit_attention(root: Path, gpu: str, date: str, write: bool):
    """Fit only the attention fields of ``[kernel]``, the rest of the committed calibration kept
    (``--attention-only``); with ``write`` the table is rewritten with its comment lines and fit
    record, the attention line and held-out error replaced."""
    import tomllib

    hw = load_hardware(gpu)
    a, exc, _v = _attention_frame(root, gpu, hw)
    if not len(a):
        return None
    res = _fit_attention(a, hw, kernel_calib(hw))
    if write:
        path = data_dir("hardware") / f"{gpu}.toml"
        lines = path.read_text().splitlines()
        head = next(i for i, ln in enumerate(lines) if ln.strip() == "[kernel]")
        start = head
        while start > 0 and lines[start - 1].startswith("#"):
            start -= 1
        comments = [ln[2:] for ln in lines[start + 1:head]]  # the first is the "written" line
        line = (f"attention: {res.summary()}; {exc} rows faster than physics excluded "
                f"(attention fields refit {date} with --attention-only, the rest kept)")
        comments = [line if c.startswith("attention:") else c for c in comments]
        record = {k: v for k, v in tomllib.loads(path.read_text())["kernel"].items()
                  if k in ("engine", "fit_date", "heldout_error")}
        record["heldout_error"] = {**record.get("heldout_error", {}), "attention": res.test_median}
        write_kernel_table(path, res.calib, comments, date, record)
    return res, exc


def fit_gpu(root: Path, gpu: str) -> dict:
    """Fit one GPU; returns the calibration, the per-class results and the row counts."""
    hw = load_hardware(gpu)
    dtype = _fit_dtype(hw)
    out = {"gpu": gpu, "dtype": dtype, "classes": {}, "excluded": {}, "versions": {}}
    g, out["excluded"]["gemm"], v = _gemm_frame(root, gpu, hw, dtype)
    out["versions"]["gemm"] = ("trtllm", v)
    deepgemm = DEEPGEMM_FIT.get(gpu)
    ho = split_shapes(g, GEMM_SHAPE)
    if deepgemm:  # the per-SM load rate of the same SM, as DeepGEMM measured it
        sm_bw = kernel_calib(load_hardware(deepgemm)).sm_bandwidth_Bps
        res = fit_gemm(g, sms=hw.sms, peak_flops=None, hbm_bw_Bps=hw.hbm_bw_Bps,
                       base=replace(DEFAULTS, sm_bandwidth_Bps=sm_bw), holdout=ho,
                       infersim_masked=False, keep=("sm_bandwidth_Bps",))
        # TensorRT-LLM's own GEMM, its input cast apart, fitted freely: [kernel.engines.trtllm]
        out["engine_gemm"] = ("trtllm", fit_engine_gemm(g, hw, dtype))
    else:
        res = fit_gemm(g, sms=hw.sms, peak_flops=None, hbm_bw_Bps=hw.hbm_bw_Bps, base=DEFAULTS,
                       holdout=ho, infersim_masked=False)
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

    a, out["excluded"]["attention"], v = _attention_frame(root, gpu, hw)
    out["versions"]["attention"] = ("trtllm", v)
    if len(a):
        res = _fit_attention(a, hw, calib)
        out["classes"]["attention"] = (res, len(a))
        calib = res.calib
    out["calib"] = calib
    out["allreduce"] = fit_allreduces(root, gpu)
    return out


# ----------------------------------------------------------------- held-out table, MoE backends
# fused-MoE kernels by the tables' kernel_source (variants of one kernel share a name; Marlin
# weight-only, non-gated and min-latency variants are other kernels and are left out)
MOE_BACKENDS = {"moe_torch_flow": "cutlass", "moe_torch_flow_cutlass": "cutlass",
                "deepgemm": "deepgemm", "sglang_fused_moe_triton": "triton",
                "sglang_flashinfer_trtllm_moe": "flashinfer-trtllm",
                "sglang_flashinfer_cutlass_moe": "flashinfer-cutlass"}
MIN_BACKEND_ROWS = 200  # a backend's fraction is fitted only on at least this many rows
# each backend's mechanisms (moesym.kernels.analytical.grouped_extra_s), fitted on its own rows:
# the grouped-GEMM tensor fraction and HBM fraction, a fixed time per grouped GEMM (the
# backend's routing / permute / finalize kernels), a time per local expert; under EP also the
# HBM passes over assignments to other ranks' experts that the grid covers; the smallest M
# block chosen by the lowest training cost among 8 rows (the narrowest token tile of a
# swapped-operand MMA, fitted: FlashInfer-TRTLLM on GB200 12% held-out against 13% at 16),
# 16 rows (SGLang's Triton small-M configs, sglang 0.5.23 srt/layers/moe/moe_runner/
# triton_utils/fused_moe_triton_config.py:254, the "M <= E" branch of the
# default config without FP8) and 64 (a Hopper
# warpgroup pair)
MOE_BACKEND_PARAMS = ("grouped_contiguous_tensor_frac", "grouped_hbm_frac", "grouped_fixed_s",
                      "grouped_expert_s", "grouped_row_passes", "grouped_serial_frac")
MOE_EP_PARAMS = ("grouped_masked_passes",)
# the time per computed assignment row beyond the tiles (grouped_row_passes, in HBM passes over
# the rows' outputs): TensorRT-LLM 1.3.0rc20's block-FP8 CUTLASS MoE on H100 at 16384 tokens,
# 256 experts, top-8, hidden 7168 reaches 3.7% of the FP8 peak at 128 columns per rank, 21% at
# 2048 (its time barely follows the FLOPs: a cost per row and hidden column); fitted, it takes the
# held-out median from 11.7% to 4.1% (H100), 14.0% to 5.2% (H200). Kept only where it lowers
# the training median by MIN_BACKEND_GAIN or more (on FlashInfer-TRTLLM it does not, and raises
# the held-out median 0.7-1.0 points)
MOE_ROW_PARAMS = ("grouped_row_passes",)
MOE_TILE_M_MIN = (8, 16, 64)
# (N, K) blocks each expert's tiles pad to (grouped_n_block_cols, grouped_k_block_cols), the one
# of the lowest training cost kept: none, or FlashInfer's TRT-LLM-gen kernels' (their weights are
# the MMA's A operand, shuffled for a 128-row epilogue tile: sglang 0.5.10
# srt/layers/moe/moe_runner/flashinfer_trtllm.py:89, epilogue_tile_m = 128, the gate and up
# rows interleaved into one tile by reorder_rows_for_gated_act_gemm, :82; K walks the 128-wide
# FP8 scale blocks). The tables show it: B300 SGLang 0.5.14 fp8_block, 256 experts, hidden 2048,
# inter 16 / 32 / 64 / 128 per rank all take 62-63 us at 48 tokens and 579-580 us at 16384.
# Held-out median with them: B300 14.2% -> 11.4%, GB200 11.9% -> 10.4%, GB300 10.8% -> 9.8%
MOE_BLOCKS = ((0, 0), (256, 128))
# fixed M blocks (grouped_tile_m_rows, grouped_few_tokens_tile_m_rows) a backend's fit also tries,
# by table dtype: SGLang's Triton fused_moe reads its tiles from a JSON file per (E, N, device,
# dtype) and, without one, takes get_default_config's BLOCK_SIZE_M whatever the rows per expert:
# 64, or 16 where the tokens are at most the local experts (no FP8: sglang srt/layers/moe/
# moe_runner/triton_utils/fused_moe_triton_config.py:247-260; moesym.kernels.analytical.
# grouped_fixed_block). AIConfigurator's A100 BF16 tables have such files (configs/triton_*/
# E=...,N=...,device_name=NVIDIA_A100-SXM4-80GB.json) for 351 of their 12177 rows. Held-out
# median on A100 (SGLang 0.5.10): triton 10.4% -> 8.4%, triton_ep 20.0% -> 18.0%. The FP8
# tables' GPUs (block-FP8 default: 64 rows at any M) have tuned files for most of their shapes
# and are not offered it
TRITON_DEFAULT_M_BLOCKS = {"bfloat16": (64, 16)}
# the load rate of grouped GEMMs whose K (the operands' row stride) is not a multiple of 16
# elements, fitted on the Triton backends of the tables above (moesym.kernels.analytical.
# grouped_load_rate: Triton specializes only integer arguments divisible by 16, and SGLang's
# fused_moe passes its strides as integers). A100 (SGLang 0.5.10, BF16), where the shapes of
# 58, 84, 116, 168 and 232 expert columns per rank came out 20-45% fast at every token count:
# fitted 0.32 (triton) and 0.27 (triton_ep) of the aligned rate, held-out median triton 8.4% ->
# 7.3% (p90 33% -> 32%), triton_ep 11.0% -> 10.5% (p90 32% -> 31%). The FP8 Triton tables of the
# other GPUs are not offered it (not re-fitted with it: their fits are unchanged)
TRITON_UNALIGNED_PARAMS = ("grouped_unaligned_load_frac",)
# the K steps (grouped_k_step_cols, grouped_few_tokens_k_step_cols) of the same tables' Triton
# rows, by table dtype: get_default_config's BLOCK_SIZE_K, 32, or 64 where the tokens are at most
# the local experts (no FP8: fused_moe_triton_config.py:247-260), and the time per step beyond
# the MMAs fitted on them (moesym.kernels.analytical.grouped_k_steps): the K loop's unhidden
# load latency, which the per-SM FLOP and byte rates do not carry (A100 EP: hidden 7168 rows at 1-4
# tokens came out 12-16% fast without it, 8-9% with it; held out 10.5% -> 9.8%; triton without
# EP fits no step time)
TRITON_DEFAULT_K_STEPS = {"bfloat16": (32, 64)}
TRITON_K_STEP_PARAMS = ("grouped_k_step_s",)
# SGLang versions whose tables' EP rows are a rank's input after an all-to-all dispatch, timed
# with a layer of the rank's experts only (AIConfigurator's collector of that version): the tokens
# with an expert on the rank, min(1, k / EP) of them (a token's k experts on k distinct ranks),
# each with its k assignments, the other ranks' ones as expert -1, which the Triton kernel then
# computes (filter_expert is off in a layer whose experts are all local: sglang 0.5.10
# srt/layers/moe/fused_moe_triton/fused_moe.py:226-229, fused_moe_triton_kernels.py:440). The
# rows show it: on H100, where AIConfigurator has the same kernel from SGLang 0.5.10 and 0.5.14,
# 0.5.10's EP rows at 16384 tokens (compute-bound) take the EP-1 time up to EP = top-k (FP8,
# 128-256 experts, top-8: within 3% at EP 2-8) and fall as top-k / EP beyond (0.50, 0.25, 0.13
# of it at EP 16, 32, 64), while at 1-32 tokens they read the weights of T k / EP experts only;
# 0.5.14's fall from EP 2 and level off (the masked-row passes). :func:`dispatched_ep_rows`
SGLANG_DISPATCHED_EP = ("0.5.10",)
# backends whose own source fixes kernels of the fused-MoE layer: (the KernelCalib fields set,
# the fields fitted beside MOE_BACKEND_PARAMS), with and without EP. FlashInfer's TRT-LLM-gen
# block-FP8 MoE (SGLang 0.5.23 srt/layers/moe/moe_runner/flashinfer_trtllm.py:947
# per_token_group_quant_fp8, then trtllm_fp8_block_scale_moe; sglang's copy of FlashInfer's
# launcher, kernels/ops/lora/moe/trtllm_lora_temp/data/csrc/trtllm_fused_moe_kernel_launcher.cu:577
# routing, in two kernels: top-k, then the permutation indices in one cluster or one cooperative
# kernel, FlashInfer 0.7.2.post1 csrc/fused_moe/trtllm_backend/trtllm_fused_moe_routing_deepseek.cu
# :573 and :596 / :605; trtllm_fused_moe_runner.cu:829 GEMM1 with the permute as its row gather,
# :859 activation, :899 GEMM2, :919 finalize) runs 5 memory-bound kernels (input cast, routing
# top-k and permutation, activation, finalize: moe_elementwise_launches) beside its two GEMMs,
# each launched with
# programmatic dependent launch (include/flashinfer/trtllm/fused_moe/DevKernel.h:59, GEMMs
# with enable_pdl up to SGLANG_TRTLLM_MOE_PDL_MAX_TOKENS = 8192 tokens), so one kernel's launch
# overlaps the one before: their time per kernel is fitted (moe_launch_us; B300, 1-4 tokens:
# 17-20 us measured for the six kernels, the host-launch model 31 us). Its M tile (tokens per
# expert tile) follows the launch: without a tuned tactic (tactic -1, as the tables' kernels are
# timed outside a server's warmup autotuning) the launcher takes the smallest of the candidate
# tiles around the first of 8, 16, 32, 64, 128 holding num_tokens x top_k / num_local_experts,
# the one below it (FlashInfer 0.7.2.post1 csrc/trtllm_fused_moe_kernel_launcher.cu:1061-1090
# computeSelectedTileN, :1094-1099 selectDefaultTileN, :1116-1119; block-FP8 tiles :4142):
# half the power of two holding it, 8 to 64 (grouped_launch_tile_max_rows; under EP every rank
# is launched with all the tokens, so the count is EP times the rank's rows per local expert).
# Held out, B300: 10.4% -> 9.2%, EP 10.2% -> 9.3%
MOE_BACKEND_KERNELS = {"flashinfer-trtllm": ({"moe_elementwise_launches": 5,
                                              "grouped_launch_tile_max_rows": 64},
                                             ("moe_launch_s",))}
MOE_TERM_MIN = 1e-3  # a fitted term below this (us, passes or fraction) is written as not used
EP_SUFFIX = "_ep"  # a kernel's fit on the tables' EP > 1 rows (moesym.engines.EngineKernels)
# a backend's own fit is written (and used) only where it lowers the held-out median or 90th
# percentile by at least this much against [kernel]'s: elsewhere the tables do not show that
# backend to differ, and [kernel] times it (a tensor fraction at its bound of 1 is kept: the
# backend's tiles then never bind, its memory, floors and overlap set its time)
MIN_BACKEND_GAIN = 0.01


def backend_used(r: dict) -> bool:
    """Whether a fused-MoE backend row's own fraction goes into [moe_kernels]."""
    gain = max(r["kernel_median"] - r["median"], r["kernel_p90"] - r["p90"])
    return gain >= MIN_BACKEND_GAIN
HELDOUT_JSON = "kernel_heldout.json"  # in bench_data/: what `moesym validate --kernels` prints


def _stats(pred, meas) -> dict:
    e = np.abs(np.asarray(pred) / np.asarray(meas) - 1)
    return {"median": float(np.median(e)), "p90": float(np.quantile(e, 0.9))}


def _gemm_frame(root: Path, gpu: str, hw, dtype: str):
    g, v = aic.read_table(root, gpu, "gemm", "gemm_perf")
    g = aic.gemm_rows(g)
    g = g[(g.table_dtype == dtype) & (g.n >= MIN_GEMM_DIM) & (g.k >= MIN_GEMM_DIM)]
    g = g.assign(peak_flops=hw.peak_flops(aic.GEMM_DTYPES[dtype][0]))
    g, excluded = _physical(g, "gemm", hw)
    return g, excluded, v


def _with_cast(g: pd.DataFrame, dtype: str) -> pd.DataFrame:
    """GEMM rows timed with TensorRT-LLM's input cast in series (an engine's own fit)."""
    return g.assign(input_cast_bytes=g.m * g.k * CAST_BYTES_PER_ELEMENT) if dtype in CAST_DTYPES \
        else g


def dispatched_ep_rows(m: pd.DataFrame) -> pd.DataFrame:
    """Fused-MoE rows read as a dispatched rank's input (SGLANG_DISPATCHED_EP): the kernel is
    launched with the T min(1, k / EP) tokens that have an expert on the rank, the rank's T k /
    EP assignments computed on its experts and the other T k / EP (min(EP, k) - 1) computed as
    expert -1's rows (``kernel_tokens``, ``masked_assignments``, ``masked_computed``).

    >>> r = dispatched_ep_rows(pd.DataFrame({"tokens": [64.0] * 3, "topk": [8.0] * 3,
    ...                                      "ep": [1.0, 4.0, 32.0]}))
    >>> r.kernel_tokens.tolist(), r.masked_assignments.tolist(), r.masked_computed.tolist()
    ([64.0, 64.0, 16.0], [0.0, 384.0, 112.0], [0.0, 1.0, 1.0])
    """
    ep, k = m.ep.to_numpy(float), m.topk.to_numpy(float)
    a = m.tokens.to_numpy(float) * k / ep
    return m.assign(kernel_tokens=m.tokens.to_numpy(float) * np.minimum(1.0, k / ep),
                    masked_assignments=a * (np.minimum(ep, k) - 1),
                    masked_computed=(ep > 1).astype(float))


def _fit_backend(r: pd.DataFrame, hw, calib, ho: np.ndarray, params: tuple,
                 m_blocks=((0, 0),)):
    """One fused-MoE backend's fit on its rows (``m_blocks``: the fixed M blocks it also tries,
    TRITON_DEFAULT_M_BLOCKS); its row passes kept only where they lower the training median by
    MIN_BACKEND_GAIN or more (MOE_ROW_PARAMS)."""
    fit = partial(fit_moe, r, sms=hw.sms, hbm_bw_Bps=hw.hbm_bw_Bps, base=calib, holdout=ho,
                  tile_m_min=MOE_TILE_M_MIN, blocks=MOE_BLOCKS, m_blocks=m_blocks)
    own = fit(params=params)
    if not own.calib.grouped_row_passes:
        return own
    plain = fit(params=tuple(p for p in params if p not in MOE_ROW_PARAMS))
    return own if plain.train_median - own.train_median >= MIN_BACKEND_GAIN else plain


def evaluate_gpu(root: Path, gpu: str) -> list[dict]:
    """Held-out error of the committed calibration (hardware/<gpu>.toml's ``[kernel]``) on the
    half of each table's shapes the fit leaves out, and each fused-MoE backend's grouped-GEMM
    fraction fitted on its own rows (the other half held out). Rows of the held-out table."""
    from moesym.kernels.fit import predict_attention, predict_rows

    hw = load_hardware(gpu)
    calib = kernel_calib(hw)
    dtype = _fit_dtype(hw)
    out = []

    def row(cls, engine, n_fit, n_held, excluded, st, **extra):
        out.append({"gpu": gpu, "class": cls, "engine": engine, "dtype": extra.pop("dtype", dtype),
                    "rows_fitted": int(n_fit), "rows_held_out": int(n_held),
                    "excluded": int(excluded), **st, **extra})

    g, exc, v = _gemm_frame(root, gpu, hw, dtype)
    test = split_shapes(g, GEMM_SHAPE)
    # the table is TensorRT-LLM's: its own GEMM fit (input cast apart) where the hardware file
    # has one, else [kernel]'s (fitted with the cast inside the GEMM)
    trt = load_engine("trtllm").hardware(hw)
    own = trt is not hw and any(k in ENGINE_GEMM_KEYS for k in
                                hw.kernel.get(ENGINES_KEY, {}).get("trtllm", {}))
    rows = _with_cast(g[test], dtype) if own else g[test]
    pred = predict_rows(rows, kernel_calib(trt), sms=hw.sms, peak_flops=None,
                        hbm_bw_Bps=hw.hbm_bw_Bps, infersim_masked=False)
    row("gemm", f"TensorRT-LLM {v}", (~test).sum(), test.sum(), exc,
        _stats(pred, g[test].latency_s.to_numpy()),
        calibration="[kernel.engines.trtllm]" if own else "[kernel]")

    for fw in MOE_FRAMEWORKS:
        for v in aic.table_versions(root, gpu, "moe", "moe_perf", fw):
            m = aic.moe_rows(aic.read_table(root, gpu, "moe", "moe_perf", fw, version=v)[0])
            m = m[(m.table_dtype == dtype) & m.kernel.isin(list(MOE_BACKENDS))]
            m = m.assign(backend=m.kernel.map(MOE_BACKENDS),
                         peak_flops=hw.peak_flops(aic.GEMM_DTYPES[dtype][0]))
            # the same kernel under expert parallelism (EP > 1 rows) is fitted apart: SGLang's
            # Triton kernel, for one, is near [kernel] at EP 1 and several times slower with EP
            m = m.assign(backend=m.backend + np.where(m.ep > 1, EP_SUFFIX, ""))
            if fw == "sglang" and v in SGLANG_DISPATCHED_EP:
                m = dispatched_ep_rows(m)
            skewed, m = m[m.distribution != "balanced"], m[m.distribution == "balanced"]
            if not len(m):
                continue  # the newest version with such rows
            for be, r in m.groupby("backend"):
                r, exc = _physical(r, "moe", hw)
                if len(r) < MIN_BACKEND_ROWS:
                    continue
                ho = split_shapes(r, MOE_SHAPE)
                kept = fit_moe(r, sms=hw.sms, hbm_bw_Bps=hw.hbm_bw_Bps, base=calib,
                               holdout=ho, params=())
                triton = be.startswith("triton") and dtype in TRITON_DEFAULT_M_BLOCKS
                m_blocks = (TRITON_DEFAULT_M_BLOCKS[dtype],) if triton else ()
                steps = dict(zip(("grouped_k_step_cols", "grouped_few_tokens_k_step_cols"),
                                 TRITON_DEFAULT_K_STEPS[dtype])) if triton else {}
                fixed, extra = MOE_BACKEND_KERNELS.get(be.removesuffix(EP_SUFFIX), ({}, ()))
                own = _fit_backend(r, hw, replace(calib, **fixed, **steps), ho,
                                   MOE_BACKEND_PARAMS + extra
                                   + (MOE_EP_PARAMS if be.endswith(EP_SUFFIX) else ())
                                   + (TRITON_UNALIGNED_PARAMS + TRITON_K_STEP_PARAMS
                                      if triton else ()),
                                   ((0, 0),) + m_blocks)
                # terms the fit drives to ~0 (below 1e-3 in their TOML units) are not used
                vals = {k: (v if abs(v) >= MOE_TERM_MIN else 0)
                        for k, v in own.calib.to_toml_values().items()}
                if not vals.get("grouped_k_step_us"):  # no time per step: its columns unused
                    vals = {k: v for k, v in vals.items() if not k.endswith("k_step_cols")}
                row("moe", f"{ENGINE_NAMES[fw]} {v}", (~ho).sum(), ho.sum(), exc,
                    {"median": own.test_median, "p90": own.test_p90}, backend=be,
                    grouped_tensor_frac=float(own.calib.grouped_contiguous_tensor_frac),
                    **{k: vals.get(k, 0) for k in MOE_KERNEL_KEYS},
                    kernel_median=kept.test_median, kernel_p90=kept.test_p90,
                    **power_law_heldout(skewed[skewed.backend == be], own.calib, hw))
            break

    a, exc, v = _attention_frame(root, gpu, hw)
    if len(a):
        test = split_shapes(a, ATTN_SHAPE)
        held = a[test].reset_index(drop=True)
        pred = predict_attention(held, calib, hw.sms, hw.peak_flops("bf16"), hw.hbm_bw_Bps)
        row("attention", f"TensorRT-LLM {v}", (~test).sum(), test.sum(), exc,
            _stats(pred, held.latency_s.to_numpy()), dtype="bfloat16")
    return out


def power_law_heldout(rows: pd.DataFrame, calib, hw) -> dict:
    """Held-out error of a backend's balanced-fitted constants on its skewed rows
    (``power_law_1.01`` / ``power_law_1.2``, the shapes the balanced fit holds out), each row's
    per-expert counts drawn from AIConfigurator's generator (:func:`moesym.kernels.aic.
    power_law_counts`: the measured rank's rows and active experts, and each expert's rows padded
    to the M tile, :mod:`moesym.kernels.skew`): ``power_law_median`` / ``_p90``, and
    ``power_law_balanced_median``, the same rows timed as balanced (no skew in the model)."""
    from moesym.kernels.fit import predict_moe
    from moesym.kernels.skew import skewed_rows

    rows = rows[split_shapes(rows, MOE_SHAPE)].reset_index(drop=True)
    if not len(rows):
        return {}

    def counts_of(r, rng):
        alpha = float(r.distribution.rsplit("_", 1)[1])
        return aic.power_law_counts(r.tokens, r.experts, r.topk, r.ep, alpha, rng)

    meas = rows.latency_s.to_numpy()
    flat = predict_moe(rows, calib, sms=hw.sms, hbm_bw_Bps=hw.hbm_bw_Bps)
    pred = predict_moe(skewed_rows(rows, counts_of, calib), calib, sms=hw.sms,
                       hbm_bw_Bps=hw.hbm_bw_Bps)
    st = _stats(pred, meas)
    return {"power_law_rows": int(len(rows)), "power_law_median": st["median"],
            "power_law_p90": st["p90"], "power_law_balanced_median": _stats(flat, meas)["median"]}


# The engine custom all-reduce's switch points: one-shot up to M_1(p) bytes for p GPUs, two-shot
# up to the 16 MiB workspace, NCCL beyond. The tables were measured with SGLang 0.5.14, whose
# default on CUDA is the JIT custom all-reduce v2 (SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2 = True in
# srt/environ.py) with THRESHOLD_2_SHOT_MAP in srt/distributed/device_communicators/
# custom_all_reduce_v2.py (one-shot push/pull thresholds per world size; SM100 "benchmarks on
# B200", else "benchmarks on H200"; the pull buffer max_pull_size = 16 MiB caps them): the fit
# assigns rows with those. The hardware file gets the thresholds of the version the SGLang
# engine profile names (0.5.23: srt/distributed/device_communicators/configs/
# custom_all_reduce_v2.py, CUDA-graph context, each clipped to the 16 MiB
# SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB workspace; SM90 tuned on H200, SM100 on B200, other
# GPUs a 1 MiB default). KiB by world size.
SGLANG_AR_ONESHOT_KIB = {
    "0.5.14": {"sm100": {2: 16384, 3: 4096, 4: 2048, 5: 2048, 6: 1024, 7: 896, 8: 720},
               "sm90": {2: 16384, 3: 512, 4: 384, 5: 256, 6: 192, 7: 192, 8: 160}},
    "0.5.23": {"sm100": {2: 16384, 3: 4096, 4: 640, 5: 1536, 6: 1024, 7: 640, 8: 256, 16: 256},
               "sm90": {2: 16384, 3: 1280, 4: 384, 5: 192, 6: 128, 7: 128, 8: 128},
               "sm80": {2: 1024}}}
SGLANG_AR_MAX_MIB = 16  # both versions: the 16 MiB pull workspace, NCCL beyond
# SGLang 0.5.14's map has no SM80 entry: every non-SM100 GPU takes the H200 map
SGLANG_AR_FIT_ARCH = {"sm80": "sm90"}
AR_FIT_VERSION, AR_RUN_VERSION = "0.5.14", "0.5.23"
GPU_ARCH = {"h100": "sm90", "h200": "sm90", "b200": "sm100", "b300": "sm100", "gb200": "sm100",
            "gb300": "sm100", "a100": "sm80"}
# AIConfigurator's message_size is an element count, not bytes (aiconfigurator-core 0.12.0,
# sdk/perf_database.py: "comm shims factor an element count"; models/llama.py queries
# CustomAllReduce with tokens x hidden); the custom all-reduce tables are bfloat16
AR_ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "half": 2}


# TensorRT-LLM's custom all-reduce (AllReduceStrategy AUTO in its all-reduce op: one-shot,
# two-shot or NCCL by message size and world size). Its source is not at hand (PyPI's
# tensorrt-llm is a stub that downloads the wheel from NVIDIA's index, unreachable here; neither
# aiconfigurator nor aiconfigurator-core 0.12.0 ships the collector or the thresholds), so both
# switch points are fitted on its own table: the kernel's limit M_max(p) is the largest message
# at which TensorRT-LLM's time is at least 5% under NCCL's own measured all-reduce of the same
# size (the NCCL table of the same GPU: above it the two coincide, NCCL ran); the one-shot limit
# M_1(p) is searched over the fitted message sizes with the times (least squares, every
# combination over the group sizes; a tie goes to the larger limit). The table has no backend
# column: its times are CUDA-graph replays (2.6 us for a 256-byte message on 2 H200s, as SGLang's
# graph rows; SGLang's eager rows take 30 us).
TRTLLM_NCCL_MARGIN = 0.95


def _allreduce_model():
    """``f(message_bytes, gpus, fixed_s, oneshot_Bps, twoshot_Bps, oneshot_max, max_bytes)``:
    the step model's own term (:func:`moesym.terms.comm.tp_allreduce_custom`) lambdified on
    1-byte 'tokens', the two switch points per row (arrays) so that one function serves every
    switch-point candidate."""
    from types import SimpleNamespace

    import sympy as sp

    from moesym.terms.comm import tp_allreduce_custom
    from moesym.terms.dims import symbolic_dims

    m, tau, w1, w2, m1, m2 = sp.symbols("m tau w1 w2 m1 m2", positive=True)
    car = SimpleNamespace(fixed_s=tau, oneshot_Bps=w1, twoshot_Bps=w2,
                          oneshot_max_bytes=((2, m1),), max_bytes=((2, m2),))
    D = symbolic_dims()
    by_p = {}
    for p in range(2, 17):  # one function per group size
        c = tp_allreduce_custom(D, m, car, 1.0, 0.0, group=p)
        t = (c.net_bytes / c.net_bw + c.fixed_s).subs({D.hidden: 1, D.act_bytes: 1})
        by_p[p] = sp.lambdify((m, tau, w1, w2, m1, m2), t, "numpy")

    def f(m, p, tau, w1, w2, one_max, top):
        out = np.empty(len(m))
        for g in np.unique(p):
            sel = p == g
            out[sel] = by_p[int(g)](m[sel], tau, w1, w2, one_max[sel], top[sel])
        return out
    return f


def _per_row(table: dict, p: np.ndarray) -> np.ndarray:
    """A switch point by group size (bytes), per row: the first listed size >= p, the last
    beyond (as the step model reads the table)."""
    sizes = sorted(table)
    return np.array([table[next((w for w in sizes if w >= g), sizes[-1])] for g in p], float)


def _allreduce_rows(root: Path, gpu: str, engine: str) -> tuple[pd.DataFrame, str]:
    """The engine's custom all-reduce rows under CUDA graphs with ``message_bytes`` (the
    table's message_size counts BF16 elements), sorted by group size and message."""
    df, v = aic.read_table(root, gpu, "comm", "custom_allreduce_perf", engine)
    if not len(df):
        return df, v
    if "backend" in df:  # SGLang's table has eager rows too; TensorRT-LLM's only graph ones
        df = df[df.backend == "sglang_graph"]
    df = df.assign(message_bytes=df.message_size * df.allreduce_dtype.map(AR_ELEMENT_BYTES),
                   latency_s=df.latency * 1e-3)
    return df.sort_values(["num_gpus", "message_bytes"]).reset_index(drop=True), v


def _custom_ceiling(root: Path, gpu: str, df: pd.DataFrame) -> dict[int, float]:
    """TensorRT-LLM's custom-kernel limit by group size (bytes): the largest message at which
    its time is TRTLLM_NCCL_MARGIN or less of NCCL's measured all-reduce of the same size."""
    n, _v = aic.read_table(root, gpu, "comm", "nccl_perf", "nccl")
    n = n[(n.op_name == "all_reduce") & (n.nccl_dtype == "half")]
    both = df.merge(n[["num_gpus", "message_size", "latency"]], on=["num_gpus", "message_size"],
                    suffixes=("", "_nccl"))
    own = both[both.latency <= TRTLLM_NCCL_MARGIN * both.latency_nccl]
    return {int(p): float(g.message_bytes.max()) for p, g in own.groupby("num_gpus")}


def _fit_constants(f, m, p, meas, sel, one_max, top):
    """(fixed s, one-shot B/s, two-shot B/s) by least squares in log time on rows ``sel``."""
    from scipy.optimize import least_squares

    def resid(x):
        return np.log(f(m[sel], p[sel], x[0] * 1e-6, x[1] * 1e9, x[2] * 1e9, one_max[sel],
                        top[sel]) / meas[sel])

    return least_squares(resid, [3.0, 100.0, 100.0], bounds=([0, 1, 1], [100, 5000, 5000]))


def fit_allreduce(root: Path, gpu: str, engine: str = "sglang") -> dict | None:
    """Fit an engine's custom all-reduce (fixed time, one-/two-shot bandwidths) on its
    CUDA-graph timings, every other message size held out. SGLang: messages up to its 16 MiB
    workspace, assigned to one- or two-shot by the measured version's own switch points.
    TensorRT-LLM: its switch points fitted on the table (see TRTLLM_NCCL_MARGIN's comment)."""
    df, v = _allreduce_rows(root, gpu, engine)
    if not len(df):
        return None
    if engine == "sglang":
        arch = GPU_ARCH[gpu]
        fit_versions = SGLANG_AR_ONESHOT_KIB[AR_FIT_VERSION]
        kib = fit_versions[arch if arch in fit_versions else SGLANG_AR_FIT_ARCH[arch]]
        top = {p: SGLANG_AR_MAX_MIB * 2 ** 20 for p in kib}
        candidates = {p: [kib[p] * 1024] for p in sorted(df.num_gpus.unique())}
    else:
        top = _custom_ceiling(root, gpu, df)
        candidates = None
    df = df[df.message_bytes <= _per_row(top, df.num_gpus.to_numpy())].reset_index(drop=True)
    test = (df.groupby("num_gpus").cumcount() % 2 == 1).to_numpy()
    m, p = df.message_bytes.to_numpy(float), df.num_gpus.to_numpy(float)
    meas = df.latency_s.to_numpy(float)
    groups = sorted(int(g) for g in df.num_gpus.unique())
    if candidates is None:  # TensorRT-LLM: the one-shot limit at a fitted size or the kernel's
        candidates = {g: sorted(set(m[~test & (p == g)]) | {top[g]}) for g in groups}
    f = _allreduce_model()
    top_rows = _per_row(top, p)
    best = None
    for combo in itertools.product(*(candidates[g] for g in groups)):
        one_rows = _per_row(dict(zip(groups, combo)), p)
        r = _fit_constants(f, m, p, meas, ~test, one_rows, top_rows)
        key = (round(r.cost, 12), -sum(combo))  # equal fits: the larger one-shot limits
        if best is None or key < best[0]:
            best = (key, r, dict(zip(groups, combo)), one_rows)
    _key, r, one_max, one_rows = best
    pred = f(m, p, r.x[0] * 1e-6, r.x[1] * 1e9, r.x[2] * 1e9, one_rows, top_rows)
    err = np.abs(pred / meas - 1)
    return {"engine": engine, "fixed_us": r.x[0], "oneshot_GBps": r.x[1], "twoshot_GBps": r.x[2],
            "oneshot_max_bytes": one_max, "max_bytes": {g: top[g] for g in groups},
            "version": v, "rows": len(df), "held_out": int(test.sum()),
            "test_median": float(np.median(err[test])),
            "test_p90": float(np.quantile(err[test], 0.9)),
            "test_worst": float(err[test].max()), "train_median": float(np.median(err[~test]))}


AR_ENGINES = ("sglang", "trtllm")  # SGLang's is [allreduce], the others [allreduce.ENGINE]


def fit_allreduces(root: Path, gpu: str) -> dict:
    """Each engine's custom all-reduce fit (:func:`fit_allreduce`), None where it has no table."""
    return {e: fit_allreduce(root, gpu, e) for e in AR_ENGINES}


def _kib_table(table: dict, unit: int) -> str:
    return "{ " + ", ".join(f"{w} = {v / unit:g}" for w, v in sorted(table.items())) + " }"


def allreduce_block(ar: dict, gpu: str, date: str) -> str:
    """The ``[allreduce]`` (SGLang's) or ``[allreduce.trtllm]`` table text for a hardware file."""
    name = ENGINE_NAMES[ar["engine"]]
    head = (f"# engine custom all-reduce, written {date} by benchmarks/kernel_fit_aic.py: fitted "
            f"on {SOURCE}, {aic.GPU_FOLDERS[gpu]}, {name} {ar['version']} custom all-reduce "
            f"under CUDA graphs, {min(ar['max_bytes'])}-{max(ar['max_bytes'])} GPUs, messages "
            + (f"<= {SGLANG_AR_MAX_MIB} MiB" if ar["engine"] == "sglang" else
               "up to the custom kernel's limit (max_MiB)")
            + " (message_size read as bf16 elements; "
            f"{ar['rows']} rows; every other size held out: held-out median "
            f"{ar['test_median']:.1%}, worst {ar['test_worst']:.1%})")
    if ar["engine"] == "sglang":
        kib = SGLANG_AR_ONESHOT_KIB[AR_RUN_VERSION][GPU_ARCH[gpu]]
        lines = [head,
                 f"# switch points (one-shot KiB by TP group size, two-shot to the "
                 f"{SGLANG_AR_MAX_MIB} MiB workspace): SGLang {AR_RUN_VERSION} srt/distributed/"
                 "device_communicators/configs/custom_all_reduce_v2.py, "
                 f"{GPU_ARCH[gpu]} CUDA-graph thresholds clipped to "
                 "SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB",
                 "[allreduce]"]
        one, top = _kib_table({w: v * 1024 for w, v in kib.items()}, 1024), SGLANG_AR_MAX_MIB
    else:
        lines = [head,
                 "# switch points FITTED on the same table (TensorRT-LLM's source not at hand): "
                 "two-shot up to max_MiB, the largest message TensorRT-LLM runs at least "
                 f"{1 - TRTLLM_NCCL_MARGIN:.0%} under the GPU's NCCL all-reduce table; one-shot "
                 "up to oneshot_max_KiB, fitted with the times; NCCL beyond",
                 f"[allreduce.{ar['engine']}]"]
        one, top = (_kib_table(ar["oneshot_max_bytes"], 1024),
                    _kib_table(ar["max_bytes"], 2 ** 20))
    return "\n".join(lines + [
        f"fixed_us = {ar['fixed_us']:.3g}",
        f"oneshot_GBps = {ar['oneshot_GBps']:.4g}",
        f"twoshot_GBps = {ar['twoshot_GBps']:.4g}",
        f"oneshot_max_KiB = {one}",
        f"max_MiB = {top}",
        f'source = "fit to {SOURCE} ({aic.GPU_FOLDERS[gpu]}, {name} {ar["version"]} '
        'custom all-reduce, CUDA graph)"']) + "\n"


def write_allreduce(gpu: str, fits: dict, date: str) -> None:
    """Store each engine's fit in hardware/<gpu>.toml: SGLang's as ``[allreduce]``, the others
    as ``[allreduce.ENGINE]`` right after it (or in place where the file has one)."""
    import tomllib

    path = data_dir("hardware") / f"{gpu}.toml"
    for engine, ar in fits.items():
        if ar is None:
            continue
        if engine == "sglang":
            replace_toml_table(path, "allreduce", allreduce_block(ar, gpu, date))
            continue
        table = f"allreduce.{engine}"
        if engine in tomllib.loads(path.read_text()).get("allreduce", {}):
            replace_toml_table(path, table, allreduce_block(ar, gpu, date))
        else:  # after [allreduce] (its table runs to the next header, which this becomes)
            block = allreduce_block(fits["sglang"], gpu, date) + "\n" + allreduce_block(ar, gpu,
                                                                                       date)
            replace_toml_table(path, "allreduce", block)


# ------------------------------------------------------------------------------ DeepEP, one node
# one node of 8 GPUs (the tables' node_num 1); normal mode at DeepEP's Buffer.num_sms default
# of 20 SMs (moesym.numbers.bindings.COMM_SMS), which SGLang keeps without a DeepEP config
# (srt/layers/moe/token_dispatcher/deepep.py: num_sms = Buffer.num_sms)
DEEPEP_GPUS, DEEPEP_SMS = 8, 20
DEEPEP_MODES = {"ll": ("wideep_deepep_ll_perf", "{op}_avg_t_us", "deepep-ll"),
                "normal": ("wideep_deepep_normal_perf", "{op}_transmit_us", "deepep-normal")}


def _deepep_bytes(mode: str, op: str, E, k, d, T) -> float:
    """Bytes one rank sends in one dispatch or combine of T tokens per GPU inside one node of
    8 GPUs, by the step model's own volume (:func:`moesym.terms.comm.a2a_volume`): FP8 with
    its scales out, BF16 back."""
    from dataclasses import replace as _r

    from moesym.specs.deployment import A2AMode, activation_dispatch_bytes
    from moesym.terms.comm import a2a_volume
    from moesym.terms.dims import symbolic_dims

    b = activation_dispatch_bytes("fp8") if op == "dispatch" else 2.0
    D = _r(symbolic_dims(), experts=int(E), topk=int(k), ep=DEEPEP_GPUS, hidden=int(d))
    v = a2a_volume(D, int(T), b, A2AMode(DEEPEP_MODES[mode][2]), DEEPEP_GPUS)
    return float(v.intra_bytes)


def _deepep_model(x, nbytes, experts, tokens):
    """DeepEP time (s) of :class:`moesym.specs.hardware.DeepEPKernel` with ``x`` = (fixed us,
    GB/s[, ns per expert, us per token a thread block sends]): normal mode fits the first two."""
    t = x[0] * 1e-6 + nbytes / (x[1] * 1e9)
    if len(x) > 2:
        blocks = np.ceil(experts / DeepEPKernel.LL_WARP_GROUPS)
        t = t + x[2] * 1e-9 * experts + x[3] * 1e-6 * np.ceil(tokens / blocks)
    return t


def fit_deepep(root: Path, gpu: str) -> dict | None:
    """Per mode (low-latency, normal) and direction (dispatch, combine): a fixed time and an
    NVLink rate, time = fixed + bytes / rate, and for the low-latency kernels a time per expert
    and per token each thread block sends in turn (:class:`DeepEPKernel`), fitted on SGLang's
    one-node DeepEP tables (every other token count held out)."""
    from scipy.optimize import least_squares

    if load_hardware(gpu).gpus_per_node != DEEPEP_GPUS:  # the fit is an 8-GPU node's
        return None
    out = {}
    for mode, (table, col, _) in DEEPEP_MODES.items():
        df, v = aic.read_table(root, gpu, "comm", table, "sglang")
        if not len(df):
            continue
        df = df[df.node_num == 1]
        if mode == "normal":
            df = df[(df.dispatch_sms == DEEPEP_SMS) & (df.combine_sms == DEEPEP_SMS)]
        df = df.sort_values(["hidden_size", "num_topk", "num_experts", "num_token"])
        test = (df.groupby(["hidden_size", "num_topk", "num_experts"]).cumcount() % 2 == 1)
        test = test.to_numpy()
        experts, tokens = df.num_experts.to_numpy(float), df.num_token.to_numpy(float)
        x0, lo, hi = ([10.0, 200.0], [0, 1], [500, 5000]) if mode == "normal" else \
            ([10.0, 200.0, 10.0, 1.0], [0, 1, 0, 0], [500, 5000, 1000, 100])
        for op in ("dispatch", "combine"):
            meas = df[col.format(op=op)].to_numpy(float) * 1e-6
            ok = meas > 0
            nbytes = np.array([_deepep_bytes(mode, op, E, k, d, T) for E, k, d, T in
                               df[["num_experts", "num_topk", "hidden_size", "num_token"]]
                               .itertuples(index=False)])

            def resid(x, sel):
                return np.log(_deepep_model(x, nbytes[sel], experts[sel], tokens[sel])
                              / meas[sel])

            tr = ok & ~test
            r = least_squares(resid, x0, args=(tr,), bounds=(lo, hi))
            err = np.abs(_deepep_model(r.x, nbytes, experts, tokens) / meas - 1)
            he = err[ok & test]
            out[f"{mode}_{op}"] = {"fixed_us": float(r.x[0]), "GBps": float(r.x[1]),
                                   **({"expert_ns": float(r.x[2]),
                                       "block_token_us": float(r.x[3])} if len(r.x) > 2 else {}),
                                   "version": v, "rows": int(ok.sum()),
                                   "held_out": int((ok & test).sum()),
                                   "median": float(np.median(he)),
                                   "p90": float(np.quantile(he, 0.9))}
    return out or None


def deepep_block(dp: dict, gpu: str, date: str) -> str:
    """The ``[deepep]`` table text for a hardware file."""
    v = next(iter(dp.values()))["version"]
    lines = [f"# DeepEP inside one node, written {date} by benchmarks/kernel_fit_aic.py --heldout: "
             f"time = fixed + bytes / rate per mode and direction (bytes as the step model counts "
             f"them), low-latency + ns per expert x experts + us per token x ceil(tokens / "
             f"ceil(experts / {DeepEPKernel.LL_WARP_GROUPS})) (its thread blocks, DeepEP 1.0.0 "
             f"internode_ll.cu:305), fitted on {SOURCE}, {aic.GPU_FOLDERS[gpu]}, SGLang {v} "
             f"DeepEP tables "
             f"(8 GPUs; normal mode at {DEEPEP_SMS} SMs; every other token count held out: "
             + ", ".join(f"{k} {r['median']:.1%}" for k, r in dp.items())
             + "); across nodes the [interconnect] and [latency_us] figures apply",
             "[deepep]"]
    for k, r in dp.items():
        lines.append(f"{k}_us = {r['fixed_us']:.3g}")
        lines.append(f"{k}_GBps = {r['GBps']:.4g}")
        for key in ("expert_ns", "block_token_us"):
            if key in r:
                lines.append(f"{k}_{key} = {r[key]:.4g}")
    lines.append(f'source = "fit to {SOURCE} ({aic.GPU_FOLDERS[gpu]}, SGLang {v} DeepEP, one '
                 'node)"')
    return "\n".join(lines) + "\n"


def moe_kernels_block(rows: list[dict], gpu: str, date: str) -> str:
    """The ``[moe_kernels]`` table text: each fused-MoE backend's fitted grouped-GEMM fraction."""
    lines = [f"# fused-MoE kernels by backend, written {date} by benchmarks/kernel_fit_aic.py "
             "--heldout: each backend's grouped-GEMM tensor and HBM fractions, fixed time per "
             "grouped GEMM, time per local expert, time per computed row, smallest M block, "
             "fixed M blocks (a kernel config that does not follow the rows), "
             "memory-bound kernels and time per kernel (where the backend's source fixes them), "
             "N and K blocks "
             "each expert's tiles pad to, share of tile and memory "
             "time not overlapped and (EP) HBM passes over other ranks' assignments "
             "(moesym.kernels.analytical.gemm_time, grouped layouts), fitted on its "
             f"balanced rows of {SOURCE}, {aic.GPU_FOLDERS[gpu]} (every other shape held out), "
             "the rest of [kernel] kept; only backends whose own fit lowers the held-out median "
             "or p90 "
             f"by >= {MIN_BACKEND_GAIN:.0%} against [kernel]'s (others run on [kernel]); an engine "
             "profile's [ENGINE.kernels] moe names which one runs",
             "[moe_kernels]"]
    dtypes = {r["dtype"] for r in rows if r["gpu"] == gpu and r["class"] == "moe" and r["used"]}
    lines += [f'dtype = "{aic.GEMM_DTYPES[d][0]}"' for d in dtypes]  # one: the GPU's fit dtype
    for r in rows:
        if r["gpu"] == gpu and r["class"] == "moe" and r["used"]:
            terms = "".join(f"{k} = {r[k]:.4g}, " for k in MOE_KERNEL_KEYS if r.get(k))
            lines.append(f'{r["backend"]} = {{ grouped_tensor_frac = '
                         f'{r["grouped_tensor_frac"]:.4g}, {terms}'
                         f'heldout_median = {r["median"]:.3f}, '
                         f'source = "{r["engine"]} {r["dtype"]}, {r["rows_fitted"]} rows" }}')
    return "\n".join(lines) + "\n"


def deepep_rows(dp: dict | None, gpu: str) -> list[dict]:
    """The held-out table's rows of a DeepEP fit (:func:`fit_deepep`)."""
    return [{"gpu": gpu, "class": "deepep", "backend": k.replace("_", " "),
             "engine": f"SGLang {r['version']}", "dtype": "fp8/bf16",
             "rows_fitted": r["rows"] - r["held_out"], "rows_held_out": r["held_out"],
             "excluded": 0, "median": r["median"], "p90": r["p90"],
             **{k2: r[k2] for k2 in ("fixed_us", "GBps", "expert_ns", "block_token_us")
                if k2 in r}}
            for k, r in (dp or {}).items()]


def refit_deepep(root: Path, gpus: list[str], date: str, write: bool) -> int:
    """Fit DeepEP alone (:func:`fit_deepep`): replace the DeepEP rows of the committed held-out
    table and, with ``write``, each GPU's ``[deepep]``."""
    import json

    path = data_dir("bench_data") / HELDOUT_JSON
    doc = json.loads(path.read_text())
    for gpu in gpus:
        dp = fit_deepep(root, gpu)
        if not dp:
            continue
        new = deepep_rows(dp, gpu)
        for r in new:
            print(gpu, {k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()})
        old = [i for i, r in enumerate(doc["rows"]) if r["gpu"] == gpu and r["class"] == "deepep"]
        at = old[0] if old else len(doc["rows"])
        doc["rows"] = [r for i, r in enumerate(doc["rows"]) if i not in old]
        doc["rows"][at:at] = new
        if write:
            replace_toml_table(data_dir("hardware") / f"{gpu}.toml", "deepep",
                               deepep_block(dp, gpu, date))
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


def write_heldout(root: Path, gpus: list[str], date: str, write: bool) -> int:
    """Evaluate every GPU of ``gpus`` (:func:`evaluate_gpu`, the custom all-reduce fit) and write
    its rows of the held-out table, bench_data/kernel_heldout.json (the other GPUs' committed rows
    kept); with ``write`` also each GPU's ``[moe_kernels]`` and ``[deepep]``."""
    import json

    rows: list[dict] = []
    for gpu in gpus:
        got = evaluate_gpu(root, gpu)
        for ar in (a for a in fit_allreduces(root, gpu).values() if a):
            got.append({"gpu": gpu, "class": "allreduce",
                        "engine": f"{ENGINE_NAMES[ar['engine']]} {ar['version']}",
                        "dtype": "bfloat16", "rows_fitted": ar["rows"] - ar["held_out"],
                        "rows_held_out": ar["held_out"], "excluded": 0,
                        "median": ar["test_median"], "p90": ar["test_p90"]})
        dp = fit_deepep(root, gpu)
        got += deepep_rows(dp, gpu)
        for r in got:
            print(gpu, {k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()})
        rows += got
        for r in got:
            if r["class"] == "moe":
                r["used"] = backend_used(r)
        if write and any(r["class"] == "moe" for r in got):
            replace_toml_table(data_dir("hardware") / f"{gpu}.toml", "moe_kernels",
                               moe_kernels_block(got, gpu, date))
        if write and dp:
            replace_toml_table(data_dir("hardware") / f"{gpu}.toml", "deepep",
                               deepep_block(dp, gpu, date))
    doc = {"source": SOURCE, "written": date,
           "how": "benchmarks/kernel_fit_aic.py AIC_DATA_DIR --heldout: |model / measured - 1| on "
                  "the shapes held out of the fit (every other shape); gemm and attention: the "
                  "committed [kernel]; moe: each backend's fitted fraction (kernel_median: the "
                  "committed [kernel] on the same rows); allreduce: the committed [allreduce] "
                  "(SGLang) and [allreduce.trtllm] (TensorRT-LLM); moe power_law_*: the "
                  "backend's balanced-fitted constants on its power_law_1.01 / 1.2 rows of the "
                  "held-out shapes, counts from AIConfigurator's generator, each expert's rows "
                  "padded to the M tile (power_law_balanced_median: timed as balanced); "
                  "excluded: rows faster than their FLOPs at peak or bytes at peak HBM bandwidth",
           "rows": rows}
    path = data_dir("bench_data") / HELDOUT_JSON
    if path.exists():  # the GPUs not refit here (--gpu) keep their committed rows, and the
        # keys other fits own (benchmarks/kernel_fit_aiter.py's amd_rows) are carried over
        old = json.loads(path.read_text())
        doc.update({k: v for k, v in old.items() if k not in doc})
        kept = [r for r in old["rows"] if r["gpu"] not in gpus]
        order = list(aic.GPU_FOLDERS)
        doc["rows"] = sorted(kept + rows, key=lambda r: order.index(r["gpu"]))
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


# the GEMM fields an engine's own GEMM fit writes into [kernel.engines.NAME]
ENGINE_GEMM_KEYS = ("tile_m_rows", "tile_n_max_cols", "gemm_tensor_frac", "tile_overhead_us",
                    "sm_bandwidth_GBps", "gemm_hbm_frac", "launch_us")


def engine_gemm_block(res, gpu: str, engine: str, version: str, date: str) -> str:
    """The ``[kernel.engines.ENGINE]`` table text: that engine's dense GEMM fitted on its own
    table (over ``[kernel]`` where a deployment names the engine)."""
    vals = res.calib.to_toml_values()
    lines = [f"# {version}'s own GEMM kernels, written {date} by benchmarks/kernel_fit_aic.py "
             f"--write: fitted freely on {SOURCE}, {aic.GPU_FOLDERS[gpu]}, its FP8 input cast "
             f"timed apart ({res.summary()}, every other shape held out); [kernel] keeps DeepGEMM's per-SM load rate for the "
             f"engines that run DeepGEMM; --engine {engine} takes these",
             f"[kernel.engines.{engine}]"]
    lines += [f"{k} = {vals[k]:.4g}" for k in ENGINE_GEMM_KEYS]
    return "\n".join(lines) + "\n"


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
        for ar in (a for a in f.get("allreduce", {}).values() if a):
            lines.append(f"| {f['gpu']} | {ENGINE_NAMES[ar['engine']]} {ar['version']} (CUDA "
                         f"graph) | bfloat16 | custom all-reduce | {ar['rows'] - ar['held_out']} "
                         f"/ {ar['held_out']} | 0 | {ar['test_median']:.1%} | "
                         f"{ar['test_p90']:.1%} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--gpu", action="append", default=None)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--markdown", type=Path, default=None)
    ap.add_argument("--heldout", action="store_true",
                    help=f"evaluate the committed calibrations on the held-out shapes, fit each "
                         f"fused-MoE backend, fit DeepEP; write bench_data/{HELDOUT_JSON} and, "
                         "with --write, each GPU's [moe_kernels] and [deepep] tables")
    ap.add_argument("--attention-only", action="store_true",
                    help="fit only the attention fields of [kernel] on the committed rest and, "
                         "with --write, store them")
    ap.add_argument("--engine-gemm-only", action="store_true",
                    help="fit only TensorRT-LLM's own GEMM ([kernel.engines.trtllm], on GPUs "
                         "whose [kernel] keeps DeepGEMM's load rate) and, with --write, store it")
    ap.add_argument("--allreduce-only", action="store_true",
                    help="fit and write only the engines' custom all-reduce ([allreduce]: "
                         "SGLang's; [allreduce.trtllm]: TensorRT-LLM's)")
    ap.add_argument("--deepep-only", action="store_true",
                    help="fit only DeepEP inside one node: its rows of the held-out table and, "
                         "with --write, each GPU's [deepep]")
    a = ap.parse_args(argv)
    gpus = a.gpu or [g for g, d in aic.GPU_FOLDERS.items() if (a.folder / d).is_dir()]
    date = _dt.date.today().isoformat()
    fits = []
    if a.deepep_only:
        return refit_deepep(a.folder, gpus, date, a.write)
    if a.heldout:
        return write_heldout(a.folder, gpus, date, a.write)
    for gpu in gpus:
        if a.attention_only:
            got = refit_attention(a.folder, gpu, date, a.write)
            if got:
                print(f"== {gpu} attention ({got[1]} excluded as faster than physics): "
                      f"{got[0].summary()}\n{got[0].per_group.to_string()}")
            continue
        if a.engine_gemm_only:
            res = refit_engine_gemm(a.folder, gpu, date, a.write)
            if res:
                print(f"== {gpu} TensorRT-LLM's own GEMM: {res.summary()}")
            continue
        if a.allreduce_only:
            ars = fit_allreduces(a.folder, gpu)
            for ar in ars.values():
                print(f"== {gpu} custom all-reduce: {ar}")
            if a.write:
                write_allreduce(gpu, ars, date)
            continue
        f = fit_gpu(a.folder, gpu)
        fits.append(f)
        for cls, (res, n) in f["classes"].items():
            print(f"== {gpu} {cls} ({n} rows, {f['excluded'].get(cls, 0)} excluded as faster "
                  f"than physics): {res.summary()}")
        for ar in (x for x in f["allreduce"].values() if x):
            print(f"== {gpu} {ENGINE_NAMES[ar['engine']]} custom all-reduce ({ar['rows']} rows): "
                  f"fixed {ar['fixed_us']:.2f} "
                  f"us, one-shot {ar['oneshot_GBps']:.0f} GB/s, two-shot "
                  f"{ar['twoshot_GBps']:.0f} GB/s; "
                  f"train median {ar['train_median']:.1%}; held-out median {ar['test_median']:.1%} "
                  f"worst {ar['test_worst']:.1%}")
        if f.get("engine_gemm"):
            print(f"== {gpu} gemm, {f['engine_gemm'][0]}'s own fit: {f['engine_gemm'][1].summary()}")
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
            if f.get("engine_gemm"):
                name, own = f["engine_gemm"]
                replace_toml_table(data_dir("hardware") / f"{gpu}.toml", f"kernel.engines.{name}",
                                   engine_gemm_block(own, gpu, name, _versions(f, "gemm"), date))
            write_allreduce(gpu, f["allreduce"], date)
            print(f"wrote [kernel] to hardware/{gpu}.toml")
    if a.markdown:
        a.markdown.write_text(markdown(fits, date))
        print(f"wrote {a.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
