"""Memory model (issue 6): hand derivations, seed 002's worked example, properties, CLI errors."""

from __future__ import annotations

import json

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from moesym.attention.counts import total_params
from moesym.cli import main
from moesym.memory import (
    MemoryOptions,
    memory_model,
    memory_report,
    replication_factors,
    routed_expert_params,
    solve_max,
    weight_bytes_per_param,
    weights_breakdown,
)
from moesym.memory.capacity import CONTRACT_KEYS, max_batch, max_context
from moesym.specs.deployment import Deployment, Workload
from moesym.specs.hardware import load_hardware
from moesym.readers.model import load_model
from moesym.symbolic.symbols import S
from moesym.terms.dims import symbolic_dims

FP8 = 1 + 4 / (128 * 128)  # fp8 element + one fp32 scale per 128 x 128 block
BF16 = 2


@pytest.fixture(scope="module")
def v3():
    return load_model("deepseek-v3")


@pytest.fixture(scope="module")
def h800():
    return load_hardware("h800")


# ---------------------------------------------------------------- hand derivations
@pytest.mark.parametrize("ep", [32, 128])
def test_deepseek_v3_fp8_weights_per_rank(v3, h800, ep):
    """DeepSeek-V3 (arXiv:2412.19437 / config.json shapes), FP8, DP attention (tp = 1), EP = GPUs."""
    d, de, dff, V = 7168, 2048, 18432, 129280
    routed = 58 * (256 // ep) * 3 * d * de * FP8  # 58 MoE layers x local experts x (w1, w2, w3)
    shared = 58 * 3 * d * de * FP8  # one shared expert per MoE layer, not EP-sharded
    dense = 3 * 3 * d * dff * FP8  # first 3 layers dense
    attn_per_layer = (d * 1536  # wq_a
                      + 1536 * 128 * (128 + 64)  # wq_b
                      + d * (512 + 64)  # wkv_a
                      + 512 * 128 * (128 + 128)  # wkv_b
                      + 128 * 128 * d)  # wo
    attention = 61 * attn_per_layer * FP8
    router = 58 * 256 * d * BF16
    norms = (61 * (2 * d + 1536 + 512) + d) * BF16
    embed_and_head = 2 * V * d * BF16
    expected = routed + shared + dense + attention + router + norms + embed_and_head
    r = memory_report(v3, h800, Deployment(gpus=ep, ep=ep, weights="fp8"),
                      Workload("decode", batch=64, context=4096))
    assert r["weights_breakdown"]["routed_experts"] == pytest.approx(routed, rel=1e-12)
    assert r["weights_bytes"] == pytest.approx(expected, rel=1e-12)
    # EP32: 20.44 GB of routed experts, 39.52 GB in all; EP128: 5.11 GB and 24.19 GB
    assert r["weights_bytes"] / 1e9 == pytest.approx({32: 39.52, 128: 24.19}[ep], abs=0.01)


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b", "qwen3-8b",
                                  "qwen3-235b-a22b"])
def test_unsharded_parameter_count_matches_model(name):
    m = load_model(name)
    D = symbolic_dims()
    w = weights_breakdown(D, mla=m.is_mla, q_lora=m.q_lora_rank > 0,
                          tie_embeddings=m.tie_embeddings, n_mtp_layers=0)
    ones = {D.tp: 1, D.ep: 1, D.gpus: 1, D.redundant: 0, D.w_bytes: 1, S.w_bytes_expert: 1, S.w_bytes_dense: 1,
            S.w_bytes_hp: 1, D.hidden: m.hidden_size, D.vocab: m.vocab_size, D.heads: m.num_heads,
            D.kv_heads: m.num_kv_heads or m.num_heads, D.head_dim: m.head_dim,
            D.q_lora: m.q_lora_rank, D.kv_lora: m.kv_lora_rank, D.qk_nope: m.qk_nope_head_dim,
            D.qk_rope: m.qk_rope_head_dim, D.v_head: m.v_head_dim, D.experts: max(m.num_experts, 1),
            D.moe_inter: m.moe_intermediate_size, D.shared_inter: m.shared_intermediate_size,
            D.dense_inter: m.dense_intermediate_size,
            S.n_moe_layers: m.moe_layers if m.is_moe else 0, S.n_dense_layers: m.dense_layers}
    total = sum(v.xreplace(ones) for v in w.values())
    assert float(total) == pytest.approx(total_params(m), rel=1e-12)


