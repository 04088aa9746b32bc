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

from moesym import emit
from moesym.cli import main

ENGINE_FLAGS = json.loads((Path(__file__).parent / "data" / "engine_flags.json").read_text())


def _launch(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["launch"]


def _pairs(command: str) -> set:
    words = shlex.split(command)
    return {(a, b if not b.startswith("--") else None) for a, b in zip(words, words[1:] + [""])
            if a.startswith("--")}


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
    problems = []
    for flag, value in zip(words, words[1:] + [None]):
        if not flag.startswith("--"):
            continue
        flag, eq, inline = flag.partition("=")
        value = inline if eq else (value if value is None or not value.startswith("--")
                                   else None)
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
    for engine in emit.ENGINES:
        fx = ENGINE_FLAGS[engine]
        assert fx["source"]
        if fx["flags"] is not None:
            assert len(fx["flags"]) > 100 and all(f.startswith("--") for f in fx["flags"])


@pytest.mark.parametrize("engine", emit.ENGINES)
@pytest.mark.parametrize("case", sorted(DEPLOYMENTS))
def test_every_emitted_flag_is_in_the_engine_parser(capsys, engine, case):
    fixture = ENGINE_FLAGS[engine]
    if fixture["flags"] is None:
        pytest.skip(f"no {engine} flag list: {fixture['source']}")
    assert main([*DEPLOYMENTS[case], "--emit", engine, "--json"]) == 0
    launch = json.loads(capsys.readouterr().out)["launch"]
    assert launch["engine"] == engine
    assert _flag_problems(engine, launch["command"], fixture) == []


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
