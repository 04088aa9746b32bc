"""Analytical kernel-time models: GEMM, grouped GEMM, attention decode / prefill, elementwise.

Every function accepts plain numbers, NumPy arrays or SymPy expressions for its shape arguments
and returns the same kind: the exact integer steps are kept (``sympy.ceiling`` / ``numpy.ceil``),
so a symbolic shape such as ``M = B k / (n_mb t_p)`` gives a SymPy expression that lambdifies to
the same numbers the NumPy path computes.

GEMM (``groups`` problems of M x N x K, output tiles ``tile_m x tile_n``; ``P`` the GPU peak
FLOP/s of the compute dtype, ``N_SM`` SMs, ``W`` HBM bandwidth)::

    tile_m  = min(tile_m_max, max(64, 64 ceiling(M / 64)))  (a 64-row block when M <= 64)
    m_tiles = groups * ceiling(M / tile_m)                  (each group padded to the M tile)
    n_alloc = max(1, floor(N_SM / m_tiles))                 (N tiles per M tile that fit on SMs)
    tile_n  = clip(tile_n_min * ceiling(N / n_alloc / tile_n_min), tile_n_min, tile_n_max)
    tiles   = m_tiles * ceiling(N / tile_n);  waves = ceiling(tiles / N_SM)
    compute = waves * (2 tile_m tile_n K / (eta_layout P / N_SM) + tau_tile)
    memory  = max(bytes / (eta_hbm W), waves * tile_bytes / W_SM)
    time    = max(compute, memory) + tau_launch

with ``tile_bytes = (tile_m + tile_n) K b_op + tile_m tile_n b_out`` (what one SM streams for one
tile) and ``W_SM`` the bandwidth one SM can draw, so a wave of few busy SMs cannot reach the HBM
peak. Narrowing the tile when M is small mirrors DeepGEMM's block-N choice that keeps SMs busy.
The contiguous layout concatenates each expert's rows padded to the M tile; the masked layout
(decode with CUDA graphs) runs every expert's block at the given (maximum) rows. Both are the
grouped form above with their own achieved tensor fraction ``eta_layout``.

Matrix-vector kernels (``M <= mv_max_rows``, 8: llama.cpp's ``MMVQ_MAX_BATCH_SIZE`` in
ggml-cuda/mmvq.cuh; Metal's ``mul_mv`` and MLX's quantized matmul likewise take a handful of rows
without tiling M; cuBLAS picks GEMV-like kernels there) are not padded to an M tile: each row's
dot products stream the weights once (:func:`matvec_time`)::

    compute = groups 2 M N K / P
    memory  = bytes / (eta_mv W) + unpack   (the weights' elements x tau_unpack where a block
                                             format is unpacked in the kernel, in series)
    time    = max(compute, memory) + tau_launch

Dense GEMMs take it on every hardware kind; grouped (expert) GEMMs only where ``mv_grouped`` says
the engine runs per-expert matrix-vector kernels (llama.cpp ``mul_mat_id``), since DeepGEMM,
CUTLASS and Triton's fused MoE pad every expert to their M block.

Time never falls when M, N or K grows (above the matrix-vector rows), and never beats the roofline
``max(2 M N K groups / P, bytes / W)`` (all fractions are <= 1 and padding only adds work).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import sympy as sp

from ..symbolic.expr import smax, smin
from ..specs.kernel_calib import DEFAULTS, KernelCalib

__all__ = [
    "KernelTime",
    "attention_decode_time",
    "attention_prefill_time",
    "attention_time_from_cost",
    "elementwise_time",
    "gemm_bytes",
    "gemm_tiles",
    "gemm_time",
    "grouped_extra_s",
    "grouped_fixed_block",
    "grouped_launch_block",
    "grouped_k_steps",
    "grouped_load_rate",
    "matvec_time",
    "split_k",
]


def _is_sym(*xs) -> bool:
    return any(isinstance(x, sp.Basic) for x in xs)


# Counts (tiles, waves, splits) are ratios of integers; compiled NumPy may compute 132/132 as
# 1.0000000000000002, so round to the nearest count first when within this relative tolerance.
_COUNT_TOL = 1e-9


def _ceil(x):
    if _is_sym(x):
        y = x * (1 - _COUNT_TOL)
        return sp.ceiling(y) if y.is_Number else sp.ceiling(y, evaluate=False)
    return np.ceil(np.asarray(x) * (1 - _COUNT_TOL))


def _floor(x):
    if _is_sym(x):
        y = x * (1 + _COUNT_TOL)
        return sp.floor(y) if y.is_Number else sp.floor(y, evaluate=False)
    return np.floor(np.asarray(x) * (1 + _COUNT_TOL))


def _max(a, b):
    return smax(a, b) if _is_sym(a, b) else np.maximum(a, b)


def _min(a, b):
    return smin(a, b) if _is_sym(a, b) else np.minimum(a, b)


@dataclass(frozen=True)
class KernelTime:
    """One kernel's time split into tensor-core time, memory time and fixed latency (seconds)."""

    compute_s: object
    memory_s: object
    launch_s: object

    @property
    def total_s(self):
        """max(compute, memory) + launch latency."""
        return _max(self.compute_s, self.memory_s) + self.launch_s


