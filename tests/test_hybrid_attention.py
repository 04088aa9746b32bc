"""Hybrid linear attention (Qwen3-Next: gated DeltaNet in 36 of 48 layers), by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from moesym import Deployment, Workload, load_hardware, load_model
from moesym.memory import memory_report
from moesym.model.predictor import predict


@pytest.fixture(scope="module")
def nxt():
    return load_model("qwen3-next-80b-a3b")


def _mem(m, context):
    dep = Deployment(gpus=4, weights="fp8", memory_options=(("kv_fragmentation", False),))
    return memory_report(m, load_hardware("h100"), dep, Workload("decode", batch=8, context=context))


def test_kv_only_in_full_attention_layers_and_a_fixed_state_elsewhere(nxt):
    # 12 full-attention layers x (K + V) x 2 KV heads x 256 x 2 bytes (attention data-parallel)
    assert _mem(nxt, 4096)["kv_bytes_per_token"] == 12 * 2 * 2 * 256 * 2
    a, b = _mem(nxt, 4096)["kv_bytes_per_request"], _mem(nxt, 32768)["kv_bytes_per_request"]
    assert b - a == 24576 * (32768 - 4096)  # only the full layers grow with the context
    # each DeltaNet layer holds 32 heads x 128 x 128 fp32 state and 3 positions of the
    # convolution over q, k (16 x 128 each) and v (32 x 128) channels in BF16
    state = 32 * 128 * 128 * 4 + (2 * 16 * 128 + 32 * 128) * 3 * 2
    assert a - 24576 * 4096 == 36 * state


def test_cheaper_than_full_attention_at_long_context(nxt):
    full = replace(nxt, linear_layers=0)
    h = load_hardware("h100")
    wl = Workload("decode", batch=32, context=32768)
    dep = Deployment(gpus=4, weights="fp8")
    hybrid, plain = predict(nxt, h, dep, wl), predict(full, h, dep, wl)
    assert hybrid["tpot_s"] < 0.6 * plain["tpot_s"]
    assert hybrid["memory_bytes"] < plain["memory_bytes"]
    # the attention work per layer: a quarter of the full layers' KV reads plus the states
    kv = plain["work_per_layer"]["attention_core"]["hbm_bytes"]
    assert hybrid["work_per_layer"]["attention_core"]["hbm_bytes"] < 0.3 * kv


def test_full_attention_share_is_a_quarter_of_the_full_batch_kernel(nxt):
    """The 12 full-attention layers of 48 each run the whole batch's kernel: the average
    layer's attention grows with the context by 12/48 of what a model of only full-attention
    layers grows by (the DeltaNet core does not depend on it). The share used to be timed as a
    kernel of a quarter of the requests, mostly launch floor: flat from context 1000 to 4096."""
    full = replace(nxt, linear_layers=0)
    h, dep = load_hardware("h200"), Deployment(gpus=4)

    def core(m, ctx):
        return predict(m, h, dep, Workload("decode", batch=8, context=ctx))["per_layer_s"]["attention_core"]

    grown = core(nxt, 4096) - core(nxt, 1000)
    assert grown == pytest.approx(12 / 48 * (core(full, 4096) - core(full, 1000)), rel=1e-9)
    assert grown > 0


def test_gated_attention_output_by_hand():
    # issue 18 item 7: Qwen3.5's attn_output_gate (and Qwen3-Next, which always gates): q_proj
    # also emits a gate of h d_h per token, and an elementwise kernel multiplies the attention
    # output by sigmoid(gate). Per layer and t tokens that adds 2 t d h d_h FLOP, the gate's
    # weights d h d_h b_w and its output t h d_h b_a to q_proj, and 3 t h d_h b_a (read output
    # and gate, write) to the elementwise kernel; memory holds the gate's weights in every layer.
    import moesym as ms
    from moesym.readers.model import from_hf_config

    cfg = {"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 1000, "intermediate_size": 4096}
    plain = from_hf_config(cfg)
    gated = from_hf_config({**cfg, "attn_output_gate": True})
    assert gated.attn_output_gate and not plain.attn_output_gate
    hw = ms.load_hardware("h100")
    wl = ms.Workload("decode", batch=32, context=2048)
    a, b = (ms.predict(m, hw, ms.Deployment(), wl) for m in (plain, gated))
    t, d, hhd, bw, ba = 32, 1024, 8 * 128, 2, 2
    fa, fb = a["work_per_layer"]["attention_proj"], b["work_per_layer"]["attention_proj"]
    assert fb["flop"] - fa["flop"] == pytest.approx(2 * t * d * hhd, rel=1e-12)
    assert fb["hbm_bytes"] - fa["hbm_bytes"] == pytest.approx(d * hhd * bw + t * hhd * ba
                                                              + 3 * t * hhd * ba, rel=1e-12)
    # the layer, not the step: this 4-layer model's GPU step is shorter than the engine's host
    # time per step, which the overlap scheduler makes the step's floor for both
    assert b["layer_s"] > a["layer_s"]
    mem = [memory_report(m, hw, ms.Deployment(), wl)["weights_bytes"] for m in (plain, gated)]
    assert mem[1] - mem[0] == pytest.approx(4 * d * hhd * bw, rel=1e-12)
    # Qwen3-Next gates without a config field: its model type says so
    assert from_hf_config({**cfg, "model_type": "qwen3_next", "full_attention_interval": 4,
                           "linear_num_key_heads": 4, "linear_num_value_heads": 8,
                           "linear_key_head_dim": 64, "linear_value_head_dim": 64,
                           "num_experts": 8, "num_experts_per_tok": 2,
                           "moe_intermediate_size": 256}).attn_output_gate
    assert ms.load_model("qwen3-next-80b-a3b").attn_output_gate


@pytest.mark.parametrize("phase,kw", [("decode", dict(batch=32, context=65536)),
                                      pytest.param("prefill", dict(tokens=8192, context=8192),
                                                   marks=pytest.mark.slow)])
def test_sliding_layers_average_the_two_kernels(phase, kw):
    """gpt-oss alternates 128-token sliding-window layers with full ones: the average layer's
    attention is the mean of a model of only full layers and one of only window layers, each
    timed by its own kernel shape (the two used to be summed into one shapeless cost)."""
    m, h = load_model("gpt-oss-120b"), load_hardware("h100")
    dep, wl = Deployment(weights="mxfp4"), Workload(phase, **kw)
    f = m.sliding_layers / m.num_layers

    def core(model):
        return predict(model, h, dep, wl)["per_layer_s"]["attention_core"]

    full, window = core(replace(m, sliding_layers=0)), core(replace(m, sliding_layers=m.num_layers))
    assert core(m) == pytest.approx((1 - f) * full + f * window, rel=1e-9)
    assert window < full
