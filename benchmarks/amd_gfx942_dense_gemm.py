"""What SGLang 0.5.9's FP8 block-scale linear layers cost on gfx942 (MI300X / MI325X) when they
run with the one launch configuration aiter ships for that architecture (issue 48).

The mechanism (benchmarks/amd_gfx942_dense_gemm.md has the evidence, file and line):
SGLang 0.5.9 on ROCm with SGLANG_USE_AITER=1 runs every FP8 block-scale linear layer through
aiter's *Triton* kernel ``aiter.ops.triton.gemm_a8w8_blockscale`` (sglang
srt/layers/quantization/fp8_utils.py:60, :549-583), not the CK / asm kernels whose tuner results
(aiter/configs/a8w8_blockscale_tuned_gemm.csv) hardware/mi300x.toml is fitted on. That Triton
kernel reads its launch configuration from ``{arch}-GEMM-A8W8_BLOCKSCALE[-N=..-K=..].json``
(amd-aiter 0.1.7.post2.dev18, aiter/ops/triton/_triton_kernels/gemm_a8w8_blockscale.py:285-328).
For gfx950 (MI350X / MI355X) aiter ships per-shape files for DeepSeek-V3's TP8 shapes with small
M tiles and split K at decode batches; for gfx942 (MI300X) it ships only the default file: a
128 x 128 output tile, no split K, at every M. A decode GEMM of M <= 128 rows then runs
ceil(N / 128) workgroups on 304 CUs, each computing 128 padded rows over the whole K.

This script times that kernel with the repository's own MI300X kernel fit (per-CU tensor rate,
per-CU load rate, per-tile and launch costs of hardware/mi300x.toml, fitted on aiter's CK tables)
and the tile the configuration names: a *transfer rule* (the Triton kernel's per-CU rates are
taken as the CK kernels'), not a fit. It reads nothing outside the repository. Run:
``python benchmarks/amd_gfx942_dense_gemm.py`` (a few seconds).
"""
from __future__ import annotations

import warnings
from dataclasses import replace

from moesym.kernels.analytical import gemm_time
from moesym.specs.kernel_calib import kernel_calib
from moesym.specs.hardware import load_hardware

# DeepSeek-V3 / R1 (hf config: hidden 7168, q_lora 1536, kv_lora 512 + rope 64, 128 heads x
# (128 + 64) query dims, v_head 128, intermediate 18432, 3 dense + 58 MoE layers) under TP 8
TP = 8
LAYERS, DENSE_LAYERS = 61, 3
# SGLang's linear layers of one decode step (deepseek_v2.py: fused_qkv_a_proj_with_mqa when
# q_lora_rank is set, :1122; the shared expert is fused into the MoE kernel on gfx942 and gfx950,
# deepseek_v2.py:2853-2893, so it runs no linear layer of its own), per layer: name -> (N, K)
ATTENTION = {"fused_qkv_a": (1536 + 512 + 64, 7168), "q_b": (128 * 192 // TP, 1536),
             "o_proj": (7168, 128 * 128 // TP)}
DENSE_FFN = {"gate_up": (2 * 18432 // TP, 7168), "down": (7168, 18432 // TP)}
# the same step with aiter's tuned CK kernels' tiles (the [kernel] fit, what moesym timed before
# SGLang's gfx942 tile: q_a and kv_a as two GEMMs, each with the tile its fit picks)
MOESYM_ATTENTION = {"q_a": (1536, 7168), "kv_a": (512 + 64, 7168), "q_b": ATTENTION["q_b"],
                    "o_proj": ATTENTION["o_proj"]}
# aiter's MI300X-GEMM-A8W8_BLOCKSCALE.json "any": BLOCK_SIZE_M = BLOCK_SIZE_N = 128,
# NUM_KSPLIT = 1 (no per-shape MI300X file for any shape above)
TRITON_TILE = 128
BATCHES = (4, 8, 16, 32, 64)
# gfx942 only: the absorbed MLA weights w_kc, w_vc (FP8, per-tensor scale after load:
# deepseek_weight_loader.py:500-524, block_quant_to_tensor_quant off CUDA) are cast to BF16 and
# scaled at every step before a BF16 torch.bmm (deepseek_v2.py:1700-1704, :1876-1880); gfx950 runs
# one FP8 batched GEMM instead (:1687-1699, :1865-1875). Per weight: .to(bf16) reads 1 B and
# writes 2 B an element, * w_scale reads and writes 2 B, the BF16 bmm reads 2 B where an FP8 one
# reads 1 B: 8 B more an element; two elementwise kernels more
ABSORBED_ELEMENTS = 128 // TP * 128 * 512  # local heads x d_nope (= d_v) x kv_lora, each weight
DEQUANT_BYTES_PER_ELEMENT = 8
DEQUANT_KERNELS = 2


def step_time(calib, shapes, m, hw, fixed_tile: bool) -> float:
    """Seconds of ``shapes`` (name -> (N, K)) at M = m rows on ``hw``."""
    kw = dict(sms=hw.sms, peak_flops=hw.peak_flops("fp8"), hbm_bw_Bps=hw.hbm_bw_Bps)
    if fixed_tile:
        calib = replace(calib, tile_m_rows=TRITON_TILE, tile_m_min_rows=0,
                        tile_n_min_cols=TRITON_TILE, tile_n_max_cols=TRITON_TILE,
                        split_k_max=0, mv_max_rows=0)
        return sum(float(gemm_time(m, n, k, calib=calib, tile_m_min=TRITON_TILE, **kw).total_s)
                   for n, k in shapes.values())
    return sum(float(gemm_time(m, n, k, calib=calib, **kw).total_s) for n, k in shapes.values())


def main() -> None:
    warnings.simplefilter("ignore")  # the transferred-calibration warnings are known here
    for gpu in ("mi300x", "mi325x"):
        hw = load_hardware(gpu)
        c = kernel_calib(hw)
        print(f"{gpu}: FP8 block-scale linear layers of one decode step (61 layers), ms")
        print("   M   CK-fitted tiles   aiter Triton default tile   difference")
        for m in BATCHES:
            now = LAYERS * step_time(c, MOESYM_ATTENTION, m, hw, False)
            now += DENSE_LAYERS * step_time(c, DENSE_FFN, m, hw, False)
            tri = LAYERS * step_time(c, ATTENTION, m, hw, True)
            tri += DENSE_LAYERS * step_time(c, DENSE_FFN, m, hw, True)
            print(f"{m:4d} {now * 1e3:17.2f} {tri * 1e3:27.2f} {(tri - now) * 1e3:12.2f}")
        dq = 2 * (ABSORBED_ELEMENTS * DEQUANT_BYTES_PER_ELEMENT
                  / (hw.hbm_bw_Bps * c.elementwise_hbm_frac) + DEQUANT_KERNELS * c.elementwise_launch_s)
        print(f"      + w_kc / w_vc cast and scale every step: {dq * 1e6:.1f} us a layer, "
              f"{LAYERS * dq * 1e3:.2f} ms a step (elementwise model: "
              f"{c.elementwise_launch_s * 1e6:.0f} us a kernel, {c.elementwise_hbm_frac} of HBM)")
        for name, (n, k) in ATTENTION.items():
            t = step_time(c, {name: (n, k)}, 4, hw, True)
            print(f"      {name} N={n} K={k}: {-(-n // TRITON_TILE)} workgroups, "
                  f"{t * 1e6:.1f} us a launch at M <= {TRITON_TILE}")


if __name__ == "__main__":
    main()