_TILE_M_MIN = 64  # the smallest M block of Hopper FP8/BF16 GEMM kernels (one warpgroup pair)


def tile_m_rows(m, calib: KernelCalib = DEFAULTS, floor: int = _TILE_M_MIN):
    """The M block a GEMM kernel picks: the calibrated block, or the smallest multiple of
    ``floor`` rows that holds M (64 for Hopper FP8/BF16 GEMMs; 16 for Marlin-style weight-only
    kernels, whose thread blocks tile M by 16 at small batch).

    >>> from dataclasses import replace
    >>> c = replace(DEFAULTS, tile_m_rows=128)
    >>> [float(tile_m_rows(m, c)) for m in (16, 64, 65, 4096)]
    [64.0, 64.0, 128.0, 128.0]
    >>> [float(tile_m_rows(m, c, floor=16)) for m in (1, 17, 4096)]
    [16.0, 32.0, 128.0]
    """
    return _min(calib.tile_m_rows, _max(floor, floor * _ceil(m / floor)))


def gemm_tiles(m, n, groups, sms, calib: KernelCalib = DEFAULTS, tile_m_min: int = _TILE_M_MIN,
               m_tile_factor=1, extra_m_tiles=0):
    """``(tiles, waves, tile_n)`` of a (grouped) GEMM (see the module docstring);
    ``m_tile_factor``: the M tiles of skewed per-group rows over those of ``groups`` equal
    groups of M rows (:func:`moesym.routing.skew.m_tile_factor`; 1: equal groups);
    ``extra_m_tiles``: M tiles beyond the groups' (a grid that computes other ranks' rows).

    >>> [float(x) for x in gemm_tiles(4096, 4096, 1, 132)]  # 64 M tiles x 2 -> 256-wide tiles
    [1024.0, 8.0, 256.0]
    >>> [float(x) for x in gemm_tiles(16, 1536, 1, 132)]  # one M tile: 16-column tiles fill SMs
    [96.0, 1.0, 16.0]
    """
    tm, tmin, tmax = tile_m_rows(m, calib, tile_m_min), calib.tile_n_min_cols, calib.tile_n_max_cols
    m_tiles = groups * _ceil(m / tm) * m_tile_factor + extra_m_tiles
    n_alloc = _max(1, _floor(sms / m_tiles))
    tile_n = _min(_max(tmin * _ceil(n / n_alloc / tmin), tmin), tmax)
    tiles = m_tiles * _ceil(n / tile_n)
    waves = _ceil(tiles / sms)
    return tiles, waves, tile_n


def gemm_bytes(m, n, k, groups=1, op_bytes=1, out_bytes=2):
    """HBM bytes of a (grouped) GEMM: groups (M K + N K) b_op + groups M N b_out.

    >>> gemm_bytes(2, 3, 4, op_bytes=1, out_bytes=2)
    32
    """
    return groups * ((m * k + n * k) * op_bytes + m * n * out_bytes)


def _below(m, rows, small, large):
    """``small`` where ``m <= rows``, else ``large`` (numbers, arrays or SymPy)."""
    if _is_sym(m, small, large):
        m = sp.sympify(m)
        if m.is_number:
            return small if m <= rows else large
        return sp.Piecewise((small, m <= rows), (large, True))
    return np.where(np.asarray(m) <= rows, small, large)


def matvec_time(m, n, k, *, peak_flops, hbm_bw_Bps, calib: KernelCalib = DEFAULTS, op_bytes=1,
                out_bytes=2, groups=1, hbm_bytes=None, unpack_s=0) -> KernelTime:
    """A matrix-vector kernel of ``groups`` problems of M x N x K, M a handful of rows (module
    docstring): no M tile, the weights streamed once at ``mv_hbm_frac`` of the bandwidth, plus
    ``unpack_s``, the time to unpack its weights where a block format is unpacked in the kernel.

    >>> from dataclasses import replace
    >>> c = replace(DEFAULTS, mv_hbm_frac=0.8)
    >>> t = matvec_time(1, 4096, 4096, peak_flops=1e14, hbm_bw_Bps=1e12, calib=c, op_bytes=2)
    >>> round(float(t.memory_s) * 1e6, 3)  # (4096*4096*2 + 4096*2 + 4096*2) B / 0.8e12
    41.964
    """
    total_bytes = gemm_bytes(m, n, k, groups, op_bytes, out_bytes) if hbm_bytes is None else hbm_bytes
    memory = total_bytes / (hbm_bw_Bps * calib.matvec_hbm_frac) + unpack_s
    return KernelTime(groups * 2 * m * n * k / peak_flops, memory, calib.launch_s)


_PARTIAL_BYTES = 4  # a split-K partial sum per output element: FP32


