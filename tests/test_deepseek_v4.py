"""DeepSeek-V4 compressed attention (CSA / HCA, shared-KV MQA, grouped output projection,
hyper-connections): config parsing, parameters, cache and attention work, by hand.

The architecture facts used here are HF transformers 5.23.0's DeepseekV4Config defaults
(DeepSeek-V4-Flash-Base) and module shapes, and vLLM 0.33.0's DeepSeek-V4-Pro widths; each
expected number below is derived in the test from those shapes, not read from moesym."""

from __future__ import annotations

import subprocess
import sys

import pytest

from moesym.attention.counts import active_params, total_params
from moesym import Deployment, Workload, load_hardware, load_model
from moesym.errors import SpecError
from moesym.model.predictor import predict
from moesym.readers.model import from_hf_config
from moesym.terms.compressed import mean_prefill_keys

#: the config.json fields of DeepSeek-V4-Flash as transformers 5.23's DeepseekV4Config defaults
FLASH = {"model_type": "deepseek_v4", "vocab_size": 129280, "hidden_size": 4096,
         "moe_intermediate_size": 2048, "num_hidden_layers": 43, "num_attention_heads": 64,
         "num_key_value_heads": 1, "head_dim": 512, "q_lora_rank": 1024, "qk_rope_head_dim": 64,
         "num_experts_per_tok": 6, "n_routed_experts": 256, "n_shared_experts": 1,
         "hc_mult": 4, "sliding_window": 128, "o_groups": 8, "o_lora_rank": 1024,
         "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512,
         "num_nextn_predict_layers": 1,
         "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}}


def test_config_parses_as_compressed_attention_with_the_default_layer_rule():
    m = from_hf_config(FLASH, name="v4")
    assert m.attention == "compressed" and m.num_kv_heads == 1 and m.head_dim == 512
    # transformers' rule: 2 HCA, then for i in 0..40 CSA when i is odd: 20 CSA, 2 + 21 HCA
    assert (m.csa_layers, m.hca_layers) == (20, 23)
    assert (m.o_groups, m.o_lora_rank, m.hc_mult, m.index_topk) == (8, 1024, 4, 512)
    assert m.sliding_window == 128 and m.sliding_layers == 0
    builtin = load_model("deepseek-v4-flash")
    assert {f: getattr(m, f) for f in ("hidden_size", "num_layers", "csa_layers", "hca_layers",
                                       "num_experts", "moe_intermediate_size", "q_lora_rank")} \
        == {f: getattr(builtin, f) for f in ("hidden_size", "num_layers", "csa_layers",
                                             "hca_layers", "num_experts", "moe_intermediate_size",
                                             "q_lora_rank")}


def test_config_layer_kinds_from_layer_types_or_legacy_ratios():
    types = ["sliding_attention"] * 3 + ["compressed_sparse_attention"] * 30 + \
        ["heavily_compressed_attention"] * 10
    m = from_hf_config({**FLASH, "layer_types": types}, name="v4")
    assert (m.csa_layers, m.hca_layers) == (30, 10)
    # V4.1-style compress_ratios lists the MTP layer too (vLLM deepseek_v4_utils): dropped
    legacy = {k: v for k, v in FLASH.items() if k != "compress_rates"}
    m = from_hf_config({**legacy, "compress_ratios": [0, 4, 128] * 14 + [4, 0]}, name="v4")
    assert (m.csa_layers, m.hca_layers) == (15, 14)
    with pytest.raises(SpecError, match="layer_types entry 'full_attention'"):
        from_hf_config({**FLASH, "layer_types": ["full_attention"] * 43}, name="v4")
    with pytest.raises(SpecError, match=r"compress ratio\(s\) \[16\]"):
        from_hf_config({**legacy, "compress_ratios": [16] * 43}, name="v4")


def _flash_params_by_hand() -> tuple[float, float]:
    """Total and activated parameters of the transformers DeepseekV4 modules at Flash's shapes
    (norm vectors of the two block norms included, as moesym counts them)."""
    d, L, V, h, hd, rq, g, dg = 4096, 43, 129280, 64, 512, 1024, 8, 1024
    csa, hca, n = 20, 23, 4
    attn = L * (d * rq + rq * h * hd + d * hd + (h * hd // g) * g * dg + g * dg * d)
    compressors = csa * (2 * d * 2 * hd) + hca * (2 * d * hd)
    indexer = csa * (2 * d * 2 * 128 + rq * 64 * 128 + d * 64)
    mhc = L * 2 * (2 + n) * n * n * d
    expert = 3 * d * 2048
    moe = L * (256 * expert + expert + 256 * d)
    total = attn + compressors + indexer + mhc + moe + 2 * V * d + L * 2 * d + d
    return total, total - L * (256 - 6) * expert


def test_parameters_match_the_module_shapes_and_the_published_sizes():
    total, active = _flash_params_by_hand()
    m = load_model("deepseek-v4-flash")
    assert total_params(m) == pytest.approx(total, rel=1e-12)
    assert active_params(m) == pytest.approx(active, rel=1e-12)
    # the sizes DeepSeek's model cards announce (deepseek-ai/DeepSeek-V4-Flash and -Pro on
    # HuggingFace: 284B total / 13B activated, 1.6T / 49B; recalled, this machine cannot fetch them)
    assert total == pytest.approx(284e9, rel=0.01)
    pro = load_model("deepseek-v4-pro")
    assert total_params(pro, include_mtp=True) == pytest.approx(1.6e12, rel=0.01)
    assert active_params(pro) == pytest.approx(49e9, rel=0.03)


def _decode(name, context, batch=16, gpus=8, **dep):
    return predict(load_model(name), load_hardware("b200"),
                   Deployment(gpus=gpus, ep=gpus, weights="fp8", kv="fp8", **dep),
                   Workload("decode", batch=batch, context=context))


def test_decode_attention_reads_the_window_and_the_compressed_entries():
    """Pro at 128K: each request reads, per CSA layer, 128 window + min(L / 4, 1024) entries and
    the indexer's L / 4 keys (128 FP8 + 4 scale bytes) with fp32 logits written and read; per
    HCA layer 128 + L / 128 entries; the sliding-only layer its 128. An entry is 448 FP8 + 64
    BF16 bytes; the q / o rows are 128 heads x 512 x 2 (BF16) each. The average layer weights
    CSA 29 / 61, HCA 31 / 61, sliding 1 / 61."""
    L, b = 131072, 16
    work = _decode("deepseek-v4-pro", L, b)["work_per_layer"]["attention_core"]
    entry, rows = 448 + 64 * 2, 2 * 128 * 512 * 2
    csa = b * (128 + 1024) * entry + b * rows + b * (L / 4) * 132 + 2 * 4 * b * (L / 4)
    hca = b * (128 + L / 128) * entry + b * rows
    swa = b * 128 * entry + b * rows
    assert work["hbm_bytes"] == pytest.approx((29 * csa + 31 * hca + swa) / 61)
    flops_csa = 4 * b * 128 * (128 + 1024) * 512 + 2 * b * 64 * (L / 4) * 128
    flops_hca = 4 * b * 128 * (128 + L / 128) * 512
    flops_swa = 4 * b * 128 * 128 * 512
    assert work["flop"] == pytest.approx((29 * flops_csa + 31 * flops_hca + flops_swa) / 61)


def test_long_context_costs_little_more_than_short():
    """The point of CSA / HCA: from 8K to 512K context (64x) the decode step grows by the
    indexer and HCA's L / 128 entries, not by the context; the KV memory grows by L / 4."""
    short, long = _decode("deepseek-v4-pro", 8192), _decode("deepseek-v4-pro", 524288)
    assert long["tpot_s"] < 1.5 * short["tpot_s"]
    assert long["per_layer_s"]["attention_core"] < 8 * short["per_layer_s"]["attention_core"]


def test_cache_memory_by_hand():
    """KV of one request at context L, Pro with FP8 KV: every layer 128 window entries, CSA
    L / 4 entries and L / 4 indexer keys, HCA L / 128 entries, and the compressors' fp32 state
    (CSA: 8 tokens x 4 x 512 and its indexer's 8 x 4 x 128; HCA: 128 x 2 x 512); an entry is
    448 FP8 + 64 BF16 bytes, an indexer key 128 + 4. Per token beyond the window:
    (29 / 4 + 31 / 128) entries + 29 / 4 keys."""
    from moesym.memory import memory_report

    L, entry = 65536, 448 + 128
    per_request = (61 * 128 + 29 * L / 4 + 31 * L / 128) * entry + 29 * L / 4 * 132 \
        + 29 * (8 * 2048 * 4 + 8 * 512 * 4) + 31 * 128 * 1024 * 4
    r = memory_report(load_model("deepseek-v4-pro"), load_hardware("b200"),
                      Deployment(gpus=8, ep=8, weights="fp8", kv="fp8"),
                      Workload("decode", batch=8, context=L))
    assert r["kv_bytes_per_request"] == pytest.approx(per_request)
    assert r["kv_bytes_per_token"] == pytest.approx((29 / 4 + 31 / 128) * entry + 29 / 4 * 132)


@pytest.mark.parametrize("kind", ["swa", "csa", "hca"])
@pytest.mark.parametrize("cached", [0.0, 0.25, 0.9])
def test_mean_prefill_keys_is_the_average_over_positions(kind, cached):
    """Brute force: average over the computed query positions p = F L + 1 .. L (a prefix-cache
    hit F skips the first F L) of min(p, 128) (+ min(p / 4, 1024) for CSA, + p / 128 for HCA)."""
    import numpy as np

    m = load_model("deepseek-v4-pro")
    for L in (100, 3000, 100000):
        p = np.arange(int(cached * L) + 1, L + 1, dtype=float)
        keys = np.minimum(p, 128)
        if kind == "csa":
            keys = keys + np.minimum(p / 4, 1024)
        elif kind == "hca":
            keys = keys + p / 128
        got = float(mean_prefill_keys(m, L, kind, cached))
        assert got == pytest.approx(keys.mean(), rel=0.01)


@pytest.mark.slow
def test_prefix_hit_computes_the_prompt_tail():
    """A prefix hit F on 16K-token prompts: projections and experts run on (1 - F) of the
    tokens; the attention of the computed tail reads more entries per query than the prompt's
    average (later positions), so attention per computed token rises."""
    def run(hit):
        return predict(load_model("deepseek-v4-flash"), load_hardware("b200"),
                       Deployment(gpus=8, ep=8, weights="fp8", kv="fp8"),
                       Workload("prefill", tokens=16384, context=16384, prefix_hit=hit))
    full, half = run(0.0), run(0.5)
    wf, wh = full["work_per_layer"], half["work_per_layer"]
    assert wh["attention_proj"]["flop"] == pytest.approx(wf["attention_proj"]["flop"] / 2)
    assert wf["attention_core"]["flop"] / 2 < wh["attention_core"]["flop"] < \
        wf["attention_core"]["flop"]
    assert half["step_time_s"] < full["step_time_s"]


def test_tensor_parallel_shards_the_heads_and_output_groups():
    """TP 8 within a node splits q_b, wo_a and wo_b by 8: the attention weights per GPU drop by
    7 / 8 of those (FP8: one byte each and a 4-byte scale per 128 x 128 block); q_a + kv, the indexer query and the BF16 compressors
    stay replicated."""
    from moesym.memory import memory_report

    m, hw = load_model("deepseek-v4-pro"), load_hardware("b200")
    wl = Workload("decode", batch=8, context=4096)
    r1 = memory_report(m, hw, Deployment(gpus=8, ep=8, weights="fp8"), wl)
    r8 = memory_report(m, hw, Deployment(gpus=8, ep=8, tp=8, weights="fp8"), wl)
    sharded = 61 * (1536 * 128 * 512 + 128 * 512 * 1024 + 16 * 1024 * 7168)
    w1, w8 = r1["weights_breakdown"], r8["weights_breakdown"]
    assert w1["attention_sharded"] - w8["attention_sharded"] == pytest.approx(
        sharded * 7 / 8 * (1 + 4 / 128 ** 2))
    assert w1["attention_replicated"] == w8["attention_replicated"]


def test_context_parallelism_is_a_one_line_error():
    p = subprocess.run([sys.executable, "-m", "moesym", "predict", "deepseek-v4-flash",
                        "--hardware", "h200", "--gpus", "8", "--phase", "prefill", "--tokens",
                        "8192", "--context", "8192", "--cp", "2"], capture_output=True, text=True)
    assert p.returncode == 2
    lines = [x for x in p.stderr.splitlines() if "warning" not in x]
    assert len(lines) == 1 and "compressed attention" in lines[0] and "--cp" in lines[0]


def test_cli_names_the_attention_kernels(cli_json):
    out = cli_json(["predict", "deepseek-v4-flash", "--hardware", "h200", "--gpus", "8",
                    "--phase", "decode", "--batch", "32", "--context", "32768"])
    kernels = out["per_kernel_s"]
    for k in ("attention_csa", "attention_hca", "indexer", "o_a_proj", "csa_compressor"):
        assert kernels[k] > 0


def test_mtp_draft_layer_attends_its_window_only():
    """vLLM gives V4's MTP layer compress ratio 0: the draft pass costs the same at 8K and at
    512K context (its window holds 128 entries either way), and less than an average layer of
    the main model at 512K (which reads compressed entries and runs the indexer)."""
    from dataclasses import replace

    from moesym.symbolic.compile import evaluate
    from moesym.numbers.bindings import bindings, workload_values
    from moesym.model.draft import draft_s
    from moesym.symbolic.symbols import by_name
    from moesym.terms.dims import symbolic_dims
    from moesym.kernels.registry import time_model

    m, hw = load_model("deepseek-v4-flash"), load_hardware("b200")
    dep = Deployment(gpus=8, ep=8, weights="fp8", kv="fp8", mtp=1, accept=0.8)
    timing = time_model(dep.timing, hw)

    def draft(model, L):
        wl = Workload("decode", batch=32, context=L)
        vals = {**bindings(model, hw, dep, wl),
                **{by_name(k): v for k, v in workload_values(wl).items()}}
        return float(evaluate(draft_s(model, dep, wl, symbolic_dims(), timing, hw), vals, {}))

    assert draft(m, 524288) == pytest.approx(draft(m, 8192), rel=1e-12)
    # the same draft as a model whose every layer is sliding-only (what the MTP layer is)
    swa = replace(m, csa_layers=0, hca_layers=0)
    assert draft(m, 524288) == pytest.approx(draft(swa, 524288), rel=1e-12)


def test_residual_holds_the_four_hyper_connection_streams():
    """Seed 002 section 4: the mHC residual is hc_mult = 4 streams of d in fp32 per token; by
    default the memory model takes the model's streams (a plain residual is 1)."""
    from moesym.memory import MemoryOptions, memory_report

    m, hw = load_model("deepseek-v4-pro"), load_hardware("b200")
    dep, wl = Deployment(gpus=8, ep=8, weights="fp8", kv="fp8"), Workload("decode", batch=64,
                                                                          context=4096)
    own = memory_report(m, hw, dep, wl)["activation_bytes"]
    one = memory_report(m, hw, dep, wl, MemoryOptions(hc_mult=1))["activation_bytes"]
    assert own - one == pytest.approx(64 * 3 * 7168 * 4)


def test_tensor_parallelism_must_divide_the_output_groups():
    """vLLM shards wo_a by output group (n_local_groups = o_groups / tp): Flash's 8 groups take
    TP 1, 2, 4 or 8; --tp 16 is a one-line error and a sweep leaves that point out."""
    with pytest.raises(SpecError, match="`tp` 16 does not divide the 8 output-projection groups"):
        Deployment(gpus=16, tp=16, ep=16).check_model(load_model("deepseek-v4-flash"))
    Deployment(gpus=16, tp=8, ep=16).check_model(load_model("deepseek-v4-flash"))
