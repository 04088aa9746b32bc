"""Per-GPU kernel calibration: the ``[kernel]`` table of a hardware file, as a frozen dataclass.

Keys are unit-suffixed (``_rows``, ``_cols``, ``_tokens``, ``_frac``, ``_us``, ``_GBps``) and
converted to SI on parsing. An unknown key is an error that names the file and the key; a
hardware file without a ``[kernel]`` table gets the documented defaults below with a warning.

Defaults (fitted to DeepGEMM FP8 timings on H800 by ``moesym.kernels.fit``; see
``hardware/h800.toml`` for the fit record):

==================================  =======  ===============================================
key                                 default  meaning
==================================  =======  ===============================================
tile_m_rows                         64       GEMM output tile rows (M tile; groups pad to it)
tile_n_max_cols                     256      widest GEMM output tile (columns)
tile_n_min_cols                     16       narrowest tile; tiles narrow to fill the SMs
split_k_max                         0        most ways a dense GEMM's K loop is split over the
                                             SMs its output tiles leave idle, FP32 partials
                                             added in HBM (0: never; DeepGEMM, cuBLAS as
                                             fitted; AMD's tuned GEMMs split K, aiter's splitK)
tile_m_min_rows                     0        smallest M block of dense GEMMs (0: 64 rows, a
                                             Hopper warpgroup pair; AMD's CK and asm GEMMs
                                             tile M by 16 at few rows, aiter's tuned kernels
                                             e.g. a8w8_blockscale_..._256x16x64x256_...)
tile_m_fixed_rows                   0        a dense GEMM kernel with one launch
                                             configuration at every M: this M block, an N
                                             block of tile_n_fixed_cols, no split K and no
                                             matrix-vector path (0: the blocks follow the
                                             shape as above; aiter's Triton FP8 block-scale
                                             GEMM on gfx942 under SGLang: 128 x 128)
tile_n_fixed_cols                   0        that configuration's N block (0: tile_m_fixed_rows)
gemm_tensor_frac                    0.76     per-SM tensor-core rate achieved, dense GEMM
grouped_contiguous_tensor_frac      0.66     same, grouped GEMM, contiguous layout
grouped_masked_tensor_frac          0.56     same, grouped GEMM, masked layout
tile_overhead_us                    0.58     fixed time per tile (prologue and epilogue)
sm_bandwidth_GBps                   104      HBM bandwidth one busy SM can draw
gemm_hbm_frac                       0.79     achieved fraction of HBM bandwidth, all SMs busy
launch_us                           6.7      fixed launch latency per GEMM kernel
attention_tensor_frac               0.56     per-SM tensor-core rate achieved in attention
attention_hbm_frac                  0.95     achieved fraction of HBM bandwidth, attention
attention_q_tile_rows               64       attention query tile rows in prefill
attention_decode_q_tile_rows        16       decode query tile: the query heads sharing a KV head
                                             are padded to it (MMA m16 granularity)
attention_prefill_tensor_frac       0.6      per-SM tensor-core rate achieved in prefill attention
attention_kv_split_tokens           512      KV tokens per split-KV work unit (decode)
attention_unit_overhead_us          0        fixed time per wave of attention work units
                                             (per-unit setup and the split-KV merge; 0: none)
attention_launch_us                 23.5     fixed latency per attention kernel
attention_prefill_launch_us         0        fixed latency per prefill attention kernel where
                                             the engine runs another kernel there (0: the same
                                             as attention_launch_us)
attention_decode_unit_overhead_us   0        fixed time per wave of decode work units where
                                             the decode kernel's differs from prefill's (0: the
                                             same as attention_unit_overhead_us)
attention_gqa_bf16_unit_us          0        fixed time per wave of GQA decode units (several
                                             query heads per KV head) with a 16-bit KV cache,
                                             where the engine runs another, slower kernel there
                                             (0: the decode unit time)
attention_split_merge_us            0        fixed time added to a decode kernel whose
                                             sequences are split into several KV units (the
                                             partial results' merge)
attention_mla_launch_us             0        fixed latency of the MLA decode kernel (latent
                                             split-KV pass and its merge; 0: attention_launch_us)
attention_mla_hbm_frac              0        achieved fraction of HBM bandwidth of the MLA
                                             decode kernel's shared-latent read (0:
                                             attention_hbm_frac)
attention_mha_decode_TFLOPs         0        decode with one query head per KV head (MHA): no
                                             query rows to stack into an MMA, the dot products
                                             (and the KV cache's conversion) run on the CUDA
                                             cores at this rate, whole GPU (0: tensor cores)
attention_decode_fill_us            0        fixed time before a decode kernel's KV stream runs at
                                             its bandwidth (added to the memory time)
attention_mha_decode_launch_us      0        fixed latency of the MHA decode kernel (one query
                                             head per KV head; 0: attention_launch_us)
attention_gqa_generic_launch_us     0        fixed latency of the GQA decode kernel with a
                                             16-bit KV cache or head dim <= 64 (0:
                                             attention_launch_us, then the FP8-cache GQA kernel's)
attention_mla_kv_split_tokens       0        KV tokens per MLA decode work unit where the MLA
                                             kernel splits otherwise (0: attention_kv_split_tokens;
                                             1048576: one unit per sequence)
attention_gqa_unit_dim_slope        0        GQA decode: the per-wave unit time scales by
                                             1 + slope ((d_qk + d_v) / 256 - 1) (0: not at all)
elementwise_hbm_frac                0.80     achieved fraction of HBM bandwidth, elementwise
elementwise_launch_us               3.0      fixed latency per elementwise kernel
tile_step_base_us                   0        tile-stepped expert GEMMs (0: not used): time when
                                             every expert fits in one row tile
tile_step_us                        0        time added per further row tile of any expert
tile_step_rows                      32       rows of one tile of the tile-stepped model
tile_step_ref_hidden                7168     expert shape the steps were measured on (d; other
tile_step_ref_inter                 2048     shapes scale by d d_e / (this d x this d_e))
mv_max_rows                         8        a GEMM of at most this many rows runs a
                                             matrix-vector kernel, not padded to an M tile (0:
                                             none, Tenstorrent's 32 x 32 tiles)
                                             (llama.cpp ggml-cuda mmvq.cuh MMVQ_MAX_BATCH_SIZE 8)
mv_grouped                          0        1: grouped expert GEMMs of few rows per expert run
                                             matrix-vector kernels too (llama.cpp mul_mat_id,
                                             MLX gather_qmm); 0: they pad to the M tile
                                             (DeepGEMM, CUTLASS, Triton fused_moe)
mv_hbm_frac                         0        achieved fraction of memory bandwidth of the
                                             matrix-vector kernels (0: gemm_hbm_frac)
unpack_Gweights_per_s               0        weights per second a matrix-vector kernel unpacks
                                             from a block format, in series with its loads
                                             (0: no unpack time)
dequant_pass_rows                   0        a GEMM of more rows on a block format first
                                             dequantizes its weights to 16 bits in a kernel of
                                             its own, then runs a 16-bit GEMM (0: never;
                                             llama.cpp CUDA MMQ_MAX_BATCH_SIZE 32, PR #3776)
grouped_hbm_frac                    0        achieved fraction of HBM bandwidth of grouped
                                             (expert) GEMMs and their weight reads (0:
                                             gemm_hbm_frac)
grouped_fixed_us                    0        fixed time per grouped GEMM kernel beyond its
                                             launch: the fused-MoE backend's routing, permute
                                             and finalize kernels, charged to its two GEMMs
grouped_expert_us                   0        time per local expert (group) per grouped GEMM
                                             kernel: the per-expert problem setup the kernel
                                             walks whether or not the expert has rows
grouped_masked_passes               0        HBM passes (at elementwise_hbm_frac) over the
                                             output rows of token x top-k assignments to
                                             experts on other EP ranks: a kernel whose grid
                                             covers every assignment writes zeros there and
                                             its activation and top-k sum read them (SGLang's
                                             Triton fused_moe under EP without an all-to-all)
grouped_row_passes                  0        time per output row of the assignments the grouped
                                             GEMM computes, beyond its tiles, in HBM passes (at
                                             elementwise_hbm_frac) over those rows' outputs: the
                                             backend's per-row gather / scale / scatter work
grouped_tile_m_min_rows             0        smallest M block of the grouped GEMMs (0: the
                                             kernel class's, 64 rows)
grouped_tile_m_rows                 0        the backend's fixed M block: each expert's rows pad
                                             to it at any rows per expert (0: the tile follows
                                             the rows; SGLang's Triton fused_moe without a tuned
                                             config file: 64, its default BLOCK_SIZE_M)
grouped_few_tokens_tile_m_rows      0        the fixed M block where the kernel's tokens are at
                                             most its local experts (0: grouped_tile_m_rows;
                                             SGLang's Triton default config: 16 without FP8)
grouped_launch_tile_max_rows        0        the M block follows the launch's assignments per
                                             local expert (T k / E_local: under EP every rank's,
                                             as the kernel's routing counts them): half the
                                             smallest power of two holding them, at least
                                             grouped_tile_m_min_rows, at most this (0: not used;
                                             FlashInfer's TRT-LLM-gen MoE without a tuned
                                             tactic: 64, of its tiles 8-128)
grouped_n_block_cols                0        N block each expert's grouped-GEMM tiles pad to
                                             (0: none; FlashInfer's TRT-LLM kernels: 256, the
                                             gate and up rows of one 128-row weight tile each)
grouped_k_block_cols                0        K block each expert's tiles pad to (0: none;
                                             FlashInfer's TRT-LLM kernels: 128, one FP8 scale
                                             block); tiles only, the HBM bytes stay unpadded
grouped_tile_overhead_us            0        fixed time per tile of the fused-MoE backend's
                                             grouped GEMMs where its kernels' prologue and
                                             epilogue differ from the dense GEMMs' (0:
                                             tile_overhead_us; aiter's MoE stages on MI355X)
grouped_serial_frac                 0        share of the shorter of a grouped GEMM's tile
                                             time and memory time not hidden under the longer
                                             (time = max + s min; 0: fully overlapped)
moe_elementwise_launches            0        memory-bound kernels the fused-MoE backend runs
                                             beside its two GEMMs (0: the step model's own:
                                             top-k, permute, unpermute-reduce, activation and
                                             the input casts; the fit counts 4). FlashInfer's
                                             TRT-LLM-gen block-FP8 MoE: 5, input cast (SGLang
                                             flashinfer_trtllm.py:947), routing in two kernels,
                                             top-k and the permutation indices (FlashInfer
                                             0.7.2.post1 trtllm_fused_moe_routing_deepseek.cu:573
                                             and :596 / :605: one cluster, or a cooperative
                                             kernel up to moe SMs x 64 x experts' threads / k
                                             tokens), activation
                                             (trtllm_fused_moe_runner.cu:859, writes
                                             the down GEMM's FP8 input: no cast of its own),
                                             finalize (:919); the permute is GEMM1's row
                                             gather (:829)
moe_launch_us                       0        fixed time per kernel of the fused-MoE backend
                                             (its GEMMs and memory-bound kernels) where they
                                             are chained with programmatic dependent launch,
                                             each launched while the one before runs
                                             (FlashInfer DevKernel.h:59); fitted; a
                                             memory-bound kernel's at most
                                             elementwise_launch_us (0: launch_us and
                                             elementwise_launch_us)
grouped_unaligned_load_frac         0        rate of a grouped GEMM's loads (HBM and per-SM)
                                             where K, the operands' row stride in elements, is
                                             not a multiple of 16, as a fraction of the aligned
                                             rate (0: not used; Triton specializes only
                                             integer arguments divisible by 16, so such
                                             strides give no 16-byte vector loads)
grouped_k_step_us                   0        time per K step of a grouped GEMM's thread block
                                             beyond its MMAs, per wave: the load latency its
                                             pipeline leaves unhidden (0: not used)
grouped_k_step_cols                 0        K columns per step of that loop (SGLang's Triton
                                             default config: BLOCK_SIZE_K 32 without FP8)
grouped_few_tokens_k_step_cols      0        the same where the kernel's tokens are at most
                                             its local experts (0: grouped_k_step_cols;
                                             SGLang's Triton default: 64 without FP8)
==================================  =======  ===============================================

A ``[kernel.engines.NAME]`` sub-table holds the same keys for one engine's kernels on that device
(llama.cpp's matrix-vector bandwidth, unpack rate, dequantization pass): a deployment with
``--engine NAME`` takes them over the table (:meth:`moesym.engines.EngineProfile.hardware`).
A ``[kernel.dtypes.FORMAT]`` sub-table (FORMAT a tensor-core format: bf16, fp16, fp8, fp4, int8)
holds the same keys for the GEMMs that compute in that format, where the device's library runs
another kernel per format (AMD's aiter: BF16, FP8 block-scale and MXFP4 GEMMs and fused MoE,
each fitted on its own table): :func:`kernel_calib` with ``dtype``, and the kernel time model
for each GEMM weight class by the format it computes in
(:meth:`moesym.kernels.timing.KernelTiming.bind`).

>>> from moesym.specs.kernel_calib import parse_kernel_calib
>>> c = parse_kernel_calib({"tile_m_rows": 64, "launch_us": 4.0}, "x.toml")
>>> c.tile_m_rows, c.launch_s
(64, 4e-06)
>>> parse_kernel_calib({"tile_rows": 64}, "x.toml")
Traceback (most recent call last):
...
moesym.errors.SpecError: x.toml [kernel]: unknown key 'tile_rows'; allowed: ...
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..errors import SpecError

__all__ = ["DEFAULTS", "DTYPES_KEY", "KernelCalib", "MOE_KERNEL_KEYS", "calib_to_toml",
           "dtype_tables", "kernel_calib", "moe_kernel_fields", "parse_kernel_calib"]

# TOML key -> (field name, SI factor, kind, default in TOML units)
_KEYS: dict[str, tuple[str, float, str, float]] = {
    "tile_m_rows": ("tile_m_rows", 1, "int", 64),
    "tile_n_max_cols": ("tile_n_max_cols", 1, "int", 256),
    "tile_n_min_cols": ("tile_n_min_cols", 1, "int", 16),
    "tile_m_min_rows": ("tile_m_min_rows", 1, "flag", 0),
    "tile_m_fixed_rows": ("tile_m_fixed_rows", 1, "flag", 0),
    "tile_n_fixed_cols": ("tile_n_fixed_cols", 1, "flag", 0),
    "split_k_max": ("split_k_max", 1, "flag", 0),
    "gemm_tensor_frac": ("gemm_tensor_frac", 1, "frac", 0.76),
    "grouped_contiguous_tensor_frac": ("grouped_contiguous_tensor_frac", 1, "frac", 0.66),
    "grouped_masked_tensor_frac": ("grouped_masked_tensor_frac", 1, "frac", 0.56),
    "tile_overhead_us": ("tile_overhead_s", 1e-6, "nonneg", 0.58),
    "sm_bandwidth_GBps": ("sm_bandwidth_Bps", 1e9, "pos", 104.0),
    "gemm_hbm_frac": ("gemm_hbm_frac", 1, "frac", 0.79),
    "launch_us": ("launch_s", 1e-6, "nonneg", 6.7),
    "attention_tensor_frac": ("attention_tensor_frac", 1, "frac", 0.56),
    "attention_hbm_frac": ("attention_hbm_frac", 1, "frac", 0.95),
    "attention_q_tile_rows": ("attention_q_tile_rows", 1, "int", 64),
    "attention_decode_q_tile_rows": ("attention_decode_q_tile_rows", 1, "int", 16),
    "attention_prefill_tensor_frac": ("attention_prefill_tensor_frac", 1, "frac", 0.6),
    "attention_kv_split_tokens": ("attention_kv_split_tokens", 1, "int", 512),
    "attention_unit_overhead_us": ("attention_unit_overhead_s", 1e-6, "nonneg", 0.0),
    "attention_launch_us": ("attention_launch_s", 1e-6, "nonneg", 23.5),
    "attention_prefill_launch_us": ("attention_prefill_launch_s", 1e-6, "nonneg", 0.0),
    "attention_decode_unit_overhead_us": ("attention_decode_unit_overhead_s", 1e-6, "nonneg", 0.0),
    "attention_gqa_bf16_unit_us": ("attention_gqa_bf16_unit_s", 1e-6, "nonneg", 0.0),
    "attention_split_merge_us": ("attention_split_merge_s", 1e-6, "nonneg", 0.0),
    "attention_mla_launch_us": ("attention_mla_launch_s", 1e-6, "nonneg", 0.0),
    "attention_mla_hbm_frac": ("attention_mla_hbm_frac", 1, "nonneg", 0.0),
    "attention_mha_decode_TFLOPs": ("attention_mha_decode_flops_per_s", 1e12, "nonneg", 0.0),
    "attention_decode_fill_us": ("attention_decode_fill_s", 1e-6, "nonneg", 0.0),
    "attention_mha_decode_launch_us": ("attention_mha_decode_launch_s", 1e-6, "nonneg", 0.0),
    "attention_gqa_generic_launch_us": ("attention_gqa_generic_launch_s", 1e-6, "nonneg", 0.0),
    "attention_mla_kv_split_tokens": ("attention_mla_kv_split_tokens", 1, "flag", 0),
    "attention_gqa_unit_dim_slope": ("attention_gqa_unit_dim_slope", 1, "nonneg", 0.0),
    "elementwise_hbm_frac": ("elementwise_hbm_frac", 1, "frac", 0.80),
    "elementwise_launch_us": ("elementwise_launch_s", 1e-6, "nonneg", 3.0),
    # tile-stepped expert compute (accelerators whose matmul engines work in fixed row tiles,
    # Tenstorrent; seed 004): base + step x tiles beyond each expert's first; 0 = not used
    "tile_step_base_us": ("tile_step_base_s", 1e-6, "nonneg", 0.0),
    "tile_step_us": ("tile_step_s", 1e-6, "nonneg", 0.0),
    "tile_step_rows": ("tile_step_rows", 1, "int", 32),
    # the expert shape the steps were measured on (hidden d, intermediate d_e); other shapes
    # scale both times by d d_e / (ref_hidden ref_inter), the work of one tile
    "tile_step_ref_hidden": ("tile_step_ref_hidden", 1, "int", 7168),
    "tile_step_ref_inter": ("tile_step_ref_inter", 1, "int", 2048),
    # matrix-vector kernels (moesym.kernels.analytical.matvec_time)
    "mv_max_rows": ("mv_max_rows", 1, "flag", 8),
    "mv_grouped": ("mv_grouped", 1, "flag", 0),
    "mv_hbm_frac": ("mv_hbm_frac", 1, "nonneg", 0.0),
    "unpack_Gweights_per_s": ("unpack_weights_per_s", 1e9, "nonneg", 0.0),
    "dequant_pass_rows": ("dequant_pass_rows", 1, "flag", 0),
    # fused-MoE kernel mechanisms (per backend in [moe_kernels]; 0: not used)
    "grouped_hbm_frac": ("grouped_hbm_frac", 1, "nonneg", 0.0),
    "grouped_fixed_us": ("grouped_fixed_s", 1e-6, "nonneg", 0.0),
    "grouped_expert_us": ("grouped_expert_s", 1e-6, "nonneg", 0.0),
    "grouped_masked_passes": ("grouped_masked_passes", 1, "nonneg", 0.0),
    "grouped_row_passes": ("grouped_row_passes", 1, "nonneg", 0.0),
    "grouped_tile_m_min_rows": ("grouped_tile_m_min_rows", 1, "flag", 0),
    "grouped_tile_m_rows": ("grouped_tile_m_rows", 1, "flag", 0),
    "grouped_few_tokens_tile_m_rows": ("grouped_few_tokens_tile_m_rows", 1, "flag", 0),
    "grouped_launch_tile_max_rows": ("grouped_launch_tile_max_rows", 1, "flag", 0),
    "grouped_n_block_cols": ("grouped_n_block_cols", 1, "flag", 0),
    "grouped_k_block_cols": ("grouped_k_block_cols", 1, "flag", 0),
    "grouped_serial_frac": ("grouped_serial_frac", 1, "nonneg", 0.0),
    "grouped_tile_overhead_us": ("grouped_tile_overhead_s", 1e-6, "nonneg", 0.0),
    "moe_launch_us": ("moe_launch_s", 1e-6, "nonneg", 0.0),
    "moe_elementwise_launches": ("moe_elementwise_launches", 1, "flag", 0),
    "grouped_unaligned_load_frac": ("grouped_unaligned_load_frac", 1, "nonneg", 0.0),
    "grouped_k_step_us": ("grouped_k_step_s", 1e-6, "nonneg", 0.0),
    "grouped_k_step_cols": ("grouped_k_step_cols", 1, "flag", 0),
    "grouped_few_tokens_k_step_cols": ("grouped_few_tokens_k_step_cols", 1, "flag", 0),
}
_OPTIONAL = ("tile_step_base_us", "tile_step_us", "tile_step_rows", "tile_step_ref_hidden",
             "tile_step_ref_inter")  # written only when used
# the keys a fused-MoE backend's [moe_kernels] entry may set beside grouped_tensor_frac (its
# mechanisms: moesym.kernels.analytical.gemm_time's grouped layouts)
MOE_KERNEL_KEYS = ("grouped_hbm_frac", "grouped_fixed_us", "grouped_expert_us",
                   "grouped_masked_passes", "grouped_row_passes", "grouped_tile_m_min_rows",
                   "grouped_tile_m_rows", "grouped_few_tokens_tile_m_rows",
                   "grouped_launch_tile_max_rows", "grouped_n_block_cols",
                   "grouped_k_block_cols", "grouped_serial_frac", "grouped_tile_overhead_us",
                   "moe_launch_us",
                   "moe_elementwise_launches",
                   "grouped_unaligned_load_frac", "grouped_k_step_us",
                   "grouped_k_step_cols", "grouped_few_tokens_k_step_cols")
_OPTIONAL_NONZERO = ("tile_m_min_rows", "tile_m_fixed_rows", "tile_n_fixed_cols", "split_k_max", "attention_unit_overhead_us", "attention_prefill_launch_us",
                     "attention_decode_unit_overhead_us", "attention_gqa_bf16_unit_us",
                     "attention_split_merge_us", "attention_mla_launch_us",
                     "attention_mla_hbm_frac", "attention_mha_decode_TFLOPs",
                     "attention_decode_fill_us", "attention_mha_decode_launch_us",
                     "attention_gqa_generic_launch_us",
                     "attention_mla_kv_split_tokens", "attention_gqa_unit_dim_slope",
                     "mv_grouped",
                     "mv_hbm_frac", "unpack_Gweights_per_s", "dequant_pass_rows",
                     *MOE_KERNEL_KEYS)  # written only when not 0
_SWITCHES = ("mv_grouped",)  # 0 or 1
# record of the fit, read by ``moesym list hardware``, never by the model: ``source`` (free
# text), ``engine`` (the engine and version whose kernels were timed), ``fit_date``,
# ``heldout_error`` ({kernel class: median |pred / meas - 1| on held-out shapes}),
# ``transferred`` (the fields not fitted on this GPU's kernels and the rule that set them: a
# warning names it whenever the calibration is used)
_INFO_KEYS = {"source", "engine", "fit_date", "heldout_error", "transferred"}
# [kernel.engines.NAME]: values of one engine's kernels on this device, over the table above when
# a deployment names that engine (moesym.engines.EngineProfile.hardware); same keys
ENGINES_KEY = "engines"
# [kernel.dtypes.FORMAT]: values of the kernels of one tensor-core format (bf16, fp8, fp4, int8)
# over the table above, for the GEMMs that compute in it (moesym.kernels.timing.KernelTiming:
# each GEMM weight class by the format its peak is bound to): a device whose kernel library
# runs another kernel per format (AMD: hipBLASLt / asm BF16, CK block-scale FP8, MXFP4 GEMMs,
# each fitted on its own aiter table); same keys
DTYPES_KEY = "dtypes"
_FORMATS = ("bf16", "fp16", "fp8", "fp4", "int8")


@dataclass(frozen=True)
class KernelCalib:
    """Kernel-model calibration of one GPU, SI units (see the module docstring for meanings)."""

    tile_m_rows: int = 64
    tile_n_max_cols: int = 256
    tile_n_min_cols: int = 16
    tile_m_min_rows: int = 0
    tile_m_fixed_rows: int = 0
    tile_n_fixed_cols: int = 0
    split_k_max: int = 0
    gemm_tensor_frac: float = 0.76
    grouped_contiguous_tensor_frac: float = 0.66
    grouped_masked_tensor_frac: float = 0.56
    tile_overhead_s: float = 0.58e-6
    sm_bandwidth_Bps: float = 104e9
    gemm_hbm_frac: float = 0.79
    launch_s: float = 6.7e-6
    attention_tensor_frac: float = 0.56
    attention_hbm_frac: float = 0.95
    attention_q_tile_rows: int = 64
    attention_decode_q_tile_rows: int = 16
    attention_prefill_tensor_frac: float = 0.6
    attention_kv_split_tokens: int = 512
    attention_unit_overhead_s: float = 0.0
    attention_launch_s: float = 23.5e-6
    attention_prefill_launch_s: float = 0.0
    attention_decode_unit_overhead_s: float = 0.0
    attention_gqa_bf16_unit_s: float = 0.0
    attention_split_merge_s: float = 0.0
    attention_mla_launch_s: float = 0.0
    attention_mla_hbm_frac: float = 0.0
    attention_mha_decode_flops_per_s: float = 0.0
    attention_decode_fill_s: float = 0.0
    attention_mha_decode_launch_s: float = 0.0
    attention_gqa_generic_launch_s: float = 0.0
    attention_mla_kv_split_tokens: int = 0
    attention_gqa_unit_dim_slope: float = 0.0
    elementwise_hbm_frac: float = 0.80
    elementwise_launch_s: float = 3.0e-6
    tile_step_base_s: float = 0.0
    tile_step_s: float = 0.0
    tile_step_rows: int = 32
    tile_step_ref_hidden: int = 7168
    tile_step_ref_inter: int = 2048
    mv_max_rows: int = 8
    mv_grouped: int = 0
    mv_hbm_frac: float = 0.0
    unpack_weights_per_s: float = 0.0
    dequant_pass_rows: int = 0
    grouped_hbm_frac: float = 0.0
    grouped_fixed_s: float = 0.0
    grouped_expert_s: float = 0.0
    grouped_masked_passes: float = 0.0
    grouped_row_passes: float = 0.0
    grouped_tile_m_min_rows: int = 0
    grouped_tile_m_rows: int = 0
    grouped_few_tokens_tile_m_rows: int = 0
    grouped_launch_tile_max_rows: int = 0
    grouped_n_block_cols: int = 0
    grouped_k_block_cols: int = 0
    grouped_serial_frac: float = 0.0
    grouped_tile_overhead_s: float = 0.0
    moe_launch_s: float = 0.0
    moe_elementwise_launches: int = 0
    grouped_unaligned_load_frac: float = 0.0
    grouped_k_step_s: float = 0.0
    grouped_k_step_cols: int = 0
    grouped_few_tokens_k_step_cols: int = 0
    source: str = "moesym defaults (H800 DeepGEMM fit)"

    @property
    def matvec_hbm_frac(self) -> float:
        """Bandwidth fraction of matrix-vector kernels (``mv_hbm_frac``, else ``gemm_hbm_frac``)."""
        return self.mv_hbm_frac or self.gemm_hbm_frac

    def hbm_frac(self, layout: str) -> float:
        """Achieved HBM fraction of a GEMM of ``layout``: ``grouped_hbm_frac`` for grouped
        (expert) layouts where set, else ``gemm_hbm_frac``."""
        return (self.grouped_hbm_frac if layout != "dense" else 0.0) or self.gemm_hbm_frac

    def backend_launches(self) -> KernelCalib:
        """This calibration as it times the fused-MoE backend's own kernels (its grouped GEMMs
        and memory-bound kernels): every launch at ``moe_launch_us`` where set, a memory-bound
        one never above ``elementwise_launch_us`` (a kernel of the chain is no slower than the
        same kernel launched alone; in a CUDA graph, the graph's per-kernel floor)."""
        if not self.moe_launch_s:
            return self
        return replace(self, launch_s=self.moe_launch_s,
                       elementwise_launch_s=min(self.moe_launch_s, self.elementwise_launch_s))

    @property
    def unpack_s_per_weight(self) -> float:
        """Seconds a matrix-vector kernel spends unpacking one block-format weight (0: none)."""
        return 1.0 / self.unpack_weights_per_s if self.unpack_weights_per_s else 0.0

    @property
    def tile_stepped(self) -> bool:
        """Expert GEMMs timed as base + step x extra row tiles (``tile_step_base_us`` > 0)."""
        return self.tile_step_base_s > 0

    @property
    def prefill_attention_launch_s(self) -> float:
        """Launch latency of a prefill attention kernel (``attention_prefill_launch_us``, else
        ``attention_launch_us``)."""
        return self.attention_prefill_launch_s or self.attention_launch_s

    @property
    def decode_unit_overhead_s(self) -> float:
        """Fixed time per wave of decode attention units (``attention_decode_unit_overhead_us``,
        else ``attention_unit_overhead_us``)."""
        return self.attention_decode_unit_overhead_s or self.attention_unit_overhead_s

    def decode_attention_launch_s(self, shared_kv: bool) -> float:
        """Launch latency of a decode attention kernel: the MLA kernel's
        (``attention_mla_launch_us``) for a shared latent, else ``attention_launch_us``."""
        return (self.attention_mla_launch_s if shared_kv else 0.0) or self.attention_launch_s

    def decode_attention_hbm_frac(self, shared_kv: bool) -> float:
        """HBM fraction of a decode attention kernel's KV read: the MLA kernel's
        (``attention_mla_hbm_frac``) for a shared latent, else ``attention_hbm_frac``."""
        return (self.attention_mla_hbm_frac if shared_kv else 0.0) or self.attention_hbm_frac

    def tensor_frac(self, layout: str) -> float:
        """Per-SM tensor-core fraction for a GEMM layout ('dense', 'contiguous', 'masked')."""
        if layout in ("dense", "gemm"):
            return self.gemm_tensor_frac
        if layout == "contiguous":
            return self.grouped_contiguous_tensor_frac
        if layout in ("masked", "batched"):
            return self.grouped_masked_tensor_frac
        raise SpecError(f"unknown GEMM layout {layout!r}; use dense, contiguous or masked")

    def to_toml_values(self) -> dict[str, float]:
        """``{toml key: value in TOML units}`` (inverse of :func:`parse_kernel_calib`)."""
        out = {}
        for key, (fname, factor, kind, _) in _KEYS.items():
            if key in _OPTIONAL and not self.tile_stepped:
                continue
            v = getattr(self, fname)
            if key in _OPTIONAL_NONZERO and not v:
                continue
            if key == "mv_max_rows" and v == _KEYS[key][3]:  # written only where it differs
                continue
            out[key] = int(v) if kind in ("int", "flag") else float(v) / factor
        return out


DEFAULTS = KernelCalib()


def parse_kernel_calib(table: Mapping[str, object], where: str) -> KernelCalib:
    """Parse a ``[kernel]`` table (TOML units) into a :class:`KernelCalib`; missing keys default."""
    vals: dict[str, object] = {}
    for sub_key in (ENGINES_KEY, DTYPES_KEY):
        subs = table.get(sub_key, {}) or {}
        if not isinstance(subs, Mapping):
            raise SpecError(f"{where} [kernel.{sub_key}]: expected tables [kernel.{sub_key}.NAME]")
        for name, sub in subs.items():
            if not isinstance(sub, Mapping):
                raise SpecError(f"{where} [kernel.{sub_key}.{name}]: expected a table of [kernel] "
                                "keys")
            if sub_key == DTYPES_KEY and name not in _FORMATS:
                raise SpecError(f"{where} [kernel.{DTYPES_KEY}.{name}]: not a tensor-core format; "
                                f"use one of {', '.join(_FORMATS)}")
            parse_kernel_calib(sub, f"{where} [kernel.{sub_key}.{name}]")
    for key, raw in table.items():
        if key in (ENGINES_KEY, DTYPES_KEY):
            continue
        if key == "source":
            vals["source"] = str(raw)
            continue
        if key in _INFO_KEYS:
            continue
        if key not in _KEYS:
            raise SpecError(f"{where} [kernel]: unknown key '{key}'; allowed: "
                            f"{', '.join(sorted(set(_KEYS) | _INFO_KEYS | {ENGINES_KEY, DTYPES_KEY}))}")
        fname, factor, kind, _ = _KEYS[key]
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise SpecError(f"{where} [kernel] {key}: must be a number, got {raw!r}")
        x = float(raw)
        if kind == "int":
            if x < 1 or x != int(x):
                raise SpecError(f"{where} [kernel] {key}: must be a positive integer, got {raw!r}")
            vals[fname] = int(x)
        elif kind == "frac":
            if not 0 < x <= 1:
                raise SpecError(f"{where} [kernel] {key}: must be in (0, 1], got {raw!r}")
            vals[fname] = x
        elif kind == "flag":  # 0: off; mv_grouped is 0 or 1, a row count any whole number
            switch = key in _SWITCHES
            if x < 0 or x != int(x) or (switch and x > 1):
                raise SpecError(f"{where} [kernel] {key}: must be "
                                f"{'0 or 1' if switch else 'a whole number (0: off)'}, got {raw!r}")
            vals[fname] = int(x)
        elif kind == "pos":
            if not x > 0:
                raise SpecError(f"{where} [kernel] {key}: must be positive, got {raw!r}")
            vals[fname] = x * factor
        else:
            if x < 0:
                raise SpecError(f"{where} [kernel] {key}: must be non-negative, got {raw!r}")
            vals[fname] = x * factor
    for key in ("mv_hbm_frac", "grouped_hbm_frac", "grouped_serial_frac"):
        if vals.get(key, 0) > 1:
            raise SpecError(f"{where} [kernel] {key}: must be in (0, 1] (0: gemm_hbm_frac), "
                            f"got {vals[key]!r}")
    c = KernelCalib(**vals)
    if c.tile_n_min_cols > c.tile_n_max_cols:
        raise SpecError(f"{where} [kernel] tile_n_min_cols: exceeds tile_n_max_cols")
    return c


def moe_kernel_fields(entry: Mapping[str, object], where: str) -> dict[str, object]:
    """The :class:`KernelCalib` fields (SI) a ``[moe_kernels]`` entry's :data:`MOE_KERNEL_KEYS`
    set, checked as ``[kernel]`` keys; keys left out are not set.

    >>> moe_kernel_fields({"grouped_fixed_us": 4.5, "grouped_serial_frac": 0.5}, "x")
    {'grouped_fixed_s': 4.5e-06, 'grouped_serial_frac': 0.5}
    """
    c = parse_kernel_calib({k: entry[k] for k in MOE_KERNEL_KEYS if k in entry}, where)
    return {_KEYS[k][0]: getattr(c, _KEYS[k][0]) for k in MOE_KERNEL_KEYS if k in entry}


def transferred(c: KernelCalib, fitted_hw, target_hw, source: str) -> KernelCalib:
    """The fit of ``fitted_hw`` carried to an unmeasured ``target_hw``. The fit is per SM, so
    every fraction carries as it is; the per-SM load rate is scaled up with the per-SM BF16
    tensor rate where the target's SM is faster (an SM that computes twice as fast is fed twice
    as fast: Blackwell's doubled per-SM tensor rate comes with its TMA and L2 to feed it), never
    down (a slower SM still draws the memory path it was fitted on). Assumed, not measured:
    without it a B200's large GEMMs sat at half their peak behind H800's per-SM load rate.

    >>> from types import SimpleNamespace as H
    >>> h800 = H(sms=132, peak_flops=lambda d: 989e12)
    >>> b200 = H(sms=148, peak_flops=lambda d: 2250e12)
    >>> round(transferred(DEFAULTS, h800, b200, "t").sm_bandwidth_Bps / DEFAULTS.sm_bandwidth_Bps, 4)
    2.0291
    """
    per_sm = lambda hw: hw.peak_flops("bf16") / hw.sms  # noqa: E731
    scale = max(1.0, per_sm(target_hw) / per_sm(fitted_hw))
    return replace(c, sm_bandwidth_Bps=c.sm_bandwidth_Bps * scale, source=source)


def dtype_tables(hw) -> tuple[str, ...]:
    """The tensor-core formats with a ``[kernel.dtypes.FORMAT]`` table in ``hw``'s file."""
    return tuple(dict(dict(getattr(hw, "kernel", {}) or {}).get(DTYPES_KEY, {}) or {}))


def kernel_calib(hw, dtype: str | None = None) -> KernelCalib:
    """The :class:`KernelCalib` of a :class:`~moesym.specs.hardware.HardwareSpec`; with
    ``dtype``, of the GEMMs computing in that tensor-core format: its ``[kernel.dtypes.dtype]``
    values over ``[kernel]`` where the file has that table, else ``[kernel]``.

    Without a ``[kernel]`` table: the defaults (H800 fit), with a warning naming them. A
    calibration transferred from another GPU (``source`` "transferred ..."), or with fields
    transferred by a rule (``transferred``), is used with a warning naming it.
    """
    table = dict(getattr(hw, "kernel", {}) or {})
    if not table:
        warnings.warn(f"hardware {hw.name}: no [kernel] table in {hw.path or 'its file'}; using the "
                      f"default kernel calibration ({DEFAULTS.source})",
                      stacklevel=2)
        return DEFAULTS
    if not set(table) - {ENGINES_KEY, DTYPES_KEY} - _INFO_KEYS:
        subs = " and ".join(f"[kernel.{k}.*]" for k in (ENGINES_KEY, DTYPES_KEY) if k in table)
        warnings.warn(f"hardware {hw.name}: the [kernel] table in {hw.path or 'its file'} holds "
                      f"only {subs or 'its source'}, no values of its own; using the default "
                      f"kernel calibration ({DEFAULTS.source}) under them", stacklevel=2)
    elif str(table.get("source", "")).startswith("transferred"):
        warnings.warn(f"hardware {hw.name}: kernel calibration {table['source']}: "
                      f"{hw.name}'s kernels were not measured", stacklevel=2)
    elif table.get("transferred"):
        car = getattr(hw, "allreduce", None)
        also = (f"; custom all-reduce {car.source}" if car is not None
                and car.source.startswith("transferred") else "")
        warnings.warn(f"hardware {hw.name}: kernel calibration partly transferred, not measured "
                      f"on {hw.name}: {table['transferred']}{also}", stacklevel=2)
    own = dict(table.get(DTYPES_KEY, {}) or {}).get(dtype) if dtype else None
    if own:
        base = {k: v for k, v in table.items() if k not in (ENGINES_KEY, DTYPES_KEY)}
        return parse_kernel_calib({**base, **own}, f"{hw.path or hw.name} [kernel.{DTYPES_KEY}."
                                                   f"{dtype}]")
    return parse_kernel_calib(table, hw.path or hw.name)


def _fmt(v) -> str:
    if isinstance(v, int):
        return str(v)
    return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.6g}"


def calib_to_toml(c: KernelCalib, comment_lines: list[str] | tuple[str, ...] = (),
                  record: Mapping[str, object] | None = None) -> str:
    """TOML text of a ``[kernel]`` table for ``c``, with leading ``#`` comment lines and the fit
    ``record`` (``engine``, ``fit_date``, ``heldout_error``: see ``_INFO_KEYS``) after ``source``.

    >>> print(calib_to_toml(KernelCalib(), ["fit: none"]).splitlines()[1])
    [kernel]
    """
    lines = [f"# {line}" for line in comment_lines]
    lines.append("[kernel]")
    for key, v in c.to_toml_values().items():
        lines.append(f"{key} = {_fmt(v) if not isinstance(v, float) else _fmt(float(v))}")
    lines.append(f'source = "{c.source}"')
    for key, v in (record or {}).items():
        if key not in _INFO_KEYS:
            raise ValueError(f"fit record key {key!r} is not one of {sorted(_INFO_KEYS)}")
        if isinstance(v, Mapping):
            inner = ", ".join(f"{k} = {float(x):.3f}" for k, x in v.items())
            lines.append(f"{key} = {{ {inner} }}")
        else:
            lines.append(f'{key} = "{v}"')
    return "\n".join(lines) + "\n"