def split_k(tiles, sms, calib: KernelCalib = DEFAULTS):
    """Ways a dense GEMM's K loop is split (``split_k_max`` > 1): the SMs its output tiles
    leave idle each take a share of a tile's K loop, ``clip(floor(N_SM / tiles), 1, split_k_max)``
    (AMD's tuned GEMMs: aiter's tuner picks ``splitK`` up to 16 for BF16 where M x N gives few
    tiles, e.g. MI355X bf16_tuned_gemm.csv N = 256, K = 5120: ``splitK`` 13 at M = 64). The
    partial sums, FP32, are written and added in HBM (:func:`gemm_time`).

    >>> from dataclasses import replace
    >>> c = replace(DEFAULTS, split_k_max=8)
    >>> [int(split_k(t, 256, c)) for t in (16, 64, 200, 300)]
    [8, 4, 1, 1]
    """
    return _max(1, _min(calib.split_k_max, _floor(sms / tiles)))


def grouped_extra_s(n, groups, masked_rows, *, hbm_bw_Bps, calib: KernelCalib = DEFAULTS,
                    out_bytes=2, rows=0):
    """Time a fused-MoE backend's grouped GEMM spends beyond its tiles (0 with [kernel]'s
    defaults): ``tau_fixed + groups tau_expert + (masked_rows passes + rows row_passes) N b_out
    / (eta_ew W)``.

    ``tau_fixed`` (``grouped_fixed_us``): the backend's routing / permute / finalize kernels,
    charged to each of its two GEMMs; ``tau_expert`` (``grouped_expert_us``): per local expert,
    with or without rows; ``masked_rows``: token x top-k assignments routed to experts on other
    EP ranks that the kernel's grid still covers. SGLang's Triton fused_moe writes zeros to their
    output rows (sglang 0.5.23 kernels/ops/moe/fused_moe_triton_kernels.py:461-470, the
    ``inactive_expert`` branch calling ``write_zeros_to_output``), and the activation and top-k
    sum between and after the GEMMs run over every assignment row; ``passes``
    (``grouped_masked_passes``) is the fitted count of those HBM passes. ``rows``: the
    assignments the kernel does compute (M x groups); ``row_passes`` (``grouped_row_passes``) is
    the fitted time the backend spends per output row beyond its tiles, in HBM passes over the
    rows' outputs: the per-row gather, scale and scatter work around the GEMM. TensorRT-LLM
    1.3.0rc20's block-FP8 CUTLASS MoE on H100 spends 8.5 such passes: at 16384 tokens its
    large-token time barely changes with the columns per rank (256 experts, top-8, hidden 7168:
    3.7% of the FP8 peak at 128 columns, 21% at 2048), the mark of a cost per assignment row
    and hidden column, not per FLOP.

    >>> from dataclasses import replace
    >>> c = replace(DEFAULTS, grouped_fixed_s=10e-6, grouped_expert_s=0.1e-6,
    ...             grouped_masked_passes=2.0, elementwise_hbm_frac=0.5)
    >>> # 10 us + 32 x 0.1 us + 1000 rows x 4096 cols x 2 B x 2 passes / (0.5 x 4e12 B/s)
    >>> round(float(grouped_extra_s(4096, 32, 1000, hbm_bw_Bps=4e12, calib=c)) * 1e6, 3)
    21.392
    """
    extra = 0  # an int 0 adds nothing to a SymPy or float launch time
    if calib.grouped_fixed_s:
        extra = extra + calib.grouped_fixed_s
    if calib.grouped_expert_s:
        extra = extra + groups * calib.grouped_expert_s
    if calib.grouped_masked_passes:
        extra = extra + (masked_rows * n * out_bytes * calib.grouped_masked_passes
                         / (hbm_bw_Bps * calib.elementwise_hbm_frac))
    if calib.grouped_row_passes:
        extra = extra + (rows * n * out_bytes * calib.grouped_row_passes
                         / (hbm_bw_Bps * calib.elementwise_hbm_frac))
    return extra


def grouped_fixed_block(calib: KernelCalib, kernel_tokens=None, local_experts=None):
    """The fixed M block of a fused-MoE backend whose kernel config does not follow the rows per
    expert (``grouped_tile_m_rows``), the smaller ``grouped_few_tokens_tile_m_rows`` where the
    kernel's tokens are at most its local experts (where set and both are given).

    SGLang's Triton fused_moe reads its tile config from a JSON file per (E, N, device, dtype);
    without one (every A100 BF16 shape of AIConfigurator's tables but a few) it takes
    ``get_default_config``: BLOCK_SIZE_M 64, or 16 where M <= E, M the tokens the kernel is
    launched with and E its local experts (sglang srt/layers/moe/moe_runner/triton_utils/
    fused_moe_triton_config.py:247-260, ``num_tokens = hidden_states.shape[0]``,
    ``E = w1.shape[0]``: fused_moe.py:464-465), and moe_align_block_size pads each expert's
    rows to that block.

    >>> from dataclasses import replace
    >>> c = replace(DEFAULTS, grouped_tile_m_rows=64, grouped_few_tokens_tile_m_rows=16)
    >>> [int(grouped_fixed_block(c, t, 32)) for t in (8, 32, 33)]
    [16, 16, 64]
    >>> int(grouped_fixed_block(c))  # no token count given: the large block
    64
    """
    return _few_tokens(calib.grouped_tile_m_rows, calib.grouped_few_tokens_tile_m_rows,
                       kernel_tokens, local_experts)


