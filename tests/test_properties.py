"""Property tests over random models, hardware and deployments (hypothesis), issue 17: the step
model is monotone in batch and context, never slower with more FLOP/s or bandwidth, has no
all-to-all at EP 1, times a one-expert MoE as the dense model it is, and a time-model swap
(kernel model <-> roofline) changes the time but no FLOP or byte count.

Each example builds a fresh step model (SymPy), so the example counts are small; hypothesis
varies every shape, the GPU, its peaks and the deployment.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import moesym as ms
from moesym.model.predictor import predict
from moesym.specs.model import ModelSpec
from moesym.symbolic.symbols import S

# the slow tier: each example builds a step model; tests/test_step.py checks the same
# properties on fixed cases in the fast tier
pytestmark = pytest.mark.slow

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
GPUS = ["h800", "h20", "h100", "h200", "b200", "mi300x", "a100"]


@st.composite
def models(draw, moe: bool = True) -> ModelSpec:
    """A decoder with GQA or MLA attention and, with ``moe``, a routed-expert FFN."""
    hidden = 128 * draw(st.integers(4, 48))
    heads = draw(st.sampled_from([8, 16, 32, 64]))
    layers = draw(st.integers(2, 64))
    mla = draw(st.booleans())
    attn = (dict(attention="mla", kv_lora_rank=draw(st.sampled_from([256, 512])),
                 qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                 q_lora_rank=draw(st.sampled_from([0, 1536])))
            if mla else dict(attention="gqa", num_kv_heads=draw(st.sampled_from([1, 2, 4, 8])),
                             head_dim=draw(st.sampled_from([64, 128]))))
    if not moe:
        return ModelSpec(name="dense", source="hypothesis", hidden_size=hidden, vocab_size=32000,
                         num_layers=layers, num_heads=heads, dense_layers=layers,
                         dense_intermediate_size=128 * draw(st.integers(4, 96)), **attn)
    experts = draw(st.sampled_from([8, 16, 32, 64, 128, 256]))
    topk = draw(st.integers(1, min(8, experts)))
    dense = draw(st.integers(0, 2))
    return ModelSpec(name="moe", source="hypothesis", hidden_size=hidden, vocab_size=32000,
                     num_layers=layers, num_heads=heads, dense_layers=dense,
                     dense_intermediate_size=(128 * draw(st.integers(4, 96))) if dense else 0,
                     num_experts=experts, experts_per_token=topk,
                     moe_intermediate_size=128 * draw(st.integers(2, 24)),
                     shared_intermediate_size=128 * draw(st.integers(0, 24)), **attn)


@st.composite
def setups(draw, moe: bool = True):
    """(model, hardware, deployment) with EP dividing the experts and TP the heads."""
    m = draw(models(moe))
    hw = ms.load_hardware(draw(st.sampled_from(GPUS)))
    gpus = draw(st.sampled_from([1, 2, 4, 8, 16]))
    tp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if gpus % d == 0 and m.num_heads % d == 0]))
    eps = [e for e in (1, 2, 4, 8, 16) if gpus % e == 0 and (not m.is_moe or m.num_experts % e == 0)
           and (not m.is_moe or m.moe_intermediate_size % (gpus // e) == 0)] if m.is_moe else [gpus]
    ep = draw(st.sampled_from(eps))
    dep = ms.Deployment(gpus=gpus, tp=tp, ep=ep, weights=draw(st.sampled_from(["bf16", "fp8"])),
                        micro_batches=draw(st.sampled_from([1, 2])) if m.is_moe else 1,
                        timing=draw(st.sampled_from(["kernel", "roofline"])))
    return m, hw, dep


def _step(m, hw, dep, phase="decode"):
    wl = (ms.Workload("decode", batch=64, context=2048) if phase == "decode"
          else ms.Workload("prefill", tokens=4096, context=2048))
    return ms.build_step(m, hw, dep, wl)


@SETTINGS
@given(setups(), st.sampled_from(["decode", "prefill"]))
def test_step_time_never_falls_with_batch_or_context(setup, phase):
    step = _step(*setup, phase=phase)
    size = "batch" if phase == "decode" else "tokens"
    sizes = np.arange(2, 1025, 2) if phase == "decode" else np.unique(np.geomspace(64, 65536, 60).astype(int)) * 2
    t = step.evaluate(**{size: sizes})
    assert np.all(np.diff(t) >= -1e-12 * t[1:]), size
    # prefill at a fixed token budget: below one prompt per step (context < tokens) a longer
    # context means fewer prompts and fewer LM-head rows, which may rightly cost less; from one
    # prompt on (chunked prefill of a long prompt) more context is only more attention
    lo = 16 if phase == "decode" else 4096
    ctx = np.unique(np.geomspace(lo, 131072, 80).astype(int))
    t = step.evaluate(context=ctx)
    assert np.all(np.diff(t) >= -1e-12 * t[1:]), "context"


@SETTINGS
@given(setups(), st.sampled_from(["flops_gemm", "flops_attn", "hbm_bw", "bw_up", "bw_out"]),
       st.floats(1.01, 4.0))
def test_more_flops_or_bandwidth_is_never_slower(setup, rate, factor):
    step = _step(*setup)
    sym = getattr(S, rate)
    if sym not in step.values:
        return  # this rate does not appear in this model (e.g. no network at one GPU)
    b = np.arange(1, 513)
    base = step.evaluate(batch=b)
    faster = step.evaluate(batch=b, **{str(sym): step.values[sym] * factor})
    assert np.all(faster <= base * (1 + 1e-12))


@SETTINGS
@given(setups())
def test_ep_one_has_no_all_to_all(setup):
    m, hw, dep = setup
    dep = dataclasses.replace(dep, gpus=dep.tp, ep=1)
    r = predict(m, hw, dep, ms.Workload("decode", batch=32, context=1024), memory=False)
    for key in ("dispatch", "combine"):
        assert r["per_layer_s"][key] == 0.0
        assert r["work_per_layer"][key]["net_bytes"] == 0.0


@SETTINGS
@given(models(moe=False), st.sampled_from(GPUS), st.sampled_from(["bf16", "fp8"]),
       st.sampled_from(["kernel", "roofline"]), st.sampled_from(["decode", "prefill"]))
def test_dense_model_is_a_one_expert_moe(dense, gpu, weights, timing, phase):
    """The same FFN written as one routed expert with top-1 (no router, no all-to-all: a single
    expert is a dense FFN) takes the same time and does the same work."""
    moe = dataclasses.replace(dense, name="one-expert", dense_layers=0, num_experts=1,
                              experts_per_token=1,
                              moe_intermediate_size=dense.dense_intermediate_size,
                              dense_intermediate_size=0)
    hw = ms.load_hardware(gpu)
    dep = ms.Deployment(weights=weights, timing=timing)
    wl = (ms.Workload("decode", batch=48, context=3000) if phase == "decode"
          else ms.Workload("prefill", tokens=4096, context=2048))
    a, b = predict(dense, hw, dep, wl, memory=False), predict(moe, hw, dep, wl, memory=False)
    assert b["step_time_s"] == pytest.approx(a["step_time_s"], rel=1e-9)
    for key, w in a["work_per_layer"].items():
        for f, v in w.items():
            assert b["work_per_layer"][key][f] == pytest.approx(v, rel=1e-9, abs=1e-6), (key, f)


@SETTINGS
@given(setups(), st.sampled_from(["decode", "prefill"]))
def test_time_model_swap_changes_no_flop_or_byte_count(setup, phase):
    m, hw, dep = setup
    wl = (ms.Workload("decode", batch=96, context=4096) if phase == "decode"
          else ms.Workload("prefill", tokens=8192, context=4096))
    kernel = predict(m, hw, dataclasses.replace(dep, timing="kernel"), wl, memory=False)
    roof = predict(m, hw, dataclasses.replace(dep, timing="roofline"), wl, memory=False)
    assert kernel["work_per_layer"] == roof["work_per_layer"]
    # the layer, not the step: a tiny model's GPU step may be shorter than the engine's host time
    # per step, which the overlap scheduler makes both models' floor
    assert kernel["layer_s"] != roof["layer_s"]


@SETTINGS
@given(setups(), st.sampled_from(["decode", "prefill"]))
def test_no_term_beats_its_bytes_at_peak_bandwidth_or_flops_at_peak_rate(setup, phase):
    """Physics (issue 33): no term of a step runs faster than its HBM bytes at the GPU's peak
    bandwidth or its FLOPs at the GPU's fastest tensor-core peak (whatever the fitted
    fractions, tiles and overlap), and the step is no shorter than any one term of one layer."""
    m, hw, dep = setup
    wl = (ms.Workload("decode", batch=64, context=2048) if phase == "decode"
          else ms.Workload("prefill", tokens=4096, context=2048))
    r = predict(m, hw, dep, wl, memory=False)
    peak = max(hw.peaks_flops.values())
    for key, work in r["work_per_layer"].items():
        floor = max(work["flop"] / peak, work["hbm_bytes"] / hw.hbm_bw_Bps)
        assert r["per_layer_s"][key] >= floor * (1 - 1e-9), (key, work, r["per_layer_s"][key])
    assert r["step_time_s"] >= max(r["per_layer_s"].values()) * (1 - 1e-9)


@SETTINGS
@given(setups(), st.integers(1, 512), st.integers(16, 65536))
def test_memory_parts_are_never_negative(setup, batch, context):
    """Every part of the memory budget holds a non-negative number of bytes (only ``free``
    may fall below zero: the configuration then does not fit, and says so)."""
    from moesym.memory import memory_report

    m, hw, dep = setup
    r = memory_report(m, hw, dep, ms.Workload("decode", batch=batch, context=context))
    for key in ("weights_bytes", "kv_bytes", "activation_bytes", "workspace_bytes",
                "comm_buffer_bytes", "reserve_bytes", "kv_bytes_per_token"):
        assert r[key] >= 0, key
    for part in ("weights_breakdown", "activation_breakdown", "workspace_breakdown",
                 "comm_breakdown"):
        assert all(v >= 0 for v in r[part].values()), part
    assert r["fits"] == (r["free_bytes"] >= 0)
