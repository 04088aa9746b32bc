"""Engine scheduler profiles (issue 31): each built-in loads with the defaults read in the
engine's own source (the expected values below are written from that reading, with the file and
setting; they are not taken from builtin.toml), the derived rules evaluate as the engine code
does, and every kind of bad profile is a one-line error naming the file, the key and the fix."""

from __future__ import annotations

import pytest

from moesym.engines import builtin_engines, load_engine
from moesym.errors import SpecError
from moesym.numbers.metrics import default_chunk_tokens

MIB = 2**20


def test_builtins():
    assert builtin_engines() == ["sglang", "sglang-0.5.9", "vllm", "trtllm", "dynamo-trt",
                                 "dynamo-sglang", "mori-sglang", "atom", "llama.cpp", "mlx",
                                 "tt-metal"]


def test_sglang_defaults():
    p = load_engine("sglang")
    assert p.version == "0.5.23"
    # srt/managers/scheduler.py get_next_batch_to_run: "Run prefill first if possible"
    assert p.policy == "prefill-first"
    # srt/arg_groups/fields/schedule.py: enable_mixed_chunk False, max_prefill_tokens 16384,
    # schedule_policy "fcfs", schedule_conservativeness 1.0, disable_overlap_schedule False
    assert p.mixed_chunk is False
    assert p.max_prefill_tokens == 16384
    assert p.prefill_order == "fcfs"
    assert p.schedule_conservativeness == 1.0
    assert p.overlap_scheduler is True
    assert p.step_token_budget is None
    assert p.chunk_tokens == "by-memory"
    assert p.kv_block_tokens == 1  # arg_groups/overrides.py _page_size_default on CUDA
    assert (p.kv_full, p.kv_memory_basis) == ("retract", "weights-kv")
    # environ.py SGLANG_INIT_NEW_TOKEN_RATIO 0.7, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14,
    # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS 600, SGLANG_RETRACT_DECODE_STEPS 20,
    # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION 4096; parallel_hook.py conservativeness x 0.3 with DP
    assert p.new_token_ratio_init == 0.7
    assert p.new_token_ratio_min == pytest.approx(0.7 * 0.14)
    assert p.new_token_ratio_decay_steps == 600
    assert p.retract_decode_steps == 20
    assert p.reserve_clip_tokens == 4096
    assert p.dp_attention_conservativeness_factor == 0.3
    assert p.ignore_eos_full_reserve is True
    # arg_groups/serving_hook.py handle_load_balance_method: auto -> round_robin
    assert p.dp_routing == "round-robin"
    assert p.cuda_graph_padding is True


def test_sglang_graph_sizes():
    """cuda_graph_hook.py generate_decode_cuda_graph_batch_sizes at memory_hook.py's max_bs
    (H100/H200: 512 at tp >= 4, 256 below)."""
    p = load_engine("sglang")
    full = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + [512]
    assert list(p.graph_batch_sizes(8)) == full
    assert list(p.graph_batch_sizes(2)) == [b for b in full if b <= 256]
    assert len(full) == 52


def test_sglang_running_requests_rule():
    """kv_cache_configurator.py resolve_max_num_reqs: min(clamp(int(kv / ctx x 512), 2048,
    4096), kv // 2)."""
    p = load_engine("sglang")
    assert p.running_requests(1_000_000, 163_840) == 3125   # 1e6 / 163840 x 512 = 3125
    assert p.running_requests(100_000, 163_840) == 2048     # 312 -> raised to 2048
    assert p.running_requests(3_000, 163_840) == 1500       # 3000 // 2
    assert p.running_requests(10_000_000, 4_096) == 4096    # 1.25e6 -> capped at 4096


