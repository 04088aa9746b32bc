"""Weight precision: formats, per-component recipes, and one truth for timing and memory."""

from __future__ import annotations

import pytest

from moesym import Deployment, Workload, load_hardware, load_model
from moesym.errors import SpecError
from moesym.memory import memory_report
from moesym.model.predictor import predict
from moesym.specs.precision import WeightRecipe, bytes_per_element


def test_bytes_per_element_by_hand():
    assert bytes_per_element("bf16") == 2
    assert bytes_per_element("fp8") == 1 + 4 / (128 * 128)  # fp32 scale per 128 x 128 block
    assert bytes_per_element("fp4") == 0.5 + 1 / 32  # E8M0 per 32 (MXFP4)
    assert bytes_per_element("nvfp4") == 0.5 + 1 / 16  # E4M3 per 16
    assert bytes_per_element("w4a16") == 0.5 + 4 / 128  # fp16 scale + fp16 zero per 128
    assert bytes_per_element("w4a16", group_size=64) == 0.5 + 4 / 64
    assert bytes_per_element("w4a8") == 0.5 + 2 / 128
    assert bytes_per_element("int8") == 1  # one scale per output channel: negligible
    assert bytes_per_element("int8", group_size=128) == 1 + 4 / 128


def test_recipes():
    assert WeightRecipe.parse("fp8") == WeightRecipe("fp8", "fp8", "fp8")
    assert WeightRecipe.parse("fp4", is_moe=True) == WeightRecipe("fp8", "fp4", "fp8")
    assert WeightRecipe.parse("fp4", is_moe=False) == WeightRecipe("fp4", "fp4", "fp4")
    assert WeightRecipe.parse("w4a16") == WeightRecipe("w4a16", "w4a16", "w4a16")
    assert WeightRecipe.parse("moe=nvfp4,attn=fp8") == WeightRecipe("fp8", "nvfp4", "bf16")
    for bad in ("int3", "moe=fp4,moe=fp8", "experts=fp4", "moe=int3"):
        with pytest.raises(SpecError):
            WeightRecipe.parse(bad)
    with pytest.raises(SpecError, match="`group_size`"):
        Deployment(weights="bf16", group_size=64)


V3 = dict(gpus=8, ep=8)


def _both(weights, hw="b200", **kw):
    m, h = load_model("deepseek-v3"), load_hardware(hw)
    dep = Deployment(weights=weights, **V3, **kw)
    wl = Workload("decode", batch=64, context=4096)
    return predict(m, h, dep, wl, memory=False)["work_per_layer"], memory_report(m, h, dep, wl)


@pytest.mark.slow
def test_timing_and_memory_use_the_same_precision_per_component():
    """``moe=fp4,attn=fp8,dense=bf16`` on B200: the routed experts are read and held at
    0.53125 bytes per weight, attention at FP8's, shared experts at BF16's, in the step model's
    bytes and in memory alike."""
    w16, m16 = _both("bf16")
    wr, mr = _both("moe=fp4,attn=fp8,dense=bf16")
    fp4, fp8 = bytes_per_element("fp4") / 2, bytes_per_element("fp8") / 2  # vs BF16's 2 bytes
    assert wr["moe_weight_load"]["hbm_bytes"] == pytest.approx(fp4 * w16["moe_weight_load"]["hbm_bytes"])
    b16, br = m16["weights_breakdown"], mr["weights_breakdown"]
    assert br["routed_experts"] == pytest.approx(fp4 * b16["routed_experts"])
    assert br["attention_sharded"] == pytest.approx(fp8 * b16["attention_sharded"])
    assert br["shared_experts"] == pytest.approx(b16["shared_experts"])
    assert br["dense_ffn"] == pytest.approx(b16["dense_ffn"])
    # the shared expert's GEMMs read BF16 weights in the step model too
    assert wr["shared_expert"]["hbm_bytes"] == pytest.approx(w16["shared_expert"]["hbm_bytes"])


