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
