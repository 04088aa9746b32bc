"""Model and hardware specs: published parameter counts, KV sizes, HF parsing and bad input."""

import json

import pytest

from moesym.attention.counts import (active_params, attention_params, kv_elements_per_token_layer,
                                    total_params)
from moesym import load_hardware, load_model
from moesym.errors import SpecError
from moesym.specs.deployment import Deployment
from moesym.readers.model import from_hf_config

# Published totals (source in each catalog file): (total, activated, total tol, active tol)
PUBLISHED = {
    # DeepSeek-V3 technical report: 671B total, 37B activated (main model, without MTP)
    "deepseek-v3": (671e9, 37e9),
    # Qwen3 model cards
    "qwen3-30b-a3b": (30.5e9, 3.3e9),
    "qwen3-235b-a22b": (235e9, 22e9),
    # Mixtral of Experts, arXiv:2401.04088
    "mixtral-8x7b": (46.7e9, 12.9e9),
    "qwen3-8b": (8.2e9, 8.2e9),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_published(name):
    total, active = PUBLISHED[name]
    m = load_model(name)
    assert total_params(m) == pytest.approx(total, rel=0.01)
    assert active_params(m) == pytest.approx(active, rel=0.03)


def test_deepseek_v3_counts_by_hand():
    # Routed experts alone: 58 MoE layers x 256 experts x 3 x 7168 x 2048
    m = load_model("deepseek-v3")
    assert m.moe_layers * m.num_experts * m.expert_params() == 58 * 256 * 3 * 7168 * 2048
    # MLA attention per layer: q_a, q_b, kv_a, kv_b, o (+ two latent norms)
    attn = (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256
            + 128 * 128 * 7168)
    assert attention_params(m) == attn


def test_kv_bytes_per_token():
    ds = load_model("deepseek-v3")
    assert ds.num_layers * kv_elements_per_token_layer(ds) * 2 == 61 * 576 * 2
    q = load_model("qwen3-30b-a3b")
    assert q.num_layers * kv_elements_per_token_layer(q) * 2 == 48 * 2 * 4 * 128 * 2


HF_DEEPSEEK = {
    "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128, "vocab_size": 129280,
    "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "n_group": 8,
    "topk_group": 4, "num_nextn_predict_layers": 1,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
}


def test_hf_deepseek_fields_and_spellings():
    m = from_hf_config(HF_DEEPSEEK)
    assert (m.attention, m.num_experts, m.dense_layers, m.moe_layers) == ("mla", 256, 3, 58)
    assert (m.expert_groups, m.groups_per_token, m.mtp_layers, m.weight_dtype) == (8, 4, 1, "fp8")
    assert m.shared_intermediate_size == 2048
    alt = dict(HF_DEEPSEEK)
    alt["num_routed_experts"] = alt.pop("n_routed_experts")
    alt["num_shared_experts"] = alt.pop("n_shared_experts")
    assert total_params(from_hf_config(alt)) == total_params(m)
    # moe_layer_freq 2: of layers 3..60 every second one is MoE -> 29 MoE layers
    assert from_hf_config({**HF_DEEPSEEK, "moe_layer_freq": 2}).moe_layers == 29


def test_hf_qwen_moe_layer_rules():
    base = {"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
            "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
            "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
            "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": []}
    assert from_hf_config(base).moe_layers == 48
    assert from_hf_config({**base, "mlp_only_layers": [0, 47]}).dense_layers == 2
    assert from_hf_config({**base, "decoder_sparse_step": 2}).moe_layers == 24
    # Qwen2-MoE style shared expert
    q2 = from_hf_config({**base, "shared_expert_intermediate_size": 5632})
    assert q2.shared_intermediate_size == 5632


def test_hf_mixtral_and_nested_text_config():
    mixtral = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "vocab_size": 32000, "intermediate_size": 14336,
               "num_local_experts": 8, "num_experts_per_tok": 2}
    m = from_hf_config(mixtral)
    assert (m.num_experts, m.moe_intermediate_size, m.head_dim) == (8, 14336, 128)
    assert total_params(m) == pytest.approx(46.7e9, rel=0.01)
    nested = {"model_type": "llama4", "text_config": {**mixtral, "num_local_experts": 16,
                                                      "num_experts_per_tok": 1,
                                                      "interleave_moe_layer_step": 2}}
    n = from_hf_config(nested)
    assert (n.num_experts, n.moe_layers, n.shared_intermediate_size) == (16, 16, 14336)