@pytest.mark.slow
def test_single_fp4_keeps_attention_fp8_in_timing_as_in_memory():
    w4, m4 = _both("fp4")
    w8, m8 = _both("fp8")
    assert w4["attention_proj"]["hbm_bytes"] == pytest.approx(w8["attention_proj"]["hbm_bytes"])
    assert m4["weights_breakdown"]["attention_sharded"] == pytest.approx(
        m8["weights_breakdown"]["attention_sharded"])
    assert w4["moe_weight_load"]["hbm_bytes"] < 0.6 * w8["moe_weight_load"]["hbm_bytes"]


def test_w4a16_reads_four_bits_and_computes_on_bf16_cores():
    m, h = load_model("qwen3-30b-a3b"), load_hardware("h100")
    wl = Workload("decode", batch=64, context=2048)
    run = {w: predict(m, h, Deployment(weights=w, timing="roofline"), wl)
           for w in ("bf16", "w4a16", "fp8")}
    b = {w: r["bounds"]["routed_experts"] for w, r in run.items()}
    assert b["w4a16"]["compute_s"] == pytest.approx(b["bf16"]["compute_s"])  # BF16 tensor cores
    # FP8 tensor cores: 1979 against 989 TFLOP/s on H100
    assert b["fp8"]["compute_s"] == pytest.approx(b["bf16"]["compute_s"] * 989 / 1979)
    load = {w: r["work_per_layer"]["moe_weight_load"]["hbm_bytes"] for w, r in run.items()}
    assert load["w4a16"] == pytest.approx(load["bf16"] * bytes_per_element("w4a16") / 2)
    assert run["w4a16"]["memory_bytes"] < run["fp8"]["memory_bytes"] < run["bf16"]["memory_bytes"]


@pytest.mark.slow
def test_mxfp4_stays_four_bit_on_hopper_where_fp4_expands():
    _, mx = _both("mxfp4", hw="h100")
    _, f4 = _both("fp4", hw="h100")
    _, f8 = _both("fp8", hw="h100")
    assert f4["weights_breakdown"]["routed_experts"] == pytest.approx(
        f8["weights_breakdown"]["routed_experts"])  # expanded to FP8 (seed 002)
    assert mx["weights_breakdown"]["routed_experts"] == pytest.approx(
        f8["weights_breakdown"]["routed_experts"] * bytes_per_element("mxfp4")
        / bytes_per_element("fp8"))


def test_separate_dequant_kernel_moves_the_weight_bytes_by_hand():
    # issue 19: --dequant separate runs a dequantisation kernel (read the packed weights, b_w per
    # element, write BF16) before a plain BF16 GEMM that reads 2 B per element. The routed
    # experts' weight traffic goes from b_w to b_w + 2 + 2 per element: x (b_w + 4) / b_w, with
    # b_w = (4 + 32/128) / 8 for w4a16 at group 128 (a 16-bit scale and zero per 128 weights).
    import moesym as ms

    m, h = ms.load_model("qwen3-30b-a3b"), ms.load_hardware("rtx-4090")
    wl = ms.Workload("decode", batch=8, context=2048)
    fused = ms.predict(m, h, ms.Deployment(weights="w4a16"), wl)
    sep = ms.predict(m, h, ms.Deployment(weights="w4a16", dequant="separate"), wl)
    bw = (4 + 32 / 128) / 8
    assert sep["work_per_layer"]["moe_weight_load"]["hbm_bytes"] == pytest.approx(
        fused["work_per_layer"]["moe_weight_load"]["hbm_bytes"] * (bw + 4) / bw, rel=1e-12)
    assert sep["step_time_s"] > fused["step_time_s"]
    # BF16 weights run no weight-only kernel: the flag changes nothing and says so
    with pytest.warns(UserWarning, match="--dequant separate has no effect"):
        a = ms.predict(m, h, ms.Deployment(weights="bf16", dequant="separate"), wl)
    assert a["step_time_s"] == ms.predict(m, h, ms.Deployment(weights="bf16"), wl)["step_time_s"]