def grouped_launch_block(calib: KernelCalib, launch_rows_per_expert):
    """The M block of a fused-MoE backend whose tile follows the whole launch's assignments per
    local expert (``grouped_launch_tile_max_rows``): half the smallest power of two holding them,
    at least ``grouped_tile_m_min_rows``, at most ``grouped_launch_tile_max_rows``.

    FlashInfer's TRT-LLM-gen MoE without a tuned tactic takes the smallest of its candidate
    tiles: of its tiles 8, 16, 32, 64, 128 (block FP8), the one below the first that holds
    ``num_tokens * top_k / num_local_experts`` (FlashInfer 0.7.2.post1
    csrc/trtllm_fused_moe_kernel_launcher.cu:1061-1090 computeSelectedTileN, :1094-1099
    selectDefaultTileN, :1116-1119 the fallback for tactic -1; tiles :4142). Under EP every rank
    is launched with all the tokens, so the count is every rank's assignments over the local
    experts, EP times the rank's own rows per expert.

    >>> from dataclasses import replace
    >>> c = replace(DEFAULTS, grouped_tile_m_min_rows=8, grouped_launch_tile_max_rows=64)
    >>> [int(grouped_launch_block(c, r)) for r in (1, 8, 9, 16, 40, 64, 100, 4096)]
    [8, 8, 8, 8, 32, 32, 64, 64]
    """
    r = _max(launch_rows_per_expert, 1)
    steps = _ceil(sp.log(r, 2) if _is_sym(r) else np.log2(r))
    lo = calib.grouped_tile_m_min_rows or _TILE_M_MIN
    return _min(calib.grouped_launch_tile_max_rows, _max(lo, 2 ** steps / 2))


def _few_tokens(value, few, kernel_tokens, local_experts):
    """A kernel config's ``few`` where its tokens are at most its local experts (SGLang's
    Triton default config, M <= E), else ``value`` (``value`` where either is not given)."""
    if not few or kernel_tokens is None or local_experts is None:
        return value
    return _below(kernel_tokens / local_experts, 1, few, value)


def grouped_k_steps(k, calib: KernelCalib, kernel_tokens=None, local_experts=None):
    """Steps of a grouped GEMM thread block's K loop, ``ceiling(K / BLOCK_K)``, with BLOCK_K
    ``grouped_k_step_cols`` (``grouped_few_tokens_k_step_cols`` where the kernel's tokens are
    at most its local experts); 0 where ``grouped_k_step_s`` is 0.

    SGLang's Triton fused_moe_kernel walks K in steps of BLOCK_SIZE_K (sglang 0.5.10
    srt/layers/moe/fused_moe_triton/fused_moe_triton_kernels.py:525, ``for k_start in
    range(0, K, BLOCK_SIZE_K)``), 32 in get_default_config without FP8, 64 where M <= E
    (fused_moe_triton_config.py:247-260): each step loads its A and B blocks and waits on the
    loads the software pipeline has not hidden, a time per step beyond the MMAs
    (``grouped_k_step_s``, fitted) that the per-SM FLOP and byte rates do not carry.

    >>> from dataclasses import replace
    >>> c = replace(DEFAULTS, grouped_k_step_s=0.1e-6, grouped_k_step_cols=32,
    ...             grouped_few_tokens_k_step_cols=64)
    >>> [int(grouped_k_steps(7168, c, t, 32)) for t in (8, 33)]  # 7168 / 64, 7168 / 32
    [112, 224]
    >>> int(grouped_k_steps(58, c))  # no token count given: the large config's 32 columns
    2
    """
    if not calib.grouped_k_step_s:
        return 0
    cols = _few_tokens(calib.grouped_k_step_cols, calib.grouped_few_tokens_k_step_cols,
                       kernel_tokens, local_experts)
    return _ceil(k / cols)



_ALIGN_ELEMENTS = 16  # Triton's divisibility specialization of integer arguments (elements)


def grouped_load_rate(k, calib: KernelCalib):
    """Rate of a grouped GEMM's loads relative to aligned operands: ``grouped_unaligned_load_frac``
    where K, the row stride (in elements) of both K-contiguous operands, is not a multiple of
    16, else 1 (1 where the field is 0).

    Triton specializes an integer kernel argument only where it is divisible by 16 (triton
    3.6.0 backends/compiler.py:82-86, ``tt.divisibility`` 16); SGLang's Triton fused_moe passes
    its strides as plain integers (sglang 0.5.10 srt/layers/moe/fused_moe_triton/
    fused_moe_triton_kernels.py:347-351; ``stride_am`` = ``stride_bn`` = K for the hidden
    states, the activations and the weights), so a K that is not a multiple of 16 leaves every
    row start of unknown alignment: no 16-byte vector loads or asynchronous copies. The
    AIConfigurator A100 tables show it at every token count on the shapes whose expert width
    per rank is 58, 84, 116, 168 or 232 (model 20-45% fast there without it).

    >>> from dataclasses import replace
    >>> c = replace(DEFAULTS, grouped_unaligned_load_frac=0.25)
    >>> [float(grouped_load_rate(k, c)) for k in (2048, 168, 58)]
    [1.0, 0.25, 0.25]
    >>> grouped_load_rate(np.array([2048.0, 84.0]), c).tolist()
    [1.0, 0.25]
    >>> float(grouped_load_rate(58, DEFAULTS))
    1.0
    """
    frac = calib.grouped_unaligned_load_frac
    if not frac:
        return 1
    if isinstance(k, np.ndarray):  # fit rows
        return np.where(np.mod(k, _ALIGN_ELEMENTS) == 0, 1.0, frac)
    k = sp.sympify(k)
    if not k.is_number:  # a symbolic width: taken as aligned
        return 1
    return 1 if int(k) % _ALIGN_ELEMENTS == 0 else frac


