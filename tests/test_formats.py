"""Weight formats by their users' names (GGUF, MLX, AWQ/GPTQ, ModelOpt): bits per weight from
each format's block layout, written here from the block definitions, and checked against the
block sizes gguf-py lists (``tests/data/ggml_quant_sizes.json``, read from the gguf 0.19.0 wheel).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moesym.errors import SpecError
from moesym.specs.hardware import load_hardware
from moesym.specs.precision import FORMATS, GGUF_TYPES, WeightRecipe, bytes_per_element, \
    compute_format, storage_format

GGML = json.loads((Path(__file__).parent / "data" / "ggml_quant_sizes.json").read_text())

QK_K = 256  # weights per K-quant super-block (ggml-common.h)
FP16 = 2
# bits per weight written from ggml-common.h's block structs: (bytes of the block) * 8 / weights
HAND_BPW = {
    "q4_0": (FP16 + 32 // 2) * 8 / 32,  # d; 32 nibbles
    "q4_1": (FP16 + FP16 + 32 // 2) * 8 / 32,  # d, m; 32 nibbles
    "q5_0": (FP16 + 4 + 32 // 2) * 8 / 32,  # d; qh (32 high bits); 32 nibbles
    "q5_1": (FP16 + FP16 + 4 + 32 // 2) * 8 / 32,
    "q8_0": (FP16 + 32) * 8 / 32,  # d; 32 int8
    "q2_k": (QK_K // 16 + QK_K // 4 + FP16 + FP16) * 8 / QK_K,  # scales; qs; d; dmin
    "q3_k": (QK_K // 8 + QK_K // 4 + 12 + FP16) * 8 / QK_K,  # hmask; qs; scales; d
    "q4_k": (FP16 + FP16 + 12 + QK_K // 2) * 8 / QK_K,  # d; dmin; scales; qs
    "q5_k": (FP16 + FP16 + 12 + QK_K // 8 + QK_K // 2) * 8 / QK_K,  # + qh
    "q6_k": (QK_K // 2 + QK_K // 4 + QK_K // 16 + FP16) * 8 / QK_K,  # ql; qh; int8 scales; d
    "iq4_nl": (FP16 + 32 // 2) * 8 / 32,
    "iq4_xs": (FP16 + 2 + QK_K // 64 + QK_K // 2) * 8 / QK_K,  # d; scales_h; scales_l; qs
    "mxfp4": (1 + 32 // 2) * 8 / 32,  # e8m0 scale; 32 fp4 nibbles
    "f16": 16.0,
}


def test_hand_computed_bits_per_weight():
    assert HAND_BPW["q4_0"] == 4.5 and HAND_BPW["q4_k"] == 4.5 and HAND_BPW["q6_k"] == 6.5625
    assert HAND_BPW["iq4_xs"] == 4.25 and HAND_BPW["q8_0"] == 8.5 and HAND_BPW["q5_0"] == 5.5
    for name, bpw in HAND_BPW.items():
        assert bytes_per_element(name) * 8 == pytest.approx(bpw, abs=1e-12), name


@pytest.mark.parametrize("name", sorted(GGUF_TYPES) + ["mxfp4", "f16"])
def test_gguf_types_match_gguf_py(name):
    """Every GGUF type moesym names holds the bytes per block gguf-py lists."""
    block, type_size = GGML["types"][name]
    assert bytes_per_element(name) == pytest.approx(type_size / block, abs=1e-12)
    assert "gguf-py 0.19.0" in GGML["source"]


def test_other_formats_from_their_layouts():
    # MLX affine (mlx.core.quantize): a 16-bit scale and a 16-bit bias per group of 64
    assert bytes_per_element("mlx-4bit") == 4 / 8 + (2 + 2) / 64
    assert bytes_per_element("mlx-8bit") == 8 / 8 + (2 + 2) / 64
    assert bytes_per_element("mlx-4bit", group_size=32) == 4 / 8 + 4 / 32
    # AWQ / GPTQ: fp16 scale + one 4-bit zero point per group of 128 along K
    assert bytes_per_element("awq") == bytes_per_element("gptq") == 0.5 + (2 + 0.5) / 128
    # ModelOpt NVFP4: 4-bit values + one FP8 scale per 16 (the per-tensor fp32 is negligible)
    assert bytes_per_element("modelopt-nvfp4") == 0.5 + 1 / 16
    assert bytes_per_element("modelopt-fp8") == 1.0


def test_names_in_any_case():
    assert WeightRecipe.parse("Q4_K").moe == "q4_k"
    assert WeightRecipe.parse("moe=IQ4_XS,attn=Q8_0,dense=Q6_K") == WeightRecipe(
        attn="q8_0", moe="iq4_xs", dense="q6_k")
    assert WeightRecipe.parse("ModelOpt-NVFP4", is_moe=False).moe == "nvfp4"
    with pytest.raises(SpecError, match="--weights 'q4_9'"):
        WeightRecipe.parse("q4_9")


@pytest.mark.parametrize("fmt,gpu,compute", [
    ("q4_0", "rtx-4090", "int8"),  # llama.cpp CUDA: q8_1 activations, int8 MMQ / dp4a
    ("q4_k", "h100", "int8"),
    ("q4_0", "m2-max", "bf16"),  # Metal: dequantize to half, 16-bit float simdgroup matmul
    ("mlx-4bit", "m2-max", "bf16"),
    ("awq", "h100", "bf16"),  # Marlin: dequantize onto 16-bit tensor cores
    ("modelopt-fp8", "h100", "fp8"),
    ("modelopt-fp8", "a100", "bf16"),  # no FP8 tensor cores: weight-only FP8
])
def test_kernel_path_per_hardware(fmt, gpu, compute):
    hw = load_hardware(gpu)
    assert compute_format(fmt, hw.peaks_flops) == compute
    assert storage_format(fmt, hw.peaks_flops) == fmt  # block formats stay as stored


def test_every_format_names_a_known_compute():
    for name, f in FORMATS.items():
        assert f.compute in ("bf16", "fp8", "fp4", "int8"), name
        assert bytes_per_element(name) * 8 >= f.bits  # scales never negative


def test_predict_with_a_gguf_type_holds_its_bytes(cli_json):
    """Qwen3-30B-A3B in Q8_0 against Q4_0: the routed experts (most of its 30.5 B weights) take
    8.5 against 4.5 bits, so memory grows by about (8.5 - 4.5) / 8 bytes per expert weight."""
    base = ["memory", "qwen3-30b-a3b", "--hardware", "h100", "--phase", "decode", "--batch", "1",
            "--context", "1024"]
    q8 = cli_json([*base, "--weights", "Q8_0"])
    q4 = cli_json([*base, "--weights", "q4_0"])
    experts = 48 * 128 * 3 * 2048 * 768  # layers x experts x (gate, up, down) x d x d_e
    grow = q8["weights_breakdown"]["routed_experts"] - q4["weights_breakdown"]["routed_experts"]
    assert grow == pytest.approx(experts * (8.5 - 4.5) / 8, rel=1e-9)
