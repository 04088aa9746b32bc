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
    with pytest.raises(SpecError, match="`weights` 'q4_9'"):
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


# ------------------------------------------------------------------------------------------------
# llama.cpp file types: per-tensor mixes (moesym.readers.gguf, rules of llama-quant.cpp)
# ------------------------------------------------------------------------------------------------

Q4_K, Q6_K, Q5_K, Q8_0 = 144 / 256, 210 / 256, 176 / 256, 34 / 32  # bytes per weight


def _more_bits_layers(n):
    """llama-quant.cpp's use_more_bits, counted by hand: the first n/8 layers, the layers from
    7n/8 on, and every third between (i - n/8) % 3 == 2."""
    return [i for i in range(n) if i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2]


def test_qwen3_8b_q4_k_m_file_size(cli_json):
    """Qwen3-8B as a Q4_K_M GGUF: 36 layers (d 4096, 32 query and 8 KV heads of 128, FFN 12288),
    vocabulary 151936, untied. Q4_K everywhere except attn_v and ffn_down in the use_more_bits
    layers (Q6_K) and the output tensor (Q6_K). Its tensors' bytes, written out here, against the
    GEMM, embedding and LM-head weights moesym's memory model holds on one GPU."""
    n, d, kv, hd, ff, vocab = 36, 4096, 8, 128, 12288, 151936
    more = len(_more_bits_layers(n))
    assert more == 18  # layers 0-3, 6, 9, ..., 30 and 31-35
    attn = n * (2 * d * d + d * kv * hd) * Q4_K + d * kv * hd * (more * Q6_K + (n - more) * Q4_K)
    ffn = n * 2 * d * ff * Q4_K + d * ff * (more * Q6_K + (n - more) * Q4_K)
    embed, output = vocab * d * Q4_K, vocab * d * Q6_K
    file_bytes = attn + ffn + embed + output
    assert file_bytes == pytest.approx(5.0206e9, rel=1e-4)
    r = cli_json(["memory", "qwen3-8b", "--hardware", "h100", "--phase", "decode", "--batch", "1",
                  "--context", "1024", "--weights", "Q4_K_M"])
    w = r["weights_breakdown"]
    assert w["attention_sharded"] == pytest.approx(attn, rel=1e-12)
    assert w["dense_ffn"] == pytest.approx(ffn, rel=1e-12)
    assert w["embeddings"] + w["lm_head"] == pytest.approx(embed + output, rel=1e-12)
    assert r["formats"]["gemm"] == "q4_k_m"


def test_mixtral_q4_k_m_eight_expert_rules():
    """Mixtral (8 experts): llama.cpp puts attn_k and attn_v in Q8_0 and attn_output in Q5_K;
    per layer q and o are 4096 x 4096, k and v 4096 x 1024: (4 Q4_K + 2 Q8_0 + 4 Q5_K) / 10."""
    from moesym.readers.gguf import component_bytes
    from moesym.readers.model import load_model

    b = component_bytes(load_model("mixtral-8x7b"), "q4_k_m")
    assert b["attn"] == pytest.approx((4 * Q4_K + 2 * Q8_0 + 4 * Q5_K) / 10, rel=1e-12)
    more = len(_more_bits_layers(32)) / 32
    assert b["moe"] == pytest.approx(2 / 3 * Q4_K + 1 / 3 * (more * Q6_K + (1 - more) * Q4_K))


def test_rows_not_a_multiple_of_256_fall_back():
    """gpt-oss (d 2880 = 11.25 x 256, expert width 2880): every Q4_K tensor falls back to Q5_0
    (5.5 bits) and every Q6_K to Q8_0 (8.5); the output is Q8_0 (its rows are not a multiple of
    Q4_K's 256). Experts: gate, up Q5_0; down Q8_0 in the use_more_bits layers."""
    from moesym.readers.gguf import component_bytes
    from moesym.readers.model import load_model

    b = component_bytes(load_model("gpt-oss-120b"), "q4_k_m")
    more = len(_more_bits_layers(36)) / 36
    assert more == 0.5
    assert b["moe"] * 8 == pytest.approx(2 / 3 * 5.5 + 1 / 3 * (0.5 * 8.5 + 0.5 * 5.5))  # 6.0
    assert b["hp"] * 8 == pytest.approx((5.5 + 8.5) / 2)  # token_embd Q5_0, output Q8_0


def test_file_types_in_any_case_and_not_per_component():
    assert WeightRecipe.parse("Q4_K_M") == WeightRecipe("q4_k", "q4_k", "q4_k", mix="q4_k_m")
    assert WeightRecipe.parse("q8_0").mix == "q8_0"
    with pytest.raises(SpecError, match="q4_k_m is a llama.cpp file type"):
        WeightRecipe.parse("moe=q4_k_m")


# ------------------------------------------------------------------------------------------------
# HuggingFace quantization_config
# ------------------------------------------------------------------------------------------------

_QWEN3 = {"model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36,
          "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
          "intermediate_size": 12288, "vocab_size": 151936}


@pytest.mark.parametrize("q, fmt", [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
     "awq"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, "gptq"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "modelopt-fp8"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "fp4"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "int", "group_size": 128}, "input_activations": None,
        "targets": ["Linear"]}}}, "w4a16"),
])
def test_quantization_config_names_the_format(q, fmt):
    from moesym.readers.model import from_hf_config

    assert from_hf_config({**_QWEN3, "quantization_config": q}).weight_dtype == fmt


def test_gptq_of_other_bits_is_refused():
    from moesym.readers.model import from_hf_config

    with pytest.raises(SpecError, match="quantization_config gptq with bits 8"):
        from_hf_config({**_QWEN3, "quantization_config": {"quant_method": "gptq", "bits": 8}})


def test_mlx_short_names():
    from moesym.specs.precision import canonical

    assert canonical("mlx4") == "mlx-4bit" and canonical("MLX8") == "mlx-8bit"
