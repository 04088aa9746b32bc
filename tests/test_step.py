"""The composed step model: free symbols, compilation, identities and monotonicity."""

import dataclasses
import random

import numpy as np
import pytest
import sympy as sp

import moesym as ms
from moesym.symbolic.compile import compile_expr
from moesym.symbolic.symbols import S
from moesym.kernels.time_model import RooflineTiming


def _step(model="deepseek-v3", hw="h800", phase="decode", timing=None, **dep):
    wl = (ms.Workload("decode", batch=64, context=4096) if phase == "decode"
          else ms.Workload("prefill", tokens=8192, context=4096))
    return ms.build_step(ms.load_model(model), ms.load_hardware(hw), ms.Deployment(**dep), wl,
                         timing=timing)


HW_SYMS = {S.flops_gemm, S.flops_attn, S.hbm_bw, S.eff_gemm, S.eff_attn, S.eff_mem,
           S.eff_mem_attn, S.eff_mem_ew, S.t_kernel, S.t_layer, S.t_step, S.eff_serve}
GQA_SYMS = {S.hidden, S.vocab, S.heads, S.kv_heads, S.head_dim, S.tp, S.micro_batches,
            S.w_bytes, S.kv_bytes, S.act_bytes, S.context, S.bw_up, S.eff_up, S.lat_up}


def test_dense_decode_free_symbols_exact_roofline():
    step = _step("qwen3-8b", "h100", timing=RooflineTiming())
    # the FFN runs in the dense component's weight format (bytes and tensor cores)
    expected = HW_SYMS | GQA_SYMS | {S.batch, S.dense_inter, S.n_dense_layers, S.w_bytes_dense,
                                     S.flops_dense}
    assert step.expr.free_symbols == expected


def test_dense_decode_free_symbols_exact_kernel_model():
    # the calibrated kernel model binds its fitted fractions and latencies as numbers: the
    # efficiency symbols drop out, the SM count enters (tiles and waves); tau_k stays for the
    # TP all-reduce launches (communication keeps the roofline timing); the matrix-vector
    # kernels of a few rows (issue 35) add the unpack time per weight of the projections' and the
    # FFN's formats (tau_uq, tau_ud: 0 for BF16, bound by the format)
    step = _step("qwen3-8b", "h100")
    hw = {S.flops_gemm, S.flops_attn, S.hbm_bw, S.sms, S.t_kernel, S.t_layer, S.t_step, S.eff_serve,
          S.t_unpack, S.t_unpack_dense}
    expected = hw | GQA_SYMS | {S.batch, S.dense_inter, S.n_dense_layers, S.w_bytes_dense,
                                S.flops_dense}
    assert step.expr.free_symbols == expected


@pytest.mark.parametrize("timing", [None, RooflineTiming()], ids=["kernel", "roofline"])
def test_mla_moe_decode_free_symbols_contain_every_shape(timing):
    step = _step("deepseek-v3", "h800", timing=timing, gpus=16, ep=16, weights="fp8")
    free = step.expr.free_symbols
    must = {S.batch, S.context, S.hidden, S.heads, S.q_lora, S.kv_lora, S.qk_nope, S.qk_rope,
            S.v_head, S.experts, S.topk, S.moe_inter, S.shared_inter, S.dense_inter, S.ep, S.gpus,
            S.n_moe_layers, S.n_dense_layers, S.dispatch_bytes, S.combine_bytes}
    assert must <= free
    # no prefill symbols in a decode model, and no GQA head_dim in an MLA model
    assert not ({S.tokens, S.chunk, S.head_dim, S.kv_heads} & free)
    # every free symbol is bound, and nothing stray
    assert set(step.values) == free


def test_prefill_uses_tokens_and_chunk():
    free = _step("qwen3-30b-a3b", "h20", "prefill").expr.free_symbols
    assert {S.tokens, S.context, S.chunk} <= free and S.batch not in free


@pytest.mark.slow
def test_compiled_equals_evalf_at_random_points():
    step = _step("deepseek-v3", "h800", gpus=32, ep=32, weights="fp8", micro_batches=2)
    expr = step.expr
    args = sorted(expr.free_symbols, key=str)
    fn = compile_expr(expr, args)
    rng = random.Random(7)
    for _ in range(5):
        point = {s: v * rng.uniform(0.5, 2.0) for s, v in step.values.items()}
        point[S.micro_batches] = rng.choice([1, 2, 3])
        want = float(expr.xreplace({s: sp.Float(v) for s, v in point.items()}).evalf())
        got = float(fn(*[point[a] for a in args]))
        assert got == pytest.approx(want, rel=1e-9)


def test_grid_evaluation_broadcasts():
    step = _step("qwen3-30b-a3b", "h20", gpus=4, ep=4)
    b = np.array([1, 8, 64, 256])[:, None]
    L = np.array([512, 4096, 32768])[None, :]
    out = step.evaluate(batch=b, context=L)
    assert out.shape == (4, 3)
    single = ms.build_step(step.model, step.hardware, step.deployment,
                           ms.Workload("decode", batch=64, context=4096)).predict()["step_time_s"]
    assert out[2, 1] == pytest.approx(single, rel=1e-12)