def test_sglang_memory_fraction_rule():
    """memory_hook.py handle_gpu_memory_settings, derived by hand for an H100 (nvidia-smi
    81559 MiB), tp 8, chunk 8192, decode graphs to 512, non-MLA (58 prefill graph sizes up to
    8192 tokens: 8 + 14 + 8 + 8 + 12 + 8), no DP attention:
    reserved = 512 + 1.5 x 8192 + 8 / 8 x 1024 + 2 x 512 + 8 x 58 = 15312 MiB (above the
    10240 floor); fraction = round((81559 - 15312) / 81559, 3) = 0.812."""
    p = load_engine("sglang")
    assert len(p.kv_memory_rule.prefill_graph_sizes(8192)) == 58
    assert p.kv_memory_rule.reserved_bytes(81559 * MIB, chunk_tokens=8192, tp=8,
                                           decode_graph_max_batch=512) == 15312 * MIB
    assert p.memory_fraction(81559 * MIB, chunk_tokens=8192, tp=8) == 0.812
    # H200 (143771 MiB), DeepSeek (MLA), 8-way attention DP, DeepEP: 512 + 12288 + 1024
    # + 1024 + 3 x 512 x 8 + 1.5 x 512 x 8 (max_bs 512 > 300) + 1536 = 34816, + 2048 DeepEP
    assert p.memory_fraction(143771 * MIB, chunk_tokens=8192, tp=8, attn_dp=8, mla=True,
                             deepep=True) == round((143771 - 34816 - 2048) / 143771, 3)
    # a 24 GiB GPU: no 10 GiB floor (below 60 GiB); 50 prefill graph sizes up to 4096 tokens
    # (8 + 14 + 8 + 8 + 12): 512 + 1.5 x 4096 + 128 + 2 x 48 + 8 x 50
    small = 24576 * MIB
    reserved = 512 + 1.5 * 4096 + 1024 / 8 + 2 * 48 + 8 * 50
    assert p.memory_fraction(small, chunk_tokens=4096, tp=1, decode_graph_max_batch=48) == \
        round((24576 - reserved) / 24576, 3)


def test_sglang_chunk_rule_matches_the_source():
    """moesym's CHUNK_BY_MEMORY against memory_hook.py: 8192 on H100 (81559 MiB) and H200
    (143771 MiB), 16384 on B200 (183359 MiB), 4096 on A100-40GB; // attn_dp_size."""
    assert default_chunk_tokens(81559 * MIB, 1) == 8192
    assert default_chunk_tokens(143771 * MIB, 1) == 8192
    assert default_chunk_tokens(183359 * MIB, 1) == 16384
    assert default_chunk_tokens(40960 * MIB, 1) == 4096
    assert default_chunk_tokens(143771 * MIB, 8) == 1024


def test_vllm_defaults():
    p = load_engine("vllm")
    assert p.version == "0.33.0"
    # v1/core/sched/scheduler.py schedule: RUNNING requests first, then WAITING
    assert (p.policy, p.mixed_chunk) == ("decode-first", True)
    # engine/arg_utils.py get_batch_defaults, OPENAI_API_SERVER on H100/H200: 8192 and 1024
    assert p.step_token_budget == 8192
    assert p.chunk_tokens == 8192
    assert p.max_running_requests == 1024
    assert p.kv_block_tokens == 16          # config/cache.py DEFAULT_BLOCK_SIZE
    assert p.kv_memory_fraction == 0.92     # config/cache.py gpu_memory_utilization
    assert p.kv_memory_basis == "weights-kv-activations"
    assert p.memory_fraction(80 * 2**30) == 0.92
    assert p.kv_full == "preempt-recompute"
    # config/vllm.py _set_cudagraph_sizes: [1, 2, 4] + 8..248 by 8 + 256..512 by 16
    assert list(p.cuda_graph_batch_sizes) == [1, 2, 4] + list(range(8, 256, 8)) + list(
        range(256, 513, 16))
    assert p.graph_batch_sizes(2) == p.cuda_graph_batch_sizes
    assert p.cuda_graph_padding is True
    assert p.dp_routing == "shortest-queue"
    assert p.overlap_scheduler is True      # async_scheduling resolves to True
    assert p.prefill_order == "fcfs"
    assert p.long_prefill_token_threshold == 0
    assert p.running_requests(10**6, 4096) == 1024
    assert p.new_token_ratio_init is None and p.host_step_s is None


def test_trtllm_defaults():
    """Not read in the engine's source (PyPI has a stub): TensorRT-LLM 1.x's documented
    trtllm-serve defaults, as builtin.toml says; 8192 tokens, 0.9 of free memory, 32-token
    blocks and GUARANTEED_NO_EVICT are also stated by NVIDIA's aiconfigurator-core 0.12.0
    (sdk/backends/trtllm_backend.py) and ai-dynamo 1.6.1 (dynamo/trtllm/backend_args.py,
    dynamo/mocker/args.py)."""
    p = load_engine("trtllm")
    assert "not read" in p.version
    assert (p.policy, p.chunk_tokens, p.step_token_budget) == ("decode-first", "off", 8192)
    assert p.max_running_requests == 2048
    assert p.kv_block_tokens == 32
    assert (p.kv_memory_fraction, p.kv_memory_basis) == (0.9, "free-after-weights")
    assert p.kv_full == "hold"
    assert list(p.cuda_graph_batch_sizes) == list(range(1, 33)) + [64, 128]
    assert p.cuda_graph_padding is False


