"""Launch commands (--emit): the modelled deployment in each engine's documented flags.

Every flag of every emitted command is checked against ``tests/data/engine_flags.json``: the
flag names each engine's server launcher registers, read offline from its source
(``benchmarks/engine_flags.py``: SGLang and vLLM wheels from PyPI). The expected names come from
the engines, never from moesym's output, so a flag an engine renames fails here.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from moesym.engines import emit
from moesym.cli import main

ENGINE_FLAGS = json.loads((Path(__file__).parent / "data" / "engine_flags.json").read_text())


def _launch(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["launch"]


def _is_flag(word) -> bool:
    """``--x`` or ``-x`` (llama.cpp's short flags), not a negative number."""
    return word is not None and len(word) > 1 and word[0] == "-" and not word[1].isdigit()


def _pairs(command: str) -> set:
    words = shlex.split(command)
    return {(a, b if not _is_flag(b) else None) for a, b in zip(words, words[1:] + [""])
            if _is_flag(a)}


def test_sglang_large_scale_ep_decode(capsys):
    """The LMSYS 96-H100 decode deployment (2025-05): DeepSeek-V3 on 72 GPUs with DP attention,
    EP 72 over DeepEP low-latency, two-batch overlap, 32 redundant experts (EPLB)."""
    c = _launch(capsys, "predict", "deepseek-v3", "--hardware", "h100", "--phase", "decode",
                "--batch", "256", "--context", "2048", "--gpus", "72", "--ep", "72",
                "--redundant-experts", "32", "--weights", "fp8", "--micro-batches", "2",
                "--a2a", "deepep-ll", "--emit", "sglang")
    # attention DP is --attn-dp-size N in SGLang 0.5.23 (`--dp-size N --enable-dp-attention` is
    # deprecated, and --dp-size alone now counts model replicas)
    want = {("--tp-size", "72"), ("--attn-dp-size", "72"), ("--ep-size", "72"),
            ("--moe-a2a-backend", "deepep"), ("--deepep-mode", "low_latency"),
            ("--enable-two-batch-overlap", None), ("--ep-num-redundant-experts", "32"),
            ("--enable-eplb", None), ("--max-running-requests", str(256 * 72))}
    assert want <= _pairs(c["command"])
    assert "--dp-size" not in {f for f, _ in _pairs(c["command"])}
    assert any("9 nodes" in n for n in c["notes"])


def test_vllm_and_trtllm_serve(capsys):
    base = ["predict", "qwen3-30b-a3b", "--hardware", "h20", "--phase", "serve", "--isl", "1024",
            "--osl", "1024", "--batch", "64", "--gpus", "4", "--tp", "2", "--kv", "fp8"]
    v = _launch(capsys, *base, "--emit", "vllm")
    assert {("--tensor-parallel-size", "2"), ("--data-parallel-size", "2"),
            ("--enable-expert-parallel", None), ("--kv-cache-dtype", "fp8"),
            ("--max-num-seqs", "64"), ("--max-num-batched-tokens", "4096")} <= _pairs(v["command"])
    t = _launch(capsys, *base, "--emit", "trtllm")
    assert {("--tp_size", "4"), ("--ep_size", "4"), ("--max_batch_size", "64")} <= _pairs(t["command"])
    assert any("enable_attention_dp" in n for n in t["notes"])  # said, not dropped


def test_optimize_emits_its_best(capsys):
    assert main(["optimize", "qwen3-30b-a3b", "--hardware", "h20", "--gpus", "4", "--phase",
                 "decode", "--context", "2048", "--tpot-ms", "50", "--emit", "sglang",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    b = out["best"]
    pairs = _pairs(out["launch"]["command"])
    assert ("--tp-size", "4") in pairs
    assert ("--max-running-requests", str(b["batch"] * 4 // b["tp"])) in pairs


def test_unknown_engine_is_refused(capsys):
    assert main(["predict", "qwen3-8b", "--hardware", "h20", "--phase", "decode", "--emit",
                 "tgi"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--emit" in err[0]


# ------------------------------------------------------------------------------------------------
# Every emitted flag exists in the engine's parser (tests/data/engine_flags.json)
# ------------------------------------------------------------------------------------------------

_DS = ["deepseek-v3", "--hardware", "h800", "--weights", "fp8"]
DEPLOYMENTS = {
    # the LMSYS 96-H100 decode deployment: DP attention, EP72 DeepEP low-latency, TBO, EPLB
    "lmsys-decode": ["predict", "deepseek-v3", "--hardware", "h100", "--phase", "decode",
                     "--batch", "256", "--context", "2048", "--gpus", "72", "--ep", "72",
                     "--redundant-experts", "32", "--weights", "fp8", "--micro-batches", "2",
                     "--a2a", "deepep-ll"],
    "serve-kv-fp8": ["predict", "qwen3-30b-a3b", "--hardware", "h20", "--phase", "serve",
                     "--isl", "1024", "--osl", "1024", "--batch", "64", "--gpus", "4", "--tp",
                     "2", "--kv", "fp8"],
    "prefill-deepep-tbo": ["predict", *_DS, "--phase", "prefill", "--tokens", "16384",
                           "--context", "8192", "--chunk", "8192", "--gpus", "16", "--ep", "16",
                           "--a2a", "deepep-normal", "--micro-batches", "2"],
    "decode-mtp": ["predict", *_DS, "--phase", "decode", "--batch", "64", "--gpus", "16",
                   "--ep", "16", "--mtp", "2", "--kv", "fp8"],
    "decode-pp": ["predict", *_DS, "--phase", "decode", "--batch", "64", "--gpus", "32",
                  "--pp", "2", "--ep", "16"],
    "decode-expert-tp": ["predict", *_DS, "--phase", "decode", "--batch", "32", "--gpus", "16",
                         "--tp", "2", "--ep", "8", "--a2a", "allgather"],
    "dense-serve-eagle": ["predict", "qwen3-8b", "--hardware", "h20", "--phase", "serve",
                          "--isl", "2048", "--osl", "512", "--batch", "32", "--gpus", "2",
                          "--tp", "2", "--mtp", "1"],
    # no CUDA graphs: each engine's switch
    "decode-eager": ["predict", "qwen3-30b-a3b", "--hardware", "h100", "--phase", "decode",
                     "--batch", "8", "--context", "1024", "--eager"],
    "optimize-decode": ["optimize", "qwen3-30b-a3b", "--hardware", "h20", "--gpus", "4",
                        "--phase", "decode", "--context", "2048", "--tpot-ms", "50"],
}


def _flag_problems(engine: str, command: str, fixture: dict) -> list[str]:
    """What in ``command`` the engine's parser (as read into ``fixture``) would not take: an
    unknown flag, a deprecated spelling, a value outside the flag's choices, a JSON key its
    config class lacks."""
    known, deprecated = set(fixture["flags"]), set(fixture.get("deprecated", ()))
    choices, keys = fixture.get("choices", {}), fixture.get("config_keys", {})
    words = shlex.split(command)
    while words and "=" in words[0] and not words[0].startswith("-"):  # VAR=value prefixes
        words = words[1:]
    if words[:2] == ["python", "-m"]:  # python's own -m, not the engine's
        words = words[3:]
    problems = []
    for flag, value in zip(words, words[1:] + [None]):
        if not _is_flag(flag):
            continue
        flag, eq, inline = flag.partition("=")
        value = inline if eq else (None if _is_flag(value) else value)
        where = f"{engine} {fixture['version']}: {flag}"
        if flag not in known:
            problems.append(f"{where} is not a flag")
        elif flag in deprecated:
            problems.append(f"{where} is deprecated")
        elif value is not None and flag in choices and value not in choices[flag]:
            problems.append(f"{where} does not take {value!r}")
        elif value is not None and flag in keys:
            extra = set(json.loads(value)) - set(keys[flag])
            if extra:
                problems.append(f"{where} has no key(s) {sorted(extra)}")
            method = json.loads(value).get("method")
            if method is not None and method not in choices.get("--spec-method", [method]):
                problems.append(f"{where} method {method!r} unknown")
    return problems


def test_the_fixture_is_the_engines_moesym_targets():
    """The fixture was read from the SGLang version emit.py names, and says how it was read."""
    assert ENGINE_FLAGS["sglang"]["version"] == "0.5.23"
    assert f"SGLang {ENGINE_FLAGS['sglang']['version']}" in emit.__doc__
    for engine in emit.GPU_ENGINES:
        fx = ENGINE_FLAGS[engine]
        assert fx["source"]
        if fx["flags"] is not None:
            assert len(fx["flags"]) > 100 and all(f.startswith("--") for f in fx["flags"])


@pytest.mark.parametrize("engine", emit.GPU_ENGINES)
@pytest.mark.parametrize("case", sorted(DEPLOYMENTS))
def test_every_emitted_flag_is_in_the_engine_parser(capsys, engine, case):
    fixture = ENGINE_FLAGS[engine]
    if fixture["flags"] is None:
        pytest.skip(f"no {engine} flag list: {fixture['source']}")
    assert main([*DEPLOYMENTS[case], "--emit", engine, "--json"]) == 0
    launch = json.loads(capsys.readouterr().out)["launch"]
    assert launch["engine"] == engine
    assert _flag_problems(engine, launch["command"], fixture) == []


ROCM_DECODE = ["predict", "deepseek-v3", "--hardware", "mi355x", "--weights", "fp8", "--phase",
               "decode", "--batch", "64", "--context", "2048", "--gpus", "8", "--ep", "8",
               "--kv", "fp8"]


@pytest.mark.parametrize("engine,env,a2a", [
    ("sglang", "SGLANG_USE_AITER=1", ("--moe-a2a-backend", "mori")),
    ("vllm", "VLLM_ROCM_USE_AITER=1", ("--all2all-backend", "mori_low_latency"))])
def test_rocm_lines_run_aiter_and_mori(capsys, engine, env, a2a):
    """On an AMD GPU the line turns on aiter (the kernels moesym's AMD fits come from) and
    dispatches over AMD's MoRI instead of DeepEP (a CUDA library); every flag still parses."""
    assert main([*ROCM_DECODE, "--engine", engine, "--emit", engine, "--json"]) == 0
    cmd = json.loads(capsys.readouterr().out)["launch"]["command"]
    assert cmd.startswith(env + " ")
    assert " ".join(a2a) in cmd and "deepep" not in cmd
    if engine == "sglang":
        assert "--attention-backend aiter" in cmd
    assert _flag_problems(engine, cmd, ENGINE_FLAGS[engine]) == []
    assert main([*ROCM_DECODE, "--emit", "trtllm"]) == 2
    assert "does not run on mi355x" in capsys.readouterr().err


def test_the_deployments_reach_each_feature(capsys):
    """The cases above emit the flags of every feature (so the check covers them): SGLang's
    attention DP, DeepEP, TBO, EPLB, PP, speculative decoding, chunk and FP8 KV."""
    seen = set()
    for argv in DEPLOYMENTS.values():
        assert main([*argv, "--emit", "sglang", "--json"]) == 0
        seen |= {f for f, _ in _pairs(json.loads(capsys.readouterr().out)["launch"]["command"])}
    assert {"--attn-dp-size", "--ep-size", "--moe-a2a-backend", "--deepep-mode",
            "--enable-two-batch-overlap", "--ep-num-redundant-experts", "--enable-eplb",
            "--pp-size", "--speculative-algorithm", "--chunked-prefill-size",
            "--kv-cache-dtype", "--max-running-requests"} <= seen


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_renamed_flag_fails(engine):
    """An engine that renames a flag moesym emits (here: the fixture without it) fails the check,
    as does a value the flag does not take."""
    fixture = ENGINE_FLAGS[engine]
    flag = {"sglang": "--ep-size", "vllm": "--max-num-seqs"}[engine]
    renamed = {**fixture, "flags": [f for f in fixture["flags"] if f != flag]}
    command = f"serve m {flag} 8"
    assert _flag_problems(engine, command, fixture) == []
    assert _flag_problems(engine, command, renamed) == [
        f"{engine} {fixture['version']}: {flag} is not a flag"]
    assert _flag_problems(engine, "serve m --kv-cache-dtype fp9", fixture)
    assert _flag_problems(engine, f"serve m {fixture['deprecated'][0]}", fixture)


def test_vllm_says_deepep_dbo_and_eplb_as_flags(capsys):
    """vLLM 0.33 has flags for what moesym models: the DeepEP mode of the phase, dual-batch
    overlap for two micro-batches, EPLB with its redundant experts (checked against the fixture
    by the test above; here that they are emitted)."""
    seen = {}
    for case in ("lmsys-decode", "prefill-deepep-tbo"):
        assert main([*DEPLOYMENTS[case], "--emit", "vllm", "--json"]) == 0
        seen[case] = _pairs(json.loads(capsys.readouterr().out)["launch"]["command"])
    assert ("--all2all-backend", "deepep_low_latency") in seen["lmsys-decode"]
    assert ("--all2all-backend", "deepep_high_throughput") in seen["prefill-deepep-tbo"]
    assert ("--enable-dbo", None) in seen["lmsys-decode"] and ("--enable-eplb", None) in seen["lmsys-decode"]
    assert ("--eplb-config", '{"num_redundant_experts": 32}') in seen["lmsys-decode"]


@pytest.mark.parametrize("engine,flag,per_rank", [("vllm", "--max-num-batched-tokens", 1),
                                                  ("sglang", "--chunked-prefill-size", 8),
                                                  ("trtllm", "--max_num_tokens", 1)])
def test_prefill_step_budget_is_the_modelled_step(engine, flag, per_rank, cli_json):
    """A prefill step of 8192 tokens per DP rank (four 2048-token prompts): the engine's step
    budget is 8192 (SGLang's counts the instance's 8 DP ranks), not the prompt length, which
    capped each step at a quarter of what was timed."""
    r = cli_json(["predict", "deepseek-v3", "--hardware", "h200", "--gpus", "8", "--ep", "8",
                  "--weights", "fp8", "--phase", "prefill", "--tokens", "8192", "--context",
                  "2048", "--emit", engine])
    words = r["launch"]["command"].split()
    assert words[words.index(flag) + 1] == str(8192 * per_rank)


def test_trtllm_notes_what_it_cannot_say_as_a_flag(cli_json):
    """FP8 KV, redundant experts, two micro-batches and attention DP x TP have no trtllm-serve
    flag: each is a note, never dropped (they were neither flag nor note)."""
    r = cli_json(["predict", "deepseek-v3", "--hardware", "h200", "--gpus", "16", "--tp", "2",
                  "--ep", "16", "--weights", "fp8", "--kv", "fp8", "--micro-batches", "2",
                  "--redundant-experts", "16", "--phase", "decode", "--batch", "32",
                  "--emit", "trtllm"])
    notes = " | ".join(r["launch"]["notes"])
    for needle in ("FP8 KV cache", "16 redundant experts", "2 micro-batches",
                   "attention DP 8 x TP 2"):
        assert needle in notes, needle


# ------------------------------------------------------------------------------------------------
# Single-device engines: llama.cpp (llama-server, llama-bench) and MLX (mlx_lm.server, generate),
# checked against the flags their own parsers register (read offline into engine_flags.json)
# ------------------------------------------------------------------------------------------------

_4090 = ["predict", "qwen3-30b-a3b", "--hardware", "rtx-4090"]
_MAC = ["predict", "qwen3-30b-a3b", "--hardware", "m2-max"]
SINGLE_DEVICE = {
    "llama.cpp": {
        "offload-decode": [*_4090, "--phase", "decode", "--batch", "1", "--context", "8192",
                           "--weights", "Q4_K_M", "--expert-cache", "64"],
        "serve-kv-q8": ["predict", "qwen3-8b", "--hardware", "rtx-5090", "--phase", "serve",
                        "--isl", "2048", "--osl", "256", "--batch", "4", "--weights", "q8_0",
                        "--kv", "fp8", "--chunk", "512"],
        "prefill-mac": [*_MAC, "--phase", "prefill", "--tokens", "2048", "--context", "2048",
                        "--weights", "q4_0"],
        "two-gpus": ["predict", "qwen3-235b-a22b", "--hardware", "h100", "--gpus", "4", "--phase",
                     "decode", "--batch", "8", "--weights", "q4_k_m", "--mtp", "1"],
        "gpt-oss-mxfp4": ["predict", "gpt-oss-120b", "--hardware", "rtx-5090", "--phase", "decode",
                          "--batch", "1", "--weights", "mxfp4", "--expert-cache", "32"],
    },
    "mlx": {
        "decode": [*_MAC, "--phase", "decode", "--batch", "4", "--context", "4096", "--weights",
                   "mlx-4bit"],
        "serve-kv8": [*_MAC, "--phase", "serve", "--isl", "512", "--osl", "128", "--batch", "4",
                      "--weights", "mlx-8bit", "--kv", "fp8", "--chunk", "512"],
        "prefill-bf16": ["predict", "qwen3-8b", "--hardware", "m4-max", "--phase", "prefill",
                         "--tokens", "1024", "--context", "1024"],
    },
}


def test_single_device_fixtures_name_their_sources():
    """The llama.cpp and MLX flag lists were read from the versions emit.py names."""
    for tools in (emit.TOOLS["llama.cpp"], emit.TOOLS["mlx"]):
        for tool in tools:
            fx = ENGINE_FLAGS[tool]
            assert fx["source"] and len(fx["flags"]) > 20
            assert all(f.startswith("-") for f in fx["flags"])
    assert ENGINE_FLAGS["llama-server"]["version"] == "0.3.36"
    assert "llama-cpp-python 0.3.36" in emit.__doc__
    assert ENGINE_FLAGS["mlx_lm.server"]["version"] == "0.32.2"
    assert "mlx-lm 0.32.2" in emit.__doc__


@pytest.mark.parametrize("engine,case", [(e, c) for e in SINGLE_DEVICE for c in SINGLE_DEVICE[e]])
def test_single_device_lines_pass_their_parsers(capsys, engine, case):
    launch = _launch(capsys, *SINGLE_DEVICE[engine][case], "--emit", engine)
    server, bench = emit.TOOLS[engine]
    assert launch["engine"] == engine
    assert launch["command"].startswith(server) and launch["bench"].startswith(bench)
    assert _flag_problems(server, launch["command"], ENGINE_FLAGS[server]) == []
    assert _flag_problems(bench, launch["bench"], ENGINE_FLAGS[bench]) == []


def test_llamacpp_offload_and_settings(capsys):
    """Qwen3-30B-A3B on an RTX 4090 with 64 of its 128 experts per layer on the GPU: llama.cpp
    keeps whole layers' experts on the CPU, so the same half of the expert weights is 24 of its
    48 MoE layers (--n-cpu-moe 24). Four 2304-token requests: -c 4 x 2304 = 9216, -np 4."""
    c = _launch(capsys, *SINGLE_DEVICE["llama.cpp"]["offload-decode"], "--emit", "llama.cpp")
    for line in (c["command"], c["bench"]):
        assert ("--n-cpu-moe", "24") in _pairs(line) and ("-ngl", "999") in _pairs(line)
    assert ("-hf", "Qwen/Qwen3-30B-A3B-GGUF:Q4_K_M") in _pairs(c["command"])
    assert {("-c", "8192"), ("-np", "1"), ("-fa", "on")} <= _pairs(c["command"])
    assert {("-p", "0"), ("-n", "128"), ("-d", "8192")} <= _pairs(c["bench"])
    s = _launch(capsys, *SINGLE_DEVICE["llama.cpp"]["serve-kv-q8"], "--emit", "llama.cpp")
    assert {("-c", str(4 * (2048 + 256))), ("-np", "4"), ("-b", "512"), ("-ub", "512"),
            ("-ctk", "q8_0"), ("-ctv", "q8_0")} <= _pairs(s["command"])
    assert {("-p", "2048"), ("-n", "256")} <= _pairs(s["bench"])
    assert any("q8_0" in n and "FP8" in n for n in s["notes"])
    g = _launch(capsys, *SINGLE_DEVICE["llama.cpp"]["gpt-oss-mxfp4"], "--emit", "llama.cpp")
    assert ("--n-cpu-moe", str(round(36 * (1 - 32 / 128)))) in _pairs(g["command"])  # 27


def test_mlx_lines(capsys):
    c = _launch(capsys, *SINGLE_DEVICE["mlx"]["serve-kv8"], "--emit", "mlx")
    assert {("--model", "mlx-community/Qwen3-30B-A3B-8bit"), ("--decode-concurrency", "4"),
            ("--prefill-step-size", "512"), ("--kv-bits", "8")} <= _pairs(c["command"])
    assert ("--max-tokens", "128") in _pairs(c["bench"])
    p = _launch(capsys, *SINGLE_DEVICE["mlx"]["prefill-bf16"], "--emit", "mlx")
    assert ("--model", "Qwen/Qwen3-8B") in _pairs(p["command"])  # the model's own BF16 weights


def test_a_renamed_llamacpp_flag_fails():
    fx = ENGINE_FLAGS["llama-server"]
    renamed = {**fx, "flags": [f for f in fx["flags"] if f != "-ngl"]}
    assert _flag_problems("llama-server", "llama-server -m f.gguf -ngl 99", fx) == []
    assert _flag_problems("llama-server", "llama-server -m f.gguf -ngl 99", renamed) == [
        f"llama-server {fx['version']}: -ngl is not a flag"]
    assert _flag_problems("llama-server", "llama-server -fa maybe", fx)  # on, off, auto


@pytest.mark.parametrize("engine", emit.GPU_ENGINES)
def test_apple_silicon_refuses_cuda_engines(capsys, engine):
    assert main([*_MAC, "--phase", "decode", "--weights", "mlx-4bit", "--emit", engine]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Apple silicon" in err[0]
    assert "--emit llama.cpp or mlx" in err[0]


@pytest.mark.parametrize("argv,engine,needle", [
    ([*_4090, "--weights", "q4_k_m", "--expert-cache", "64"], "vllm", "--emit llama.cpp"),
    (["predict", "qwen3-8b", "--hardware", "h100", "--weights", "q4_k_m"], "sglang",
     "--emit llama.cpp"),
    (["predict", "qwen3-8b", "--hardware", "h100", "--weights", "mlx-4bit"], "vllm", "--emit mlx"),
    (["predict", "qwen3-8b", "--hardware", "h100", "--weights", "awq"], "llama.cpp", "GGUF"),
    (["predict", "qwen3-8b", "--hardware", "m2-max", "--weights", "q4_0"], "mlx", "mlx-4bit"),
    (["predict", "deepseek-v3", "--hardware", "h100", "--gpus", "16", "--weights", "q4_k_m"],
     "llama.cpp", "one machine"),
])
def test_engines_that_cannot_run_it_are_refused(capsys, argv, engine, needle):
    assert main([*argv, "--phase", "decode", "--emit", engine]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--emit {engine}" in err[0] and needle in err[0]


def test_checkpoint_matches_the_weights(capsys):
    """A w4 checkpoint for a w4 deployment: Qwen's GPTQ-Int4 repository where it exists, else a
    placeholder in angle brackets and a note (never the BF16 repository)."""
    base = ["predict", "qwen3-30b-a3b", "--hardware", "h100", "--phase", "decode"]
    g = _launch(capsys, *base, "--weights", "gptq", "--emit", "vllm")
    assert shlex.split(g["command"])[2] == "Qwen/Qwen3-30B-A3B-GPTQ-Int4"
    a = _launch(capsys, *base, "--weights", "awq", "--emit", "sglang")
    path = dict(_pairs(a["command"]))["--model-path"]
    assert path.startswith("<") and "awq" in path and "Qwen/Qwen3-30B-A3B" in path
    assert any("placeholder" in n for n in a["notes"])
    f = _launch(capsys, "predict", "deepseek-v3", "--hardware", "h200", "--gpus", "8",
                "--weights", "fp8", "--phase", "decode", "--emit", "vllm")
    assert shlex.split(f["command"])[2] == "deepseek-ai/DeepSeek-V3"  # it ships FP8


@pytest.mark.parametrize("engine, batch, tp, want", [
    # SGLang 0.5.23 captures decode batches up to 512 at TP >= 4 on 60-160 GiB GPUs, 256 below
    # (builtin.toml, from its cuda_graph_hook/memory_hook); vLLM 0.33 up to 512
    ("sglang", 512, 4, None), ("sglang", 513, 4, ("--cuda-graph-max-bs-decode", "513")),
    ("sglang", 300, 1, ("--cuda-graph-max-bs-decode", "300")),
    ("vllm", 512, 1, None), ("vllm", 600, 1, ("--max-cudagraph-capture-size", "600"))])
def test_a_decode_batch_beyond_the_captured_graphs_is_captured(engine, batch, tp, want, capsys):
    """moesym times decode steps as CUDA-graph replays: where the per-rank batch is beyond the
    engine's largest captured size, the launch line raises it (the flag as the wheel names it)."""
    c = _launch(capsys, "predict", "qwen3-30b-a3b", "--hardware", "h100", "--phase", "decode",
                "--batch", str(batch), "--context", "1024", "--gpus", str(tp), "--tp", str(tp),
                "--engine", engine, "--emit", engine)
    flags = {f for f, _ in _pairs(c["command"])}
    if want is None:
        assert not flags & {"--cuda-graph-max-bs-decode", "--max-cudagraph-capture-size"}
    else:
        assert want in _pairs(c["command"])
    assert not any("timed with" in n for n in c["notes"])


def test_another_engines_profile_is_said(capsys):
    c = _launch(capsys, "predict", "qwen3-30b-a3b", "--hardware", "h100", "--phase", "decode",
                "--batch", "8", "--context", "1024", "--engine", "vllm", "--emit", "sglang")
    assert any("timed with vllm's scheduler" in n for n in c["notes"])