def test_kv_bytes_per_token_mla_and_gqa(v3, h800):
    wl = Workload("decode", batch=1, context=4096)
    r = memory_report(v3, h800, Deployment(gpus=8, ep=8, weights="fp8"), wl)
    assert r["kv_bytes_per_token"] == 61 * (512 + 64) * 2  # latent + rope, bf16, not TP-sharded
    r = memory_report(v3, h800, Deployment(gpus=8, tp=8, weights="fp8", kv="fp8"), wl)
    assert r["kv_bytes_per_token"] == 61 * 576 * 1
    q = load_model("qwen3-30b-a3b")
    h100 = load_hardware("h100")
    assert memory_report(q, h100, Deployment(), wl)["kv_bytes_per_token"] == 48 * 2 * 4 * 128 * 2
    # TP2 shards the 4 KV heads; TP8 > 4 KV heads replicates one head per rank
    assert memory_report(q, h100, Deployment(gpus=2, tp=2), wl)["kv_bytes_per_token"] == 48 * 2 * 2 * 128 * 2
    assert memory_report(q, h100, Deployment(gpus=8, tp=8), wl)["kv_bytes_per_token"] == 48 * 2 * 1 * 128 * 2


def test_kv_per_request_paged_and_sliding():
    g = load_model("gpt-oss-120b")
    h = load_hardware("h100")
    per_layer = 2 * 8 * 64 * 2
    r = memory_report(g, h, Deployment(weights="fp4"), Workload("decode", batch=1, context=4096),
                      MemoryOptions(block_size=16))
    # 18 full layers hold the context, 18 sliding layers the 128-token window; +8 tokens tail each
    assert r["kv_bytes_per_request"] == (18 * (4096 + 8) + 18 * (128 + 8)) * per_layer
    assert r["kv_bytes_per_token"] == 18 * per_layer


def test_v4_pro_compressed_kv_one_million_tokens():
    """Seed 002 section 3: V4-Pro at 1M tokens, 29 CSA + 31 HCA (ratio 128) + 1 SWA layer, every
    layer a 128-entry window, entries of 448 FP8 + 64 BF16 bytes: CSA 29 x 250,128 x 576 = 4.18
    GB. The seed's indexer is FP4 (0.5 byte per element, 0.47 GB); moesym keeps vLLM's default
    FP8 indexer keys with a 4-byte scale (132 bytes each) and adds the compressors' fp32 state
    (CSA 8 tokens x (4 x 512 + 4 x 128), HCA 128 tokens x 2 x 512, 4 bytes each)."""
    L = 1_000_000
    csa = 29 * (128 + L / 4) * (448 * 1 + 64 * 2)
    hca = 31 * (128 + L / 128) * 576
    swa = 128 * 576
    assert csa / 1e9 == pytest.approx(4.18, abs=0.005)
    assert (csa + hca + swa + 29 * L / 4 * 128 * 0.5) / 1e9 == pytest.approx(4.79, rel=0.005)
    state = 29 * 8 * (4 * 512 + 4 * 128) * 4 + 31 * 128 * 2 * 512 * 4
    r = memory_report(load_model("deepseek-v4-pro"), load_hardware("b200"),
                      Deployment(gpus=8, ep=8, weights="fp8", kv="fp8"),
                      Workload("decode", batch=1, context=L))
    assert r["kv_bytes_per_request"] == pytest.approx(csa + hca + swa + 29 * L / 4 * 132 + state)


# ---------------------------------------------------------------- properties
@settings(max_examples=30, deadline=None)
@given(st.integers(0, 7), st.integers(0, 7), st.sampled_from([0, 32]))
def test_more_ep_never_raises_expert_memory(a, b, redundant):
    ep1, ep2 = sorted((2 ** a, 2 ** b))
    D = symbolic_dims()
    e = routed_expert_params(D).xreplace({D.experts: 256, D.redundant: redundant, D.hidden: 7168,
                                          D.moe_inter: 2048})
    assert e.xreplace({D.gpus: ep2, D.ep: ep2}) <= e.xreplace({D.gpus: ep1, D.ep: ep1})


@pytest.mark.parametrize("name,hw,dep", [
    ("deepseek-v3", "h800", Deployment(gpus=128, ep=128, weights="fp8")),
    ("qwen3-30b-a3b", "h100", Deployment()),
    ("gpt-oss-120b", "h100", Deployment(weights="fp4")),
    ("qwen3-8b", "h100", Deployment(gpus=2, tp=2)),
])
def test_max_batch_never_rises_with_context(name, hw, dep):
    m, h = load_model(name), load_hardware(hw)
    last = None
    for L in (128, 1024, 4096, 16384, 65536):
        b = max_batch(m, h, dep, Workload("decode", batch=1, context=L), scope="rank")
        assert last is None or b <= last
        last = b