def test_dense_equals_one_expert_moe():
    dense = ms.load_model("qwen3-8b")
    moe = dense.with_(name="one-expert", num_experts=1, experts_per_token=1,
                      moe_intermediate_size=dense.dense_intermediate_size, dense_layers=0)
    hw = ms.load_hardware("h100")
    for wl in (ms.Workload("decode", batch=32, context=2000),
               ms.Workload("prefill", tokens=8192, context=4096)):
        a = ms.build_step(dense, hw, ms.Deployment(), wl).predict()
        b = ms.build_step(moe, hw, ms.Deployment(), wl).predict()
        assert b["step_time_s"] == pytest.approx(a["step_time_s"], rel=1e-12)
        assert b["per_layer_s"]["moe_routed"] == pytest.approx(a["per_layer_s"]["moe_routed"])


@pytest.mark.parametrize("model,hw,dep", [
    ("deepseek-v3", "h800", dict(gpus=32, ep=32, weights="fp8", micro_batches=2)),
    ("qwen3-30b-a3b", "h20", dict(gpus=4, ep=4)),
    ("qwen3-8b", "h100", dict()),
])
def test_step_time_never_falls_with_batch_or_context(model, hw, dep):
    step = _step(model, hw, **dep)
    b = np.arange(1, 513)
    t = step.evaluate(batch=b)
    assert np.all(np.diff(t) >= -1e-15)
    L = np.unique(np.geomspace(16, 131072, 200).astype(int))
    t = step.evaluate(context=L)
    assert np.all(np.diff(t) >= -1e-15)


@pytest.mark.slow
def test_more_flops_or_bandwidth_never_slower():
    step = _step("deepseek-v3", "h800", gpus=16, ep=16, weights="fp8")
    base = step.evaluate(batch=np.arange(1, 300))
    for sym in (S.flops_gemm, S.flops_attn, S.hbm_bw, S.bw_up, S.bw_out):
        if sym in step.values:
            faster = step.evaluate(batch=np.arange(1, 300), **{str(sym): step.values[sym] * 1.5})
            assert np.all(faster <= base * (1 + 1e-12)), sym


def test_contract_keys_and_bound():
    r = _step("deepseek-v3", "h800", gpus=128, ep=128, weights="fp8", micro_batches=2).predict()
    for k in ("step_time_s", "tokens_per_gpu_s", "tpot_s", "bound", "per_layer_s"):
        assert k in r
    assert r["bound"] in ("compute", "memory", "communication", "overhead")
    assert set(ms.BREAKDOWN_KEYS) <= set(r["per_layer_s"])
    assert r["tokens_per_gpu_s"] == pytest.approx(64 / r["step_time_s"])


def test_weight_load_floor_at_small_batch():
    # one decode request on one GPU: the MoE layer reads the experts it touches; with top-8 of 256
    # that is 8 experts (the expected count 256 (1 - (1 - 8/256)^1) = 8 exactly), and SGLang (the
    # default engine) runs DeepSeek-V3's shared expert on Hopper as a ninth expert of the same
    # kernel (sglang 0.5.9 deepseek_v2.py:2853-2895), whose weights that read takes too
    m = ms.load_model("deepseek-v3")
    step = ms.build_step(m, ms.load_hardware("h200"), ms.Deployment(weights="fp8"),
                         ms.Workload("decode", batch=1, context=1024), timing=RooflineTiming())
    r = step.predict()
    per_expert_bytes = 3 * 7168 * 2048 * (1 + 4 / 128**2)
    bw = step.values[S.hbm_bw] * step.values[S.eff_mem]
    assert r["per_layer_s"]["moe_weight_load"] == pytest.approx((8 + 1) * per_expert_bytes / bw, rel=1e-9)
    assert r["per_layer_s"]["moe_weight_load"] > r["per_layer_s"]["moe_routed"]


def test_ep_shards_routed_experts_only():
    a = _step("deepseek-v3", "h800", gpus=8, ep=8, weights="fp8").predict()["per_layer_s"]
    b = _step("deepseek-v3", "h800", gpus=8, ep=8, weights="fp8", tp=8).predict()["per_layer_s"]
    # TP shards attention heads: projections per GPU shrink with tp
    assert b["attention_proj"] < a["attention_proj"]


def test_hardware_replacement_changes_numbers():
    m, hw = ms.load_model("qwen3-8b"), ms.load_hardware("h100")
    faster = dataclasses.replace(hw, hbm_bw_Bps=hw.hbm_bw_Bps * 2)
    wl = ms.Workload("decode", batch=1, context=1024)
    a = ms.build_step(m, hw, ms.Deployment(), wl).predict()["step_time_s"]
    b = ms.build_step(m, faster, ms.Deployment(), wl).predict()["step_time_s"]
    assert b < a