def gemm_time(m, n, k, *, sms, peak_flops, hbm_bw_Bps, calib: KernelCalib = DEFAULTS,
              op_bytes=1, out_bytes=2, groups=1, layout: str = "dense",
              hbm_bytes=None, tile_m_min: int = _TILE_M_MIN, unpack_s=0,
              masked_rows=0, m_tile_factor=1, kernel_tokens=None, local_experts=None,
              masked_computed=0, launch_assignments=None) -> KernelTime:
    """Time of ``groups`` GEMMs of M x N x K in one kernel (module docstring formulas).

    ``op_bytes`` is bytes per operand element (FP8 = 1, BF16 = 2), ``out_bytes`` per output
    element; ``hbm_bytes`` overrides the total traffic (a caller that accounts weights elsewhere).
    Grouped layouts take the fused-MoE backend's terms where its calibration sets them: its HBM
    fraction (``grouped_hbm_frac``), smallest M block (``grouped_tile_m_min_rows``), the N and K
    blocks its tiles pad each expert to (``grouped_n_block_cols``, ``grouped_k_block_cols``:
    tile count, tile FLOPs and per-SM tile bytes; the HBM bytes are the unpadded ones) and the time
    beyond its tiles (:func:`grouped_extra_s`; ``masked_rows``: assignments to other EP ranks'
    experts that the grid covers); ``m_tile_factor``: skewed routing's M tiles over equal
    groups' (:func:`gemm_tiles`); the backend's fixed M block where it sets one
    (:func:`grouped_fixed_block`: ``kernel_tokens``, the tokens the fused kernel is launched
    with, and ``local_experts``, the rank's experts, choose it). ``masked_computed`` (0 or 1): the grid
    computes the masked rows as tiles of their own (one bucket padded to the M block) instead
    of skipping them (their HBM bytes are not counted: with one out-of-range expert's weights
    added, A100's held-out median rises from 11.0% to 11.7%): SGLang's Triton kernel
    with ``filter_expert`` off, a layer built with the rank's experts only (sglang 0.5.10
    srt/layers/moe/fused_moe_triton/fused_moe_triton_kernels.py:440, ``if filter_expert and
    off_experts == -1``; fused_moe.py:226-229, ``filter_expert = num_experts !=
    num_local_experts``).
    ``launch_assignments``: the assignments the fused kernel is launched with (tokens x top-k,
    every rank's under EP), whose count per local expert picks the M block of a backend whose
    tile follows the launch (:func:`grouped_launch_block`; not given: the rows and masked rows).

    >>> t = gemm_time(4096, 4096, 4096, sms=132, peak_flops=1979e12, hbm_bw_Bps=3.35e12)
    >>> # per-SM streaming: 8 waves x ((64+256) 4096 + 64 256 2) B / 104 GB/s = 103.3 us, + 6.7 us
    >>> round(float(t.total_s) * 1e6, 1), bool(t.compute_s > t.memory_s)
    (110.0, False)
    >>> from moesym.symbolic.symbols import S
    >>> ts = gemm_time(S.batch, 7168, 2048, sms=132, peak_flops=1979e12, hbm_bw_Bps=3.35e12)
    >>> ts.compute_s.has(sp.ceiling), float(ts.total_s.subs(S.batch, 4096))  # doctest: +ELLIPSIS
    (True, ...)
    """
    grouped = layout != "dense"
    if not grouped and calib.tile_m_min_rows:  # the GPU's dense kernels' smallest M block
        tile_m_min = min(tile_m_min, calib.tile_m_min_rows)
    if not grouped and calib.tile_m_fixed_rows:  # one launch configuration at any M
        tile_m_min = calib.tile_m_fixed_rows
        n_block = calib.tile_n_fixed_cols or tile_m_min
        calib = replace(calib, tile_m_rows=tile_m_min, tile_n_min_cols=n_block,
                        tile_n_max_cols=n_block, split_k_max=0, mv_max_rows=0)
    if grouped and calib.grouped_tile_m_min_rows:
        tile_m_min = calib.grouped_tile_m_min_rows
    if grouped and calib.grouped_tile_m_rows:  # a fixed M block: the tile is that block
        tile_m_min = grouped_fixed_block(calib, kernel_tokens, local_experts)
        calib = replace(calib, tile_m_rows=tile_m_min)
    if grouped and calib.grouped_launch_tile_max_rows:  # the tile follows the whole launch
        if launch_assignments is None:
            launch_assignments = m * groups + masked_rows
        launch = launch_assignments / (groups if local_experts is None else local_experts)
        tile_m_min = grouped_launch_block(calib, launch)
        calib = replace(calib, tile_m_rows=tile_m_min)
    # the tiles walk N and K padded to the backend's blocks where set (its HBM bytes do not)
    n_tile, k_tile = n, k
    if grouped and calib.grouped_n_block_cols:
        n_tile = calib.grouped_n_block_cols * _ceil(n / calib.grouped_n_block_cols)
    if grouped and calib.grouped_k_block_cols:
        k_tile = calib.grouped_k_block_cols * _ceil(k / calib.grouped_k_block_cols)
    tm = tile_m_rows(m, calib, tile_m_min)
    # 0 or 1 (per row where arrays): the grid's masked rows as M tiles of their own
    masked_tiles = 0
    if grouped and not (np.isscalar(masked_computed) and not masked_computed):
        masked_tiles = _ceil(masked_rows / tm) * masked_computed
    tiles, waves, tile_n = gemm_tiles(m, n_tile, groups, sms, calib, tile_m_min,
                                     m_tile_factor, masked_tiles)
    split = 1
    if not grouped and calib.split_k_max > 1:  # idle SMs take a share of each tile's K loop
        split = split_k(tiles, sms, calib)
        waves = _ceil(tiles * split / sms)
        k_tile = k_tile / split
    per_sm_flops = peak_flops / sms * calib.tensor_frac(layout)
    tile_s = (calib.grouped_tile_overhead_s if grouped else 0) or calib.tile_overhead_s
    if grouped and calib.grouped_k_step_s:  # the K loop's unhidden load latency, per step
        steps = grouped_k_steps(k, calib, kernel_tokens, local_experts)
        tile_s = tile_s + steps * calib.grouped_k_step_s
    compute = waves * (2 * tm * tile_n * k_tile / per_sm_flops + tile_s)
    tile_bytes = (tm + tile_n) * k_tile * op_bytes + tm * tile_n * out_bytes
    total_bytes = gemm_bytes(m, n, k, groups, op_bytes, out_bytes) if hbm_bytes is None else hbm_bytes
    if calib.split_k_max > 1:  # each further split writes and adds an FP32 partial of the output
        total_bytes = total_bytes + (split - 1) * groups * m * n * _PARTIAL_BYTES
    memory = _max(total_bytes / (hbm_bw_Bps * calib.hbm_frac(layout)),
                  waves * tile_bytes / calib.sm_bandwidth_Bps)
    if grouped and calib.grouped_unaligned_load_frac:  # operand rows not 16-element aligned
        memory = memory / grouped_load_rate(k, calib)
    if grouped and not calib.mv_grouped:  # kernels that pad to the M block
        extra = grouped_extra_s(n, groups, masked_rows, hbm_bw_Bps=hbm_bw_Bps, calib=calib,
                                out_bytes=out_bytes, rows=m * groups)
        if calib.grouped_serial_frac:  # loads and MMAs overlap only in part: max + s min
            serial = calib.grouped_serial_frac * _min(compute, memory)
            compute, memory = compute + serial, memory + serial
        return KernelTime(compute, memory, calib.launch_s + extra)
    if not calib.mv_max_rows:
        return KernelTime(compute, memory, calib.launch_s)
    mv = matvec_time(m, n, k, peak_flops=peak_flops, hbm_bw_Bps=hbm_bw_Bps, calib=calib,
                     op_bytes=op_bytes, out_bytes=out_bytes, groups=groups, hbm_bytes=total_bytes,
                     unpack_s=unpack_s)
    rows = calib.mv_max_rows
    return KernelTime(_below(m, rows, mv.compute_s, compute), _below(m, rows, mv.memory_s, memory),
                      calib.launch_s)