# --- a user's profile, and bad ones -------------------------------------------------------

GOOD = """[mine]
version = "1"
description = "a test engine"
policy = "decode-first"
mixed_chunk = true
chunk_tokens = 2048
step_token_budget = 4096
max_running_requests = 256
kv_block_tokens = 16
kv_memory_fraction = 0.9
kv_memory_basis = "weights-kv-activations"
kv_full = "preempt-recompute"
cuda_graph_batch_sizes = [1, 2, 4, 8]
cuda_graph_padding = true
dp_routing = "round-robin"
overlap_scheduler = false
prefill_order = "fcfs"
host_step_us = 150
"""


def _write(tmp_path, text, name="eng.toml"):
    f = tmp_path / name
    f.write_text(text)
    return str(f)


def _replace(key, line):
    """GOOD with ``key``'s line replaced (or removed when ``line`` is empty)."""
    out = [(line if line else None) if ln.split(" = ")[0] == key else ln
           for ln in GOOD.splitlines()]
    return "\n".join(x for x in out if x is not None) + "\n"


def test_user_profile(tmp_path):
    p = load_engine(_write(tmp_path, GOOD))
    assert (p.name, p.chunk_tokens, p.step_token_budget, p.max_running_requests) == \
        ("mine", 2048, 4096, 256)
    assert p.host_step_s == pytest.approx(150e-6)
    assert p.cuda_graph_batch_sizes == (1, 2, 4, 8)


RETRACT = GOOD.replace('kv_full = "preempt-recompute"', 'kv_full = "retract"')

BAD = [
    # (profile text, words the one-line error must contain)
    (GOOD + "max_seqs = 4\n", ["[mine].max_seqs", "unknown key"]),
    (_replace("policy", ""), ["missing key policy"]),
    (_replace("mixed_chunk", 'mixed_chunk = "yes"'), ["[mine].mixed_chunk", "true or false"]),
    (_replace("version", "version = 3"), ["[mine].version", "string"]),
    (_replace("kv_block_tokens", "kv_block_tokens = 16.5"), ["kv_block_tokens", "whole number"]),
    (_replace("max_running_requests", "max_running_requests = -8"),
     ["max_running_requests", "at least 1"]),
    (_replace("host_step_us", "host_step_us = -1.0"), ["host_step_us", "negative"]),
    (_replace("kv_memory_fraction", "kv_memory_fraction = 1.5"),
     ["kv_memory_fraction", "(0, 1]"]),
    (_replace("policy", 'policy = "decode-last"'), ["[mine].policy", "'prefill-first'"]),
    (_replace("kv_full", 'kv_full = "swap"'), ["[mine].kv_full", "'retract'"]),
    (_replace("dp_routing", 'dp_routing = "random"'), ["dp_routing", "'shortest-queue'"]),
    (_replace("chunk_tokens", 'chunk_tokens = "by-magic"'), ["chunk_tokens", "'by-memory'"]),
    (_replace("cuda_graph_batch_sizes", "cuda_graph_batch_sizes = [1, 4, 2]"),
     ["cuda_graph_batch_sizes", "ascending"]),
    (_replace("cuda_graph_batch_sizes", "cuda_graph_batch_sizes = [1, 2, 2, 4]"),
     ["cuda_graph_batch_sizes", "repeated"]),
    (_replace("cuda_graph_batch_sizes", "cuda_graph_batch_sizes = [0, 2]"),
     ["cuda_graph_batch_sizes", ">= 1"]),
    (_replace("step_token_budget", ""), ["step_token_budget", "needs"]),
    (_replace("max_running_requests", 'max_running_requests = "by-kv"'),
     ["max_running_requests", "running_requests_rule"]),
    (_replace("kv_memory_fraction", 'kv_memory_fraction = "by-rule"'),
     ["kv_memory_fraction", "kv_memory_rule"]),
    (GOOD + "new_token_ratio_init = 0.7\n", ["new_token_ratio_init", "retract"]),
    (RETRACT, ["needs new_token_ratio_init"]),
    (RETRACT + "new_token_ratio_init = 0.5\nnew_token_ratio_min = 0.6\n"
     "new_token_ratio_decay_steps = 600\n", ["new_token_ratio_min", "larger"]),
    (_replace("max_running_requests", 'max_running_requests = "by-kv"')
     + "[mine.running_requests_rule]\nrequests_per_context = 512\nmin_requests = 2048\n"
     "max_requests = 4096\n", ["missing key kv_tokens_per_request"]),
    (GOOD + "[other]\nversion = \"2\"\n", ["exactly one engine table"]),
    (GOOD + "[mine.kernels]\nmoe = \"triton\"\n", ["[mine.kernels].moe", "list of kernel names"]),
    (GOOD + "[mine.kernels]\nmoe_ep = [\"triton\"]\n", ["[mine.kernels]", "missing key moe"]),
    (GOOD + "[mine.kernels]\nmoe = [\"triton\"]\ngemm = [\"x\"]\n", ["[mine.kernels].gemm",
                                                                        "unknown key"]),
    ("[mine\nversion =", ["malformed TOML"]),
]