def test_fp8_adds_ffn_input_casts_and_moe_keeps_grouped_gemms():
    # FP8 (block-quantized) linears quantize their BF16 inputs: for Qwen3-8B prefill the FFN
    # adds a cast of t (d + I) elements per layer: read 2 B, write 1 B + 4/128 B of scale, at
    # the elementwise fraction of HBM bandwidth, plus one launch. Roofline timing, so the
    # extra "other" time is exactly bytes / (eta_me W) + tau_k.
    def other_s(weights):
        st = _step("qwen3-8b", "h20", "prefill", timing=RooflineTiming(), weights=weights)
        return float(st.terms["other"].total_s.subs(st.values))

    st = _step("qwen3-8b", "h20", "prefill", timing=RooflineTiming(), weights="fp8")
    t, d, inter = 8192, 4096, 12288
    cast_bytes = t * (d + inter) * (2 + 1 + 4 / 128)
    expected = cast_bytes / float((S.eff_mem_ew * S.hbm_bw).subs(st.values)) + float(
        S.t_kernel.subs(st.values))
    # fp8 also casts the attention inputs (already counted in both), so compare the difference
    # against the BF16 run with the attention casts removed: t (d + h d_h) (b_a + 1) bytes
    attn_cast = t * (d + 32 * 128) * 3 / float((S.eff_mem_ew * S.hbm_bw).subs(st.values)) + float(
        S.t_kernel.subs(st.values))
    assert other_s("fp8") - other_s("bf16") == pytest.approx(expected + attn_cast, rel=1e-9)


@pytest.mark.parametrize("weights", ["bf16", "fp8"])
def test_moe_without_shared_expert_keeps_grouped_gemms(weights):
    # only a one-expert model turns its routed GEMMs into dense ones
    from moesym.model.layer_costs import moe_layer_costs
    from moesym.terms.cost import KernelClass
    from moesym.terms.dims import symbolic_dims

    model = ms.load_model("qwen3-30b-a3b")
    assert not model.shared_intermediate_size
    costs = moe_layer_costs(model, ms.Deployment(gpus=4, weights=weights),
                             ms.Workload("decode", batch=64, context=4096), symbolic_dims())
    seen = [c for v in costs.values() for c in v]
    kinds = {c.kind for c in seen if c.name.startswith(("experts_", "moe_weight"))
             and c.kind in (KernelClass.GEMM, KernelClass.GROUPED_GEMM)}
    assert kinds == {KernelClass.GROUPED_GEMM}


@pytest.mark.parametrize("model", ["mixtral-8x7b", "gpt-oss-120b", "llama-4-scout"])
def test_moe_models_without_dense_layers_predict_with_expert_tp(model):
    # no dense layers (and no dense FFN width): the dense-layer model must not enter the step,
    # whatever the deployment (here EP 1 with the experts split over 4 GPUs)
    r = ms.build_step(ms.load_model(model), ms.load_hardware("h100"), ms.Deployment(gpus=4, ep=1),
                      ms.Workload("decode", batch=16, context=4096)).predict()
    assert np.isfinite(r["step_time_s"]) and r["step_time_s"] > 0


def test_serving_efficiency_divides_the_whole_step():
    # step = (layers + once) / eta_sv: every term slows by the same factor, so halving eta_sv
    # doubles the step exactly, and the per-layer kernel times do not move
    step = _step("qwen3-30b-a3b", "h20")
    assert step.values[S.eff_serve] == ms.load_hardware("h20").efficiency.serving < 1
    t1 = float(step.evaluate(eff_serve=1.0))
    assert float(step.evaluate(eff_serve=0.5)) == pytest.approx(2 * t1, rel=1e-12)
    r = step.predict()
    assert r["step_time_s"] == pytest.approx(t1 / step.values[S.eff_serve], rel=1e-12)
    assert r["serving_frac"] == step.values[S.eff_serve]
    # the time the engine loses is counted as overhead: all shares together grow by 1 / eta_sv
    raw = dataclasses.replace(step, values={**step.values, S.eff_serve: 1.0}).predict()
    shares, raw_shares = r["bound_shares_s"], raw["bound_shares_s"]
    assert sum(shares.values()) == pytest.approx(sum(raw_shares.values()) / step.values[S.eff_serve],
                                                 rel=1e-12)
    assert {k: shares[k] for k in ("compute", "memory")} == {k: raw_shares[k] for k in ("compute", "memory")}
    assert raw["step_time_s"] == pytest.approx(t1, rel=1e-12)


def test_a_missing_binding_is_an_error_not_a_nan(monkeypatch):
    import moesym.model.step as step_mod
    from moesym.symbolic.symbols import BindingError

    real = step_mod.bindings

    def without_hbm(*a):
        vals = real(*a)
        vals.pop(S.hbm_bw)
        return vals

    monkeypatch.setattr(step_mod, "bindings", without_hbm)
    with pytest.raises(BindingError, match="missing binding.*W\\b"):
        _step("qwen3-8b", "h100")