def attention_decode_time(batch, kv_len, heads, kv_heads, qk_dim, v_dim, *, sms, peak_flops,
                          hbm_bw_Bps, calib: KernelCalib = DEFAULTS, kv_bytes=2, act_bytes=2,
                          shared_kv: bool = False) -> KernelTime:
    """Decode attention (one query token per request), split-KV over the SMs.

    KV bytes = batch kv_len kv_heads (d_qk + d_v) b_kv (``shared_kv``: MLA's latent serves as
    both K and V, so only d_qk per token). Each (request, KV head, KV split of ``s`` tokens)
    is a work unit; query heads sharing a KV head are padded to the query tile ``t_q``::

        units   = batch kv_heads ceiling(heads / kv_heads / t_q) ceiling(kv_len / s)
        (t_q: 64 rows for MLA's shared latent, 16 rows per KV head for GQA)
        waves   = ceiling(units / N_SM)
        compute = waves (2 t_q min(kv_len, s) (d_qk + d_v) / (eta_a P / N_SM) + tau_unit)
        (MHA, one query head per KV head, with P_v = attention_mha_decode_TFLOPs set: at least
         waves (2 min(kv_len, s) (d_qk + d_v) / (P_v / N_SM) + tau_unit), CUDA cores)
        memory  = max(bytes / (eta_hbm,a W) + tau_fill, waves min(kv_len, s) kv_bytes_per_token / W_SM)
        time    = max(compute, memory) + tau_attn (+ tau_merge where kv_len > s)

    (MLA's latent read and launch take ``attention_mla_hbm_frac`` and ``attention_mla_launch_us``
    where set; tau_unit is ``attention_decode_unit_overhead_us`` where set, and
    ``attention_gqa_bf16_unit_us`` for GQA with a 16-bit KV cache where set; tau_fill is
    ``attention_decode_fill_us``; for GQA tau_unit is scaled by 1 + k ((d_qk + d_v) / 256 - 1),
    k = ``attention_gqa_unit_dim_slope``; tau_attn the decode kernel's own launch where set, see
    :func:`_decode_kernel_launch`; MLA splits by ``attention_mla_kv_split_tokens`` where set.)

    >>> t = attention_decode_time(64, 4096, 32, 8, 128, 128, sms=132, peak_flops=989e12,
    ...                           hbm_bw_Bps=3.35e12)
    >>> round(float(t.memory_s) * 1e6, 1)  # (64*4096*8*256*2 + 64*32*256*2) B / (0.95 * 3.35e12)
    337.7
    """
    # MLA kernels (FlashMLA) tile the query heads of the shared latent by 64 rows; GQA decode
    # kernels pad the few query heads of one KV head to the MMA granularity (16 rows)
    tq = calib.attention_q_tile_rows if shared_kv else calib.attention_decode_q_tile_rows
    # the MLA kernel's own split where set (a split of 2^20 tokens: one unit per sequence)
    split = (calib.attention_mla_kv_split_tokens if shared_kv else 0) or calib.attention_kv_split_tokens
    per_token = kv_heads * (qk_dim if shared_kv else qk_dim + v_dim) * kv_bytes
    kv_total = batch * kv_len * per_token
    qo_bytes = batch * heads * (qk_dim + v_dim) * act_bytes
    q_tiles = _ceil(heads / kv_heads / tq)
    units = batch * kv_heads * q_tiles * _ceil(kv_len / split)
    waves = _ceil(units / sms)
    chunk = _min(kv_len, split)
    unit_s = calib.decode_unit_overhead_s
    if calib.attention_gqa_bf16_unit_s and not shared_kv:  # GQA with a 16-bit KV cache
        unit_s = _below(heads / kv_heads, 1, unit_s,
                        _below(kv_bytes, 1, unit_s, calib.attention_gqa_bf16_unit_s))
    if calib.attention_gqa_unit_dim_slope and not shared_kv:
        # a GQA unit's fixed work (its padded KV tile, its query heads) grows with the head dim:
        # at 2 KV tokens and 1024-2048 requests TensorRT-LLM's H200 FP8-cache GQA kernel takes
        # 0.9 / 1.3 / 1.75 / 2.2 us per wave at head dim 64 / 128 / 192 / 256, its BF16 one 4.1 /
        # 4.6 / 6.2 / 6.5 us; MHA stays at 1.2-1.5 us (fitted: 0.38 on H200, attention held-out
        # median 10.3% -> 9.4%; H100 10.0% -> 9.4%)
        unit_s = unit_s * _below(heads / kv_heads, 1, 1, 1 + calib.attention_gqa_unit_dim_slope
                                 * ((qk_dim + v_dim) / 256 - 1))
    compute = waves * (2 * tq * chunk * (qk_dim + v_dim)
                       / (peak_flops / sms * calib.attention_tensor_frac) + unit_s)
    if calib.attention_mha_decode_flops_per_s and not shared_kv:
        # one query head per KV head (MHA): no query rows to stack into an MMA, the kernel's dot
        # products and the KV cache's conversion run on the CUDA cores
        vector = waves * (2 * chunk * (qk_dim + v_dim)
                          / (calib.attention_mha_decode_flops_per_s / sms) + unit_s)
        compute = _below(heads / kv_heads, 1, _max(compute, vector), compute)
    unit_bytes = chunk * per_token / kv_heads
    # the KV stream starts after a fixed fill (DRAM latency, the first loads in flight)
    memory = _max((kv_total + qo_bytes) / (hbm_bw_Bps * calib.decode_attention_hbm_frac(shared_kv))
                  + calib.attention_decode_fill_s,
                  waves * unit_bytes / calib.sm_bandwidth_Bps)
    launch = calib.decode_attention_launch_s(shared_kv)
    if not shared_kv:
        launch = _decode_kernel_launch(heads / kv_heads, kv_bytes, qk_dim, launch, calib)
    if calib.attention_split_merge_s:  # sequences split into several KV units: their merge
        launch = launch + _below(kv_len, split, 0, calib.attention_split_merge_s)
    return KernelTime(compute, memory, launch)