def test_max_batch_is_the_edge_of_fitting(v3, h800):
    dep = Deployment(gpus=128, ep=128, weights="fp8")
    b = max_batch(v3, h800, dep, Workload("decode", batch=1, context=4096), scope="rank")
    assert 100 < b < 250  # ~169 at 4096 tokens on H800 EP128 (DeepEP LL buffer grows past 128)
    assert memory_report(v3, h800, dep, Workload("decode", batch=b, context=4096))["fits"]
    assert not memory_report(v3, h800, dep, Workload("decode", batch=b + 1, context=4096))["fits"]
    L = max_context(v3, h800, dep, Workload("decode", batch=b, context=4096))
    assert L >= 4096
    assert not memory_report(v3, h800, dep, Workload("decode", batch=b, context=L + 64))["fits"]


def test_replication_factors_symbolic_mla():
    """Sum over GPUs of each per-GPU component = factor x the component unsharded."""
    D = symbolic_dims()
    per_gpu = weights_breakdown(D, mla=True, n_mtp_layers=0)
    single = {D.tp: 1, D.ep: 1, D.gpus: 1, D.redundant: 0}
    for name, factor in replication_factors(D).items():
        if factor is None:
            continue
        lhs = D.gpus * per_gpu[name]
        rhs = factor * per_gpu[name].xreplace(single)
        assert sp.simplify(lhs - rhs) == 0, name


@pytest.mark.parametrize("gpus,tp,ep", [(8, 2, 8), (16, 4, 8), (4, 4, 4)])
def test_replication_gqa_numeric(gpus, tp, ep):
    """Qwen3-235B (4 KV heads): with tp <= 4 every component obeys the derived factor."""
    m, h = load_model("qwen3-235b-a22b"), load_hardware("h200")
    wl = Workload("decode", batch=1, context=1024)
    r = memory_report(m, h, Deployment(gpus=gpus, tp=tp, ep=ep, weights="fp8"), wl)
    r1 = memory_report(m, h, Deployment(gpus=1, tp=1, ep=1, weights="fp8"), wl)
    D = symbolic_dims()
    nums = {D.gpus: gpus, D.tp: tp, D.experts: m.num_experts, D.redundant: 0}
    total_sharded = 0.0
    for name, factor in replication_factors(D).items():
        if factor is None:
            continue
        expect = float(factor.xreplace(nums)) * r1["weights_breakdown"][name]
        assert gpus * r["weights_breakdown"][name] == pytest.approx(expect, rel=1e-12), name
        total_sharded += expect
    assert gpus * r["weights_bytes"] == pytest.approx(total_sharded, rel=1e-12)


def test_fp4_on_hopper_doubles_expert_bytes():
    g = load_model("gpt-oss-120b")
    wl = Workload("decode", batch=1, context=1024)
    dep = Deployment(weights="fp4")
    hopper = memory_report(g, load_hardware("h100"), dep, wl)
    blackwell = memory_report(g, load_hardware("b200"), dep, wl)
    assert hopper["formats"]["routed_experts"] == "fp8"
    assert blackwell["formats"]["routed_experts"] == "fp4"
    ratio = hopper["weights_breakdown"]["routed_experts"] / blackwell["weights_breakdown"]["routed_experts"]
    # data bytes double (1 vs 0.5); scales differ (fp32 per 128x128 vs E8M0 per 32)
    assert ratio == pytest.approx(weight_bytes_per_param("fp8") / weight_bytes_per_param("fp4"))
    assert 1.85 < ratio <= 2.0
    no_scales = MemoryOptions()
    assert no_scales.fp4_scale_group == 32


def test_batched_layout_workspace_exceeds_contiguous(v3, h800):
    wl = Workload("decode", batch=64, context=4096)
    c = memory_report(v3, h800, Deployment(gpus=32, ep=32, weights="fp8", layout="contiguous"), wl)
    b = memory_report(v3, h800, Deployment(gpus=32, ep=32, weights="fp8", layout="batched"), wl)
    # contiguous: 64 x 8 rows; batched: 8 local experts x 32 dispatchers x max(128, 64) rows
    assert c["workspace_breakdown"]["dispatch_buffer"] == pytest.approx(2 * 64 * 8 * 7168 * 1.03125)
    assert b["workspace_breakdown"]["dispatch_buffer"] == pytest.approx(2 * 8 * 32 * 128 * 7168 * 1.03125)


def test_mtp_and_prefill_add_memory(v3, h800):
    dep = Deployment(gpus=32, ep=32, weights="fp8")
    wl = Workload("decode", batch=32, context=4096)
    base = memory_report(v3, h800, dep, wl)
    mtp = memory_report(v3, h800, dep, wl, MemoryOptions(mtp_layers=1))
    assert mtp["weights_bytes"] > base["weights_bytes"]
    assert mtp["kv_bytes_per_request"] > base["kv_bytes_per_request"]
    assert mtp["activation_bytes"] >= base["activation_bytes"] + 32 * 129280 * 4
    mixed = memory_report(v3, h800, dep, wl, MemoryOptions(prefill_tokens=8192))
    assert mixed["activation_bytes"] > base["activation_bytes"]
    pre = memory_report(v3, h800, dep, Workload("prefill", tokens=16384, context=4096))
    assert pre["a2a"] == "deepep-normal" and pre["requests"] == 4


