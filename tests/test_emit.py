"""Launch commands (--emit): the modelled deployment in each engine's documented flags."""

from __future__ import annotations

import json
import shlex

from moesym.cli import main


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
    want = {("--tp-size", "72"), ("--dp-size", "72"), ("--enable-dp-attention", None),
            ("--ep-size", "72"), ("--moe-a2a-backend", "deepep"), ("--deepep-mode", "low_latency"),
            ("--enable-two-batch-overlap", None), ("--ep-num-redundant-experts", "32"),
            ("--enable-eplb", None), ("--max-running-requests", str(256 * 72))}
    assert want <= _pairs(c["command"])
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