@pytest.mark.parametrize("text,words", BAD)
def test_bad_profile_is_one_line_naming_file_and_key(tmp_path, text, words):
    path = _write(tmp_path, text)
    with pytest.raises(SpecError) as e:
        load_engine(path)
    msg = str(e.value)
    assert "\n" not in msg
    assert path in msg
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize("arg,words", [("sgl", ["'sgl'", "sglang, sglang-0.5.9, vllm, trtllm"]),
                                       ("/no/such/engine.toml", ["no such file"])])
def test_bad_engine_name(arg, words):
    with pytest.raises(SpecError) as e:
        load_engine(arg)
    assert "\n" not in str(e.value)
    for w in words:
        assert w in str(e.value)


def test_deployment_engine_names_are_the_builtin_profiles():
    from moesym.specs.deployment import ENGINES

    assert tuple(builtin_engines()) == ENGINES


def test_engine_flag_sets_the_serve_chunk(cli_json):
    """predict --phase serve takes the engine's prompt tokens per step: SGLang's 8192 on a
    141 GB H200 divided over 8 attention-DP ranks (parallel_hook.py: // attn_dp_size) = 1024;
    vLLM's 8192-token step budget per engine, one engine per DP rank (arg_utils.py)."""
    base = ["predict", "qwen3-30b-a3b", "--hardware", "h200", "--gpus", "8", "--phase", "serve",
            "--isl", "1024", "--osl", "256", "--batch", "16"]
    assert cli_json(base)["serve"]["chunk_tokens"] == 1024
    assert cli_json(base + ["--engine", "vllm"])["serve"]["chunk_tokens"] == 8192