def test_hf_fp4_quantization():
    gptoss = {"hidden_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64,
              "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088,
              "intermediate_size": 2880, "num_local_experts": 128, "num_experts_per_tok": 4,
              "sliding_window": 128,
              "layer_types": ["sliding_attention", "full_attention"] * 18,
              "quantization_config": {"quant_method": "mxfp4"}}
    m = from_hf_config(gptoss)
    assert (m.weight_dtype, m.sliding_layers, m.sliding_window) == ("fp4", 18, 128)


@pytest.mark.parametrize("change, field", [
    ({"hidden_size": None}, "hidden_size"),
    ({"num_experts_per_tok": None}, "num_experts_per_tok"),
    ({"hidden_size": -5}, "hidden_size"),
    ({"num_experts_per_tok": 300}, "experts_per_token"),
    ({"n_group": 7}, "expert_groups"),
    ({"quantization_config": {"quant_method": "gptq"}}, "quantization_config"),
    ({"kv_lora_rank": "big"}, "kv_lora_rank"),
])
def test_hf_bad_fields_are_named(change, field):
    cfg = {**HF_DEEPSEEK, **change}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(SpecError, match=field):
        from_hf_config(cfg)


def test_bad_model_files(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(SpecError, match="malformed JSON"):
        load_model(bad)
    gqa = tmp_path / "gqa.json"
    gqa.write_text(json.dumps({"hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 32,
                               "num_key_value_heads": 5, "vocab_size": 10, "intermediate_size": 8}))
    with pytest.raises(SpecError, match="num_kv_heads"):
        load_model(gqa)
    with pytest.raises(SpecError, match="unknown model"):
        load_model("no-such-model")


def test_every_builtin_config_shape_parses():
    from moesym import builtin_models

    for name in builtin_models():
        m = load_model(name)
        assert m.source and total_params(m) > 0


def test_hardware_files_load_and_units():
    from moesym import builtin_hardware

    names = builtin_hardware()
    for required in ("h100", "h800", "h200", "h20", "b200"):
        assert required in names
    h = load_hardware("h100")
    assert h.hbm_bw_Bps == 3.35e12  # datasheet 3.35 TB/s, SI: no 1024 factors
    assert h.peak_flops("bf16") == 989e12 and h.peak_flops("fp8") == 1979e12
    assert h.scale_up_Bps == 450e9 and h.scale_out_Bps == 50e9
    assert load_hardware("h800").scale_up_Bps == 200e9
    assert load_hardware("gb200").scale_up_domain_gpus == 72
    assert h.compute_format("fp4") == "fp8" and load_hardware("b200").compute_format("fp4") == "fp4"
    for name in names:
        e = load_hardware(name).efficiency
        assert 0 < e.scale_up <= 1 and 0 < e.scale_out <= 1 and 0 < e.serving <= 1


GOOD_TOML = """name = "x"
source = "test"
sms = 132
gpus_per_node = 8
hbm_capacity_GB = 80
hbm_bandwidth_TBps = 3.35
[peak_TFLOPs]
bf16 = 989
[interconnect]
scale_up_GBps = 450
scale_out_GBps = 50
scale_up_domain_gpus = 8
[efficiency]
scale_up = 0.8
scale_out = 0.8
[latency_us]
kernel = 5
layer = 0
step = 100
scale_up = 3
scale_out = 10
"""


def test_good_hardware_file_loads(tmp_path):
    p = tmp_path / "gpu.toml"
    p.write_text(GOOD_TOML.replace("[efficiency]", "[efficiency]\nserving = 0.9"))
    h = load_hardware(p)
    assert h.hbm_bw_Bps == 3.35e12 and h.latency.step_s == pytest.approx(100e-6)
    assert h.efficiency.serving == 0.9


def test_missing_serving_efficiency_warns_and_names_the_default(tmp_path):
    p = tmp_path / "gpu.toml"
    p.write_text(GOOD_TOML)
    with pytest.warns(UserWarning, match=r"no \[efficiency\] serving.*using 1\.0"):
        h = load_hardware(p)
    assert h.efficiency.serving == 1.0
    with pytest.raises(SpecError, match="efficiency.serving"):
        p.write_text(GOOD_TOML.replace("[efficiency]", "[efficiency]\nserving = 1.2"))
        load_hardware(p)


_DEEPEP = "[deepep]\n" + "".join(f"{op}_us = 10\n{op}_GBps = 200\n" for op in (
    "ll_dispatch", "ll_combine", "normal_dispatch", "normal_combine"))
_ALLREDUCE = ("[allreduce]\nfixed_us = 3\noneshot_GBps = 300\ntwoshot_GBps = 300\n"
              "oneshot_max_KiB = 128\nmax_MiB = 16\n")


def test_engine_allreduce_tables(tmp_path):
    """[allreduce] is the default custom all-reduce; [allreduce.NAME] an engine's own, with its
    switch points and kernel limit by TP group size (KiB and MiB to bytes)."""
    p = tmp_path / "gpu.toml"
    p.write_text(GOOD_TOML + _ALLREDUCE + "[allreduce.trtllm]\nfixed_us = 4\noneshot_GBps = 200\n"
                 "twoshot_GBps = 100\noneshot_max_KiB = { 2 = 4096, 8 = 64 }\n"
                 "max_MiB = { 2 = 16, 8 = 0.5 }\n")
    h = load_hardware(p)
    assert h.allreduce.max_bytes == ((2, 16 * 2 ** 20),)
    trt = h.allreduce_kernels["trtllm"]
    assert (trt.fixed_s, trt.oneshot_Bps, trt.twoshot_Bps) == pytest.approx((4e-6, 2e11, 1e11))
    assert trt.oneshot_max_bytes == ((2, 4096 * 1024), (8, 64 * 1024))
    assert trt.max_bytes == ((2, 16 * 2 ** 20), (8, 2 ** 19))


@pytest.mark.parametrize("text, match", [
    ("sms = 132\n", "missing key"),
    (GOOD_TOML.replace("hbm_bandwidth_TBps = 3.35", "hbm_bandwidth_TBps = -1"), "hbm_bandwidth_TBps"),
    (GOOD_TOML.replace("scale_up = 0.8", "scale_up = 1.5"), "efficiency.scale_up"),
    # the compute/memory efficiencies moved to [kernel]: the old key names the new one
    (GOOD_TOML.replace("[efficiency]", "[efficiency]\ngemm = 0.7"), r"\[kernel\] gemm_tensor_frac"),
    (GOOD_TOML.replace("[efficiency]", "[efficiency]\nmemory = 0.8"), r"\[kernel\] gemm_hbm_frac"),
    (GOOD_TOML.replace("[latency_us]", "[latency_us]\nfoo = 1"), "unknown key"),
    ("this is not toml =", "malformed TOML"),
    ('name = "x"\nbogus_key = 1\n', "unknown key"),
    (GOOD_TOML + "[moe_kernels]\ntriton = { grouped_tensor_frac = 1.3 }\n",
     r"\[moe_kernels\] triton grouped_tensor_frac"),
    (GOOD_TOML + "[moe_kernels]\ntriton = { frac = 0.3 }\n",
     r"\[moe_kernels\] triton: unknown key 'frac'"),
    (GOOD_TOML + '[moe_kernels]\ndtype = "fp8"\n'
     "triton = { grouped_tensor_frac = 0.3, grouped_hbm_frac = 1.2 }\n",
     r"\[moe_kernels\] triton \[kernel\] grouped_hbm_frac"),
    (GOOD_TOML + '[moe_kernels]\ndtype = "fp8"\n'
     "triton = { grouped_tensor_frac = 0.3, grouped_fixed_us = -1 }\n",
     r"\[moe_kernels\] triton \[kernel\] grouped_fixed_us: must be non-negative"),
    (GOOD_TOML + "[allreduce]\nfixed_us = 3\noneshot_GBps = 300\ntwoshot_GBps = 300\n"
     "max_MiB = 16\noneshot_max_KiB = { eight = 128 }\n", "oneshot_max_KiB: key 'eight'"),
    # an engine's own all-reduce: the same keys, none inherited, nothing nested deeper
    (GOOD_TOML + _ALLREDUCE + "[allreduce.trtllm]\nfixed_us = 3\noneshot_GBps = 300\n"
     "oneshot_max_KiB = 128\nmax_MiB = { 2 = 16, 8 = 4 }\n",
     r"\[allreduce.trtllm\]: missing key 'twoshot_GBps'"),
    (GOOD_TOML + _ALLREDUCE + "[allreduce.trtllm]\nfixed_us = 3\noneshot_GBps = 300\n"
     "twoshot_GBps = 300\noneshot_max_KiB = 128\nmax_MiB = { 2 = 0, 8 = 4 }\n",
     r"\[allreduce.trtllm\] max_MiB.2"),
    (GOOD_TOML + _ALLREDUCE + "[allreduce.trtllm.x]\nfixed_us = 3\n",
     r"\[allreduce.trtllm\]: unknown key 'x'"),
    # DeepEP: the low-latency kernels' serial terms are non-negative; normal mode has none
    (GOOD_TOML + _DEEPEP + "ll_dispatch_expert_ns = -1\n",
     r"\[deepep\] ll_dispatch_expert_ns: must be a non-negative"),
    (GOOD_TOML + _DEEPEP + "normal_combine_block_token_us = 1\n",
     r"\[deepep\]: unknown key 'normal_combine_block_token_us'"),
])
def test_bad_hardware_files(tmp_path, text, match):
    p = tmp_path / "gpu.toml"
    p.write_text(text)
    with pytest.raises(SpecError, match=match):
        load_hardware(p)
    with pytest.raises(SpecError, match="unknown hardware"):
        load_hardware("tpu-v9")


@pytest.mark.parametrize("kw, field, flag", [
    (dict(gpus=8, tp=3), "`tp` 3 does not divide `gpus` 8", "--tp 3 does not divide --gpus 8"),
    (dict(gpus=8, ep=3), "`ep` 3 does not divide", "--ep 3 does not divide"),
    (dict(gpus=0), "`gpus` must be", "--gpus must be"),
    (dict(micro_batches=-1), "`micro_batches` must be", "--micro-batches must be"),
    (dict(weights="int4"), "`weights` 'int4'", "--weights 'int4'"),
])
def test_bad_deployments(kw, field, flag):
    """A Python user reads the field's name, the command line its flag (one table)."""
    from moesym.cli.flags import FLAGS

    with pytest.raises(SpecError) as err:
        Deployment(**kw)
    assert field in str(err.value) and "--" not in str(err.value)
    assert flag in err.value.named(FLAGS)


def test_every_field_has_its_flag():
    """The CLI's table gives every field of a deployment and a workload a flag the command
    line has."""
    import dataclasses

    from moesym.cli import build_parser
    from moesym.cli.flags import FLAGS
    from moesym.specs.deployment import Workload

    given = {o for sub in build_parser()._subparsers._group_actions
             for p in sub.choices.values() for a in p._actions for o in a.option_strings}
    skip = {"derived", "lengths"}  # not set by one flag: derived, or a distribution's
    for cls in (Deployment, Workload):
        for f in dataclasses.fields(cls):
            if f.name not in skip:
                assert f.name in FLAGS, f.name
                assert FLAGS[f.name] in given, (f.name, FLAGS[f.name])


def test_deployment_must_shard_the_model():
    with pytest.raises(SpecError, match="heads"):
        Deployment(gpus=48, tp=48).check_model(load_model("qwen3-8b"))
    with pytest.raises(SpecError, match="experts"):
        Deployment(gpus=24, ep=24).check_model(load_model("deepseek-v3"))


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b", "qwen3-8b"])
@pytest.mark.parametrize("a2a", ["auto", "deepep-ll", "allgather"])
def test_valid_mask_is_what_a_deployment_accepts(name, a2a):
    """sweep and optimize (vectorised) and predict (one deployment) apply the same rules."""
    from moesym.errors import MoesymError
    from moesym.specs.deployment import A2AMode, Deployment, valid_mask

    m = load_model(name)
    for gpus in (1, 2, 3, 4, 6, 8, 12, 16, 32):
        for ep in range(1, gpus + 1):
            for tp in range(1, gpus + 1):
                try:
                    Deployment(gpus=gpus, ep=ep, tp=tp, a2a=a2a).check_model(m)
                    accepted = True
                except MoesymError:
                    accepted = False
                mask = bool(valid_mask(m, gpus, ep, tp, 0, A2AMode(a2a), 8))
                assert mask == accepted, (gpus, ep, tp)


def test_sparse_attention_fields_are_read():
    cfg = {"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 1000,
           "intermediate_size": 4096, "index_topk": 2048, "index_n_heads": 64,
           "index_head_dim": 128}
    m = from_hf_config(cfg)
    assert (m.index_topk, m.index_heads, m.index_head_dim) == (2048, 64, 128)
    del cfg["index_n_heads"]
    with pytest.raises(SpecError, match="index_n_heads"):
        from_hf_config(cfg)


def test_hybrid_linear_attention_fields_are_read():
    cfg = {"hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 1000,
           "intermediate_size": 4096, "full_attention_interval": 4, "linear_num_key_heads": 4,
           "linear_num_value_heads": 8, "linear_key_head_dim": 64, "linear_value_head_dim": 64}
    m = from_hf_config(cfg)
    assert (m.linear_layers, m.linear_v_heads, m.linear_conv) == (6, 8, 4)
    del cfg["linear_num_value_heads"]
    with pytest.raises(SpecError, match="linear_num_value_heads"):
        from_hf_config(cfg)


@pytest.mark.parametrize("field,value", [("vision_config", {"depth": 27})])
def test_an_unmodelled_cost_field_is_said_not_ignored(field, value):
    """Config fields that change the cost and are not modelled (a vision encoder) warn, naming
    the field, instead of being dropped in silence."""
    cfg = {"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 1000,
           "intermediate_size": 4096, field: value}
    with pytest.warns(UserWarning, match=f"config field '{field}'"):
        from_hf_config(cfg)


def test_mixtral_window_and_llama4_chunks_from_the_config():
    """Mistral/Mixtral apply any sliding_window (no use_sliding_window flag, unlike Qwen2/3,
    whose window waits for it); Llama-4's chunked attention is said, not silently dropped."""
    import warnings

    mix = {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
           "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000}
    assert from_hf_config({**mix, "sliding_window": 4096}).sliding_layers == 32
    assert from_hf_config({**mix, "sliding_window": None}).sliding_layers == 0
    qwen = {**mix, "model_type": "qwen2_moe", "moe_intermediate_size": 1408, "sliding_window": 4096,
            "use_sliding_window": False}
    assert from_hf_config(qwen).sliding_layers == 0
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        from_hf_config({**mix, "model_type": "llama4_text", "attention_chunk_size": 8192})
    assert any("attention_chunk_size" in str(x.message) and "8192" in str(x.message) for x in w)


def test_qwen3_config_defaults_are_transformers_own():
    """A qwen3_moe config without head_dim takes Qwen3Config's 128 (not hidden / heads = 64);
    one without an expert count is an error, not a dense model."""
    cfg = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
           "num_attention_heads": 32, "num_key_value_heads": 4, "intermediate_size": 6144,
           "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
           "vocab_size": 151936}
    assert from_hf_config(cfg).head_dim == 128
    assert from_hf_config({**cfg, "model_type": "other"}).head_dim == 64
    with pytest.raises(SpecError, match="num_experts"):
        from_hf_config({k: v for k, v in cfg.items() if k != "num_experts"})


def test_moe_kernel_entry_gives_the_calibration_fields(tmp_path):
    """A [moe_kernels] entry's keys become the KernelCalib fields (SI) that replace [kernel]'s
    when an engine runs that backend: microseconds to seconds, the tensor fraction for both
    grouped layouts, keys left out not set."""
    p = tmp_path / "gpu.toml"
    p.write_text(GOOD_TOML + '[moe_kernels]\ndtype = "fp8"\n'
                 "triton_ep = { grouped_tensor_frac = 0.4, grouped_fixed_us = 4.5, "
                 "grouped_masked_passes = 2.5, grouped_tile_m_min_rows = 16, "
                 'heldout_median = 0.07, source = "test" }\n')
    with pytest.warns(UserWarning):  # GOOD_TOML has no [kernel] / [efficiency] serving
        h = load_hardware(p)
    assert dict(h.moe_kernels["triton_ep"]) == {
        "grouped_contiguous_tensor_frac": 0.4, "grouped_masked_tensor_frac": 0.4,
        "grouped_fixed_s": pytest.approx(4.5e-6), "grouped_masked_passes": 2.5,
        "grouped_tile_m_min_rows": 16}