def _decode_kernel_launch(group, kv_bytes, qk_dim, launch, calib: KernelCalib):
    """Fixed latency of the GQA/MHA decode kernel the engine runs for this shape: the FP8-cache
    GQA kernel's ``launch`` (several query heads per KV head, 1-byte KV, head dim > 64), the
    other GQA kernel's (16-bit KV, or head dim <= 64) and the MHA kernel's (one query head per
    KV head) where set. The split is fitted on AIConfigurator's TensorRT-LLM 1.3.0rc20 decode
    tables (every other shape held out): their latency at 1-4 requests of <= 16 tokens is 5.7-6.4
    us for the first kind on H100, 7.6-9.1 us for the other two (the held-out attention median
    falls 12.1% -> 10.0% on H100, 12.8% -> 10.3% on H200).

    >>> from dataclasses import replace
    >>> c = replace(DEFAULTS, attention_gqa_generic_launch_s=8e-6, attention_mha_decode_launch_s=9e-6)
    >>> [float(_decode_kernel_launch(g, b, d, 5e-6, c)) for g, b, d in
    ...  ((4, 1, 128), (4, 2, 128), (4, 1, 64), (1, 1, 128))]
    [5e-06, 8e-06, 8e-06, 9e-06]
    """
    if calib.attention_gqa_generic_launch_s:
        other = calib.attention_gqa_generic_launch_s
        launch = _below(group, 1, launch, _below(kv_bytes, 1, _below(qk_dim, 64, other, launch),
                                                 other))
    if calib.attention_mha_decode_launch_s:
        launch = _below(group, 1, calib.attention_mha_decode_launch_s, launch)
    return launch