def test_unknown_engine_is_one_line(capsys):
    from moesym.cli import main

    rc = main(["predict", "qwen3-8b", "--hardware", "h20", "--phase", "decode", "--engine", "tgi"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--engine 'tgi'" in err and len(err.splitlines()) == 1


def test_engine_moe_kernels_follow_the_engines_rules():
    """Which fused-MoE kernel each engine runs, on a GPU whose tables fitted the kernels given
    (the rules as read in the engines' sources, written out here): SGLang 0.5.23 runs
    flashinfer_trtllm where it exists (SM100, arg_groups/overrides.py), else Triton, and DeepGEMM
    with a DeepEP all-to-all (layers/quantization/fp8.py); vLLM 0.33.0 prefers FlashInfer
    CUTLASS with EP and Triton without on Hopper (fused_moe/oracle/fp8.py); TensorRT-LLM runs
    its CUTLASS kernel. With EP the kernel's fit under EP (NAME_ep) times it; a kernel the GPU
    has not fitted falls back to [kernel] (None)."""
    hopper = {"triton": 0.4, "triton_ep": 0.2, "cutlass": 0.29, "flashinfer-cutlass_ep": 0.3}
    blackwell = {"flashinfer-trtllm": 0.17, "triton": 0.13}
    k = {e: load_engine(e).kernels for e in builtin_engines()}
    assert k["sglang"].moe_kernel(hopper, ep=1, deepep=False) == "triton"
    assert k["sglang"].moe_kernel(hopper, ep=8, deepep=False) == "triton_ep"  # fitted with EP
    assert k["sglang"].moe_kernel(blackwell, ep=1, deepep=False) == "flashinfer-trtllm"
    assert k["sglang"].moe_kernel(blackwell, ep=8, deepep=False) is None  # no EP fit
    assert k["sglang"].moe_kernel(hopper, ep=8, deepep=True) is None
    assert k["vllm"].moe_kernel(hopper, ep=1, deepep=False) == "triton"
    assert k["vllm"].moe_kernel(hopper, ep=8, deepep=True) == "flashinfer-cutlass_ep"
    assert k["trtllm"].moe_kernel(hopper, ep=1, deepep=False) == "cutlass"
    assert k["trtllm"].moe_kernel(blackwell, ep=1, deepep=False) is None


def test_engine_changes_moe_time_where_the_tables_differ(cli_json):
    """DeepSeek-V3 FP8 on 8 H200, TP8 EP1: the routed experts' time follows the engine's fused-MoE
    kernel (hardware/h200.toml [moe_kernels]). AIConfigurator's H200 tables time this very layer
    (hidden 7168, 256 experts of 2048 / 8, top-8, balanced) with SGLang 0.5.14's Triton kernel
    at 250 us for 32 tokens and 393 us for 1024, with TensorRT-LLM 1.3.0rc20's CUTLASS kernel at
    489 us and 1086 us: SGLang must come out faster. On H800, which has no per-kernel fits, the
    engine's kernel changes nothing (vLLM against TensorRT-LLM: SGLang adds the shared expert's
    rows to its kernel, test_sglang_runs_the_shared_expert_inside_the_moe_kernel)."""
    argv = ["predict", "deepseek-v3", "--phase", "prefill", "--batch", "1", "--context", "1024",
            "--gpus", "8", "--tp", "8", "--ep", "1", "--weights", "fp8", "--hardware"]
    t = {e: cli_json(argv + ["h200", "--engine", e])["per_layer_s"]["moe_routed"]
         for e in ("sglang", "trtllm")}
    assert t["sglang"] < 0.9 * t["trtllm"]
    h800 = {e: cli_json(argv + ["h800", "--engine", e])["per_layer_s"]["moe_routed"]
            for e in ("vllm", "trtllm")}
    assert h800["vllm"] == h800["trtllm"]


def test_autotuned_engines_drop_the_untuned_fallback_tile():
    """The kernel tables time FlashInfer-TRTLLM's untuned fallback (its M tile follows the
    launch's assignments per local expert: grouped_launch_tile_max_rows in B300's fit); SGLang
    and vLLM autotune that kernel at warmup (sglang flashinfer_autotune.py:77-125, vllm
    config/vllm.py:294-336), so their view of the GPU drops that field and keeps every other
    fitted one."""
    from moesym.engines import UNTUNED_MOE_FIELDS, load_engine
    from moesym.specs.hardware import load_hardware

    hw = load_hardware("b300")
    raw = hw.moe_kernels["flashinfer-trtllm"]
    assert raw["grouped_launch_tile_max_rows"] == 64
    for engine in ("sglang", "vllm"):
        seen = load_engine(engine).hardware(hw).moe_kernels
        for name in ("flashinfer-trtllm", "flashinfer-trtllm_ep"):
            want = {k: v for k, v in hw.moe_kernels[name].items() if k not in UNTUNED_MOE_FIELDS}
            assert seen[name] == want
        assert seen["triton"] == hw.moe_kernels["triton"]


def _projections(engine: str, tokens: int = 16) -> dict:
    """DeepSeek-V3's attention GEMMs of one layer as ``engine`` runs them, by name, at
    ``tokens`` tokens on one GPU, the sizes bound (BF16 weights and activations: 2 bytes)."""
    import moesym as ms
    from moesym.model.layer_costs import moe_layer_costs
    from moesym.numbers.bindings import bindings
    from moesym.terms.dims import symbolic_dims

    model = ms.load_model("deepseek-v3")
    dep = ms.Deployment(gpus=8, tp=8, ep=8, weights="bf16", engine=engine)
    wl = ms.Workload("decode", batch=tokens, context=1024)
    costs = moe_layer_costs(model, dep, wl, symbolic_dims())["attention_proj"]
    values = bindings(model, ms.load_hardware("h200"), dep, wl)
    return {c.name: (float(c.flops.subs(values)), float(c.hbm_bytes.subs(values)),
                     int(c.launches)) for c in costs}


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
def test_mla_down_projections_run_as_one_gemm_where_the_engine_fuses_them(engine):
    """SGLang (srt/models/deepseek_v2.py fused_qkv_a_proj_with_mqa), vLLM (deepseek_v2.py
    fused_qkv_a_proj) and TensorRT-LLM (fused_a, as AIConfigurator models it) run MLA's q_a
    (7168 -> 1536) and kv_a (7168 -> 512 + 64) as one GEMM of N = 2112 over the same input.
    By hand, at t tokens with BF16 weights and activations (2 bytes): the same FLOPs
    2 t 7168 2112; bytes 7168 x 2112 x 2 + t (7168 + 2112) x 2, i.e. the two GEMMs' bytes less
    one read of the input (t x 7168 x 2); one launch instead of two."""
    t = 16
    fused = _projections(engine, t)
    assert "q_a_proj" not in fused and "kv_a_proj" not in fused
    flops, hbm, launches = fused["q_a_proj+kv_a_proj"]
    assert flops == pytest.approx(2 * t * 7168 * 2112, rel=1e-12)
    assert hbm == pytest.approx(7168 * 2112 * 2 + t * (7168 + 2112) * 2, rel=1e-12)
    assert launches == 1


def test_an_engine_without_the_fusion_runs_the_two_gemms(tmp_path):
    """A profile whose [kernels] names no fused GEMMs (llama.cpp's attn_q_a and attn_kv_a_mqa
    are two matmuls): q_a and kv_a stay two GEMMs, each with its own input read."""
    path = tmp_path / "plain.toml"
    path.write_text('[plain]\nbase = "sglang"\n[plain.kernels]\nmoe = ["triton"]\n'
                    'fused_gemms = []\n', encoding="utf-8")
    t = 16
    plain = _projections(str(path), t)
    assert plain["q_a_proj"][1] == pytest.approx(7168 * 1536 * 2 + t * (7168 + 1536) * 2,
                                                 rel=1e-12)
    assert plain["kv_a_proj"][1] == pytest.approx(7168 * 576 * 2 + t * (7168 + 576) * 2,
                                                  rel=1e-12)
    fused = _projections("sglang", t)
    assert (plain["q_a_proj"][1] + plain["kv_a_proj"][1] - fused["q_a_proj+kv_a_proj"][1]
            == pytest.approx(t * 7168 * 2, rel=1e-12))


@pytest.mark.parametrize("value, problem", [
    ('[["q_a_proj"]]', "two or more"),
    ('[["q_a_proj", "o_proj"]]', "two or more"),
    ('["q_a_proj", "kv_a_proj"]', "two or more"),
])
def test_fused_gemms_that_cannot_be_fused_are_refused(tmp_path, value, problem):
    msg = _bad_kernels_line(tmp_path, f"fused_gemms = {value}")
    assert "fused_gemms" in msg and problem in msg and "kv_a_proj" in msg and "\n" not in msg


def _bad_kernels_line(tmp_path, line: str) -> str:
    """The one-line error of an SGLang-based profile whose [NAME.kernels] has ``line``."""
    path = tmp_path / "bad.toml"
    path.write_text(f'[bad]\nbase = "sglang"\n[bad.kernels]\nmoe = ["triton"]\n{line}\n',
                    encoding="utf-8")
    with pytest.raises(SpecError) as e:
        load_engine(str(path))
    return str(e.value)


def test_sglang_disaggregated_prefill_joins_after_its_bootstrap_poll():
    """SGLang's disaggregated prefill loop (0.5.9 disaggregation/prefill.py:362-384; 0.5.23
    :684-700) moves a received request to its waiting queue only once pop_bootstrapped polls
    its KV handshake complete: the SGLang-based profiles carry the lag, TensorRT-LLM's
    disaggregation (a context-only request from the decode worker) and vLLM do not."""
    for name in ("sglang", "sglang-0.5.9", "dynamo-sglang", "mori-sglang"):
        assert load_engine(name).pd_bootstrap_lag, name
    for name in ("trtllm", "dynamo-trt", "vllm"):
        assert not load_engine(name).pd_bootstrap_lag, name


@pytest.mark.parametrize("engine", ["trtllm", "vllm", "sglang"])
def test_python_api_refuses_a_format_the_engine_does_not_load(engine):
    """What the command line refuses (issue 51: a GGUF type under a serving engine) the Python
    API refuses too, in build_step and in predict, with the same one line."""
    import moesym as ms

    dep = ms.Deployment(gpus=1, weights="q4_k_m", engine=engine)
    wl = ms.Workload("decode", batch=1, context=512)
    model, hw = ms.load_model("qwen3-30b-a3b"), ms.load_hardware("h100")
    for call in (lambda: ms.build_step(model, hw, dep, wl), lambda: ms.predict(model, hw, dep, wl)):
        with pytest.raises(SpecError) as e:
            call()
        assert "GGUF" in str(e.value) and "llama.cpp" in str(e.value) and "\n" not in str(e.value)
    ms.build_step(model, hw, ms.Deployment(gpus=1, weights="q4_k_m", engine="llama.cpp"), wl)


# -- the shared expert inside the fused MoE (SGLang) ---------------------------------------------
D_MODEL, D_EXPERT = 7168, 2048  # DeepSeek-V3 hidden size and expert width (config.json)


def _moe_work(cli_json, hardware, engine, ep, batch, model="deepseek-v3", weights="fp8", extra=()):
    argv = ["predict", model, "--phase", "decode", "--batch", str(batch), "--context", "1024",
            "--gpus", "8", "--tp", "8", "--ep", str(ep), "--weights", weights, "--hardware",
            hardware, "--engine", engine, *extra]
    w = cli_json(argv)["work_per_layer"]
    return w["moe_routed"]["flop"], w["shared_expert"]["flop"]


def test_sglang_runs_the_shared_expert_inside_the_moe_kernel(cli_json):
    """DeepSeek-V3 FP8 decode, 16 requests on 8 H200 at TP 8, EP 1. SGLang runs the shared
    expert as a 257th expert of the fused MoE (sglang 0.5.9 deepseek_v2.py:2853-2895): per GPU
    the kernel computes the 16 x 8 routed rows of every expert's 2048 / 8 columns (TP-sharded,
    16 / 8 tokens a GPU x 8 experts x 8 expert-TP ranks = 128 rows) plus the shared expert's 16,
    6 FLOPs per row x d x d_e / 8 (gate, up, down), and no dense shared GEMM is left. vLLM
    keeps the shared expert's own GEMMs: the same FLOPs, split the other way."""
    routed, shared = _moe_work(cli_json, "h200", "sglang", 1, 16)
    assert shared == 0
    assert routed == pytest.approx(6 * (128 + 16) * D_MODEL * D_EXPERT / 8, rel=1e-12)
    routed_v, shared_v = _moe_work(cli_json, "h200", "vllm", 1, 16)
    assert routed_v == pytest.approx(6 * 128 * D_MODEL * D_EXPERT / 8, rel=1e-12)
    assert shared_v == pytest.approx(6 * 16 * D_MODEL * D_EXPERT / 8, rel=1e-12)


def test_sglang_on_amd_fuses_the_shared_expert_under_expert_parallelism(cli_json):
    """On AMD SGLang fuses it under EP as well, each rank computing the whole shared expert for
    every token it holds (the top-k scales it by 1 / EP, deepseek_v2.py:412-418): TP 8 x EP 8 on
    8 MI300X, 16 requests: beside the busiest rank's routed rows (vLLM's, the same kernel
    without the shared expert) 16 shared rows at the full width 2048, where vLLM's TP-sharded
    shared GEMMs compute 16 rows of 2048 / 8."""
    args = (cli_json, "mi300x")
    routed, shared = _moe_work(*args, "sglang", 8, 16, extra=["--a2a", "allgather"])
    routed_v, shared_v = _moe_work(*args, "vllm", 8, 16, extra=["--a2a", "allgather"])
    assert shared == 0
    assert routed - routed_v == pytest.approx(6 * 16 * D_MODEL * D_EXPERT, rel=1e-9)
    assert shared_v == pytest.approx(6 * 16 * D_MODEL * D_EXPERT / 8, rel=1e-12)


@pytest.mark.parametrize("hardware,engine,ep,model,extra,why", [
    ("h200", "sglang", 8, "deepseek-v3", ["--a2a", "allgather"], "EP > 1 on NVIDIA (:2875-2880)"),
    ("b200", "sglang", 1, "deepseek-v3", [], "SM100 runs flashinfer_trtllm (server_args.py:2147)"),
    ("h200", "sglang", 1, "deepseek-v3.2", [], "DeepseekV32ForCausalLM is another architecture"),
    ("h200", "sglang", 1, "kimi-k2", [], "384 routed experts, not 256"),
    ("h200", "sglang", 8, "deepseek-v3", ["--a2a", "deepep-ll"], "DeepEP (:2882-2886)"),
    ("mi355x", "mori-sglang", 8, "deepseek-v3", ["--a2a", "deepep-normal"], "MoRI (:2882-2886)"),
    ("h200", "vllm", 1, "deepseek-v3", [], "vLLM runs its own shared-expert GEMMs"),
])
def test_where_sglang_keeps_the_shared_expert_apart(cli_json, hardware, engine, ep, model, extra,
                                                     why):
    """Each condition of SGLang's determine_num_fused_shared_experts (0.5.9) that turns the
    fusion off: the shared expert keeps its own dense GEMMs."""
    _routed, shared = _moe_work(cli_json, hardware, engine, ep, 8, model=model, extra=extra)
    assert shared > 0, why


def test_sglang_fp8_linear_on_gfx942_runs_one_128_by_128_tile(cli_json):
    """SGLang's FP8 block-scale linear layers on MI300X run aiter's Triton kernel with its one
    gfx942 configuration, a 128 x 128 block, no split K (hardware/mi300x.toml
    [kernel.engines.sglang.dtypes.fp8]). q_b_proj at TP 8 is N = 128 x 192 / 8 = 3072, K = 1536:
    24 blocks, one wave on 304 CUs, each 2 x 128 x 128 x 1536 FLOPs at the per-CU rate of
    [kernel] (peak / CUs x gemm_tensor_frac) plus its tile overhead, then the launch; at 4 rows
    and at 64 alike. The per-CU load of a block ((128 + 128) x 1536 + 128 x 128 x 2 bytes at
    sm_bandwidth) is shorter, the weights' HBM read shorter still. vLLM keeps the CK fit."""
    import tomllib
    from pathlib import Path

    hw = tomllib.loads((Path(__file__).parents[1] / "hardware" / "mi300x.toml").read_text())
    k = hw["kernel"]
    per_cu = hw["peak_TFLOPs"]["fp8"] * 1e12 / hw["sms"] * k["gemm_tensor_frac"]
    compute = 2 * 128 * 128 * 1536 / per_cu + k["tile_overhead_us"] * 1e-6
    assert ((128 + 128) * 1536 + 128 * 128 * 2) / (k["sm_bandwidth_GBps"] * 1e9) < compute
    expect = compute + k["launch_us"] * 1e-6
    for batch in (4, 64):
        argv = ["predict", "deepseek-v3", "--phase", "decode", "--batch", str(batch),
                "--context", "1024", "--gpus", "8", "--tp", "8", "--weights", "fp8",
                "--hardware", "mi300x", "--engine"]
        t = cli_json(argv + ["sglang-0.5.9"])["per_kernel_s"]
        assert t["q_b_proj"] == pytest.approx(expect, rel=1e-9)
        v = cli_json(argv + ["vllm"])["per_kernel_s"]
        assert v["q_b_proj"] < 0.6 * t["q_b_proj"]
        # the router's gate stays BF16: the BF16 table times it under both engines
        assert t["router"] == pytest.approx(v["router"], rel=1e-12)


@pytest.mark.parametrize("value,problem", [
    ('{ routed_experts = 256, shared_experts = 1 }', "missing key 'architectures'"),
    ('{ architectures = ["X"], routed_experts = 256, shared_experts = 1, ep = 2 }',
     "unknown key 'ep'"),
    ('{ architectures = ["X"], routed_experts = 0, shared_experts = 1 }', "positive whole number"),
    ('{ architectures = "X", routed_experts = 256, shared_experts = 1 }', "list of names"),
    ('"yes"', "expected a table"),
])
def test_a_shared_expert_fusion_rule_that_cannot_be_read_is_refused(tmp_path, value, problem):
    msg = _bad_kernels_line(tmp_path, f"shared_expert_fusion = {value}")
    assert "shared_expert_fusion" in msg and problem in msg and "\n" not in msg


def test_sglang_casts_the_absorbed_mla_weights_on_gfx942_only(cli_json):
    """SGLang 0.5.9 on ROCm without the gfx950 path casts MLA's absorbed FP8 weights w_kc, w_vc
    to BF16 and scales them at every decode step (deepseek_v2.py:1700-1704, :1876-1880): at TP 8
    16 heads x (128 + 128) x 512 elements a GPU, 8 B an element moved, in at least the time
    those bytes take at the MI300X's HBM rate. MI355X (gfx950) runs an FP8 batched GEMM, vLLM
    and prefill steps none."""
    def kernels(hardware, engine, phase="decode"):
        argv = ["predict", "deepseek-v3", "--phase", phase, "--batch", "8", "--context", "1024",
                "--gpus", "8", "--tp", "8", "--weights", "fp8", "--hardware", hardware,
                "--engine", engine]
        return cli_json(argv)["per_kernel_s"]

    t = kernels("mi300x", "sglang-0.5.9")["absorbed_weight_cast"]
    assert t > 8 * 16 * (128 + 128) * 512 / 5.3e12
    assert "absorbed_weight_cast" not in kernels("mi355x", "sglang-0.5.9")
    assert "absorbed_weight_cast" not in kernels("mi300x", "vllm")
    assert "absorbed_weight_cast" not in kernels("mi300x", "sglang-0.5.9", "prefill")
