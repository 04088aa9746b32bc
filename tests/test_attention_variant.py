"""Adding an attention variant takes one file and one catalog entry: the toy variant of
tests/fixtures/toy_attention.py (GQA keeping a fixed share phi of the context's KV), registered
in the catalog for the test only, is predicted, swept, derived and reported in memory, each
against numbers derived here by hand, without touching any module of moesym."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest

import moesym as ms
from moesym.attention import catalog
from moesym.specs.deployment import Workload

_spec = importlib.util.spec_from_file_location(
    "toy_attention", Path(__file__).parent / "fixtures" / "toy_attention.py")
toy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(toy)

# a Qwen3-30B-A3B-shaped config.json (48 layers, 32 query heads and 4 KV heads of 128) carrying
# the toy's field
CONFIG = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
          "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
          "vocab_size": 151936, "num_experts": 128, "num_experts_per_tok": 8,
          "moe_intermediate_size": 768, "intermediate_size": 6144, "decoder_sparse_step": 1,
          "toy_kv_fraction": 0.25}
PHI, N, H, H_KV, D_H = 0.25, 48, 32, 4, 128
KV_TOKEN_LAYER = 2 * H_KV * D_H * 2  # K and V, BF16 KV (b_kv = 2), one GPU


@pytest.fixture
def registered(monkeypatch):
    """The toy in the catalog for this test only (the catalog's lists restored after)."""
    monkeypatch.setattr(catalog, "ENTRIES", list(catalog.ENTRIES))
    monkeypatch.setattr(catalog, "_REGISTERED", dict(catalog._REGISTERED))
    catalog.register(toy.VARIANT, toy.APPLIES)


def _model(phi=PHI):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ms.from_hf_config({**CONFIG, "toy_kv_fraction": phi}, name=f"toy-{phi}")


def test_the_config_field_selects_the_toy(registered):
    m = _model()
    assert m.field("toy_kv_fraction") == PHI
    assert catalog.base(m) is toy.VARIANT
    assert [v.name for v, _ in catalog.kinds(m)] == ["toy"]
    assert catalog.base(_model(0.0)).name == "gqa"  # without the field: plain GQA


def test_predict_reads_phi_of_the_kv_in_decode(registered):
    """Decode attention of B requests at context L per layer: the KV read, B phi L 2 h_kv d_h
    b_kv, plus the queries read and outputs written, 2 B h d_h b_a; 4 B h phi L d_h FLOPs."""
    B, L = 64, 4096
    r = ms.predict(_model(), "h200", ms.Deployment(), Workload("decode", batch=B, context=L))
    work = r["work_per_layer"]["attention_core"]
    assert work["hbm_bytes"] == B * PHI * L * KV_TOKEN_LAYER + 2 * B * H * D_H * 2 == 135266304
    assert work["flop"] == 4 * B * H * PHI * L * D_H


def test_a_batch_sweep_scales_the_kv_read(registered):
    step = ms.build_step(_model(), ms.load_hardware("h200"), ms.Deployment(),
                         Workload("decode", batch=1, context=4096))
    batch = np.array([1, 8, 256])
    got = step.evaluate(step.work["attention_core"]["hbm_bytes"], batch=batch)
    per_request = PHI * 4096 * KV_TOKEN_LAYER + 2 * H * D_H * 2
    np.testing.assert_array_equal(got, batch * per_request)


def test_memory_reports_phi_of_the_kv(registered):
    """Per request: N phi L tokens of 2 h_kv d_h b_kv (the toy keeps no paged-block tail)."""
    from moesym.memory.capacity import memory_report

    r = memory_report(_model(), ms.load_hardware("h200"), ms.Deployment(),
                      Workload("decode", batch=8, context=4096))
    assert r["kv_bytes_per_token"] == N * PHI * KV_TOKEN_LAYER == 24576
    assert r["kv_bytes_per_request"] == N * PHI * 4096 * KV_TOKEN_LAYER == 100663296


def test_derive_halves_the_context_that_fills_memory_when_phi_doubles(registered):
    """``derive solve --for context --equal memory_used hbm_capacity``: memory per GPU is the
    fixed bytes F (weights, activations, buffers: none depend on the context) plus the KV,
    B N phi L 2 h_kv d_h b_kv, so L* = (M - F) / (B N phi 2 h_kv d_h b_kv): doubling phi halves
    L* (its closed form, not rounded to whole tokens)."""
    from moesym.derive.solve import solve

    hw, dep = ms.load_hardware("h200"), ms.Deployment()
    wl = Workload("decode", batch=64, context=4096)
    one, two = (solve(_model(phi), hw, dep, wl, "context", equal=("memory_used", "hbm_capacity"))
                for phi in (PHI, 2 * PHI))
    assert one.closed_value / two.closed_value == pytest.approx(2, rel=1e-12)
    assert one.value > 4096  # the weights leave room for more than the workload's context


def test_a_toml_spec_carries_the_field(registered, tmp_path):
    spec = tmp_path / "toy.toml"
    spec.write_text('name = "toy"\nsource = "test"\nhidden_size = 2048\nvocab_size = 151936\n'
                    'num_layers = 48\nnum_heads = 32\nnum_kv_heads = 4\nhead_dim = 128\n'
                    'num_experts = 128\nexperts_per_token = 8\nmoe_intermediate_size = 768\n'
                    'toy_kv_fraction = 0.25\n')
    m = ms.load_model(spec)
    assert catalog.base(m) is toy.VARIANT and m.field("toy_kv_fraction") == PHI


def test_without_the_entry_the_field_is_unknown(tmp_path):
    """An unregistered variant's field is an unknown key, as any other."""
    from moesym.errors import SpecError

    spec = tmp_path / "toy.toml"
    spec.write_text('name = "toy"\nsource = "t"\nhidden_size = 8\nvocab_size = 8\n'
                    'num_layers = 1\nnum_heads = 1\ntoy_kv_fraction = 0.25\n')
    with pytest.raises(SpecError, match="unknown key.*toy_kv_fraction"):
        ms.load_model(spec)


def test_sliding_and_linear_layers_split_the_layers_three_ways():
    """A hybrid with both gated DeltaNet and sliding-window layers (Qwen3-Next's shapes with 6 of
    its 12 full-attention layers windowed at 512): the layers are 6 full, 6 windowed and 36
    DeltaNet, in the step's attention core as in its memory. Decode at B = 8, L = 4096, one
    GPU: a full layer reads B L 2 h_kv d_h b_kv of KV plus 2 B h d_h b_a of queries and outputs,
    a windowed one B min(L, 512) of KV, a DeltaNet layer 2 B (h_v d_k d_v 4 + (2 h_k d_k +
    h_v d_v) (conv - 1) b_a) of state. (Before the attention components the windowed share was
    taken out of the full-attention layers only, 6/48 x 12/48 of them.)"""
    from dataclasses import replace

    from moesym.memory.capacity import memory_report

    m = replace(ms.load_model("qwen3-next-80b-a3b"), sliding_window=512, sliding_layers=6)
    assert [(v.name, str(s)) for v, s in catalog.kinds(m)] == [("gqa", "1/8"), ("gdn", "3/4"),
                                                              ("sliding", "1/8")]
    B, L, W = 8, 4096, 512
    kv = 2 * 2 * 256 * 2  # 2 KV heads of 256, K and V, BF16
    queries = 2 * B * 16 * 256 * 2  # 16 query heads of 256
    state = 32 * 128 * 128 * 4 + (2 * 16 * 128 + 32 * 128) * 3 * 2  # h_v d_k d_v fp32, conv 4
    wl = Workload("decode", batch=B, context=L)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = ms.predict(m, "h200", ms.Deployment(), wl)
        mem = memory_report(m, ms.load_hardware("h200"), ms.Deployment(), wl)
    full, window, delta = B * L * kv + queries, B * W * kv + queries, 2 * B * state
    assert r["work_per_layer"]["attention_core"]["hbm_bytes"] == pytest.approx(
        (6 * full + 6 * window + 36 * delta) / 48, rel=1e-12)
    tail = 16 / 2  # half a paged block of 16 tokens per request and layer
    assert mem["kv_bytes_per_request"] == pytest.approx(
        6 * (L + tail) * kv + 6 * (W + tail) * kv + 36 * state, rel=1e-12)