def _chunk_tiles(batch, seq_len, n_q, tq):
    """Query tiles per head of ``batch`` sequences of ``seq_len`` (``n_q`` tiles each), or of one
    chunk of ``batch * seq_len`` queries when ``batch`` < 1."""
    whole, chunk = batch * n_q, _ceil(batch * seq_len / tq)
    if not _is_sym(batch):
        return np.where(np.asarray(batch) < 1, chunk, whole)
    b = sp.sympify(batch)
    if b.is_number:
        return chunk if b < 1 else whole
    return sp.Piecewise((chunk, b < 1), (whole, True))


def attention_prefill_time(batch, seq_len, heads, kv_heads, qk_dim, v_dim, *, sms, peak_flops,
                           hbm_bw_Bps, calib: KernelCalib = DEFAULTS, act_bytes=2,
                           causal: bool = True) -> KernelTime:
    """Prefill attention, FlashAttention-style: one work unit per (sequence, head, query tile).

    With ``n_q = ceiling(L / t_q)`` query tiles, a causal unit ``i`` reads ``i t_q`` keys, so the
    mean unit does ``2 t_q (t_q (n_q + 1) / 2) (d_qk + d_v)`` FLOPs (non-causal: ``2 t_q L (.)``)::

        waves   = ceiling(heads Q / N_SM),  Q = batch n_q  (a chunk, batch < 1: ceiling(batch L / t_q))
        compute = waves (mean_unit_flops / (eta_a P / N_SM) + tau_unit)
        memory  = batch L (heads + kv_heads) (d_qk + d_v) b_a / (eta_hbm,a W)

    >>> t = attention_prefill_time(1, 4096, 32, 8, 128, 128, sms=132, peak_flops=989e12,
    ...                            hbm_bw_Bps=3.35e12)
    >>> round(float(t.compute_s) * 1e6, 1)  # 16 waves * 2*64*2080*256 / (0.6*989e12/132)
    242.6
    """
    tq = calib.attention_q_tile_rows
    n_q = _ceil(seq_len / tq)
    keys = tq * (n_q + 1) / 2 if causal else seq_len
    unit_flops = 2 * tq * keys * (qk_dim + v_dim)
    # query tiles per head: whole sequences' tiles; a chunk of one long prompt (batch < 1, chunked
    # prefill) has the tiles of its own batch L queries, each unit at the prompt's mean key count
    tiles = _chunk_tiles(batch, seq_len, n_q, tq)
    waves = _ceil(heads * tiles / sms)
    compute = waves * (unit_flops / (peak_flops / sms * calib.attention_prefill_tensor_frac)
                       + calib.attention_unit_overhead_s)
    total_bytes = batch * seq_len * (heads + kv_heads) * (qk_dim + v_dim) * act_bytes
    memory = total_bytes / (hbm_bw_Bps * calib.attention_hbm_frac)
    return KernelTime(compute, memory, calib.prefill_attention_launch_s)


def attention_time_from_cost(flops, hbm_bytes, *, peak_flops, hbm_bw_Bps,
                             calib: KernelCalib = DEFAULTS, launches=1) -> KernelTime:
    """Attention when only FLOPs and bytes are known: achieved-fraction roofline.

    compute = F / (eta_a P), memory = bytes / (eta_hbm,a W), launch = launches tau_attn.

    >>> round(attention_time_from_cost(5.6e9, 0, peak_flops=1e15, hbm_bw_Bps=1e12).compute_s, 12)
    1e-05
    """
    return KernelTime(flops / (peak_flops * calib.attention_tensor_frac),
                      hbm_bytes / (hbm_bw_Bps * calib.attention_hbm_frac),
                      launches * calib.attention_launch_s)


def elementwise_time(hbm_bytes, *, hbm_bw_Bps, calib: KernelCalib = DEFAULTS, launches=1,
                     flops=0, peak_flops=None) -> KernelTime:
    """Elementwise / memory-bound kernel: bytes / (eta_ew W) + launches tau_ew.

    >>> elementwise_time(8e9, hbm_bw_Bps=1e12).memory_s
    0.01
    """
    compute = 0 if not peak_flops else flops / peak_flops
    return KernelTime(compute, hbm_bytes / (hbm_bw_Bps * calib.elementwise_hbm_frac),
                      launches * calib.elementwise_launch_s)