def test_solve_max_branches():
    x = S.batch
    assert solve_max(3 * x + sp.Max(10, 2 * x), x, 100) == pytest.approx(20.0)
    assert solve_max(3 * x + sp.Max(10, 2 * x), x, 40) == pytest.approx(8.0)
    assert solve_max(3 * x + sp.Max(10, 2 * x), x, 22) == pytest.approx(4.0)
    assert solve_max(x + 200, x, 100) == 0.0


def test_memory_model_numbers_match_expression_evalf(v3, h800):
    mm = memory_model(v3, h800, Deployment(gpus=32, ep=32, weights="fp8"),
                      Workload("decode", batch=16, context=2048))
    expr = mm.used_expr()
    by_evalf = float(expr.xreplace({s: sp.Float(v) for s, v in mm.values.items()}).evalf())
    assert mm.number(expr) == pytest.approx(by_evalf, rel=1e-12)


# ---------------------------------------------------------------- CLI
def test_cli_json_contract_keys(capsys):
    rc = main(["memory", "deepseek-v3", "--hardware", "h800", "--gpus", "128", "--weights", "fp8",
               "--batch", "64", "--context", "4096", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    for k in CONTRACT_KEYS:
        assert k in out
    assert isinstance(out["fits"], bool) and isinstance(out["max_batch"], int)
    assert out["kv_bytes_per_token"] == 70272


def test_cli_table(capsys):
    assert main(["memory", "qwen3-8b", "--hardware", "h100"]) == 0
    assert "max batch per GPU" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["memory", "no-such-model", "--hardware", "h100"],
    ["memory", "qwen3-8b", "--hardware", "no-such-gpu"],
    ["memory", "qwen3-30b-a3b", "--hardware", "h100", "--gpus", "4", "--ep", "3"],
    ["memory", "qwen3-30b-a3b", "--hardware", "h100", "--batch", "0"],
    ["memory", "qwen3-30b-a3b", "--hardware", "h100", "--phase", "train"],
    ["memory", "qwen3-8b", "--hardware", "h100", "--gpus", "3", "--tp", "3"],
    ["memory", "qwen3-8b", "--hardware", "h100", "--weights", "fp16"],
    ["memory", "qwen3-8b"],
])
def test_cli_bad_input_one_line(argv, capsys):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc != 0
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.slow
def test_memory_option_flags_override_engine_defaults():
    # raising the runtime reserve from 4% to 10% of H800's 80e9 bytes takes 4.8e9 bytes from the
    # free memory and nothing else; a bad key is a one-line error
    import json
    import subprocess
    import sys

    argv = [sys.executable, "-m", "moesym", "memory", "deepseek-v3", "--hardware", "h800",
            "--gpus", "32", "--ep", "32", "--weights", "fp8", "--batch", "64", "--json"]
    base = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    more = json.loads(subprocess.run(argv + ["--memory-option", "reserve_fraction=0.10"],
                                     capture_output=True, text=True, check=True).stdout)
    assert base["free_bytes"] - more["free_bytes"] == pytest.approx(0.06 * 80e9, rel=1e-9)
    bad = subprocess.run(argv + ["--memory-option", "nope=1"], capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--memory-option" in bad.stderr


@pytest.mark.slow
def test_memory_options_reach_predict_sweep_and_optimize(tmp_path, capsys):
    """--memory-option rides on the deployment: predict, sweep and optimize read it as memory
    does. The reserve is reserve_fraction x HBM capacity, so raising it from the default 0.04 to
    0.30 adds 0.26 x 80 GB on an H800."""
    import csv
    import json

    from moesym.cli import main

    base = ["deepseek-v3", "--hardware", "h800", "--gpus", "16", "--weights", "fp8"]
    opt = ["--memory-option", "reserve_fraction=0.3"]

    def predicted(extra):
        assert main(["predict", *base, "--phase", "decode", "--batch", "64", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["memory_bytes"]

    assert predicted(opt) - predicted([]) == pytest.approx(0.26 * 80e9, rel=1e-9)
    out = tmp_path / "s.csv"
    assert main(["sweep", *base, "--phase", "decode", "--batch", "64", "--out", str(out), *opt]) == 0
    capsys.readouterr()
    with out.open() as f:
        assert float(next(csv.DictReader(f))["memory_bytes"]) == pytest.approx(predicted(opt))

    def best(extra):
        assert main(["optimize", *base[:-2], "--gpus", "32", "--phase", "decode", "--context",
                     "4096", "--tpot-ms", "100", "--weights", "fp8", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["best"]["batch"]

    assert best(opt) < best([])  # memory binds the batch here: a larger reserve, a smaller one
